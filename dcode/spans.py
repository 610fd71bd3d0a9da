"""Which bytes a repair or an edit rewrites, and how new text goes back in: pure byte arithmetic.

Owns: widening an issue's span per repair round (the first round its focus line, the second the
enclosing statement and the line before, the third on the enclosing block, or for a draft the rest
of it), the lines a fix in a user's file may change, merging spans, splicing new text into them,
and fitting a filled region or line span to the text around it. Used by the local repair and edit
(dcode.repair, dcode.localfill) and by the same commands through an endpoint (dcode.remote), so it
imports no torch: only dcode.syntax. Knows nothing about tokens, models, files or the terminal.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from dcode.syntax import BLOCK_TYPES, STATEMENT_TYPES, Issue, line_span, line_start

if TYPE_CHECKING:
    from tree_sitter import Node

# Who wrote the text being repaired. "draft": the model, the whole answer (dcode new): a fix may
# redraft it from the broken statement on and rename what it defines. "edit": the model, a region
# of a user's file. "file": the user (dcode repair): a fix may change only the blamed lines (see
# blamed_lines; lines may be inserted), a partial fix must not add an issue, and greedy refills come first.
Origin = Literal["draft", "edit", "file"]

# Definitions of functions and types: the second round never widens to one (a whole function
# re-masked is a rewrite, not a repair); the third round's block is the most it gets.
DEFINITIONS = re.compile(r"(function|class|method|struct|impl|trait|interface|enum|module)")
# The second round, then the third on -> (node types they widen to, lines of context added when no
# such node encloses the span).
_ROUNDS: tuple[tuple[re.Pattern[str], int], ...] = ((STATEMENT_TYPES, 1), (BLOCK_TYPES, 2))
# A single line after an edit's region that a fill repeats counts as a repeat of that code only
# from this many characters: "}" or "pass" may well end a fill.
ECHO_LINE = 12


def covering_lines(data: bytes, start: int, end: int) -> tuple[int, int]:
    """The lines holding [start, end), without the last line's ending (unlike dcode.edit.whole_lines)."""
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
    """The smallest node from `node` up (the file itself excluded) of a type matching kinds whose
    lines strictly contain span; None past a node whose type matches `stop`."""
    while node is not None and node.parent is not None:
        if stop is not None and stop.search(node.type):
            return None
        lines = covering_lines(data, node.start_byte, node.end_byte)
        if kinds.search(node.type) and lines[0] <= span[0] and lines[1] >= span[1] and lines != span:
            return node
        node = node.parent
    return None


def focus_line(data: bytes, issue: Issue, hint: Issue | None) -> tuple[int, int]:
    """The one line the first round re-masks: the line compile() blames (`hint`, Python) when it
    lies in the issue's span, else the issue's own line. A tree-sitter ERROR can cover a whole
    function; the broken line inside it is usually one."""
    if hint is not None:
        first, last = covering_lines(data, issue.start_byte, issue.end_byte)
        if first <= hint.start_byte <= last:
            return line_span(data, hint.start_byte)
    return line_span(data, line_start(data, issue.line))


def blamed_lines(data: bytes, issues: Sequence[Issue], hint: Issue | None) -> set[int]:
    """The 0-based lines a fix in a user's file may change: the line compile() blames where Python
    has one (the grammar's other errors follow from it), else every issue's focus line."""
    if hint is not None:
        return {data.count(b"\n", 0, hint.start_byte)}
    return {data.count(b"\n", 0, focus_line(data, issue, None)[0]) for issue in issues}


def widen(
    data: bytes, root: Node, issue: Issue, round: int, hint: Issue | None = None, draft: bool = False
) -> tuple[int, int, str]:
    """Byte span to re-mask for issue in this round (1, 2, 3...) and why. The first round: the focus
    line; the second: the statement enclosing it (never a whole function or type definition) and
    the line before; the third on: the enclosing block, or for a draft (text the model wrote, left
    to right) everything from the second round's span to the end. Where no statement/block encloses
    the span, a line or two of context stand in. Spans stop before the last line's ending, so the
    line breaks around them are kept as they are."""
    span = focus_line(data, issue, hint)
    scope = "its line"
    anchor = root.descendant_for_byte_range(*span)
    for step in range(2, round + 1):
        if draft and step >= 3:
            # What a draft wrote after a broken line was conditioned on it: redraft the rest.
            span, scope = (span[0], len(data)), "to the end of the draft"
            break
        kinds, context = _ROUNDS[min(step, 3) - 2]
        found = enclosing(anchor, kinds, data, span, DEFINITIONS if step == 2 else None)
        if found is not None:
            anchor, scope = found, f"enclosing {found.type}"
            span = covering_lines(data, found.start_byte, found.end_byte)
            if step == 2:  # a broken line often shows as an error on the next one
                span = (with_context(data, span, 1, after=False)[0], span[1])
                scope += " and the line before"
        else:
            span, scope = with_context(data, span, context), f"{context} line(s) of context"
    first, last = (data.count(b"\n", 0, i) + 1 for i in (span[0], max(span[0], span[1] - 1)))
    where = f"line {first}" if first == last else f"lines {first}-{last}"
    return span[0], span[1], f"{issue.message} (line {issue.line}): {where}, {scope}"


