"""Where a failure points: which files `dcode fix` may change, the region of each failure (the
enclosing function or method, by dcode.edit's symbols, else the lines around), and the
instruction a fill is given (the failure's test, message and assertion, cut to a budget).

Reads files only through the caller's `read`; knows nothing about running commands, models,
argv or the terminal. Paths printed by a command resolve against the folder it ran in.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dcode.failures import Failure, innermost

if TYPE_CHECKING:
    from dcode.edit import Symbol

# ---------------------------------------------------------------------------------------------
# Which files may change

_TEST_NAME = re.compile(r"^(test_.*\.py|.*_test\.(py|go)|conftest\.py|.*\.(test|spec)\.[cm]?[jt]sx?)$")
_TEST_FOLDERS = frozenset({"test", "tests", "__tests__", "testing"})
_SKIPPED_FOLDERS = frozenset({".git", ".venv", "venv", "node_modules", "__pycache__", "build", "dist", "target"})


def is_test_file(path: Path, folder: Path) -> bool:
    """A test file by name (test_x.py, x_test.go, x.test.ts) or by a test folder under `folder`."""
    return bool(_TEST_NAME.match(path.name)) or any(p in _TEST_FOLDERS for p in path.relative_to(folder).parts[:-1])


@dataclass(frozen=True)
class Targets:
    """The files a fix may change: files named (test files too), and in a folder named the source
    files it holds, test files excepted. Paths the command prints resolve against `root`."""

    files: frozenset[Path]
    folders: tuple[Path, ...]
    root: Path

    @classmethod
    def of(cls, paths: list[Path], root: Path) -> Targets:
        named = [(root / p).resolve() for p in paths]
        return cls(frozenset(p for p in named if not p.is_dir()), tuple(p for p in named if p.is_dir()), root.resolve())

    def allows(self, printed: str) -> Path | None:
        """The file a printed path names, if the fix may change it. A relative path that names no
        file here may be relative to the runner's own root (pytest's rootdir, a folder up): a
        named file whose path ends with it is that file."""
        path = (self.root / printed).resolve()
        if path in self.files:
            return path
        for folder in self.folders:
            if path.is_relative_to(folder) and path.is_file() and not is_test_file(path, folder):
                return path if _language(path) is not None else None
        if not Path(printed).is_absolute() and not path.exists():
            tail = Path(printed).parts
            ends = [f for f in self.files if f.parts[-len(tail) :] == tail and ".." not in tail]
            return ends[0] if len(ends) == 1 else None
        return None

    def sources(self, most: int = 200) -> list[Path]:
        """Every file the fix may change (a folder's first `most` source files), for finding a
        function by name when a failure's frames are all in test files."""
        found = sorted(self.files)
        for folder in self.folders:
            for dirpath, dirnames, filenames in os.walk(folder):
                dirnames[:] = sorted(d for d in dirnames if d not in _SKIPPED_FOLDERS and not d.startswith("."))
                for name in sorted(filenames):
                    path = Path(dirpath) / name
                    if len(found) < most and self.allows(str(path)) is not None:
                        found.append(path)
        return found


def _language(path: Path) -> str | None:
    from dcode.syntax import detect_language

    return detect_language(str(path), None, None)


# ---------------------------------------------------------------------------------------------
# Regions and instructions


@dataclass(frozen=True)
class Target:
    """A region to regenerate and the failures that point into it."""

    path: Path
    region: tuple[int, int]  # byte span of whole lines
    symbol: str | None  # the enclosing function, method or class; None: lines around the failure
    failures: tuple[Failure, ...]


def enclosing(source: str, language: str | None, line: int, around: int) -> tuple[tuple[int, int], str | None]:
    """The innermost function, method or class holding `line` (1-based), else `around` lines each side."""
    from dcode.edit import RegionError, find_symbols, line_starts

    data = source.encode()
    starts = line_starts(data)
    if not starts:
        return (0, 0), None
    line = min(max(line, 1), len(starts))
    at = starts[line - 1]
    try:
        found = find_symbols(source, language or "") if language else []
    except RegionError:
        found = []
    holding = [s for s in found if s.start_byte <= at < s.end_byte]
    if holding:
        best = min(holding, key=lambda s: s.end_byte - s.start_byte)
        return (best.start_byte, best.end_byte), best.name
    first, last = max(1, line - around), min(len(starts), line + around)
    return (starts[first - 1], starts[last] if last < len(starts) else len(data)), None


def called_names(failure: Failure) -> set[str]:
    """Names called in a failure's assertion context: `assert add(1, 2) == 3` -> {"add"}."""
    return set(re.findall(r"([A-Za-z_]\w*)\s*\(", f"{failure.context}\n{failure.message}"))


def pick(failures: tuple[Failure, ...], targets: Targets, read: Callable[[Path], str], around: int) -> list[Target]:
    """The regions the failures point into: the innermost frame in a file the fix may change, or,
    when every frame is in a test file, the functions the failing assertion calls by name."""
    picked: list[Target] = []
    sources = functools.cache(targets.sources)  # walked once, and only if a failure needs it
    symbols = functools.cache(lambda path: _symbols(read, path))  # each file read and parsed once
    for failure in failures:
        frame = innermost(failure, lambda printed: targets.allows(printed) is not None)
        if frame is not None:
            path = targets.allows(frame.path)
            assert path is not None
            source = read(path)
            region, symbol = enclosing(source, _language(path), frame.line, around)
            picked.append(Target(path, region, symbol, (failure,)))
        else:
            picked.extend(_by_name(failure, sources() if called_names(failure) else [], symbols))
    return merged(picked)


def _symbols(read: Callable[[Path], str], path: Path) -> list[Symbol]:
    """The file's functions, methods and classes (dcode.edit.find_symbols); none where it cannot
    tell (no grammar, not text)."""
    from dcode.edit import RegionError, find_symbols

    language = _language(path)
    try:
        return find_symbols(read(path), language) if language else []
    except (RegionError, ValueError):
        return []


def _by_name(failure: Failure, sources: Iterable[Path], symbols: Callable[[Path], list[Symbol]]) -> list[Target]:
    """The functions among `sources` that the failing assertion calls by name."""
    names = called_names(failure)
    return [
        Target(path, (s.start_byte, s.end_byte), s.name, (failure,))
        for path in sources
        for s in symbols(path)
        if s.name.rsplit(".", 1)[-1] in names
    ]


def merged(picked: list[Target]) -> list[Target]:
    """One Target per region: overlapping regions of a file joined, their failures together, in order."""
    out: list[Target] = []
    for target in picked:
        for i, other in enumerate(out):
            a, b = other.region
            overlaps = target.region == other.region or (target.region[0] < b and a < target.region[1])
            if other.path == target.path and overlaps:
                region = (min(a, target.region[0]), max(b, target.region[1]))
                symbol = other.symbol if region == other.region else target.symbol if region == target.region else None
                failures = other.failures + tuple(f for f in target.failures if f not in other.failures)
                out[i] = Target(other.path, region, symbol, failures)
                break
        else:
            out.append(target)
    return out


def instruction(target: Target, command: str, budget: int, worse_before: str | None = None) -> str:
    """What the filler is asked: make the command pass, with each failure's test, message and
    assertion, cut to `budget` characters (the context is cut first, then the failures)."""
    where = f"`{target.symbol}`" if target.symbol else "this code"
    head = f"Fix {where} so that `{command}` passes."
    if worse_before:
        head += f" An earlier attempt made it worse ({worse_before}); try another way."
    parts = []
    for failure in target.failures:
        said = f"The test {failure.test} fails: {failure.message}" if failure.test else f"It fails: {failure.message}"
        parts.append(said + (f"\n{failure.context}" if failure.context and failure.context != failure.message else ""))
    text = "\n".join([head, *parts])
    if len(text) > budget:
        text = "\n".join([head, *(p.split("\n", 1)[0] for p in parts)])
    return text if len(text) <= budget else text[: max(0, budget - 3)].rstrip() + "..."
