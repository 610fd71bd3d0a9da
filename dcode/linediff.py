"""Line-level diffs: which stretches of lines changed between two texts, paired line by line.

Pure text: the repair pass uses it to put back the lines a fix did not need. Imports nothing of
dcode and knows nothing about tokens, syntax or files.
"""

from __future__ import annotations

from difflib import SequenceMatcher


def newline_of(text: str) -> str:
    """The line ending a text uses: CRLF when its first line ends so, else LF.
    Example: newline_of("a\\r\\nb\\r\\n") -> "\\r\\n"."""
    first = text.find("\n")
    return "\r\n" if first > 0 and text[first - 1] == "\r" else "\n"


def starts(i1: int, j1: int, shift: int, longer_old: bool) -> tuple[int, int]:
    """Where a replaced stretch's pairs begin in old and new when the shorter side is shifted by `shift`."""
    return (i1 + shift, j1) if longer_old else (i1, j1 + shift)


def likeness(old: list[str], new: list[str], a: int, b: int, k: int) -> float:
    """How alike old[a:a+k] and new[b:b+k] are, line by line (sum of difflib ratios)."""
    return sum(SequenceMatcher(None, old[a + t], new[b + t]).ratio() for t in range(k))


def hunks(old: list[str], new: list[str]) -> list[tuple[int, int, int, int]]:
    """Changed stretches of lines as (old from, old to, new from, new to), in order. Inside a
    replaced stretch the shorter side is laid along the longer where its lines are most alike, each
    such pair is a hunk of its own, and the lines left over on either side are inserted or deleted:
    so each line can be judged on its own.
    Example: ["x = (1\n"] -> ["x = (1)\n", "w = 0\n"]: [(0, 1, 0, 1), (1, 1, 1, 2)]."""
    out = []
    for tag, i1, i2, j1, j2 in SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        n, m = i2 - i1, j2 - j1
        k = min(n, m)
        if k == 0:
            out.append((i1, i2, j1, j2))
            continue
        a, b = max(
            (starts(i1, j1, shift, n > m) for shift in range(abs(n - m) + 1)),
            key=lambda ab: likeness(old, new, ab[0], ab[1], k),
        )
        if (a, b) != (i1, j1):
            out.append((i1, a, j1, b))  # lines before the pairs: only one side has them
        out += [(a + t, a + t + 1, b + t, b + t + 1) for t in range(k)]
        if (a + k, b + k) != (i2, j2):
            out.append((a + k, i2, b + k, j2))
    return out
