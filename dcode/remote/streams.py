"""A served model's stream, read as the live view draws it: whole-text replacements (Mercury 2 with
`"diffusing": true`), appended deltas (SGLang's finished blocks, vLLM, OpenAI) or dcode frames
(the `dcode` extension of a dcode server, see docs of `dcode serve`), each chunk becoming a
dcode.render.Frame.

Owns: detecting a stream's kind (or taking the one --stream-mode forces), splitting text into the
pieces a Frame shows (words, single spaces and symbols standing in for tokens, which a remote text
does not have), what changed since the last chunk, and the wire frame of a dcode server. Knows
nothing about HTTP, files or the terminal.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from difflib import SequenceMatcher
from typing import Any, Literal

from dcode.events import Drawn, Frame
from dcode.remote.client import RemoteError
from dcode.remote.sse import MalformedStream
from dcode.render import MASK

Kind = Literal["replace", "append", "dcode"]
Mode = Literal["auto", "replace", "append", "dcode"]
STREAM_MODES: tuple[Mode, ...] = ("auto", "replace", "append", "dcode")
MOST_DIFF = 250_000  # piece pairs difflib compares for one chunk's highlight (a few ms)
PIECE = re.compile(r"\w+|\s|[^\w\s]")  # a word, one white-space character, or one symbol


@dataclass(frozen=True)
class Answer:
    """A whole streamed answer."""

    text: str  # the final text (for a dcode stream, the `finished` event's code)
    kind: Kind  # how the stream was read
    chunks: int  # content chunks: "passes" of the live view and the summary line
    tokens: int  # completion tokens (the server's usage, else the pieces of the text)
    prompt_tokens: int  # from the server's usage (0 when it sent none)
    seconds: float
    finish_reason: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)  # a dcode server's `finished` metadata
    first_frame: float | None = None  # seconds until the first content chunk


def pieces(text: str, masks: bool = False) -> list[str | None]:
    """The text as a Frame's pieces; with masks, MASK characters are masked positions (None).
    Example: pieces("def f(·") -> ["def", " ", "f", "(", "·"]; with masks=True the last is None."""
    found: list[str | None] = list(PIECE.findall(text))
    return [None if masks and p == MASK else p for p in found]


def changed(old: list[str | None], new: list[str | None]) -> frozenset[int]:
    """Offsets of new's pieces that differ from old, for the highlight: position by position when
    the length held (a diffusion canvas), else the part between the common head and tail, diffed
    with difflib while that is small (MOST_DIFF pairs) and marked whole beyond.
    Example: changed(["a", "=", "1"], ["a", "=", "2"]) -> {2}."""
    if len(old) == len(new):
        return frozenset(i for i, (a, b) in enumerate(zip(old, new, strict=True)) if a != b)
    head = next((i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b), min(len(old), len(new)))
    tail = 0
    while tail < min(len(old), len(new)) - head and old[-1 - tail] == new[-1 - tail]:
        tail += 1
    was, now = old[head : len(old) - tail], new[head : len(new) - tail]
    if len(was) * len(now) > MOST_DIFF:
        return frozenset(range(head, head + len(now)))
    opcodes = SequenceMatcher(None, was, now, autojunk=False).get_opcodes()
    return frozenset(head + j for tag, _, _, j1, j2 in opcodes if tag in ("replace", "insert") for j in range(j1, j2))


def wire_frame(raw: Any) -> Frame:
    """A dcode server's `frame` object as the Frame a local Describer builds (dcode.serve.wire is
    the format both sides share)."""
    from dcode.serve.wire import frame_from_json

    try:
        return frame_from_json(raw)
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise MalformedStream(f"a dcode frame lacks or mistypes {error}") from None


def content(chunk: dict[str, Any]) -> str | None:
    """A chunk's text: chat delta, completion text, or a whole (non-streamed) message."""
    choices = chunk.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    choice = choices[0]
    for holder, key in ((choice.get("delta"), "content"), (choice, "text"), (choice.get("message"), "content")):
        if isinstance(holder, dict) and isinstance(holder.get(key), str):
            return str(holder[key])
    return None


def kind_of(chunk: dict[str, Any], mode: Mode, diffusing: bool) -> Kind:
    """A stream's kind from one chunk: what --stream-mode forces; else dcode frames when the chunk
    carries the `dcode` extension; whole texts when it says `diffusing` (or we asked Inception's
    host for them, `diffusing`), or when it is a whole non-streamed message; else appended deltas."""
    if mode != "auto":
        return mode
    if isinstance(chunk.get("dcode"), dict):
        return "dcode"
    choices = chunk.get("choices")
    first = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    delta = first["delta"] if isinstance(first.get("delta"), dict) else {}
    if diffusing or chunk.get("diffusing") is True or delta.get("diffusing") is True or "message" in first:
        return "replace"
    return "append"


