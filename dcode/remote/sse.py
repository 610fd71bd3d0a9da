"""Server-Sent Events, read the way real servers send them: `data:` lines up to a blank line make
one event; comments (`:`), other fields (`event:`, `id:`, `retry:`), CRLF line ends, a missing
blank line before the end of the stream and a missing `data: [DONE]` are all tolerated.

Pure text: takes lines, yields events and JSON chunks. Knows nothing about HTTP or OpenAI's fields.
Spec: https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

DONE = "[DONE]"  # OpenAI's end-of-stream sentinel


class MalformedStream(ValueError):
    """A stream that is not the SSE of JSON chunks it claims to be."""


@dataclass(frozen=True)
class Event:
    data: str  # the event's `data:` lines joined with "\n"
    event: str = "message"  # the `event:` field, if any


def events(lines: Iterable[str]) -> Iterator[Event]:
    """SSE events from the stream's lines (with or without their line ends).
    Example: events(["data: 1", "", ": ping", "data: 2"]) -> Event("1"), Event("2")."""
    data: list[str] = []
    kind = "message"
    for raw in lines:
        line = raw.rstrip("\r\n")
        if not line:
            if data:
                yield Event("\n".join(data), kind)
            data, kind = [], "message"
            continue
        if line.startswith(":"):
            continue  # a comment: keep-alive pings
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "data":
            data.append(value)
        elif field == "event":
            kind = value
    if data:  # the stream ended without the blank line
        yield Event("\n".join(data), kind)


def chunks(lines: Iterable[str]) -> Iterator[dict[str, object]]:
    """The JSON objects of an OpenAI-style stream, up to `data: [DONE]` (or the stream's end)."""
    for event in events(lines):
        if event.data.strip() == DONE:
            return
        try:
            chunk = json.loads(event.data)
        except json.JSONDecodeError as error:
            raise MalformedStream(f"a chunk is not JSON ({error.msg} at {error.pos}): {event.data[:60]!r}") from None
        if not isinstance(chunk, dict):
            raise MalformedStream(f"a chunk is not a JSON object: {event.data[:60]!r}")
        yield chunk
