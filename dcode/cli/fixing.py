"""`dcode fix`: run the tests, regenerate the code their failures point into, run them again.

The loop, the files' promises and the judging are dcode.fixloop's; this module reads the options,
builds the one fill the loop calls (`filler`: the local model through dcode.pipeline.edit, or an
endpoint through dcode.remote.flows.edit), prints the rounds and the summary, records each round
in the history, and picks the exit code: 0 the command passes, 4 it still fails (the files at the
best state reached), 1 runtime, 2 usage, 130/143 interrupted (the best state restored first).

`dcode new ... -o FILE --test CMD` runs the same loop on the written file: `fix_written`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from dcode.cli.common import INTERRUPTED, RUNTIME, TERMINATED, USAGE, Terminated, app, fail, interrupted, view_mode
from dcode.cli.history import LogOption, chosen_settings, remember
from dcode.cli.options import with_options
from dcode.cli.remote import ApiKeyOption, EndpointOption, StreamModeOption, TimeoutOption
from dcode.options import MODEL, REPAIR, SAMPLER, VIEW

if TYPE_CHECKING:
    from dcode.fixloop import Fixed, FixEvent, Regenerate, Settings, Targets

STILL_FAILS = 4  # the command still fails after the last round

# Declared once; `dcode new` takes the same three (see fix_written).
TestOption = Annotated[
    str | None,
    typer.Option("--test", envvar="DCODE_TEST", help="The command that must pass (run through the shell, here)."),
]
RoundsOption = Annotated[
    int, typer.Option("--rounds", envvar="DCODE_FIX_ROUNDS", min=0, help="Rounds of regenerate-and-test.")
]
TestTimeoutOption = Annotated[
    float,
    typer.Option(
        "--test-timeout",
        envvar="DCODE_TEST_TIMEOUT",
        min=0.1,
        help="Seconds a run of --test may take before it is killed.",
    ),
]


@app.command("fix")
@with_options(*MODEL, *SAMPLER, *REPAIR, *VIEW)
def fix_command(
    ctx: typer.Context,
    paths: Annotated[
        list[Path],
        typer.Argument(help="Files dcode may change; a folder: its source files, test files excepted."),
    ],
    test: TestOption = None,
    rounds: RoundsOption = 3,
    test_timeout: TestTimeoutOption = 300.0,
    diff: Annotated[bool, typer.Option("--diff", help="Print the change (a unified diff) on stdout.")] = False,
    as_json: Annotated[
        bool, typer.Option("--json", envvar="DCODE_JSON", help="Print rounds, regions and runs as JSON.")
    ] = False,
    log: LogOption = True,
    endpoint: EndpointOption = None,
    api_key: ApiKeyOption = None,
    stream_mode: StreamModeOption = "auto",
    timeout: TimeoutOption = 60.0,
    **chosen: Any,
) -> None:
    """Run --test; while it fails, regenerate the function (or lines) each failure points into and
    run it again, up to --rounds. A round that makes things worse is undone; the files end at the
    best state reached (originals kept as FILE.orig). Exit 0 passes, 4 still fails."""
    from dcode.fixloop import Settings, Targets

    if not test or not test.strip():
        fail("no test command: pass --test CMD (for example --test 'python -m pytest -q')", USAGE)
    targets = Targets.of(check_paths(paths), Path.cwd())
    settings = Settings(test, rounds, test_timeout)
    regenerate, fills = filler(ctx, ctx.params)
    run_fix(targets, settings, regenerate, fills, ctx.params)


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
# The fill: the one place that knows what regenerates a region


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


def filler(ctx: typer.Context, params: Mapping[str, Any]) -> tuple[Regenerate, Fills]:
    """The adapter from the loop's `regenerate(path, source, region, instruction) -> source` to
    dcode's edit flow: an endpoint's (dcode.remote.flows.edit) when --endpoint is given, else the
    local model's (dcode.pipeline.edit, the model loaded at the first fill, so a command that
    passes from the start loads nothing). Its live view closes after each fill."""
    from dcode.cli.common import sampler_config

    config = sampler_config(params)  # a bad sampler option fails before anything runs
    fills = Fills(settings=chosen_settings(ctx, always=("rounds", "test_timeout")))
    if params.get("endpoint"):
        return _endpoint_fill(params, fills), fills
    return _local_fill(ctx, params, config, fills), fills


def _local_fill(ctx: typer.Context, params: Mapping[str, Any], config: Any, fills: Fills) -> Regenerate:
    from dcode.fixloop import FillError

    loaded: dict[str, Any] = {}

    def regenerate(path: Path, source: str, region: tuple[int, int], instruction: str) -> str:
        from dcode import pipeline, syntax, tui
        from dcode.cli.common import load_model, pick_device, with_family_defaults
        from dcode.events import Edited
        from dcode.render import Describer

        if not loaded:
            denoiser = load_model(params["model"], params["device"])
            loaded.update(model=denoiser, config=with_family_defaults(config, denoiser, ctx))
            fills.model, fills.device = denoiser.facts.name, denoiser.device.type
            fills.dtype = str(pick_device(params["device"])[1]).removeprefix("torch.")
        denoiser, settings = loaded["model"], loaded["config"]
        language = syntax.detect_language(str(path), source, None) or "python"
        facts = denoiser.facts
        describe = Describer(
            denoiser.tokenizer, facts.mask_id, model=facts.name, device=fills.device or "cpu", language=language,
            hidden=facts.eos_ids | {facts.pad_id},
        )  # fmt: skip
        rounds = params["repair_rounds"] if params["repair"] else 0
        events = lambda: pipeline.edit(  # noqa: E731
            denoiser, source, region, instruction, language, settings, None, rounds, str(path), params["repair_tries"]
        )
        try:
            edited = tui.run_live(
                events, describe, view=view_mode(params["quiet"], params["live"]), exit_when_done=True
            )
        except pipeline.InputError as error:
            raise FillError(str(error)) from None
        except (RuntimeError, MemoryError) as error:
            raise FillError(f"generation failed: {str(error).splitlines()[0] if str(error) else error!r}") from None
        assert isinstance(edited, Edited)
        repaired = edited.repair.forward if edited.repair is not None else 0
        fills.tokens, fills.passes = fills.tokens + edited.tokens, fills.passes + edited.forward + repaired
        fills.seconds += edited.seconds
        return edited.code

    return regenerate


def _endpoint_fill(params: Mapping[str, Any], fills: Fills) -> Regenerate:
    from dcode.cli import remote

    endpoint = remote.connect(params)  # bad endpoint options fail before the tests run
    fills.model, fills.endpoint = endpoint.model, endpoint.shown

    def regenerate(path: Path, source: str, region: tuple[int, int], instruction: str) -> str:
        from dcode import syntax
        from dcode.remote import flows

        language = syntax.detect_language(str(path), source, None) or "python"
        old = source.encode()[region[0] : region[1]].decode()
        ask = remote.sampling(params, params.get("length") or flows.fill_budget(old, 32))
        rounds = params["repair_rounds"] if params["repair"] else 0
        changed = remote.run(
            endpoint,
            {**params, "exit_when_done": True},
            lambda: flows.edit(
                endpoint, source, region, instruction, language, ask, rounds, params["repair_tries"], str(path)
            ),
            language,
        )
        assert isinstance(changed, flows.Changed)
        fills.tokens, fills.passes = fills.tokens + changed.answer.tokens, fills.passes + changed.answer.chunks
        fills.seconds += changed.answer.seconds
        return str(changed.code)

    return regenerate


# ---------------------------------------------------------------------------------------------
# Running the loop and saying what it did


def run_fix(
    targets: Targets, settings: Settings, regenerate: Regenerate, fills: Fills, params: Mapping[str, Any]
) -> None:
    """Drain dcode.fixloop.fix, printing each run's verdict; then --diff / --json, the summary, the
    history's records, and the exit code. Ctrl-C / SIGTERM: the best state is back before exit."""
    from dcode import fixloop
    from dcode.files import FileProblem

    quiet = params["quiet"]
    seen: list[FixEvent] = []
    try:
        for event in fixloop.fix(targets, settings, regenerate):
            seen.append(event)
            if not quiet:
                say(event, settings.command)
    except KeyboardInterrupt as error:  # the loop has put the best state back
        record_rounds(seen, fills, params, TERMINATED if isinstance(error, Terminated) else INTERRUPTED)
        interrupted(error)
    except OSError as error:
        record_rounds(seen, fills, params, RUNTIME)
        where = f"{error.filename}: " if error.filename else ""
        fail(f"fix stopped: {where}{error.strerror or error}", RUNTIME)
    except FileProblem as error:  # a file the failures point into that cannot be read
        record_rounds(seen, fills, params, RUNTIME)
        fail(f"fix stopped: {error}", RUNTIME)
    done = seen[-1]
    assert isinstance(done, fixloop.Fixed)
    if params["as_json"]:
        typer.echo(json.dumps(report(done, seen, settings, fills), indent=2))
    elif params["diff"]:
        sys.stdout.write(patch(done))
        sys.stdout.flush()
    if not quiet:
        typer.echo(summary(done, fills), err=True)
    record_rounds(seen, fills, params, done.exit_code)
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
    from dcode.fixloop import Rewriting, Skipped, Tested

    if isinstance(event, Tested) and event.round == 0:
        typer.echo(f"dcode: fix: {command}: {event.run.verdict} ({event.run.seconds:.1f} s)", err=True)
        for failure in event.run.failures[:3]:
            where = f"{failure.frames[-1].path}:{failure.frames[-1].line}: " if failure.frames else ""
            typer.echo(
                f"dcode:   {where}{failure.test + ': ' if failure.test else ''}{failure.message}"[:160], err=True
            )
    elif isinstance(event, Tested):
        note = {"worse": " (worse: undone)", "same": " (no better)", "better": ""}.get(event.judged, "")
        typer.echo(f"dcode: round {event.round}: {event.run.verdict}{note}", err=True)
    elif isinstance(event, Rewriting):
        target = event.target
        what = (
            f"{target.symbol} ({describe(target.path.read_text(), target.region)})"
            if target.symbol
            else describe(target.path.read_text(), target.region)
        )
        typer.echo(f"dcode: round {event.round}: regenerating {shown(target.path)}: {what}", err=True)
    elif isinstance(event, Skipped):
        typer.echo(f"dcode: round {event.round}: skipped {shown(event.target.path)}: {event.reason}", err=True)