def merge(spans: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Spans that overlap or touch merged, in text order.
    Example: merge([(5, 9), (0, 2), (2, 4)]) -> [(0, 4), (5, 9)]."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(end, out[-1][1]))
        else:
            out.append((start, end))
    return out


def splice(data: bytes, spans: Sequence[tuple[int, int]], texts: Sequence[str]) -> str:
    """data with each byte span (in text order) replaced by its new text; every other byte copied as is.
    A span that ends after a line break (its last line is blank: context taken after it, or a token
    reaching past the line) has text that ends with that break, or the blank line after it is lost.
    Example: splice(b"f(\\r\\n\\r\\nx", [(0, 4)], ["f()"]) -> "f()\\r\\n\\r\\nx"."""
    out, at = [], 0
    for (start, end), text in zip(spans, texts, strict=True):
        if text and data[start:end].endswith(b"\n") and not text.endswith("\n"):
            text += "\r\n" if data[start:end].endswith(b"\r\n") else "\n"
        out += [data[at:start], text.encode()]
        at = end
    out.append(data[at:])
    return b"".join(out).decode()


def fit_line_span(text: str, after: bytes) -> str:
    """A fill for a span of whole lines that stops before its last line's ending: no blank lines
    before it (its first line's indentation kept), and no line ending or trailing spaces after it
    when the line ending after the span is kept.
    Example: fit_line_span("\\n    return 1\\n", b"\\nprint()") -> "    return 1"."""
    text = re.sub(r"\A(?:[ \t]*\r?\n)+", "", text)
    return text.rstrip("\r\n \t") if after.startswith((b"\n", b"\r")) else text


def fit_region(text: str, old: str, newline: str | None = None) -> str:
    """The decoded region as whole lines in the file's line-ending style (`newline`, else the old
    region's): trailing blank lines and spaces dropped, leading blank lines too (unless the old
    region began with one), and a line ending after the last line unless the old region ended
    the file without one. Blank text stays blank: the edit deleted the region.
    Example: fit_region("\\n  x = 1\\n\\n", "  x = 0\\r\\n") -> "  x = 1\\r\\n"."""
    newline = newline or ("\r\n" if "\r\n" in old else "\n")
    body = text.replace("\r\n", "\n").rstrip()
    if old.split("\n", 1)[0].strip() or not old:
        body = re.sub(r"\A(?:[ \t]*\n)+", "", body)
    if not body:
        return ""
    return body.replace("\n", newline) + (newline if old.endswith("\n") or not old else "")


def unechoed(text: str, after: str) -> str | None:
    """A region's fill without an echo of the text after the region: a fill whose last lines are
    the first lines of `after` (a server that echoes `suffix`) loses them; a fill that still holds
    the first lines of `after` (two, or one of at least ECHO_LINE characters) repeats that code,
    and is refused (None). Lines are compared without their indentation and line endings.
    Example: unechoed("    x = 2\\nmain()\\n", "main()\\n") -> "    x = 2\\n"."""
    want = [line.strip() for line in after.splitlines() if line.strip()]
    if not want:
        return text
    lines = text.splitlines(keepends=True)
    body = [i for i, line in enumerate(lines) if line.strip()]  # indices of lines with text
    for k in range(min(len(body), len(want)), 0, -1):
        if [lines[i].strip() for i in body[-k:]] == want[:k]:
            lines = lines[: body[-k]]
            break
    head = want[:2] if len(want) > 1 else want if len(want[0]) >= ECHO_LINE else []
    held = [line.strip() for line in lines if line.strip()]
    if head and any(held[i : i + len(head)] == head for i in range(len(held) - len(head) + 1)):
        return None
    return "".join(lines)
