"""The context window of an edit or a repair on a file larger than the model's context.

Owns: choosing which whole lines around a region go on the canvas when the whole file does not
fit. The region always fits (or the request is refused); the context is cut to what is left of
the model's context after the prompt and the region's masks: for a block-causal model, which
reads only what comes before, the nearest lines before the region (and the file's import lines,
if they take at most half the room); for a full-attention model the nearest lines on both sides.
Pure bytes and token counts: no torch, no tokenizer, no model (callers count the tokens).
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass

# Top-level lines that bring names into a file, by language (what a region's code is likely to use).
IMPORTS: dict[str, re.Pattern[bytes]] = {
    "python": re.compile(rb"(?:import|from)\s"),
    "javascript": re.compile(rb"(?:import\s|(?:const|let|var)\s.*=\s*require\()"),
    "rust": re.compile(rb"(?:pub\s+)?(?:use|extern\s+crate)\s"),
    "go": re.compile(rb"import\s"),
    "c": re.compile(rb"#\s*include\s"),
    "java": re.compile(rb"(?:import|package)\s"),
}
IMPORTS["typescript"] = IMPORTS["tsx"] = IMPORTS["javascript"]
IMPORTS["cpp"] = re.compile(rb"(?:#\s*include\s|using\s+namespace\s)")


@dataclass(frozen=True)
class Window:
    """What of a file a canvas holds around a region [before[1], after[0])."""

    before: tuple[int, int]  # byte span of the context before the region (it ends where the region starts)
    after: tuple[int, int]  # byte span of the context after the region (empty for a block-causal model)
    imports: tuple[tuple[int, int], ...] = ()  # import lines above `before`, put first on the canvas
    whole: bool = True  # the whole file is on the canvas

    def metadata(self, data: bytes, tokens: int) -> dict[str, object]:
        """The window for --json: byte and 1-based line ranges, and its tokens on the canvas."""

        def lines(span: tuple[int, int]) -> list[int] | None:
            if span[1] <= span[0]:
                return None
            return [data.count(b"\n", 0, span[0]) + 1, data.count(b"\n", 0, span[1] - 1) + 1]

        return {
            "whole_file": self.whole,
            "before": {"start_byte": self.before[0], "end_byte": self.before[1], "lines": lines(self.before)},
            "after": {"start_byte": self.after[0], "end_byte": self.after[1], "lines": lines(self.after)},
            "import_lines": [lines(span)[0] for span in self.imports],  # type: ignore[index]
            "tokens": tokens,
        }


def line_cuts(data: bytes) -> list[int]:
    """Every byte offset where a line starts, plus len(data): the places a window may be cut."""
    return [0, *(i + 1 for i, byte in enumerate(data) if byte == 0x0A and i + 1 < len(data)), len(data)]


def count(starts: Sequence[int], lo: int, hi: int) -> int:
    """Tokens (by their sorted start offsets) that start in [lo, hi)."""
    return bisect_left(starts, hi) - bisect_left(starts, lo)


def import_lines(data: bytes, language: str, end: int) -> list[tuple[int, int]]:
    """Byte spans (line endings included) of the unindented import lines that start before `end`."""
    pattern = IMPORTS.get(language)
    if pattern is None:
        return []
    found = []
    for match in re.finditer(rb"^.*(?:\n|\Z)", data[:end], re.MULTILINE):
        if match.end() > match.start() and pattern.match(match[0]):
            found.append((match.start(), match.end()))
    return found


def choose(
    data: bytes,
    region: tuple[int, int],
    starts: Sequence[int],
    room: int,
    both_sides: bool,
    language: str = "",
) -> Window:
    """The context around region that fits in `room` tokens, by the token start offsets of the
    whole file (`starts`): the whole file when it fits, else whole lines nearest the region, on
    both sides (a line before, a line after, ...) or, for a block-causal model, before it only."""
    a, b = region
    if count(starts, 0, a) + count(starts, b, len(data)) <= room:
        return Window((0, a), (b, len(data)))  # the whole file, as a short file always had it
    cuts = line_cuts(data)
    imports: list[tuple[int, int]] = []
    spent = 0
    wanted = import_lines(data, language, a)
    if wanted and sum(count(starts, *span) for span in wanted) <= room // 2:
        imports, spent = wanted, sum(count(starts, *span) for span in wanted)
    lo, hi = a, b
    ups = [c for c in reversed(cuts) if c < a]  # nearest first
    downs = [c for c in cuts if c > b] if both_sides else []
    while ups or downs:
        grew = False
        for side in (ups, downs):
            if not side:
                continue
            new_lo, new_hi = (side[0], hi) if side is ups else (lo, side[0])
            cost = count(starts, new_lo, a) + count(starts, b, new_hi)
            if cost + spent <= room:
                lo, hi, grew = new_lo, new_hi, True
                side.pop(0)
            else:
                side.clear()
        if not grew:
            break
    imports = [span for span in imports if span[1] <= lo]
    return Window((lo, a), (b, hi), tuple(imports), whole=lo == 0 and hi == len(data))


def narrower(window: Window, data: bytes) -> Window | None:
    """The window one line smaller (the far end of its larger side; imports go first), or None
    when it holds no context: for when the token estimate was short of the real count."""
    if window.imports:
        return Window(window.before, window.after, (), whole=False)
    (lo, a), (b, hi) = window.before, window.after
    if lo == a and hi == b:
        return None
    if a - lo >= hi - b:
        lo = data.find(b"\n", lo, a - 1) + 1 or a
    else:
        hi = data.rfind(b"\n", b, hi - 1) + 1 if data.rfind(b"\n", b, hi - 1) >= 0 else b
    return Window((lo, a), (b, hi), (), whole=False)
