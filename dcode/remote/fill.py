"""Requests a served model answers: a new file (chat), and the text of one span of a file (fill in
the middle), with what to do when a server will not take a `suffix`.

Owns: the request bodies (model, the sampling fields the user set, dcode's extension), asking
again without a sampling field a server refuses by name (400 or 422; said once on stderr), the fill-in-the-middle path
(`/fim/completions` on Inception's host, `/completions` with `suffix` elsewhere), the chat request
that carries the file and the lines to rewrite when `suffix` is refused, and cutting a chat
answer's Markdown fence. Knows nothing about syntax checks, files or the terminal.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from dcode.events import Drawn
from dcode.remote import client, streams
from dcode.remote.client import Endpoint, RemoteError
from dcode.remote.sse import MalformedStream
from dcode.remote.streams import Answer, Mode

# Statuses of a server that does not do fill-in-the-middle: vLLM answers `suffix` with 400, a
# server without the path 404 or 405, one without the feature 501. Then the chat request is sent.
NO_FIM = (400, 404, 405, 422, 501)
# Statuses of a server that refuses fields it does not know (dcode's `dcode` and `diffusing`):
# OpenAI's own API says 400, a FastAPI server (transformers serve) 422. Then it is asked plainly.
UNKNOWN_FIELDS = (400, 422)
# The standard sampling fields dcode sets. A request carries temperature (every OpenAI-compatible
# server takes it, and dcode's greedy default is what makes a run repeatable) and the others only
# when the user set them (a server takes its own defaults for the rest): a strict server refuses
# some (a LLaDA server on PyPI refuses top_p), and one it refuses by name is left out of a second
# try and of later requests.
SAMPLING_FIELDS = frozenset({"temperature", "top_p", "seed"})
ALWAYS_SENT = frozenset({"temperature"})
# What a request may go on without when a server refuses it by name: the sampling fields and
# --effort's reasoning_effort (Mercury's, dcode serve's; a strict server knows neither).
# And response_format (--schema, --json-object): dcode validates the answer itself.
DROPPABLE = SAMPLING_FIELDS | {"reasoning_effort", "response_format"}
INCEPTION_CHAT_MODEL = "mercury-2"
SYSTEM_NEW = "You write {language} code. Reply with the code only: one whole file, no explanations, no Markdown fences."
SYSTEM_FILL = (
    "You rewrite one part of a {language} file. Reply with only the new text of the marked lines, "
    "which replaces them exactly: no explanations, no Markdown fences, nothing from outside the markers."
)
BEGIN, END = "<<<<<<< REWRITE", ">>>>>>> END"
PROSE_LINES = 2  # lines a chat model writes before its fence
FENCE = re.compile(r"^```[^\n`]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)
# Line comments for the instruction of an edit sent as fill-in-the-middle (the prompt only; the
# file's bytes are never changed by it). Languages not listed use "//".
HASH = {"python", "ruby", "bash", "shell", "sh", "yaml", "toml", "r", "perl", "elixir", "julia", "make", "dockerfile"}
DASHES = {"sql", "lua", "haskell"}


@dataclass(frozen=True)
class Sampling:
    """The request fields dcode's options set; `sent` names the sampling fields a request carries
    beside temperature (SAMPLING_FIELDS the user set, or that dcode chose itself, as a repair retry's)."""

    max_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    sent: frozenset[str] = SAMPLING_FIELDS
    effort: str | None = None  # --effort, as OpenAI's reasoning_effort (Mercury's, and dcode serve's)

    def fields(self) -> dict[str, Any]:
        chosen = {"temperature": self.temperature, "top_p": self.top_p, "seed": self.seed}
        sent = self.sent | ALWAYS_SENT
        effort = {"reasoning_effort": self.effort} if self.effort else {}
        return {"max_tokens": self.max_tokens, **{k: v for k, v in chosen.items() if k in sent}, **effort}


def model_of(endpoint: Endpoint) -> str:
    """--model; else mercury-2 on Inception's host; else the first model the server lists."""
    if endpoint.model:
        return endpoint.model
    if endpoint.inception:
        return INCEPTION_CHAT_MODEL
    listed = client.get_json(endpoint, "/models")
    data = listed.get("data") if isinstance(listed, dict) else None
    if not data or not isinstance(data[0], dict) or not data[0].get("id"):
        raise RemoteError(f"{endpoint.shown}/models lists no model: pass --model", "usage")
    return str(data[0]["id"])


def unfence(text: str) -> str:
    """A chat answer's code: the inside of its first Markdown fence when at most PROSE_LINES lines
    of prose come before it ("Here is the code:"), else the text as it is (a file whose docstring
    holds a fenced example is code, not an answer wrapped in a fence).
    Example: unfence("Sure:\n```python\nx = 1\n```\nIt sets x.") -> "x = 1\n"."""
    found = FENCE.search(text)
    if found is None or text[: found.start()].count("\n") > PROSE_LINES:
        return text
    return found.group(1)


def comment(language: str, text: str) -> str:
    """text as one line comment of the language (newlines folded)."""
    line = " ".join(text.split())
    lead = "#" if language in HASH else "--" if language in DASHES else "//"
    return f"{lead} {line}\n"


def answer(
    endpoint: Endpoint,
    path: str,
    body: dict[str, Any],
    mode: Mode,
    language: str,
    diffusing: bool = False,
    empty_ok: bool = False,
) -> Iterator[Drawn | Answer]:
    """Stream one request, read as streams.read reads it; a malformed stream is a RemoteError.
    Sampling fields (and reasoning_effort) the endpoint refused before are left out; a 400 or 422 naming one (before
    any chunk) is said on stderr and the request sent once more without it."""
    body = {k: v for k, v in body.items() if k not in endpoint.refused}
    try:
        yield from read(endpoint, path, body, mode, language, diffusing, empty_ok)
    except RemoteError as error:
        blamed = DROPPABLE.intersection(error.named) & body.keys() if error.status in UNKNOWN_FIELDS else set()
        if not blamed:
            raise
        endpoint.refused.update(blamed)
        names = ", ".join(sorted(blamed))
        endpoint.tell(f"{endpoint.shown} refused {names} ({error.status}): asking again without it")
        body = {k: v for k, v in body.items() if k not in blamed}
        yield from read(endpoint, path, body, mode, language, diffusing, empty_ok)


def read(
    endpoint: Endpoint, path: str, body: dict[str, Any], mode: Mode, language: str, diffusing: bool, empty_ok: bool
) -> Iterator[Drawn | Answer]:
    try:
        yield from streams.read(
            client.stream(endpoint, path, body),
            mode,
            model=body["model"],
            device=endpoint.host,
            language=language,
            diffusing=diffusing,
            empty_ok=empty_ok,
        )
    except MalformedStream as error:
        raise RemoteError(endpoint.redact(f"malformed stream from {endpoint.shown}: {error}")) from None


def new(
    endpoint: Endpoint,
    request: str,
    language: str,
    sampling: Sampling,
    mode: Mode,
    repair: bool,
    settings: dict[str, Any] | None = None,
    response_format: dict[str, Any] | None = None,
) -> Iterator[Drawn | Answer]:
    """A whole file from a request, as a chat completion. Asks for whole texts (`diffusing`), the
    usage chunk and, from a dcode server, its frames and its own repair; a server that refuses
    those fields (UNKNOWN_FIELDS) is asked again without them; `response_format` (OpenAI's), where
    given, is sent (a server that refuses it by name is asked without it: DROPPABLE)."""
    model = model_of(endpoint)
    messages = [
        {"role": "system", "content": SYSTEM_NEW.format(language=language)},
        {"role": "user", "content": request},
    ]
    body: dict[str, Any] = {"model": model, "messages": messages, "stream": True, **sampling.fields()}
    if response_format is not None:
        body["response_format"] = response_format
    extended = mode != "append"
    if extended:
        body |= {"diffusing": True, "stream_options": {"include_usage": True}}
        if not endpoint.inception:  # a dcode server's own fields; Inception is not one
            body["dcode"] = {**(settings or {}), "language": language, "repair": repair}
    diffusing = extended and endpoint.inception
    try:
        yield from answer(endpoint, "/chat/completions", body, mode, language, diffusing)
    except RemoteError as error:
        if not (extended and error.status in UNKNOWN_FIELDS):
            raise
        plain = {k: v for k, v in body.items() if k not in ("diffusing", "dcode", "stream_options")}
        yield from answer(endpoint, "/chat/completions", plain, mode, language)


def middle(
    endpoint: Endpoint,
    before: str,
    after: str,
    language: str,
    sampling: Sampling,
    *,
    old: str = "",
    instruction: str = "",
    name: str = "the file",
    request: str = "",
) -> Iterator[Drawn | Answer]:
    """The text between before and after (where `old` stands now): fill in the middle, else (NO_FIM)
    a chat request carrying the whole file with the span marked. With nothing before or after the
    span (the whole file), fill in the middle would carry nothing of the file's purpose: the chat
    request is sent, with `request` (what the file was written for). So is it for a span at the
    file's start: an empty prompt crashes some servers' generation (transformers serve 5.24 answers
    200, then "cannot reshape tensor of 0 elements"). The Answer's text is the middle only."""
    model = model_of(endpoint)
    prompt = before + (comment(language, instruction) if instruction else "")
    if prompt.strip() and (before.strip() or after.strip()):
        body = {"model": model, "prompt": prompt, "suffix": after, "stream": True, **sampling.fields()}
        path = "/fim/completions" if endpoint.inception else "/completions"
        try:
            yield from answer(endpoint, path, body, "append", language, empty_ok=True)
            return
        except RemoteError as error:
            if error.status not in NO_FIM:
                raise
    ask = (
        f"The {language} file {name}, with the lines to rewrite between the markers {BEGIN!r} and {END!r}:\n"
        f"```\n{before}{BEGIN}\n{old}\n{END}{after}\n```\n"
        + (f"The file was written for this request: {request}\n" if request else "")
        + (f"Rewrite those lines to do this: {instruction}\n" if instruction else "Rewrite them so the file parses.\n")
        + "Reply with only the new lines."
    )
    messages = [{"role": "system", "content": SYSTEM_FILL.format(language=language)}, {"role": "user", "content": ask}]
    chat = {"model": model, "messages": messages, "stream": True, **sampling.fields()}
    for event in answer(endpoint, "/chat/completions", chat, "append", language, empty_ok=True):
        yield replace(event, text=unfence(event.text)) if isinstance(event, Answer) else event
