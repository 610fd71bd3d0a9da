"""Inception's editing paths on `dcode serve`: apply an update snippet, and predict the next edit.

Mercury Edit's request and answer shapes (docs.inceptionlabs.ai, "Models, Endpoints, and Pricing":
the Apply-Edit and Next-Edit examples; Inception's OpenAPI description of /v1/edit/completions):
a chat-shaped body whose one user message carries the text in tags, answered as a chat completion.

  POST /v1/apply/completions  {"model", "messages": [{"role": "user", "content":
      "<|original_code|>\\nCODE\\n<|/original_code|>\\n\\n<|update_snippet|>\\nSNIPPET\\n<|/update_snippet|>"}],
      "max_tokens", "temperature", "top_p", "stream"}  ->  choices[0].message.content: the merged code
  POST /v1/edit/completions   the same body; the content holds <|recently_viewed_code_snippets|>,
      <|current_file_content|> (a `current_file_path: PATH` line, then the file with the region to
      rewrite between <|code_to_edit|> and <|/code_to_edit|> and <|cursor|> in it) and
      <|edit_diff_history|>  ->  object "edit.completion", content: the region's new text in a
      ```-fence, as Zed's and Continue's Mercury providers read it (zed crates/edit_prediction/
      src/mercury.rs strips "```\\n" and "\\n```"; continue core/nextEdit/providers/
      MercuryCoderNextEditProvider.ts slices between them)

Both run dcode.merge.edits (dcode.flows.edit over each region) over dcode.localfill.LocalFiller,
through the engine's slots, queue and batched passes: apply rewrites each region of the file a part
of the snippet changes (dcode.merge.regions, the code a local `dcode edit` with a snippet runs: the
part located by dcode.snippets, as the instruction), or the whole file with the whole snippet when
a part cannot be located; next edit rewrites the <|code_to_edit|> region (or the cursor's line and the 5
after it, Continue's window, when there is none) with the recent edits as the instruction. A
streamed answer is the role chunk at once, then the answer in one delta (an appended stream cannot
take text back, and every region must be done first). Errors are OpenAI's shape, naming the field.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from threading import Event as Flag
from typing import TYPE_CHECKING, Any, Literal

from fastapi import FastAPI, Request

from dcode import merge
from dcode.events import Edited
from dcode.filler import FillError, Region
from dcode.flows import InputError
from dcode.merge import TooLong
from dcode.serve import wire
from dcode.serve.batching import RequestCancelled
from dcode.serve.engine import Emit, Engine, Runner
from dcode.serve.jobs import BadRequest, parse, parse_body
from dcode.serve.replies import Prepared

if TYPE_CHECKING:
    from dcode.localfill import Sizer

Path = Literal["apply", "edit"]
Accept = Callable[[Request], Awaitable[bytes]]  # a POST's checks, then its body
Answer = Callable[[Request, Engine, Prepared, Runner], Awaitable[Any]]  # submit a job, answer it
CURSOR = "<|cursor|>"
WINDOW = 5  # lines after the cursor's that next edit rewrites when the request marks no region (Continue's)
NEXT_EDIT = "Make the next edit the developer would make in {where}, at the cursor, continuing their recent edits."
FIELD = "messages"  # what a refusal names: the user message's content, as Mercury's own 400s do
# The answer's shape and tools (chat's, dcode.serve.shaping): an editing path answers code, so a
# body that asks for JSON or tool calls is refused by name rather than answered without them.
SHAPING = ("response_format", "tools", "tool_choice", "parallel_tool_calls")


@dataclass(frozen=True)
class Plan:
    """What one apply or next-edit request runs: the file, its regions (in file order), how to answer."""

    path: Path
    source: str
    regions: tuple[Region, ...]
    language: str
    name: str  # the file as messages name it
    open_end: bool = False  # next edit: the asked region did not end its last line; neither does the answer


# ---------------------------------------------------------------------------------------------
# Reading the tagged prompt


def tagged(text: str, tag: str) -> str | None:
    """The text between <|tag|> and <|/tag|>, without the line break the tags sit on (one after the
    opening tag and one before the closing tag); None unless both are there.
    Example: tagged("<|a|>\\nx = 1\\n<|/a|>", "a") -> "x = 1"."""
    opening, closing = f"<|{tag}|>", f"<|/{tag}|>"
    a = text.find(opening)
    b = text.find(closing, a + len(opening)) if a >= 0 else -1
    if a < 0 or b < 0:
        return None
    inner = text[a + len(opening) : b]
    inner = inner[1:] if inner.startswith("\n") else inner
    return inner[:-1] if inner.endswith("\n") else inner


def required(text: str, tag: str) -> str:
    """tagged(), refused (400 naming the message) when missing or blank."""
    inner = tagged(text, tag)
    if inner is None:
        raise BadRequest(f"the user message must hold <|{tag}|> ... <|/{tag}|>", FIELD)
    if not inner.strip():
        raise BadRequest(f"<|{tag}|> is empty", FIELD)
    return inner


def whole_lines(text: str, a: int, b: int) -> tuple[int, int]:
    """Character offsets a..b widened to whole lines (b past its line's line break)."""
    a = text.rfind("\n", 0, a) + 1
    if b > a and text[b - 1] == "\n":
        return a, b
    end = text.find("\n", b)
    return a, len(text) if end < 0 else end + 1


def file_and_region(current: str, marked: str | None) -> tuple[str, int, int, bool]:
    """The file (tags and cursor taken out), the character span of the region to rewrite and
    whether the region, marked inside the file, ends in the middle of its last line (Zed sends the
    closing tag there): the <|code_to_edit|> part of the file, or (Inception's OpenAPI example) a
    copy of it after the file, or the cursor's line and WINDOW more."""
    if "<|code_to_edit|>" in current:
        before, rest = current.split("<|code_to_edit|>", 1)
        if "<|/code_to_edit|>" not in rest:
            raise BadRequest("<|code_to_edit|> has no <|/code_to_edit|>", FIELD)
        region, after = rest.split("<|/code_to_edit|>", 1)
        region = region[1:] if region.startswith("\n") else region
        after = after[1:] if after.startswith("\n") else after
        before, region, after = (part.replace(CURSOR, "") for part in (before, region, after))
        open_end = bool(region) and not region.endswith("\n") and bool(after)
        return before + region + after, len(before), len(before) + len(region), open_end
    cursor = current.find(CURSOR)
    source = current.replace(CURSOR, "")
    if marked is not None:
        code = marked.replace(CURSOR, "")
        at = source.find(code) if code.strip() else -1
        if at < 0:
            raise BadRequest("the <|code_to_edit|> text is not in <|current_file_content|>", FIELD)
        return source, at, at + len(code), False
    if cursor < 0:
        raise BadRequest("the user message marks no place to edit: give <|code_to_edit|> or <|cursor|>", FIELD)
    lines = source[cursor:].split("\n")
    end = cursor + sum(len(line) + 1 for line in lines[: WINDOW + 1])
    return source, cursor, min(end, len(source)), False


def next_edit_instruction(path: str, history: str, viewed: str, keep: int) -> str:
    """The instruction of a next edit: where, the recent edits (keep >= 1), code looked at (keep 2)."""
    out = NEXT_EDIT.format(where=path or "this file")
    if keep >= 1 and history.strip():
        out += "\n\nTheir recent edits:\n" + history.strip()
    if keep >= 2 and viewed.strip():
        out += (
            "\n\nCode they looked at recently:\n"
            + re.sub(r"<\|/?recently_viewed_code_snippet\|>\n?", "", viewed).strip()
        )
    return out


# ---------------------------------------------------------------------------------------------
# Plans, sized to the model


def sizer_for(engine: Engine, language: str, max_tokens: int | None) -> Sizer:
    """dcode.localfill.Sizer on the engine's model (torch: the engine has it loaded)."""
    from dcode.localfill import Sizer

    return Sizer(engine.model, language, max_tokens)


def too_long(error: TooLong) -> BadRequest:
    return BadRequest(str(error), FIELD, code="context_length_exceeded")


def apply_plan(text: str, sizer: Sizer, name: str) -> Plan:
    """An apply request's plan: each placed part of the snippet, or the whole file (dcode.merge.regions,
    as a local `dcode edit` with a snippet places them)."""
    original, snippet = required(text, "original_code"), required(text, "update_snippet")
    try:
        regions = merge.regions(original, (0, len(original.encode())), snippet, sizer, name)
    except TooLong as error:
        raise too_long(error) from None
    return Plan("apply", original, regions, sizer.language, name)


def file_path(current: str) -> tuple[str, str]:
    """The path on the `current_file_path: PATH` line ("" without one), and the file after it."""
    if found := re.match(r"current_file_path: ?([^\n]*)(?:\n|$)", current):
        return found.group(1).strip(), current[found.end() :]
    return "", current


def next_edit_plan(text: str, sizer: Sizer) -> Plan:
    """A next-edit request's plan: its one region."""
    path, current = file_path(required(text, "current_file_content"))
    source, a, b, open_end = file_and_region(current, tagged(text, "code_to_edit"))
    a, b = whole_lines(source, a, b)
    start, end = len(source[:a].encode()), len(source[:b].encode())
    history, viewed = tagged(text, "edit_diff_history") or "", tagged(text, "recently_viewed_code_snippets") or ""
    for keep in (2, 1, 0):  # what fits: recently viewed code goes first, then the edit history
        region = sizer.region(source, start, end, next_edit_instruction(path, history, viewed, keep))
        if region is not None:
            return Plan("edit", source, (region,), sizer.language, path or "the file", open_end)
    raise too_long(sizer.too_long("the <|code_to_edit|> region"))


def unshaped(body: dict[str, Any]) -> None:
    """BadRequest naming the first field of SHAPING the body sends (`response_format` {"type": "text"},
    what every answer here is, passes): an editing path answers code, never JSON or tool calls."""
    for name in SHAPING:
        value = body.get(name)
        if value is not None and not (name == "response_format" and value == {"type": "text"}):
            message = f"'{name}' is not supported here: this path answers code (send it to /v1/chat/completions)"
            raise BadRequest(message, name)


def prepare(engine: Engine, path: Path, raw: bytes) -> tuple[Prepared, Plan]:
    """A request body -> the Prepared job (sampler settings, stream options) and its plan; BadRequest
    for a body that is not Mercury's shape or does not fit. Tokenizes: run it off the event loop."""
    from dcode.syntax import detect_language

    body = parse_body(raw)
    unshaped(body)
    job = parse("chat", body, engine.served)  # model, messages, max_tokens, sampling, stream, the dcode object
    explicit = body["dcode"].get("language") if isinstance(body.get("dcode"), dict) else None
    if path == "apply":
        language = explicit or detect_language(None, tagged(job.text, "original_code"), None) or "python"
        plan = apply_plan(job.text, sizer_for(engine, language, job.max_tokens), "the original code")
    else:
        where = file_path(tagged(job.text, "current_file_content") or "")[0]
        language = explicit or detect_language(where, None, None) or "python"
        plan = next_edit_plan(job.text, sizer_for(engine, language, job.max_tokens))
    repair = engine.repair_rounds > 0 if job.repair is None else job.repair
    rounds = (engine.repair_rounds or 3) if repair else 0
    length = sum(region.length for region in plan.regions) or 1
    return Prepared(job, [], [], length, engine.settings(job), rounds), plan


# ---------------------------------------------------------------------------------------------
# Running a plan and answering


def answer_text(plan: Plan, code: str, new_region: tuple[int, int]) -> str:
    """Apply: the merged code. Next edit: the region's new text in a ```-fence."""
    if plan.path == "apply":
        return code
    region = code.encode()[new_region[0] : new_region[1]].decode()
    if plan.open_end and region.endswith("\n"):
        region = region[:-1]
    return f"```\n{region}\n```"


def runner(engine: Engine, plan: Plan) -> Runner:
    """The engine's worker body for a plan: dcode.merge.edits over its regions (the edit flow over
    each, last first, as a local `dcode edit` with a snippet runs), then the answer's chunks and
    the final object."""

    def work(prepared: Prepared, emit: Emit, cancelled: Flag) -> None:
        from dcode.localfill import LocalFiller

        job, created = prepared.job, int(time.time())
        ident = ("chatcmpl-" if plan.path == "apply" else "cmpl-") + uuid.uuid4().hex[:24]
        if job.stream:
            emit("chunk", wire.chunk("chat", ident, engine.served, "", created=created, first=True))
        began, filler = time.perf_counter(), LocalFiller(engine.batcher, prepared.config)
        steps = merge.edits(
            filler, plan.source, plan.regions, plan.language, prepared.rounds, plan.name, engine.repair_tries
        )
        done = None
        try:
            with engine.batcher.worker(cancelled):
                for event in steps:
                    if cancelled.is_set():
                        raise RequestCancelled
                    done = event
        except InputError as error:  # prepare() sized every region; a window that cannot fit lands here
            emit("error", BadRequest(str(error), FIELD, code="context_length_exceeded"))
            return
        except FillError as error:  # the fill repeated the code after its region: nothing to answer
            emit("error", BadRequest(f"generation failed: {error}", None, 500, kind="server_error"))
            return
        assert isinstance(done, Edited)
        text = answer_text(plan, done.code, done.new_region)
        finish(engine, plan, prepared, emit, (ident, created, text), done, time.perf_counter() - began)

    return work


def finish(
    engine: Engine,
    plan: Plan,
    prepared: Prepared,
    emit: Emit,
    answer: tuple[str, int, str],
    done: Edited,
    seconds: float,
) -> None:
    """Emit the answer: its delta and finish chunks when streamed, then the final object."""
    ident, created, text = answer
    used = wire.usage(done.prompt_tokens + (done.context_tokens or 0), done.tokens)
    metadata: dict[str, Any] = {
        "model": engine.model.facts.name,
        "language": plan.language,
        "regions": [[r.start, r.end] for r in plan.regions],  # byte spans of the file as sent
        "forward": done.forward,
        "seconds": round(seconds, 3),
    }
    if prepared.job.stream:
        emit("chunk", wire.chunk("chat", ident, engine.served, text, created=created))
        emit("chunk", wire.chunk("chat", ident, engine.served, None, "stop", created=created))
    final = wire.completion("chat", ident, engine.served, text, "stop", used, metadata, created=created)
    if plan.path == "edit":
        final["object"] = "edit.completion"  # Inception's name for the next-edit answer
    emit("final", final)


def add_routes(app: FastAPI, engine: Engine, preparers: ThreadPoolExecutor, accept: Accept, answer: Answer) -> None:
    """POST /v1/apply/completions and /v1/edit/completions on the app: `accept` checks a request
    and reads its body (dcode.serve.app's key, media type and limits), `answer` submits the job and
    answers it (dcode.serve.app.run); preparing runs on the `preparers` threads."""

    async def serve(request: Request, path: Path) -> Any:
        raw = await accept(request)
        loop = asyncio.get_running_loop()
        prepared, plan = await loop.run_in_executor(preparers, prepare, engine, path, raw)
        return await answer(request, engine, prepared, runner(engine, plan))

    @app.post("/v1/apply/completions")
    async def apply(request: Request) -> Any:
        return await serve(request, "apply")

    @app.post("/v1/edit/completions")
    async def next_edit(request: Request) -> Any:
        return await serve(request, "edit")
