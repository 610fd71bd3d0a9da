"""Where a test or build command says it failed: its output parsed into failures and counts.

Pure text code: takes what a command printed, returns `Failure`s (the frames that led to each
error, innermost last, its message, the failing test's name and its assertion context) and the
counts of a pytest summary (`2 failed, 5 passed, 1 error`). Reads Python tracebacks, pytest's
failure sections (long, short and line forms) and the `path:line[:col]: message` form that gcc,
clang, go, ruff, mypy and tsc print (tsc's `path(line,col): error TS...` too), and rustc's
`--> path:line:col`. Knows nothing about files on disk, symbols, models or the terminal: which
paths may be changed is the caller's predicate (`innermost`).

Example: parse('calc.c:5:12: error: expected ";"\\n')[0].frames[-1] -> Location("calc.c", 5, 12).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Location:
    """A place in a file, as the command printed it (the path relative or absolute)."""

    path: str
    line: int  # 1-based
    column: int | None = None  # 1-based, where the tool gave one


@dataclass(frozen=True)
class Failure:
    """One error: the frames that led to it (outermost first; the last is where it was raised or
    reported), the message, and for a test its name and the lines that show the assertion."""

    frames: tuple[Location, ...]
    message: str  # "assert 4 == 3", "ZeroDivisionError: division by zero", "error: expected ';'"
    test: str | None = None  # "test_add", "TestStack.test_push": pytest's section name
    context: str = ""  # pytest's `>` source line and `E` lines, or the lines under a diagnostic


@dataclass(frozen=True)
class Counts:
    """A pytest summary line's counts. Example: Counts(failed=2, passed=5) says "2 failed, 5 passed"."""

    failed: int = 0
    passed: int = 0
    errors: int = 0  # errors at collection or in fixtures: a test that cannot even run

    def __str__(self) -> str:
        parts = [
            (self.failed, "failed"),
            (self.passed, "passed"),
            (self.errors, "error" if self.errors == 1 else "errors"),
        ]
        return ", ".join(f"{n} {word}" for n, word in parts if n) or "no tests ran"


# ---------------------------------------------------------------------------------------------
# Counts

_SUMMARY = re.compile(r"^[=\s]*((?:\d+ \w+(?:, )?)+)(?: in [\d.]+s)?(?: \([^)]*\))?[=\s]*$")
_COUNT = re.compile(r"(\d+) (failed|passed|errors?|skipped|xfailed|xpassed|warnings?|deselected|rerun)\b")


def counts(output: str) -> Counts | None:
    """The counts of the last pytest summary line (`1 failed, 2 passed in 0.05s`, `== 1 error in
    0.1s ==`); None when the output has none (another tool, or pytest never got that far)."""
    for line in reversed(output.splitlines()):
        match = _SUMMARY.match(line)
        if match is None or " in " not in line:
            continue
        found = {word.rstrip("s") if word.startswith("error") else word: int(n) for n, word in _COUNT.findall(line)}
        if found:
            return Counts(found.get("failed", 0), found.get("passed", 0), found.get("error", 0))
    if re.search(r"^[=\s]*no tests ran in [\d.]+s", output, re.MULTILINE):
        return Counts()
    return None


# ---------------------------------------------------------------------------------------------
# Echoing output

# Escape sequences (CSI: colours, clear-screen, cursor moves; OSC: window titles, hyperlinks; DCS,
# SOS, PM, APC strings; two-byte ESC X), then any control byte left but tab and newline (C0, DEL, C1).
_ESCAPES = re.compile(
    r"(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f]).*?(?:\x07|\x1b\\|\x9c|(?=\n)|$)"  # OSC, DCS, SOS, PM, APC
    r"|(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"  # CSI
    r"|\x1b[ -/]*[0-~]?"  # any other ESC sequence
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]"  # control bytes but tab and newline
)


def printable(text: str) -> str:
    """Text a command printed, safe to echo on a terminal: escape sequences and control bytes
    removed (tabs and newlines kept). Example: printable("\x1b]0;pwned\x07E  \x1b[31massert\x1b[0m") -> "E  assert"."""
    return _ESCAPES.sub("", text)


# ---------------------------------------------------------------------------------------------
# Failures

_PYTEST_SECTIONS = re.compile(r"^=+ (FAILURES|ERRORS) =+$", re.MULTILINE)
_SECTION_END = re.compile(r"^=+ (short test summary info|warnings summary|.*\d+ \w+.* in [\d.]+s).*=+$")
_TEST_HEADER = re.compile(r"^_{3,} (.+?) _{3,}$")
_TRACEBACK_FILE = re.compile(r'File "(?P<path>[^"]+)", line (?P<line>\d+)')
_PYTEST_FRAME = re.compile(r"^(?P<path>[^\s:][^:]*?\.\w+):(?P<line>\d+):(?: (?P<rest>.*))?$")
# gcc, clang, go, ruff, mypy, eslint -f unix, tsc --pretty: path:line[:col][:] [-] message
_DIAGNOSTIC = re.compile(r"^(?P<path>[^\s:(][^:(]*?\.\w+):(?P<line>\d+)(?::(?P<col>\d+))?(?::| -) ?(?P<message>.*)$")
_TSC = re.compile(r"^(?P<path>[^\s(][^(]*?\.\w+)\((?P<line>\d+),(?P<col>\d+)\): (?P<message>.*)$")
_RUST_ARROW = re.compile(r"^\s*--> (?P<path>[^\s:]+):(?P<line>\d+):(?P<col>\d+)$")
_NOT_ERRORS = re.compile(r"^\s*(note|warning|info|help)\b", re.IGNORECASE)


