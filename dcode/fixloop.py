"""`dcode fix`'s loop: run the test command, regenerate the regions its failures point into, run it
again; keep the best state, undo a round that makes things worse.

Owns: running the command (through the shell, in the current folder, its output to a temporary
file; the run ends with the shell or at the timeout, and what it left in its process group is
killed), comparing a run with the best one (dcode.failures' counts and locations), refusing a fill
that deletes code no failing test asks for, and the best state restored on any exit, Ctrl-C
included. The files' promises (backups, atomic writes, locks, undoing only what dcode wrote) are
dcode.fixfiles'; which files may change, the regions and the instructions dcode.fixtargets'. The
keys in Settings.secrets are redacted (dcode.history.redact) from the output and the instructions.

Knows nothing about models, endpoints, argv or the terminal: the fill is one callable,
`regenerate(path, source, region, instruction) -> new source` (a dcode.filler.FillError skips the
region), and the loop is a stream of
events (Tested, Rewrote, Skipped, Fixed) that the command draws and records.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from dcode.failures import Counts, Failure, counts, parse
from dcode.filler import FillError
from dcode.fixes import code_lines, dropped_names
from dcode.fixfiles import Untouchable, Workspace, default_locks
from dcode.fixtargets import Target, Targets, called_names, instruction, pick
from dcode.history import redact

# (path, source, byte region, instruction) -> source. A region it cannot serve (too long for the
# model's context, say) raises dcode.filler.FillError: skipped, the loop goes on.
Regenerate = Callable[[Path, str, tuple[int, int], str], str]


@dataclass(frozen=True)
class Settings:
    """What a fix does; built by the command from its options."""

    command: str  # --test: run through the shell, as typed
    rounds: int = 3  # --rounds: fill-and-test rounds after the first run
    timeout: float = 300.0  # --test-timeout: seconds before the command's process group is killed
    budget: int = 1200  # characters of failure text in an instruction: room for the code in a small context
    most_regions: int = 4  # regions regenerated per round; the rest wait for the next round
    lines_around: int = 3  # lines each side of a failing line that no function encloses
    secrets: tuple[str, ...] = ()  # keys dcode holds: redacted from the command's output and the instructions
    locks: Path | None = field(default_factory=default_locks)  # the folder of per-file locks; None: none


# ---------------------------------------------------------------------------------------------
# Running the command


@dataclass(frozen=True)
class Run:
    """One run of the test command."""

    exit_code: int  # -9 (killed) when it timed out
    output: str  # stdout and stderr, interleaved as printed
    seconds: float
    counts: Counts | None  # pytest's summary, when it printed one
    failures: tuple[Failure, ...]
    timed_out: bool = False

    @property
    def passes(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    @property
    def problems(self) -> int:
        """Failing tests plus errors; for other tools the failures found (at least 1 when it fails)."""
        if self.passes:
            return 0
        if self.counts is not None and self.counts.failed + self.counts.errors:
            return self.counts.failed + self.counts.errors
        return max(1, len(self.failures))

    @property
    def verdict(self) -> str:
        """One line: '2 failed, 5 passed', 'passes', 'exit 1, 3 errors', 'timed out after 300 s'."""
        if self.timed_out:
            return f"timed out after {self.seconds:.0f} s"
        if self.counts is not None:
            return str(self.counts) + (
                "" if self.passes or self.counts.failed + self.counts.errors else f" (exit {self.exit_code})"
            )
        if self.passes:
            return "passes"
        return f"exit {self.exit_code}, {self.problems} error{'s' if self.problems != 1 else ''}"

    def metadata(self) -> dict[str, object]:
        """What `dcode fix --json` says of a run."""
        found = self.counts or Counts()
        return {
            "exit_code": self.exit_code,
            "passes": self.passes,
            "timed_out": self.timed_out,
            "failed": found.failed,
            "passed": found.passed,
            "errors": found.errors if self.counts is not None else 0 if self.passes else self.problems,
            "verdict": self.verdict,
            "seconds": round(self.seconds, 3),
        }


def run_command(command: str, timeout: float, cwd: Path | None = None) -> Run:
    """Run `command` through the shell in its own process group, its output to a temporary file
    (not a pipe: a detached child that keeps the output open cannot hold the run). The run is the
    shell's: it ends when the shell exits, or at `timeout`; then the rest of its group is killed
    (a test runner's children too), as it is when dcode itself is interrupted."""
    began = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        process = subprocess.Popen(
            command,
            shell=True,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a group of its own: Ctrl-C reaches dcode, which ends the group
        )
        timed_out = False
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:  # what it left running in its group ends with it (also when dcode is interrupted)
            _kill_group(process)
            process.wait()
        seconds = time.perf_counter() - began
        out.seek(0)
        output = out.read().decode("utf-8", errors="replace")
    return Run(process.returncode, output, seconds, counts(output), tuple(parse(output)), timed_out)


def hidden(run: Run, secrets: tuple[str, ...]) -> Run:
    """The run with the keys dcode holds taken out of its output (and so out of its failures, the
    instructions made of them, the history and the terminal)."""
    output = redact(run.output, secrets)
    return run if output == run.output else replace(run, output=output, failures=tuple(parse(output)))


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


Judgement = Literal["first", "better", "same", "worse"]


def compare(new: Run, best: Run) -> Judgement:
    """How a round's run compares with the best so far. Worse: it times out, has more errors (a
    failing test turned into an import or collection error), more problems, or fewer passing tests.
    Better: it passes, has fewer problems, or as many with more tests passing (`pytest -x` got further)."""
    if new.passes:
        return "same" if best.passes else "better"
    if best.passes or (new.timed_out and not best.timed_out):
        return "worse"
    further = False
    if new.counts is not None and best.counts is not None:
        if new.counts.errors > best.counts.errors or new.counts.passed < best.counts.passed:
            return "worse"
        further = new.counts.passed > best.counts.passed
    elif best.counts is not None and not best.timed_out:
        return "worse"  # the runner no longer gets to its summary
    if new.problems > best.problems:
        return "worse"
    if new.problems < best.problems or further or (best.timed_out and not new.timed_out):
        return "better"
    return "same"


# ---------------------------------------------------------------------------------------------
# The loop as a stream of events


@dataclass(frozen=True)
class Tested:
    """A run of the command: round 0 is the run before any change."""

    round: int
    run: Run
    judged: Judgement  # "first" for round 0; "worse" means the round is undone
    best: Run  # the best run after this one


@dataclass(frozen=True)
class Rewriting:
    """A region is about to be regenerated (a view says where; the fill's own view follows)."""

    round: int
    target: Target
    instruction: str


@dataclass(frozen=True)
class Rewrote:
    """A region regenerated and written."""

    round: int
    path: Path
    region: tuple[int, int]  # in the file before
    new_region: tuple[int, int]  # in the file after
    symbol: str | None
    instruction: str
    before: str  # the file's text before and after
    after: str


@dataclass(frozen=True)
class Skipped:
    """A region the filler could not serve, or whose fill changed nothing."""

    round: int
    target: Target
    reason: str


@dataclass(frozen=True)
class Fixed:
    """The end: the first and the best run, the rounds run, and the files' state."""

    first: Run
    best: Run
    rounds: int
    kept: tuple[Rewrote, ...]  # the rewrites in the best state
    changed: tuple[Path, ...]  # files that differ from their originals
    backups: dict[Path, Path]
    original: dict[Path, str]
    seconds: float
    note: str = ""  # why the loop stopped before its last round
    left: tuple[Path, ...] = ()  # files someone else changed during the run, left as they left them
    final: dict[Path, str] = field(default_factory=dict)  # each file dcode changed: its text as dcode last wrote it

    @property
    def exit_code(self) -> int:
        """0 when the command passes on the files as they are; 4 when it still fails, or when a
        file was changed by someone else during the run (the state on disk was never tested)."""
        return 0 if self.best.passes and not self.left else 4


FixEvent = Tested | Rewriting | Rewrote | Skipped | Fixed


def fix(
    targets: Targets,
    settings: Settings,
    regenerate: Regenerate,
    run: Callable[[str, float, Path | None], Run] = run_command,
) -> Iterator[FixEvent]:
    """Run, regenerate, run again, up to settings.rounds; the files end at the best state reached,
    whatever ends the loop (an exception or Ctrl-C in the middle of a round too), except a file
    someone else changed meanwhile, which stays as they left it. Each file named is locked before
    the first run (dcode.fixfiles.Busy when another fix holds it), a folder's files at their first write."""
    space = Workspace(locks=settings.locks)
    try:
        for path in sorted(targets.files):
            space.lock(path)
        yield from _loop(
            targets,
            settings,
            regenerate,
            lambda: hidden(run(settings.command, settings.timeout, None), settings.secrets),
            space,
        )
    finally:
        space.release()


def _loop(
    targets: Targets, settings: Settings, regenerate: Regenerate, test: Callable[[], Run], space: Workspace
) -> Iterator[FixEvent]:
    began = time.perf_counter()
    first = best = current = test()
    yield Tested(0, first, "first", best)
    rounds, note, worse_before = 0, "", None
    kept: tuple[Rewrote, ...] = ()
    undone: set[tuple[tuple[Path, str], ...]] = set()  # the files of each round undone as worse
    try:
        for number in range(1, settings.rounds + 1):
            if best.passes:
                break
            picked = pick(current.failures, targets, space.read, settings.lines_around)
            if not picked:
                note = "no failure points into the files dcode may change"
                break
            rounds = number
            done = yield from _rewrite(
                number, picked[: settings.most_regions], settings, regenerate, space, worse_before
            )
            if not done:
                note = "the fills changed nothing"
                break
            if space.state() in undone:  # a greedy fill answers the same request the same way
                note = "the fills repeated a round already undone"
                break
            after = test()
            judged = compare(after, best)
            if judged == "worse":
                undone.add(space.state())
                space.restore()
                current, worse_before = best, after.verdict
            else:
                current, worse_before = after, None
                if judged == "better":
                    space.keep()
                    best, kept = after, (*kept, *done)
            yield Tested(number, after, judged, best)
    finally:
        space.restore()  # the best state, also when interrupted mid-round
        space.settle()
        space.drop_needless_backups()
    changed, seconds = tuple(space.changed()), time.perf_counter() - began
    yield Fixed(
        first, best, rounds, kept, changed, dict(space.backups), dict(space.original), seconds, note,
        tuple(space.left), space.written(),
    )  # fmt: skip


def _rewrite(
    number: int,
    picked: list[Target],
    settings: Settings,
    regenerate: Regenerate,
    space: Workspace,
    worse_before: str | None,
) -> Generator[FixEvent, None, list[Rewrote]]:
    """One round's fills, each region through `regenerate`, written as it comes; a file's regions
    are filled from its end, so the spans of those above stay true. A region of a file dcode may
    not write now (read-only, locked, changed by someone else) is skipped before its fill, a fill
    that deletes code the tests did not ask about is refused. Returns what was rewritten."""
    done: list[Rewrote] = []
    for target in sorted(picked, key=lambda t: (str(t.path), -t.region[0])):
        asked = redact(instruction(target, settings.command, settings.budget, worse_before), settings.secrets)
        yield Rewriting(number, target, asked)
        try:
            space.check(target.path)
        except Untouchable as why:
            yield Skipped(number, target, str(why))
            continue
        source = space.read(target.path)
        try:
            new = regenerate(target.path, source, target.region, asked)
        except FillError as error:
            yield Skipped(number, target, str(error))
            continue
        if new == source:
            yield Skipped(number, target, "the fill changed nothing")
            continue
        tail = len(source.encode()) - target.region[1]
        new_region = (target.region[0], len(new.encode()) - tail)
        refused = deletes(_text(source, target.region), _text(new, new_region), target.failures)
        try:
            if refused:
                raise Untouchable(refused)
            space.write(target.path, new)
        except Untouchable as why:
            yield Skipped(number, target, str(why))
            continue
        tail = len(source.encode()) - target.region[1]
        rewrote = Rewrote(number, target.path, target.region, new_region, target.symbol, asked, source, new)
        done.append(rewrote)
        yield rewrote
    return done


def _text(source: str, region: tuple[int, int]) -> str:
    return source.encode()[region[0] : region[1]].decode(errors="replace")


def deletes(before: str, after: str, failures: tuple[Failure, ...]) -> str | None:
    """Why a region's fill is refused for deleting code, or None: it leaves out a function or type
    the region defined that no failing test calls (dcode.fixes.dropped_names, as the repair pass
    judges), or it leaves no code where there was some.
    Example: deletes("def f():\n    return 1\n\ndef g(): ...", "def f():\n    return 2\n", ()) -> "... g ..."."""
    asked = set().union(*(called_names(f) for f in failures))
    gone = sorted(dropped_names(before, after) - asked)
    if gone:
        return f"the fill deletes {', '.join(gone)}, which no failing test asks for"
    if code_lines(before) and not code_lines(after):
        return "the fill deletes the region's code"
    return None
