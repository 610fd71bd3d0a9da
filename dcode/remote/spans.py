"""Which bytes a repair through an endpoint rewrites: the span rules of dcode.repair, on bytes.

dcode.repair imports torch (its canvas and sampler code), so its pure span functions are repeated
here, unchanged, to keep `--endpoint` torch-free: round 1 an issue's focus line (the line compile()
blames, for Python), round 2 the enclosing statement (never a whole definition) and the line
before, round 3 the enclosing block, or for a draft the rest of it; a user's file may change only
its blamed lines. Moving those functions into a torch-free module would let both import one copy.
Also fit_region (dcode.pipeline, which imports torch too): an edit's text as whole lines.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from dcode.syntax import BLOCK_TYPES, STATEMENT_TYPES, Issue, line_span, line_start

if TYPE_CHECKING:
    from tree_sitter import Node

DEFINITIONS = re.compile(r"(function|class|method|struct|impl|trait|interface|enum|module)")
_ROUNDS: tuple[tuple[re.Pattern[str], int], ...] = ((STATEMENT_TYPES, 1), (BLOCK_TYPES, 2))


def whole_lines(data: bytes, start: int, end: int) -> tuple[int, int]:
    """The lines holding [start, end), without the last line's ending."""
    return line_span(data, start)[0], line_span(data, max(start, end - 1))[1]


def with_context(data: bytes, span: tuple[int, int], lines: int, after: bool = True) -> tuple[int, int]:
    """span plus `lines` whole lines before it (and after it, unless after=False)."""
    start, end = span
    for _ in range(lines):
        start = line_span(data, start - 1)[0] if start > 0 else 0
        nl = data.find(b"\n", end)
        if after:
            end = line_span(data, nl + 1)[1] if nl >= 0 else len(data)
    return start, end


def enclosing(
    node: Node | None, kinds: re.Pattern[str], data: bytes, span: tuple[int, int], stop: re.Pattern[str] | None = None
) -> Node | None:
    """The smallest node from `node` up (the file excluded) of a type matching kinds whose lines
    strictly contain span; None past a node whose type matches `stop`."""
    while node is not None and node.parent is not None:
        if stop is not None and stop.search(node.type):
            return None
        lines = whole_lines(data, node.start_byte, node.end_byte)
        if kinds.search(node.type) and lines[0] <= span[0] and lines[1] >= span[1] and lines != span:
            return node
        node = node.parent
    return None


def focus_line(data: bytes, issue: Issue, hint: Issue | None) -> tuple[int, int]:
    """The line compile() blames (`hint`) when it lies in the issue's span, else the issue's line."""
    if hint is not None:
        first, last = whole_lines(data, issue.start_byte, issue.end_byte)
        if first <= hint.start_byte <= last:
            return line_span(data, hint.start_byte)
    return line_span(data, line_start(data, issue.line))


def blamed_lines(data: bytes, issues: Sequence[Issue], hint: Issue | None) -> set[int]:
    """The 0-based lines a fix in a user's file may change."""
    if hint is not None:
        return {data.count(b"\n", 0, hint.start_byte)}
    return {data.count(b"\n", 0, focus_line(data, issue, None)[0]) for issue in issues}


def widen(
    data: bytes, root: Node, issue: Issue, round: int, hint: Issue | None = None, draft: bool = False
) -> tuple[int, int]:
    """Byte span to rewrite for issue in this round (1, 2, 3...), whole lines without the last
    line's ending (dcode.repair.widen, without its reason text)."""
    span = focus_line(data, issue, hint)
    anchor = root.descendant_for_byte_range(*span)
    for step in range(2, round + 1):
        if draft and step >= 3:
            return span[0], len(data)
        kinds, context = _ROUNDS[min(step, 3) - 2]
        found = enclosing(anchor, kinds, data, span, DEFINITIONS if step == 2 else None)
        if found is not None:
            anchor = found
            span = whole_lines(data, found.start_byte, found.end_byte)
            if step == 2:
                span = (with_context(data, span, 1, after=False)[0], span[1])
        else:
            span = with_context(data, span, context)
    return span


def merge(spans: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Spans that overlap or touch merged, in text order."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(end, out[-1][1]))
        else:
            out.append((start, end))
    return out


def splice(data: bytes, spans: Sequence[tuple[int, int]], texts: Sequence[str]) -> str:
    """data with each span's bytes replaced by its new text; every other byte copied as is."""
    out, at = [], 0
    for (start, end), text in zip(spans, texts, strict=True):
        out += [data[at:start], text.encode()]
        at = end
    out.append(data[at:])
    return b"".join(out).decode()


def fit_line_span(text: str, after: bytes) -> str:
    """A fill for a span of whole lines that stops before its last line's ending: no blank lines
    before it (its first line's indentation kept), and no line ending or trailing spaces after it
    when the line ending after the span is kept.
    Example: fit_line_span("\n    return 1\n", b"\nprint()") -> "    return 1"."""
    text = re.sub(r"\A(?:[ \t]*\r?\n)+", "", text)
    return text.rstrip("\r\n \t") if after.startswith((b"\n", b"\r")) else text


def fit_region(text: str, old: str) -> str:
    """The filled region as whole lines in the old region's line-ending style (dcode.pipeline.fit_region).
    Example: fit_region("\\n  x = 1\\n\\n", "  x = 0\\r\\n") -> "  x = 1\\r\\n"."""
    newline = "\r\n" if "\r\n" in old else "\n"
    body = text.replace("\r\n", "\n").rstrip()
    if old.split("\n", 1)[0].strip() or not old:
        body = re.sub(r"\A(?:[ \t]*\n)+", "", body)
    if not body:
        return ""
    return body.replace("\n", newline) + (newline if old.endswith("\n") or not old else "")