def parse(output: str) -> list[Failure]:
    """Every failure the output names, in the order printed: pytest's sections first, then Python
    tracebacks outside them, then compiler and linter diagnostics (errors only, where the tool
    marks them; notes and warnings are dropped when any error is there)."""
    lines = output.splitlines()
    found, used = _pytest_failures(lines)
    rest = [line if i not in used else "" for i, line in enumerate(lines)]
    tracebacks, used = _tracebacks(rest)
    rest = [line if i not in used else "" for i, line in enumerate(rest)]
    return found + tracebacks + _diagnostics(rest)


def innermost(failure: Failure, allowed: Callable[[str], bool]) -> Location | None:
    """The innermost frame in a file the caller may change, or None."""
    return next((frame for frame in reversed(failure.frames) if allowed(frame.path)), None)


def _pytest_failures(lines: list[str]) -> tuple[list[Failure], set[int]]:
    """pytest's FAILURES and ERRORS sections: one Failure per `___ name ___` header."""
    found: list[Failure] = []
    used: set[int] = set()
    inside, name, body, start = False, None, [], 0
    for i, line in enumerate([*lines, "=== end ==="]):
        header = _TEST_HEADER.match(line)
        ends = _PYTEST_SECTIONS.match(line) or _SECTION_END.match(line) or line == "=== end ==="
        if (header or ends) and name is not None:
            found.append(_pytest_section(name, body))
            used.update(range(start, i))
            name, body = None, []
        if _PYTEST_SECTIONS.match(line):
            inside = True
        elif ends:
            inside = False
        elif inside and header:
            name, start = header[1].strip(), i
        elif name is not None:
            body.append(line)
    return found, used


def _pytest_section(name: str, body: list[str]) -> Failure:
    """One test's section: the frames its location lines and embedded tracebacks name, the `E`
    lines as the message, and the `>` lines beside them as the context."""
    frames: list[Location] = []
    for line in body:
        if (match := _PYTEST_FRAME.match(line)) or (match := _TRACEBACK_FILE.search(line)):
            frames.append(Location(match["path"], int(match["line"])))
    errors = [line[1:].strip() for line in body if line.startswith("E ")]
    message = next((e for e in reversed(errors) if re.match(r"\w+(\.\w+)*(Error|Exception)\b", e)), None)
    message = message or (errors[0] if errors else _last_frame_text(body))
    context = "\n".join(line.rstrip() for line in body if line.startswith((">", "E ")))
    test = name.removeprefix("ERROR collecting ").removeprefix("ERROR at setup of ")
    return Failure(tuple(frames), message, test, context)


def _last_frame_text(body: list[str]) -> str:
    """The text after the last location line (`calc.py:3: ZeroDivisionError`), for a section
    without `E` lines."""
    for line in reversed(body):
        if (match := _PYTEST_FRAME.match(line)) and match["rest"]:
            return match["rest"]
    return "failed"


def _tracebacks(lines: list[str]) -> tuple[list[Failure], set[int]]:
    """Python's `Traceback (most recent call last):` blocks: frames, then the exception line."""
    found: list[Failure] = []
    used: set[int] = set()
    i = 0
    while i < len(lines):
        if not lines[i].startswith("Traceback (most recent call last)"):
            i += 1
            continue
        start, frames, context = i, [], []
        i += 1
        while i < len(lines) and (lines[i].startswith(" ") or not lines[i].strip()):
            if match := _TRACEBACK_FILE.search(lines[i]):
                frames.append(Location(match["path"], int(match["line"])))
            elif lines[i].strip() and not re.fullmatch(r"[\s^~]+", lines[i]):  # not a marker line
                context.append(lines[i].strip())
            i += 1
        message = lines[i].strip() if i < len(lines) else "exception"
        found.append(Failure(tuple(frames), message, None, "\n".join(context[-3:])))
        used.update(range(start, i + 1))
        i += 1
    return found, used


def _diagnostics(lines: list[str]) -> list[Failure]:
    """`path:line[:col]: message` lines (and tsc's and rustc's forms), each with the lines under it
    (the source line and caret a compiler prints) as context."""
    found: list[tuple[Failure, bool]] = []  # (failure, whether it is an error)
    pending: str | None = None  # rustc's `error[E0308]: ...` line, waiting for its `-->`
    for i, line in enumerate(lines):
        if match := _RUST_ARROW.match(line):
            message = pending or "error"
            frame = Location(match["path"], int(match["line"]), int(match["col"]))
            found.append((Failure((frame,), message, None, _under(lines, i)), not _NOT_ERRORS.match(message)))
            pending = None
            continue
        match = _TSC.match(line) or _DIAGNOSTIC.match(line)
        if match is None:
            if re.match(r"^(error|warning)(\[\w+\])?: ", line):
                pending = line.strip()
            continue
        message = match["message"].strip()
        column = int(match["col"]) if match["col"] else None
        frame = Location(match["path"], int(match["line"]), column)
        found.append((Failure((frame,), message, None, _under(lines, i)), not _NOT_ERRORS.match(message)))
    errors = [failure for failure, is_error in found if is_error]
    return errors or [failure for failure, _ in found]


def _under(lines: list[str], i: int, most: int = 3) -> str:
    """The indented lines right under line i (a compiler's quoted source and caret)."""
    block = []
    for line in lines[i + 1 : i + 1 + most]:
        if not line.startswith((" ", "\t", "|")) or not line.strip():
            break
        block.append(line.rstrip())
    return "\n".join(block)
