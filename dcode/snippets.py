"""Update snippets: the edit an apply request merges into a file, and where each part of it lands.

An update snippet is code in which marker lines such as `// ... existing code ...` stand for code
that stays as it is: the convention of the "apply" models (Inception's Mercury Edit at
/v1/apply/completions, docs.inceptionlabs.ai; Morph's and Relace's fast apply). Owns: telling a
marker line, splitting a snippet at them, and placing each part in the original by its first and
last lines (whole lines, in file order, each after the one before). A part whose first line is
not in the original makes the whole original the one region to rewrite, with the whole snippet.
Pure text: no model, no tokenizer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# A line that stands for unchanged code: a comment (or nothing) holding "... existing code ...",
# "... rest of code ...", "... keep existing code ...", "... code remains the same ..." or any
# "... words ..." between two ellipses ("# ... keep the imports ...").
MARKER = re.compile(
    r"^\s*(?:#+|//+|--|;+|/\*+|<!--|\*)?\s*"
    r"(?:\.\.\.|…)\s*(?:(?:existing|rest of|keep|unchanged|remaining|code remains)\b.*|.*(?:\.\.\.|…))"
    r"\s*(?:\*/|-->)?\s*$",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Placed:
    """One region of the original to rewrite, and the part of the snippet that goes there."""

    start: int  # byte offsets of whole lines in the original
    end: int
    part: str  # the snippet's lines for this region (the whole snippet when nothing could be placed)


def is_marker(line: str) -> bool:
    """Whether a line stands for unchanged code. Example: is_marker("// ... existing code ...") -> True."""
    return bool(MARKER.match(line))


def is_snippet(text: str) -> bool:
    """Whether text is an update snippet: it holds at least one marker line (prose does not)."""
    return any(is_marker(line) for line in text.splitlines())


def parts(snippet: str) -> list[str]:
    """The snippet's runs of lines between marker lines, without blank lines at their ends.
    Example: parts("# ... existing code ...\\nx = 1\\n# ... existing code ...") -> ["x = 1\\n"]."""
    runs: list[list[str]] = [[]]
    for line in snippet.splitlines(keepends=True):
        if is_marker(line):
            runs.append([])
        else:
            runs[-1].append(line)
    out = []
    for run in runs:
        text = "".join(run).strip("\n")
        while text and not text.split("\n", 1)[0].strip():  # a first line of spaces only
            text = text.split("\n", 1)[1] if "\n" in text else ""
        if text.strip():
            out.append(text.rstrip() + "\n")
    return out


def place(original: str, snippet: str) -> list[Placed]:
    """Where each part of the snippet goes. A part's first line is a line of the original (its
    context line, as apply snippets are written; indentation aside), found after the region
    before; the region runs to the original line equal to the part's last line found in it, and
    one line further for each part line after that (a changed line stands where the old one did).
    A part already in the original as it stands is left out (nothing to rewrite). When a part's
    first line is nowhere to be found, the whole original is the one region, with the whole snippet.
    Example: place("a\nb\nc\n", "a\nB") -> [Placed(0, 4, "a\nB\n")]."""
    lines = original.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line.encode()))
    keys = [line.strip() for line in lines]
    placed, after = [], 0
    for part in parts(snippet):
        own = [line.strip() for line in part.splitlines()]
        first = _find(keys, own[0], after)
        if first is None:
            return [Placed(0, starts[-1], snippet)]
        last, tail = first, len(own) - 1
        for k in range(len(own) - 1, 0, -1):  # the part's last line that is in the original after its first
            if (found := _find(keys, own[k], first + 1)) is not None:
                last, tail = found, len(own) - 1 - k
                break
        after = min(last + tail, len(lines) - 1) + 1
        if "".join(lines[first:after]).rstrip("\n") != part.rstrip("\n"):
            placed.append(Placed(starts[first], starts[after], part))
    return placed


def _find(keys: list[str], key: str, start: int) -> int | None:
    """The first index at or after start whose line (stripped) is key."""
    return next((i for i in range(start, len(keys)) if keys[i] == key and key), None)
