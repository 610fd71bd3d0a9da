"""The dcode wire format: OpenAI-compatible objects, SSE lines and the `dcode` frame extension.

Owns the JSON shapes `dcode serve` sends and a dcode client reads back: completion objects and
stream chunks (chat and text), the whole-canvas chunk of a `"diffusing": true` stream with its
`dcode` field (a frame, a repair round, the finished code), usage, errors, and a render.Frame to
and from JSON. Pure dictionaries and strings: imports neither torch nor a web framework, so a
client can use it without either.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from dcode.render import MASK, Frame

Kind = Literal["chat", "text"]  # /v1/chat/completions, or /v1/completions and /v1/fim/completions
DONE = "data: [DONE]\n\n"


def sse(data: Mapping[str, Any]) -> str:
    """One Server-Sent Event: `data: {json}` and a blank line. ASCII JSON: a client that splits
    lines as str.splitlines does (at U+2028, U+0085) still gets one event per line."""
    return f"data: {json.dumps(data, separators=(',', ':'))}\n\n"


def error_body(message: str, kind: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    """OpenAI's error shape. Example: error_body("no", "invalid_request_error")["error"]["type"]."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def model_card(model: str, created: int, context: int) -> dict[str, Any]:
    """One entry of GET /v1/models, and GET /v1/models/{id}: OpenAI's fields, and the context length
    under vLLM's name (`max_model_len`), which tools read to size what they send."""
    return {"id": model, "object": "model", "created": created, "owned_by": "dcode", "max_model_len": context}


def completion(
    kind: Kind,
    ident: str,
    model: str,
    text: str,
    finish: str,
    used: Mapping[str, int],
    extra: Mapping[str, Any],
    *,
    created: int,
    warning: str | None = None,
    tool_calls: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """A finished `chat.completion` or `text_completion` made at `created` (Unix seconds), with
    dcode's metadata under "dcode", and `warning` when the prompt was cut to fit. A chat answer
    that calls tools has them as `tool_calls`, and content null when it is nothing but calls."""
    choice: dict[str, Any] = {"index": 0, "finish_reason": finish, "logprobs": None}
    if kind == "chat":
        choice["message"] = {"role": "assistant", "content": text or None if tool_calls else text}
        if tool_calls:
            choice["message"]["tool_calls"] = [dict(call) for call in tool_calls]
    else:
        choice["text"] = text
    out = {
        "id": ident,
        "object": "chat.completion" if kind == "chat" else "text_completion",
        "created": created,
        "model": model,
        "choices": [choice],
        "usage": dict(used),
        "dcode": dict(extra),
    }
    if warning is not None:
        out["warning"] = warning
    return out


def chunk(
    kind: Kind,
    ident: str,
    model: str,
    text: str | None,
    finish: str | None = None,
    *,
    created: int,
    first: bool = False,
    extension: Mapping[str, Any] | None = None,
    warning: str | None = None,
    tool_calls: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """One stream chunk: `text` is the delta (appended streams) or the whole canvas (diffusing
    streams); `created` is the stream's (every chunk of a stream has the same); `first` adds the
    chat role; `extension` is the dcode field; `warning` says the prompt was cut to fit;
    `tool_calls` are OpenAI's tool-call deltas (index, and id, type and name when a call starts)."""
    choice: dict[str, Any] = {"index": 0, "finish_reason": finish, "logprobs": None}
    if kind == "chat":
        delta: dict[str, Any] = {"role": "assistant"} if first else {}
        if text is not None:
            delta["content"] = text
        if tool_calls:
            delta["tool_calls"] = [dict(call) for call in tool_calls]
        choice["delta"] = delta
    else:
        choice["text"] = text or ""
    out: dict[str, Any] = {
        "id": ident,
        "object": "chat.completion.chunk" if kind == "chat" else "text_completion",
        "created": created,
        "model": model,
        "choices": [choice],
    }
    if extension is not None:
        out["dcode"] = dict(extension)
    if warning is not None:
        out["warning"] = warning
    return out


def usage_chunk(kind: Kind, ident: str, model: str, used: Mapping[str, int], created: int) -> dict[str, Any]:
    """The last chunk of a stream asked for `stream_options.include_usage`: no choices, the usage."""
    out = chunk(kind, ident, model, None, created=created)
    out["choices"] = []
    out["usage"] = dict(used)
    return out


# ---------------------------------------------------------------------------------------------
# The diffusing stream's extension


def canvas_text(frame: Frame) -> str:
    """The whole current canvas: decoded pieces, masked positions as render.MASK."""
    return "".join(MASK if piece is None else piece for piece in frame.pieces)


def frame_json(frame: Frame) -> dict[str, Any]:
    """A Frame as the wire's `frame` object. Example: frame_from_json(frame_json(f)) == f."""
    return {
        "pieces": list(frame.pieces),
        "committed": sorted(frame.committed),
        "remasked": sorted(frame.remasked),
        "edited": sorted(frame.edited),
        "forward": frame.forward,
        "masked": frame.masked,
        "filled": frame.filled,
        "elapsed": round(frame.elapsed, 4),
        "settled": frame.settled,
        "repair_round": frame.repair_round,
        "language": frame.language,
        "model": frame.model,
        "device": frame.device,
    }


def frame_from_json(data: Mapping[str, Any]) -> Frame:
    """The Frame a `frame` object describes (the inverse of frame_json)."""
    return Frame(
        pieces=tuple(None if piece is None else str(piece) for piece in data["pieces"]),
        committed=frozenset(int(i) for i in data["committed"]),
        remasked=frozenset(int(i) for i in data.get("remasked", ())),
        model=str(data.get("model", "")),
        device=str(data.get("device", "")),
        forward=int(data["forward"]),
        masked=int(data["masked"]),
        filled=int(data["filled"]),
        elapsed=float(data["elapsed"]),
        language=str(data.get("language", "python")),
        settled=bool(data.get("settled", False)),
        repair_round=int(data.get("repair_round", 0)),
        edited=frozenset(int(i) for i in data.get("edited", ())),
    )


def frame_event(frame: Frame) -> dict[str, Any]:
    return {"event": "frame", "frame": frame_json(frame)}


def repair_round_event(
    round: int, attempt: int, spans: Sequence[tuple[int, int]], issues_after: int, kept: bool
) -> dict[str, Any]:
    return {
        "event": "repair_round",
        "round": round,
        "attempt": attempt,
        "spans": [[a, b] for a, b in spans],
        "issues_after": issues_after,
        "kept": kept,
    }


def finished_event(code: str, metadata: Mapping[str, Any]) -> dict[str, Any]:
    return {"event": "finished", "code": code, "metadata": dict(metadata)}
