"""`dcode fix`: run the tests, regenerate the code their failures point into, run them again.

The loop, the files' promises and the judging are dcode.fixloop's; this module reads the options,
builds the one fill the loop calls (`regenerator`: dcode.flows.edit over a filler, the local model
or an endpoint, under the live view as `dcode edit` draws it), prints the rounds and the summary,
records each round in the history, and picks the exit code: 0 the command passes, 4 it still
fails (the files at the best state reached) or a file was changed by someone else during the run,
1 runtime (a file another fix holds among others), 2 usage, 130/143 interrupted (the best state
restored first).

`dcode new ... -o FILE --test CMD` runs the same loop on the written file: `fix_written`.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from dcode.cli.app import INTERRUPTED, RUNTIME, TERMINATED, USAGE, Terminated, app, fail, interrupted
from dcode.cli.history import remember
from dcode.cli.options import with_options
from dcode.cli.resolve import Remote, Resolved
from dcode.cli.running import live, make_filler
from dcode.options import FIX

if TYPE_CHECKING:
    from dcode.events import Edited
    from dcode.filler import Filler
    from dcode.fixloop import Fixed, FixEvent, Regenerate, Settings, Targets


@app.command("fix")
@with_options(*FIX)
def fix_command(
    paths: Annotated[
        list[Path],
        typer.Argument(help="Files dcode may change; a folder: its source files, test files excepted."),
    ],
    run: Resolved[None],
) -> None:
    """Run --test; while it fails, regenerate the function (or lines) each failure points into and
    run it again, up to --rounds. A round that makes things worse is undone; the files end at the
    best state reached (originals kept as FILE.orig). Exit 0 passes, 4 still fails."""
    from dcode.fixloop import Targets

    test = checked_test(run, needed=True)
    assert test is not None
    targets = Targets.of(check_paths(paths), Path.cwd())
    regenerate, fills = regenerator(run, length=run.length)
    run_fix(targets, fix_settings(run, test), regenerate, fills, run)


def fix_settings(run: Resolved[object], test: str) -> Settings:
    """The loop's settings from the options, with the keys dcode holds (the options marked secret,
    else the variables an endpoint's key comes from): redacted from what the loop reads, sends and records."""
    from dcode.fixloop import Settings

    keys = (*run.secrets, os.environ.get("INCEPTION_API_KEY"), os.environ.get("OPENAI_API_KEY"))
    secrets = tuple(k for k in keys if k)
    return Settings(test, run.testing.rounds, run.testing.timeout, secrets=secrets)


def checked_test(run: Resolved[object], needed: bool) -> str | None:
    """--test (None when not given and not `needed`), checked (--test-timeout is, by its bounds)."""
    test = run.testing.command
    if test is None and not needed:
        return None
    if not test or not test.strip():
        fail("no test command: pass --test CMD (for example --test 'python -m pytest -q')", USAGE)
    return str(test)


def check_paths(paths: list[Path]) -> list[Path]:
    """Every path a writable UTF-8 file of a known language, or a folder; else a one-line usage error."""
    from dcode import syntax
    from dcode.files import FileProblem, check_writable, read_source

    for path in paths:
        if path.is_dir():
            continue
        try:
            source = read_source(path)
            check_writable(path, True)
        except FileProblem as error:
            fail(str(error), USAGE)
        if syntax.detect_language(str(path), source, None) is None:
            fail(f"{path}: unknown language", USAGE)
    return paths


# ---------------------------------------------------------------------------------------------
# The fill: dcode edit's flow over a filler


@dataclass
class Fills:
    """Who fills, and what the fills cost so far (for the summary and the history)."""

    model: str | None = None
    device: str | None = None
    dtype: str | None = None
    endpoint: str | None = None
    tokens: int = 0
    passes: int = 0
    seconds: float = 0.0
    settings: dict[str, object] = field(default_factory=dict)

    def identify(self, filler: Filler) -> None:
        who = filler.identity()
        self.model, self.device, self.dtype, self.endpoint = who.model, who.device, who.dtype, who.endpoint

    def add(self, edited: Edited) -> None:
        repaired = edited.repair.forward if edited.repair is not None else 0
        self.tokens, self.passes = self.tokens + edited.tokens, self.passes + edited.forward + repaired
        self.seconds += edited.seconds