def summary(done: Fixed, fills: Fills) -> str:
    """The last line: passes or not, before -> after, rounds, files changed and their backups, time."""
    if done.rounds == 0 and done.first.passes:
        return f"dcode: passes: {done.first.verdict}; nothing to fix"
    state = "passes" if done.best.passes else "still fails"
    line = (
        f"dcode: {state}: {done.first.verdict} -> {done.best.verdict} in {done.rounds} round(s), {done.seconds:.1f} s"
    )
    if done.changed:
        changed = ", ".join(f"{shown(p)} (backup {shown(done.backups[p])})" for p in done.changed if p in done.backups)
        line += f"; changed {changed}"
    elif done.rounds:
        line += "; files unchanged"
    if done.note:
        line += f"; {done.note}"
    if fills.model and done.rounds:
        line += f"; {fills.model}" + (f" at {fills.endpoint}" if fills.endpoint else "")
    return line


def patch(done: Fixed) -> str:
    from dcode.edit import unified_diff

    return "".join(unified_diff(done.original[p], p.read_text(), shown(p)) for p in done.changed)


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
        "model": fills.model,
        "endpoint": fills.endpoint,
        "seconds": round(done.seconds, 3),
        **({"note": done.note} if done.note else {}),
    }


def record_rounds(seen: list[FixEvent], fills: Fills, params: Mapping[str, Any], exit_code: int) -> None:
    """One history record per round (round 0 alone when no round ran), each with the exit code."""
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
            settings={"test": params["test"], **fills.settings},
            files=files,
            answer="".join(unified_diff(r.before, r.after, shown(r.path)) for r in rewrote) or None,
            tokens=fills.tokens if run.round else None,
            passes=fills.passes if run.round else None,
            seconds=round(run.run.seconds, 3),
            exit_code=exit_code, round=run.round, verdict=run.run.verdict,
        )  # fmt: skip
        remember(entry, params["log"])


def fix_written(path: Path, test: str, rounds: int, test_timeout: float, ctx: typer.Context) -> None:
    """`dcode new ... -o FILE --test CMD`, after FILE is written: the same loop on FILE, with the
    command's model options (ctx.params: MODEL, SAMPLER, REPAIR, VIEW, the endpoint group, `log`).
    Exits with fix's code (0 passes, 4 still fails)."""
    from dcode.fixloop import Settings, Targets

    regenerate, fills = filler(ctx, ctx.params)
    params = {"log": True, **ctx.params, "as_json": False, "diff": False, "test": test}  # new's --json is new's
    run_fix(Targets.of([path], Path.cwd()), Settings(test, rounds, test_timeout), regenerate, fills, params)
