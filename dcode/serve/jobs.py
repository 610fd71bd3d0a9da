"""A request body -> a Job, or a BadRequest with the status, message and parameter to blame.

Owns what `dcode serve` accepts: the OpenAI fields (model, messages, prompt, suffix, max_tokens or
max_completion_tokens, temperature, top_p, seed, reasoning_effort, stop, stream, stream_options, n; temperature,
top_p and the penalties within OpenAI's ranges), the serving world's `ignore_eos` and `min_tokens`
(vLLM, SGLang, llama.cpp), and dcode's (`diffusing`, and a `dcode` object with `repair`,
`language` and sampler options by name), their
JSON types, and text the tokenizer can take (no lone surrogate). Sampler options are read by the
declarations of dcode.options (dcode.serve.settings): nothing here re-declares one; the answer's
shape (response_format, tools, tool_choice, parallel_tool_calls, and past tool calls in the
messages) is dcode.serve.shaping's. Unknown
top-level fields are ignored, as OpenAI-compatible servers do; an unknown key in the `dcode` object
is refused. Pure Python: no torch, no web framework; nothing here reaches the model.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from dcode.config import EFFORTS
from dcode.serve import shaping
from dcode.serve.settings import BY_KEY, SettingError, checked, json_type, read_options
from dcode.serve.shaping import Shape
from dcode.serve.wire import Kind

# OpenAI's message roles; another role next to a user message is refused, as OpenAI does.
# "developer" is OpenAI's newer name for "system"; a chat template knows the older one.
ROLES = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
    "function": "tool",
}
MAX_STOP_CHARS = 4096  # characters of all stop strings together: each pass looks for every one
MAX_LANGUAGE_CHARS = 64
# OpenAI's documented ranges for its standard fields: a value outside gets 400 naming the field,
# before anything runs or streams, as OpenAI answers it. (dcode's own options, in the `dcode`
# object, keep SamplerConfig's wider ranges: `dcode.temperature` may be 3.)
OPENAI_RANGES = {
    "temperature": (0.0, 2.0),
    "top_p": (0.0, 1.0),
    "presence_penalty": (-2.0, 2.0),
    "frequency_penalty": (-2.0, 2.0),
}


class BadRequest(Exception):
    """A request the server refuses before it reaches the model: an HTTP status and OpenAI's error."""

    def __init__(
        self, message: str, param: str | None = None, status: int = 400, code: str | None = None, kind: str = ""
    ) -> None:
        super().__init__(message)
        self.message, self.param, self.status, self.code = message, param, status, code
        self.kind = kind or {401: "authentication_error", 404: "not_found_error", 413: "invalid_request_error"}.get(
            status, "invalid_request_error"
        )


@dataclass(frozen=True)
class Job:
    kind: Kind
    text: str  # chat: the request (the last user message); text: the prompt, the code before the middle
    suffix: str | None  # fill-in-the-middle: the code after the middle
    max_tokens: int | None  # answer positions to fill (None: the server's default)
    options: dict[str, Any] = field(default_factory=dict)  # sampler options the request gave, by option name
    stream: bool = False
    ignore_eos: bool = False  # vLLM's, SGLang's, llama.cpp's: no end token anywhere, the answer fills max_tokens
    min_tokens: int = 0  # vLLM's: no end token in the answer's first min_tokens positions
    include_usage: bool = False
    diffusing: bool = False
    repair: bool | None = None  # None: the server's default
    language: str = "python"
    stop: tuple[str, ...] = ()
    messages: tuple[tuple[str, str], ...] = ()  # chat: the whole conversation, (role, text) with ROLES' roles
    effort: str | None = None  # reasoning_effort (OpenAI's, Mercury's): the family's decoding at that level
    shape: Shape = Shape()  # response_format and tools: the answer's form and its grammar (free text)


def reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_body(raw: bytes) -> dict[str, Any]:
    """The JSON object of a request body: 400 for anything else, including what Python's parser
    refuses past its own limits (nesting beyond the recursion limit, integers of over 4300 digits)."""
    try:
        body = json.loads(raw, parse_constant=reject_constant)
    except RecursionError:
        raise BadRequest("the body is not valid JSON: nested too deeply") from None
    except ValueError as error:  # JSONDecodeError, UnicodeDecodeError, the integer digit limit
        raise BadRequest(f"the body is not valid JSON: {str(error).splitlines()[0][:200]}") from None
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    return body


def text_of(value: str, param: str) -> str:
    """`value`, refused unless it is text a tokenizer takes (UTF-8: no lone surrogate, which JSON's
    \\ud800 escape can carry)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise BadRequest(f"'{param}' holds a lone surrogate: it is not valid Unicode text", param) from None
    return value


def _typed(body: dict[str, Any], name: str, kinds: tuple[type, ...], what: str) -> Any:
    """body[name] (None when absent or null), refused unless it is one of `kinds` (never a bool for a number)."""
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise BadRequest(f"'{name}' must be {what}, got {json_type(value)}", name)
    return value


def _number(body: dict[str, Any], name: str, low: float, high: float, integer: bool = False) -> Any:
    value = _typed(body, name, (int,) if integer else (int, float), "an integer" if integer else "a number")
    if value is not None and not (low <= value <= high and math.isfinite(value)):
        raise BadRequest(f"'{name}' must be between {low:g} and {high:g}, got {value}", name)
    return value


def message_text(content: Any, param: str) -> str:
    """A message's content: a string, OpenAI's list of parts whose text parts are joined, or null
    (an assistant turn that only called tools)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return text_of(content, param)
    if isinstance(content, list) and all(isinstance(p, dict) for p in content):
        parts = [p.get("text") for p in content if p.get("type") == "text"]
        if all(isinstance(p, str) for p in parts):
            return text_of("".join(parts), param)
    raise BadRequest(f"'{param}' must be a string or a list of parts", param)