def regenerator(
    run: Resolved[object], length: int | None = None, ready: Filler | None = None
) -> tuple[Regenerate, Fills]:
    """The adapter from the loop's `regenerate(path, source, region, instruction) -> source` to
    dcode.flows.edit, the one edit flow (`length`: --length, else the region's own), over a filler:
    `ready` (the one `dcode new` wrote with), else the endpoint (--endpoint, checked now), else the
    local model, loaded at the first fill so that a command that passes from the start loads nothing.
    The live view closes after each fill.
    A fill the flow refuses (too long for the context, an echo) is a FillError: the loop skips the
    region; a server that fails stops the fix (exit 1, or 2 for a request it refused)."""
    testing = run.testing
    fills = Fills(settings={**run.recorded, "rounds": testing.rounds, "test_timeout": testing.timeout})
    made: list[Filler] = []
    if ready is not None or isinstance(run.fills, Remote):
        made.append(ready or make_filler(run))
        fills.identify(made[0])
    rounds, tries = run.repair.rounds, run.repair.tries

    def regenerate(path: Path, source: str, region: tuple[int, int], instruction: str) -> str:
        from dcode import flows, syntax
        from dcode.events import Edited
        from dcode.filler import FillError

        if not made:
            made.append(make_filler(run))
            fills.identify(made[0])
        language = syntax.detect_language(str(path), source, None) or "python"
        edit = lambda f: flows.edit(f, source, region, instruction, language, length, rounds, str(path), tries)  # noqa: E731
        try:
            edited = live(made[0], edit, language, run.view, True)
        except flows.InputError as error:
            raise FillError(str(error)) from None
        except FillError as error:
            stop_on_server_failure(error)
            raise
        except (RuntimeError, MemoryError) as error:
            raise FillError(f"generation failed: {str(error).splitlines()[0] if str(error) else error!r}") from None
        if not isinstance(edited, Edited):
            raise FillError("the fill ended without its result")
        fills.add(edited)
        return edited.code

    return regenerate, fills


def stop_on_server_failure(error: Exception) -> None:
    """A server that failed (or refused a request) fails the next fill too: the fix stops there,
    the files at the best state (the loop restores them as the exit passes through it)."""
    from dcode.remote.client import RemoteError

    if isinstance(error, RemoteError):
        fail(f"fix stopped: {error}", USAGE if error.kind == "usage" else RUNTIME)


# ---------------------------------------------------------------------------------------------
# Running the loop and saying what it did


def run_fix(
    targets: Targets,
    settings: Settings,
    regenerate: Regenerate,
    fills: Fills,
    run: Resolved[object],
    report_too: bool = True,
) -> None:
    """Drain dcode.fixloop.fix, printing each run's verdict; then --diff / --json, the summary, the
    history's records, and the exit code. Ctrl-C / SIGTERM: the best state is back before exit."""
    from dcode import fixloop
    from dcode.files import FileProblem
    from dcode.fixfiles import CHANGED, Busy

    quiet, log = run.view.quiet, run.log
    seen: list[FixEvent] = []
    try:
        for event in fixloop.fix(targets, settings, regenerate):
            seen.append(event)
            if not quiet:
                say(event, settings.command)
    except typer.Exit as stop:  # a server that failed, a model that would not load: the files are back
        record_rounds(seen, fills, settings, log, stop.exit_code)
        raise
    except KeyboardInterrupt as error:  # the loop has put the best state back
        record_rounds(seen, fills, settings, log, TERMINATED if isinstance(error, Terminated) else INTERRUPTED)
        interrupted(error)
    except OSError as error:
        record_rounds(seen, fills, settings, log, RUNTIME)
        where = f"{error.filename}: " if error.filename else ""
        fail(f"fix stopped: {where}{error.strerror or error}", RUNTIME)
    except Busy as error:  # another dcode fix holds a file named: refused before the first run
        fail(f"{shown(error.path)}: {error}", RUNTIME)
    except FileProblem as error:  # a file the failures point into that cannot be read
        record_rounds(seen, fills, settings, log, RUNTIME)
        fail(f"fix stopped: {error}", RUNTIME)
    done = seen[-1]
    assert isinstance(done, fixloop.Fixed)
    if report_too and run.output.as_json:
        typer.echo(json.dumps(report(done, seen, settings, fills), indent=2))
    elif report_too and run.output.diff:
        sys.stdout.write(patch(done))
        sys.stdout.flush()
    for path in done.left:  # said even with --quiet: the user's own edit is at stake
        backup = f" (backup {shown(done.backups[path])})" if path in done.backups else ""
        typer.echo(f"dcode: warning: {shown(path)} was {CHANGED}{backup}", err=True)
    if not quiet:
        typer.echo(summary(done, fills), err=True)
    record_rounds(seen, fills, settings, log, done.exit_code)
    raise typer.Exit(done.exit_code)


