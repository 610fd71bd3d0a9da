"""`dcode bench speed` and `dcode bench quality`: dcode's settings against the baselines users would pick.

The Markdown table goes to stdout; JSON, Markdown (and the quality plot) go to --out, each headed
by the command, the weights' sha256 and the date; a progress bar goes to stderr, and only to a
terminal. The settings, metrics and suites are dcode.bench's, shared with the scripts in benchmarks/.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import typer

from dcode.cli.app import RUNTIME, USAGE, command_group, fail, interrupted
from dcode.cli.loading import load_model
from dcode.cli.options import with_options
from dcode.cli.resolve import Local, Resolved
from dcode.cli.stdio import show_progress
from dcode.config import described
from dcode.options import QUALITY, SPEED

if TYPE_CHECKING:
    from rich.progress import Progress

R = TypeVar("R")


bench_app = command_group(
    "bench", "Measure speed and quality against the baselines users would pick.", no_args_is_help=True
)


@dataclass(frozen=True)
class Bench:
    """What both benchmarks take (dcode.options.BENCH): the prompts, the settings, where reports go."""

    prompts: Path | None
    limit: int
    out: Path
    setting_names: str | None


@dataclass(frozen=True)
class Speed(Bench):
    repeats: int
    ar: bool
    early_stop: bool


@dataclass(frozen=True)
class Quality(Bench):
    humaneval: bool
    timeout: float
    memory_mb: int


@bench_app.command("speed")
@with_options(*SPEED, own=Speed)
def speed_command(run: Resolved[Speed]) -> None:
    """Forward passes, tok/pass, ms/pass, tok/s, first draft, wall time and peak memory of the
    one-token-per-pass schedule, dcode's fast settings and an autoregressive model, in one process."""
    from dcode.bench.speed import run_speed

    chosen, length = run.own, run.tokens
    rows = read_rows(chosen)

    def measure(denoiser: Any, settings: list[Any], bar: Progress | None) -> dict[str, Any]:
        return run_speed(denoiser, rows, length, chosen.repeats, settings, chosen.ar, chosen.early_stop, bar)

    measured(run, measure)


@bench_app.command("quality")
@with_options(*QUALITY, own=Quality)
def quality_command(run: Resolved[Quality]) -> None:
    """Parse-valid rate before and after repair on the prompt set, and HumanEval pass@1 with every
    program run in a sandbox (timeout, memory and CPU limits, no network, a temporary folder)."""
    from dcode.bench.quality import load_problems, run_quality
    from dcode.bench.sandbox import Limits

    chosen, length, rounds = run.own, run.tokens, run.repair.rounds
    rows = read_rows(chosen, "matplotlib")
    problems = extra(lambda: load_problems(chosen.limit)) if chosen.humaneval else []
    limits = Limits(seconds=chosen.timeout, memory_mb=chosen.memory_mb)

    def measure(denoiser: Any, settings: list[Any], bar: Progress | None) -> dict[str, Any]:
        return run_quality(denoiser, rows, problems, length, limits, settings, rounds, bar)

    measured(run, measure)


@bench_app.command("settings")
def settings_command() -> None:
    """The named decoding settings every benchmark takes (--settings here, in benchmarks/*.py)."""
    from dcode.bench import PARAMETRIC, REGISTRY, describe

    for setting in REGISTRY.values():
        typer.echo(f"{setting.name:<34}{setting.role:<10}{describe(setting)}")
    for prefix, rule, field, _ in PARAMETRIC:
        typer.echo(f"{prefix + '<' + field + '>':<34}{'fast':<10}rule={rule}, {field}=<{field}>")
    typer.echo("\n--effort by family, over a checkpoint's own defaults (dcode-tiny's: `dcode models --verbose`);")
    typer.echo("a sampler option the user sets wins:")
    for family, level, settings in effort_table():
        typer.echo(f"{family:<18}{level:<8}{described(settings) if settings is not None else OWN_DECODING}")


OWN_DECODING = "the checkpoint's own decoding (its generation_config.json) at every level"


def effort_table() -> list[tuple[str, str, Mapping[str, object] | None]]:
    """(family, level, settings) of every family's named decodings (FamilyFacts.efforts), and of the
    releases its name tells apart (LLaDA2.1: family "llada2 (llada2.1)")."""
    from dcode.models.facts import decodings
    from dcode.models.families import FAMILIES

    rows: list[tuple[str, str, Mapping[str, object] | None]] = []
    for family in FAMILIES.values():
        spec = family.facts
        if spec is None:  # a family that states its facts from the files (DiffusionGemma): one decoding
            rows.append((family.name, "all", None))
            continue
        for label, word in [(family.name, ""), *((f"{family.name} ({w})", w) for w, _ in spec.named_efforts)]:
            rows += [(label, level, settings) for level, settings in decodings(spec, spec.defaults, word).items()]
    return rows


# ---------------------------------------------------------------------------------------------
# Shared steps


def read_rows(chosen: Bench, *packages: str) -> list[dict[str, str]]:
    """The prompt set (--prompts, --limit), after checking --out and the optional `packages` the
    benchmark needs: before any model loads."""
    from dcode.bench import PROMPTS, need, read_prompts

    path = chosen.prompts
    if path is None and not PROMPTS.is_file():
        fail(f"no prompt set at {PROMPTS} (a broken install?): pass --prompts PATH", USAGE)
    try:
        rows = read_prompts(path or PROMPTS, chosen.limit)
    except OSError as error:
        fail(f"cannot read --prompts {path}: {error.strerror}", USAGE)
    except ValueError as error:
        fail(str(error), USAGE)
    if chosen.out.exists() and not chosen.out.is_dir():
        fail(f"--out {chosen.out} is a file; give a folder", USAGE)
    for package in packages:
        extra(lambda: need(package))  # noqa: B023  (called at once)
    return rows


def extra(work: Callable[[], R]) -> R:
    """work(), whose missing optional package is a usage error."""
    from dcode.bench import MissingExtra

    try:
        return work()
    except MissingExtra as error:
        fail(str(error), USAGE)


def measured(run: Resolved[Speed] | Resolved[Quality], measure: Callable[..., dict[str, Any]]) -> None:
    """Load the model (--model, --device, --dtype), pick the settings, `measure(denoiser, settings,
    bar)` under a progress bar, and deliver the reports."""
    from dcode.bench import report, settings

    local, quiet = run.fills, run.view.quiet
    assert isinstance(local, Local)  # bench has no --endpoint
    with guarded():
        denoiser = load_model(local.model, local.device, local.dtype, local.quantize)
        chosen = pick_settings(settings(denoiser.facts.block, denoiser.facts.defaults), run.own.setting_names)
        with progress_bar(quiet) as bar:
            result = measure(denoiser, chosen, bar)
        deliver(result, report.write_reports, run.own.out, quiet, local.model, run.line)


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
    from dcode.flows import InputError

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