def conversation(body: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """The chat's messages as (role, text): every role one of OpenAI's, at least one user message;
    an assistant's `tool_calls` as the `<tool_call>` blocks the model writes (dcode.serve.shaping).
    SettingError (a malformed tool call) is the caller's to answer."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty list", "messages")
    out = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise BadRequest(f"'messages[{i}]' must be an object with a 'role'", f"messages[{i}].role")
        role = ROLES.get(message["role"])
        if role is None:
            choices = ", ".join(sorted(ROLES))
            raise BadRequest(
                f"'messages[{i}].role' is {message['role']!r}; it must be one of {choices}", f"messages[{i}].role"
            )
        text = message_text(message.get("content"), f"messages[{i}].content")
        if role == "assistant" and message.get("tool_calls") is not None:
            text = shaping.history_calls(text, message["tool_calls"], f"messages[{i}].tool_calls")
        call_id = message.get("tool_call_id")
        if role == "tool" and call_id is not None and not isinstance(call_id, str):
            raise BadRequest(f"'messages[{i}].tool_call_id' must be a string", f"messages[{i}].tool_call_id")
        out.append((role, text))
    if not any(role == "user" for role, _ in out):
        raise BadRequest("'messages' has no user message", "messages")
    return tuple(out)


def extensions(body: dict[str, Any]) -> tuple[dict[str, Any], bool | None, str]:
    """The `dcode` object: sampler options by name (dcode.options), repair, language."""
    extra = dict(_typed(body, "dcode", (dict,), "an object") or {})
    repair = _typed(extra, "repair", (bool,), "true or false")
    language = _typed(extra, "language", (str,), "a string") or "python"
    if len(language) > MAX_LANGUAGE_CHARS:
        raise BadRequest(f"'dcode.language' is over {MAX_LANGUAGE_CHARS} characters", "dcode.language")
    text_of(language, "dcode.language")
    options = {k: v for k, v in extra.items() if k not in ("repair", "language")}
    try:
        return read_options(options, "dcode."), repair, language
    except SettingError as error:
        raise BadRequest(str(error), error.param) from None


def stops(body: dict[str, Any]) -> tuple[str, ...]:
    """`stop`: a string or a list of non-empty strings, as many as the client likes (Continue sends
    7-9), up to MAX_STOP_CHARS characters in all."""
    stop = body.get("stop")
    given = [stop] if isinstance(stop, str) else stop if stop is not None else []
    if not isinstance(given, list) or not all(isinstance(s, str) and s for s in given):
        raise BadRequest("'stop' must be a string or a list of non-empty strings", "stop")
    if sum(len(s) for s in given) > MAX_STOP_CHARS:
        raise BadRequest(f"'stop' holds over {MAX_STOP_CHARS} characters", "stop")
    return tuple(text_of(s, "stop") for s in dict.fromkeys(given))


def prompt_and_suffix(body: dict[str, Any]) -> tuple[str, str | None]:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]  # OpenAI allows a list of prompts; dcode serves one
    if not isinstance(prompt, str):
        raise BadRequest("'prompt' must be a string", "prompt")
    suffix = _typed(body, "suffix", (str,), "a string")
    return text_of(prompt, "prompt"), None if suffix is None else text_of(suffix, "suffix")


def sampling(body: dict[str, Any]) -> dict[str, Any]:
    """OpenAI's sampler fields (`temperature`, `top_p`, `seed`): dcode's options of those names,
    each first held to OpenAI's range (OPENAI_RANGES)."""
    for name, (low, high) in OPENAI_RANGES.items():
        _number(body, name, low, high)
    try:
        return {
            name: checked(BY_KEY[name], body[name], name)
            for name in ("temperature", "top_p", "seed")
            if body.get(name) is not None
        }
    except SettingError as error:
        raise BadRequest(str(error), error.param) from None


def effort_of(body: dict[str, Any]) -> str | None:
    """`reasoning_effort`: one of dcode.config.EFFORTS (low, medium, high) or absent; 400 otherwise."""
    effort = _typed(body, "reasoning_effort", (str,), "a string")
    if effort is not None and effort not in EFFORTS:
        choices = ", ".join(EFFORTS)
        raise BadRequest(f"'reasoning_effort' must be one of {choices}, got {effort!r}", "reasoning_effort")
    return effort


def parse(kind: Kind, body: dict[str, Any], served: str) -> Job:
    """The Job a request body asks for; BadRequest (400, or 404 for another model) otherwise."""
    model = _typed(body, "model", (str,), "a string")
    if model is not None and model != served:
        raise BadRequest(
            f"the model '{model}' does not exist; this server serves '{served}'", "model", 404, "model_not_found"
        )
    try:
        messages = conversation(body) if kind == "chat" else ()
        shape = shaping.shaped(kind, body)
    except SettingError as error:
        raise BadRequest(str(error), error.param) from None
    if kind == "chat":
        text, suffix = [content for role, content in messages if role == "user"][-1], None
    else:
        text, suffix = prompt_and_suffix(body)
    if not text.strip() and not (suffix or "").strip():
        raise BadRequest("the prompt is empty", "messages" if kind == "chat" else "prompt")
    _number(body, "n", 1, 1, integer=True)  # only n=1
    options, repair, language = extensions(body)
    options |= {k: v for k, v in sampling(body).items() if v is not None}
    stream_options = _typed(body, "stream_options", (dict,), "an object") or {}
    return Job(
        kind=kind,
        text=text,
        suffix=suffix,
        max_tokens=_number(body, "max_tokens" if "max_tokens" in body else "max_completion_tokens", 1, 2**31, True),
        options=options,
        stream=bool(_typed(body, "stream", (bool,), "true or false")),
        ignore_eos=bool(_typed(body, "ignore_eos", (bool,), "true or false")),
        min_tokens=_number(body, "min_tokens", 0, 2**31, True) or 0,
        include_usage=bool(_typed(stream_options, "include_usage", (bool,), "true or false")),
        diffusing=bool(_typed(body, "diffusing", (bool,), "true or false")),
        repair=repair,
        language=language,
        stop=stops(body),
        messages=messages,
        effort=effort_of(body),
        shape=shape,
    )
