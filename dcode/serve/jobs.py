"""A request body -> a Job, or a BadRequest with the status, message and parameter to blame.

Owns what `dcode serve` accepts: the OpenAI fields (model, messages, prompt, suffix, max_tokens or
max_completion_tokens, temperature, top_p, seed, stop, stream, stream_options, n) and dcode's
(`diffusing`, and a `dcode` object with `repair`, `language` and sampler option names), their
types and ranges. Unknown fields are ignored, as OpenAI-compatible servers do. Pure Python: no
torch, no web framework; nothing here reaches the model.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import Any

from dcode.config import SamplerConfig
from dcode.serve.wire import Kind

# `dcode` object keys -> SamplerConfig fields: the CLI's option names and the fields themselves.
SAMPLER_KEYS = {
    "strategy": "rule",
    "order": "ordering",
    **{f.name: f.name for f in dataclasses.fields(SamplerConfig)},
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
    settings: dict[str, Any] = field(default_factory=dict)  # SamplerConfig fields the request set
    stream: bool = False
    include_usage: bool = False
    diffusing: bool = False
    repair: bool | None = None  # None: the server's default
    language: str = "python"
    stop: tuple[str, ...] = ()


def parse_body(raw: bytes) -> dict[str, Any]:
    """The JSON object of a request body."""
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise BadRequest(f"the body is not valid JSON: {error}") from None
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    return body


def _typed(body: dict[str, Any], name: str, kinds: tuple[type, ...], what: str) -> Any:
    """body[name] (None when absent or null), refused unless it is one of `kinds` (never a bool for a number)."""
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise BadRequest(f"'{name}' must be {what}, got {type(value).__name__}", name)
    return value


def _number(body: dict[str, Any], name: str, low: float, high: float, integer: bool = False) -> Any:
    value = _typed(body, name, (int,) if integer else (int, float), "an integer" if integer else "a number")
    if value is not None and not (low <= value <= high and math.isfinite(value)):
        raise BadRequest(f"'{name}' must be between {low:g} and {high:g}, got {value}", name)
    return value


def message_text(content: Any) -> str:
    """A message's content: a string, or OpenAI's list of parts whose text parts are joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) for p in content):
        return "".join(str(p.get("text", "")) for p in content if p.get("type") == "text")
    raise BadRequest("a message's 'content' must be a string or a list of parts", "messages")


def chat_request(body: dict[str, Any]) -> str:
    """The request of a chat: the last user message (earlier turns and system prompts are context
    dcode's prompt template has no place for)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty list", "messages")
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise BadRequest("each message must be an object with a 'role'", "messages")
    users = [m for m in messages if m["role"] == "user"]
    if not users:
        raise BadRequest("'messages' has no user message", "messages")
    return message_text(users[-1].get("content"))


def extensions(body: dict[str, Any]) -> tuple[dict[str, Any], bool | None, str]:
    """The `dcode` object: sampler settings (checked by SamplerConfig), repair, language."""
    extra = _typed(body, "dcode", (dict,), "an object") or {}
    settings = {SAMPLER_KEYS[k]: v for k, v in extra.items() if k in SAMPLER_KEYS}
    repair = _typed(extra, "repair", (bool,), "true or false")
    language = _typed(extra, "language", (str,), "a string") or "python"
    return settings, repair, language


def parse(kind: Kind, body: dict[str, Any], served: str) -> Job:
    """The Job a request body asks for; BadRequest (400, or 404 for another model) otherwise."""
    model = _typed(body, "model", (str,), "a string")
    if model is not None and model != served:
        raise BadRequest(
            f"the model '{model}' does not exist; this server serves '{served}'", "model", 404, "model_not_found"
        )
    if kind == "chat":
        text, suffix = chat_request(body), None
    else:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]  # OpenAI allows a list of prompts; dcode serves one
        if not isinstance(prompt, str):
            raise BadRequest("'prompt' must be a string", "prompt")
        text, suffix = prompt, _typed(body, "suffix", (str,), "a string")
    if not text.strip() and not (suffix or "").strip():
        raise BadRequest("the prompt is empty", "messages" if kind == "chat" else "prompt")
    n = _number(body, "n", 1, 1, integer=True)
    del n  # only n=1: checked by the range
    settings, repair, language = extensions(body)
    for name, target in (("temperature", "temperature"), ("top_p", "top_p"), ("seed", "seed")):
        low, high = {"temperature": (0, 2), "top_p": (0, 1), "seed": (0, 2**63 - 1)}[name]
        value = _number(body, name, low, high, integer=name == "seed")
        if value is not None:
            settings[target] = value
    if settings.get("top_p") == 0:
        raise BadRequest("'top_p' must be above 0", "top_p")
    try:
        SamplerConfig(**settings)  # every value in range before the model sees it
    except (TypeError, ValueError) as error:
        raise BadRequest(f"bad sampler setting: {error}", "dcode") from None
    stop = body.get("stop")
    stops = (stop,) if isinstance(stop, str) else stop if stop is not None else ()
    if not isinstance(stops, list | tuple) or not all(isinstance(s, str) and s for s in stops) or len(stops) > 4:
        raise BadRequest("'stop' must be a string or a list of up to 4 non-empty strings", "stop")
    options = _typed(body, "stream_options", (dict,), "an object") or {}
    return Job(
        kind=kind,
        text=text,
        suffix=suffix,
        max_tokens=_number(body, "max_tokens" if "max_tokens" in body else "max_completion_tokens", 1, 2**31, True),
        settings=settings,
        stream=bool(_typed(body, "stream", (bool,), "true or false")),
        include_usage=bool(_typed(options, "include_usage", (bool,), "true or false")),
        diffusing=bool(_typed(body, "diffusing", (bool,), "true or false")),
        repair=repair,
        language=language,
        stop=tuple(stops),
    )
