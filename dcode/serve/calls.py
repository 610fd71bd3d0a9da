"""A tool-calling answer's text -> OpenAI's `tool_calls`, whole or as stream deltas.

Owns: reading the `<tool_call>` blocks dcode.serve.shaping's grammar makes the model write (also
from a prefix of the answer, while it settles), the call ids ("call_" and 24 hex digits), and the
deltas OpenAI streams a call as: the first with its index, id, type and function name (arguments
""), then pieces of its arguments. A call's arguments are the JSON text the model wrote, so the
pieces streamed join into the final answer's `arguments`. Pure Python.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from dcode.serve.shaping import CALL_CLOSE, CALL_OPEN

HEAD = '{"name": "'
ARGUMENTS = '", "arguments": '


@dataclass(frozen=True)
class Call:
    name: str | None  # None until the name is written whole
    arguments: str  # the arguments' JSON text written so far
    complete: bool  # the arguments' JSON is closed


def json_end(text: str) -> int | None:
    """Where the JSON value at the start of `text` ends (index after it), None when it is not closed
    yet. Strings and escapes are followed; the value is an object or array (a tool's arguments).
    Example: json_end('{"a": "}"} x') -> 10."""
    depth, quoted, escaped = 0, False, False
    for i, char in enumerate(text):
        if quoted:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                quoted = False
        elif char == '"':
            quoted = True
        elif char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
            if depth == 0:
                return i + 1
    return None


def scan(text: str) -> list[Call]:
    """The calls in (a prefix of) an answer made of `<tool_call>` blocks; [] for a text answer.
    Example: scan('<tool_call>\\n{"name": "f", "arguments": {"x": 1') -> [Call("f", '{"x": 1', False)]."""
    calls: list[Call] = []
    at = 0
    while text.startswith(CALL_OPEN, at):
        at += len(CALL_OPEN)
        named = text.find(ARGUMENTS, at)
        if not text.startswith(HEAD, at) or named < 0:
            return [*calls, Call(None, "", False)]  # its name is still being written
        start = named + len(ARGUMENTS)
        end = json_end(text[start:])
        if end is None:
            return [*calls, Call(text[at + len(HEAD) : named], text[start:], False)]
        calls.append(Call(text[at + len(HEAD) : named], text[start : start + end], True))
        at = start + end + len("}" + CALL_CLOSE + "\n")  # the call's "}", its close, the line between
    return calls


def is_calls(text: str) -> bool:
    """Does an answer (or its settled prefix) hold calls rather than text: it opens with a call."""
    return text.startswith(CALL_OPEN) or (bool(text) and CALL_OPEN.startswith(text))


def call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


def tool_calls(text: str, ids: list[str]) -> list[dict[str, Any]]:
    """The answer's calls in OpenAI's message shape; `ids` (extended here) are those already given
    to its calls while streaming, so a call keeps its id. Each call's arguments parse as JSON."""
    out = []
    for i, call in enumerate(c for c in scan(text) if c.complete):
        json.loads(call.arguments)  # the grammar made it JSON: a failure here is a bug, and says so
        if i == len(ids):
            ids.append(call_id())
        function = {"name": call.name, "arguments": call.arguments}
        out.append({"id": ids[i], "type": "function", "function": function})
    return out


class CallStream:
    """The tool-call deltas of an answer as it settles: feed it each settled prefix."""

    def __init__(self) -> None:
        self.ids: list[str] = []  # one per call announced
        self.sent: list[str] = []  # each call's arguments text sent so far

    def deltas(self, text: str) -> list[dict[str, Any]]:
        """The `tool_calls` delta entries that bring a client from what was sent to `text` (a
        settled prefix of the answer: what it holds is committed, so every piece can go)."""
        out: list[dict[str, Any]] = []
        for index, call in enumerate(scan(text)):
            if call.name is None:
                break
            if index == len(self.ids):
                self.ids.append(call_id())
                self.sent.append("")
                function = {"name": call.name, "arguments": ""}
                out.append({"index": index, "id": self.ids[index], "type": "function", "function": function})
            now = call.arguments
            if now.startswith(self.sent[index]) and len(now) > len(self.sent[index]):
                out.append({"index": index, "function": {"arguments": now[len(self.sent[index]) :]}})
                self.sent[index] = now
        return out