def shown(path: Path) -> str:
    """A path as the user would type it: relative to here when it is below here."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def say(event: FixEvent, command: str) -> None:
    """One line on stderr per run, region and skipped region."""
    from dcode.edit import describe
    from dcode.failures import printable
    from dcode.fixloop import Rewriting, Skipped, Tested

    if isinstance(event, Tested) and event.round == 0:
        typer.echo(f"dcode: fix: {command}: {event.run.verdict} ({event.run.seconds:.1f} s)", err=True)
        for failure in event.run.failures[:3]:
            where = f"{failure.frames[-1].path}:{failure.frames[-1].line}: " if failure.frames else ""
            said = printable(f"{where}{failure.test + ': ' if failure.test else ''}{failure.message}")
            typer.echo(f"dcode:   {said}"[:160], err=True)
    elif isinstance(event, Tested):
        note = {"worse": " (worse: undone)", "same": " (no better)", "better": ""}.get(event.judged, "")
        typer.echo(f"dcode: round {event.round}: {event.run.verdict}{note}", err=True)
    elif isinstance(event, Rewriting):
        target = event.target
        where = describe(target.path.read_text(), target.region)
        what = f"{target.symbol} ({where})" if target.symbol else where
        typer.echo(f"dcode: round {event.round}: regenerating {shown(target.path)}: {what}", err=True)
    elif isinstance(event, Skipped):
        reason = printable(event.reason)
        typer.echo(f"dcode: round {event.round}: skipped {shown(event.target.path)}: {reason}", err=True)


def summary(done: Fixed, fills: Fills) -> str:
    """The last line: passes or not, before -> after, rounds, files changed and their backups, time."""
    if done.rounds == 0 and done.first.passes:
        return f"dcode: passes: {done.first.verdict}; nothing to fix"
    state = "still fails" if not done.best.passes else "untested" if done.left else "passes"
    line = (
        f"dcode: {state}: {done.first.verdict} -> {done.best.verdict} in {done.rounds} round(s), {done.seconds:.1f} s"
    )
    if done.changed:
        changed = ", ".join(f"{shown(p)} (backup {shown(done.backups[p])})" for p in done.changed if p in done.backups)
        line += f"; changed {changed}"
    elif done.rounds and not done.left:
        line += "; files unchanged"
    if done.left:
        line += f"; left as someone else left it: {', '.join(shown(p) for p in done.left)}"
    if done.note:
        line += f"; {done.note}"
    if fills.model and done.rounds:
        line += f"; {fills.model}" + (f" at {fills.endpoint}" if fills.endpoint else "")
    return line


def patch(done: Fixed) -> str:
    from dcode.edit import unified_diff

    return "".join(unified_diff(done.original[p], text, shown(p)) for p, text in done.final.items())


def report(done: Fixed, seen: list[FixEvent], settings: Settings, fills: Fills) -> dict[str, object]:
    """`dcode fix --json`: the runs, the rounds with their regions, the files and the diff."""
    from dcode.edit import lines_of
    from dcode.fixloop import Rewrote, Tested

    rounds = []
    for event in seen:
        if isinstance(event, Tested) and event.round:
            rewrote = [e for e in seen if isinstance(e, Rewrote) and e.round == event.round]
            regions = [
                {"path": shown(r.path), "symbol": r.symbol, "lines": list(lines_of(r.before, r.region))}
                for r in rewrote
            ]
            rounds.append(
                {"round": event.round, "regions": regions, "test": event.run.metadata(), "judged": event.judged}
            )
    return {
        "command": settings.command,
        "passes": done.best.passes,
        "exit_code": done.exit_code,
        "before": done.first.metadata(),
        "after": done.best.metadata(),
        "rounds": rounds,
        "files": [{"path": shown(p), "backup": shown(done.backups[p])} for p in done.changed if p in done.backups],
        "diff": patch(done),
        **({"left": [shown(p) for p in done.left]} if done.left else {}),
        "model": fills.model,
        "endpoint": fills.endpoint,
        "seconds": round(done.seconds, 3),
        **({"note": done.note} if done.note else {}),
    }


def record_rounds(seen: list[FixEvent], fills: Fills, settings: Settings, log: bool, exit_code: int) -> None:
    """One history record per round (round 0 alone when no round ran), each with the exit code and
    the keys in `settings.secrets` redacted; a history that fails costs one warning, not one a round."""
    from dcode.edit import lines_of, unified_diff
    from dcode.fixloop import Rewrote, Tested
    from dcode.history import Entry, Touched

    runs = [e for e in seen if isinstance(e, Tested)]
    for run in runs[1:] or runs[:1]:
        rewrote = [e for e in seen if isinstance(e, Rewrote) and e.round == run.round]
        paths = list(dict.fromkeys(r.path for r in rewrote))
        files = tuple(
            Touched(shown(p), tuple(lines_of(r.after, r.new_region) for r in rewrote if r.path == p)) for p in paths
        )
        entry = Entry(
            "fix",
            prompt="\n\n".join(r.instruction for r in rewrote) or None,
            model=fills.model, dtype=fills.dtype, device=fills.device, endpoint=fills.endpoint,
            settings={"test": settings.command, **fills.settings},
            files=files,
            answer="".join(unified_diff(r.before, r.after, shown(r.path)) for r in rewrote) or None,
            tokens=fills.tokens if run.round else None,
            passes=fills.passes if run.round else None,
            seconds=round(run.run.seconds, 3),
            exit_code=exit_code, round=run.round, verdict=run.run.verdict,
        )  # fmt: skip
        if remember(entry, log, settings.secrets) is None:
            return


def fix_written(run: Resolved[object], filler: Filler, path: Path, test: str) -> None:
    """`dcode new ... -o FILE --test CMD`, after FILE is written: the same loop on FILE, through the
    filler that wrote it and the command's options (the model, sampler, repair, view and endpoint
    groups, --rounds, --test-timeout, --log); new's --json was new's report. Exits with fix's code
    (0 passes, 4 still fails)."""
    from dcode.fixloop import Targets

    regenerate, fills = regenerator(run, ready=filler)
    run_fix(Targets.of([path], Path.cwd()), fix_settings(run, test), regenerate, fills, run, report_too=False)