def redrawn(shown: list[str | None], piece: str, appended: bool) -> tuple[list[str | None], frozenset[int]]:
    """The pieces on screen after a chunk, and which of them it changed: an appended delta
    re-splits only the last piece and the delta (a word may go on); a whole text replaces them.
    Example: redrawn(["def", " ", "ad"], "d(", True) -> (["def", " ", "add", "("], {2, 3})."""
    if not appended:
        now = pieces(piece, masks=True)
        return now, changed(shown, now)
    start = max(len(shown) - 1, 0)
    redo = pieces("".join(p or "" for p in shown[start:]) + piece)
    kept = start + 1 if shown and redo and redo[0] == shown[-1] else start
    return shown[:start] + redo, frozenset(range(kept, start + len(redo)))


def read(
    chunks: Iterable[dict[str, Any]],
    mode: Mode,
    *,
    model: str,
    device: str,
    language: str,
    diffusing: bool = False,
    empty_ok: bool = False,
    began: float | None = None,
) -> Iterator[Drawn | Answer]:
    """A Drawn frame per content chunk, then the Answer. `diffusing`: the server is known to send
    whole texts when asked (Inception's host). A dcode extension seen later switches to dcode frames.
    An empty answer is a RemoteError unless `empty_ok` (a fill may delete its span)."""
    reading = Reading(mode, diffusing, model, device, language, time.perf_counter() if began is None else began)
    for chunk in chunks:
        drawn = reading.take(chunk)
        if drawn is not None:
            yield drawn
    yield reading.answer(empty_ok)


@dataclass
class Reading:
    """What read() has gathered of one stream so far: the text, the pieces drawn last, the counters."""

    mode: Mode
    diffusing: bool
    model: str
    device: str
    language: str
    began: float
    text: str = ""
    shown: list[str | None] = field(default_factory=list)  # the pieces drawn last
    parts: list[str] = field(default_factory=list)  # an appended stream's deltas
    kind: Kind | None = None
    count: int = 0
    usage: dict[str, Any] = field(default_factory=dict)
    finish: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    first: float | None = None

    def take(self, chunk: dict[str, Any]) -> Drawn | None:
        """Read one chunk; the frame it draws, if any."""
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        choices = chunk.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            self.finish = choices[0].get("finish_reason") or self.finish
        extension = chunk.get("dcode") if isinstance(chunk.get("dcode"), dict) else {}
        piece = content(chunk)
        if piece or extension:  # a role or usage chunk says nothing of the kind
            found = kind_of(chunk, self.mode, self.diffusing)
            self.kind = found if self.kind is None or found != "append" else self.kind  # a later marker wins
        elapsed = time.perf_counter() - self.began
        if self.kind == "dcode" and extension:
            return self.extension(extension, piece, elapsed)
        if piece is None or (self.kind == "append" and not piece):
            return None
        self.count += 1
        self.first = elapsed if self.first is None else self.first
        if self.kind == "append":
            self.parts.append(piece)
        else:
            self.text = piece
        self.shown, fresh = redrawn(self.shown, piece, self.kind == "append")
        masked = sum(1 for p in self.shown if p is None)
        filled = sum(1 for p in self.shown if p)  # the tokens on screen, as the summary line counts them
        frame = Frame(
            tuple(self.shown), fresh, frozenset(), self.model, self.device, self.count, masked, filled, elapsed,
            self.language,
        )  # fmt: skip
        return Drawn(replace(frame, unit="chunk"))

    def extension(self, extension: dict[str, Any], piece: str | None, elapsed: float) -> Drawn | None:
        """A dcode server's own event: a frame to draw, or the finished answer and its metadata."""
        event = extension.get("event")
        if event == "frame":
            self.count += 1
            self.first = elapsed if self.first is None else self.first
            return Drawn(wire_frame(extension.get("frame")))
        if event == "finished":
            self.text = str(extension.get("code", piece or ""))
            self.metadata = extension["metadata"] if isinstance(extension.get("metadata"), dict) else {}
        return None

    def answer(self, empty_ok: bool) -> Answer:
        """The Answer once the stream ended; an empty one is a RemoteError unless `empty_ok`."""
        text = "".join(self.parts) if self.kind == "append" else self.text
        if not empty_ok and (self.kind is None or not text.strip()):
            raise RemoteError("the server returned an empty answer")
        usage, metadata = self.usage, self.metadata
        tokens = int(usage.get("completion_tokens") or metadata.get("tokens") or len(pieces(text)))
        return Answer(
            text=text,
            kind=self.kind or "append",
            chunks=int(metadata.get("forward_passes") or self.count),
            tokens=tokens,
            prompt_tokens=int(usage.get("prompt_tokens") or metadata.get("prompt_tokens") or 0),
            seconds=time.perf_counter() - self.began,
            finish_reason=self.finish,
            metadata=metadata,
            first_frame=self.first,
        )
