"""Judging a repair's fill: did it delete code, did it change lines the issues do not blame, and
which of its changed lines the fix did not need.

Pure text plus dcode.syntax's checker and dcode.spans' splice: the repair pass (local, and through
an endpoint) calls judge() on each candidate. Knows nothing about tokens, models or files.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from difflib import SequenceMatcher

from dcode.linediff import hunks
from dcode.spans import Origin, blamed_lines, splice
from dcode.syntax import Issue, find_issues

# Names a span defines (Python, JavaScript, Rust, Go, C-like, ...): a repair keeps them.
DEFINED = re.compile(r"\b(?:def|class|function|fn|func|struct|interface|enum|trait)\s+([A-Za-z_]\w*)")


# A line holding only a comment (Python / shell, C-like, CSS, HTML, SQL / Lua); it is not code.
COMMENT_LINE = re.compile(r"\s*(#|//|/\*|\*|<!--|--)")


def code_lines(text: str) -> int:
    """Lines holding code: not blank, not only a comment."""
    return sum(1 for line in text.splitlines() if line.strip() and not COMMENT_LINE.match(line))


def deleted(old: str, new: str, names: bool = True) -> bool:
    """Whether a span's new text drops the code it replaces: blank or only comments where there was
    code, under half its code lines where there were three or more, or (names=True) without a
    function or type name the old text defined (the model replacing a function with an unrelated
    stub; a draft's own names may change). Such a result can have fewer issues, but it is not a repair.
    Example: deleted("def add(a, b):\n    return a +", "def get(self):\n    return 1") -> True."""
    before, after = code_lines(old), code_lines(new)
    if (before > 0 and after == 0) or (before >= 3 and 2 * after < before):
        return True
    return names and bool(dropped_names(old, new))


def dropped_names(old: str, new: str) -> set[str]:
    """The function and type names old defines that new does not.
    Example: dropped_names("def f(): ...\ndef g(): ...", "def f(): ...") -> {"g"}."""
    return set(DEFINED.findall(old)) - set(DEFINED.findall(new))


def narrowest(old: str, new: str, language: str, found: list[Issue]) -> tuple[str, list[Issue], int]:
    """new with every changed line that the fix does not need put back as it was in old: a widened
    round re-masks a statement or block, and the model rewrites lines that were fine. A line goes
    back when that adds no issue. Returns the text, its issues and the lines put back.
    Example: old "x = (1\ny = 2\n", new "x = (1)\ny = 3\n" -> "x = (1)\ny = 2\n", 1 line put back."""
    before, lines = old.splitlines(keepends=True), new.splitlines(keepends=True)
    put_back = 0
    for i1, i2, j1, j2 in reversed(hunks(before, lines)):  # from the end: earlier indices stay valid
        trial = lines[:j1] + before[i1:i2] + lines[j2:]
        issues = find_issues("".join(trial), language)
        if len(issues) <= len(found):
            lines, found, put_back = trial, issues, put_back + max(1, i2 - i1)
    return "".join(lines), found, put_back


def confined(old: str, new: str, lines: Collection[int]) -> bool:
    """Whether new changes no line of old outside `lines` (0-based line numbers): lines may be
    inserted anywhere, but every line replaced or removed is one of those. A user's file is
    repaired on the lines its issues blame, and nowhere else.
    Example: confined("a(\nb\n", "a()\nb\n", {0}) -> True; confined("a(\nb\n", "a()\nc\n", {0}) -> False."""
    before, after = old.splitlines(keepends=True), new.splitlines(keepends=True)
    return all(set(range(i1, i2)) <= set(lines) for i1, i2, _, _ in hunks(before, after))


def resembles(old: str, new: str, share: float = 0.5) -> bool:
    """Whether every line new replaces in old is still mostly itself: the replaced and the new text
    of each hunk have a similarity ratio (difflib's) of at least `share`; inserted lines pass. A
    user's broken line is repaired, not swapped for another statement: where the checker blames a
    line that was fine (after `els` became broken, compile() blames the `return` under it), a fill
    that parses by writing `found.append()` there would lose the user's code.
    Example: resembles("x = f(1\n", "x = f(1)\n") -> True; resembles("return f(a)\n", "y.append()\n") -> False."""
    before, after = old.splitlines(keepends=True), new.splitlines(keepends=True)
    return all(
        SequenceMatcher(None, "".join(before[i1:i2]).strip(), "".join(after[j1:j2]).strip()).ratio() >= share
        for i1, i2, j1, j2 in hunks(before, after)
        if i2 > i1
    )


def complaints(text: str, issues: Sequence[Issue]) -> set[tuple[str, str]]:
    """Each issue as (message, the text of its line, stripped): what it says about which line."""
    lines = text.splitlines()
    return {(i.message, lines[i.line - 1].strip() if 0 < i.line <= len(lines) else "") for i in issues}


def progress(old: str, old_issues: Sequence[Issue], new: str, new_issues: Sequence[Issue]) -> bool:
    """Whether new is a step forward from old: fewer issues, and each one left was there before
    (the same message about the same line). A fill that trades two issues for one it caused has
    fewer issues but broke something new: `els:` refilled as `________()` leaves an "unexpected
    indent" under it.
    Example: progress("a(\nb(\n", [two issues], "a()\nb(\n", [b's issue as before]) -> True."""
    return len(new_issues) < len(old_issues) and complaints(new, new_issues) <= complaints(old, old_issues)


def judge(
    best: str,
    best_issues: list[Issue],
    spans: Sequence[tuple[int, int]],
    texts: Sequence[str],
    language: str,
    origin: Origin,
    hint: Issue | None,
) -> tuple[str, list[Issue], bool, int]:
    """A try's result: the text with each byte span replaced by its fill, its issues, whether it is
    kept and how many lines were put back. Kept: it deletes no code, has fewer issues than the best
    so far and, in a user's file, changes only the blamed lines, each still mostly itself, breaking
    no line that was fine."""
    data = best.encode()
    candidate = splice(data, spans, texts)
    found = find_issues(candidate, language)
    erased = any(
        deleted(data[a:b].decode(), t, names=origin != "draft") for (a, b), t in zip(spans, texts, strict=True)
    )
    kept = not erased and len(found) < len(best_issues)
    restored = 0
    if kept:
        candidate, found, restored = narrowest(best, candidate, language, found)
        kept = origin != "file" or (
            confined(best, candidate, blamed_lines(data, best_issues, hint))
            and progress(best, best_issues, candidate, found)
            and resembles(best, candidate)
        )
    return candidate, found, kept, restored
