"""The command line: the only package that reads argv, the environment and stdin, and picks exit codes.

This module holds the Typer app, the shared helpers and exit codes; each command lives in a small
module beside it (generate: new; checking: check, repair; editing: edit; listing: models).

Exit codes: 0 ok, 1 runtime error, 2 usage error (bad input), 3 syntax errors remain, 130
interrupted. The answer goes to stdout; progress goes to stderr, and only to a terminal.
Heavy imports (torch, transformers) happen inside the commands that need a model.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, NoReturn

import typer
from typer.core import TyperGroup

from dcode.config import APPROX_CACHES, ORDERINGS, RULES, SamplerConfig

if TYPE_CHECKING:
    from dcode.models import Denoiser

OK, RUNTIME, USAGE, SYNTAX, INTERRUPTED = 0, 1, 2, 3, 130
DEFAULT_LENGTH = 256  # answer tokens when neither --length nor DCODE_LENGTH is given


class OneLineErrors(TyperGroup):
    """Click's usage errors as one `dcode: error:` line (exit 2) instead of four lines."""

    def main(self, *args, standalone_mode: bool = True, **kwargs):  # type: ignore[no-untyped-def, override]
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)  # type: ignore[misc]
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)  # type: ignore[misc]
        except typer.TyperException as error:  # click's exceptions, vendored by typer
            if type(error).__name__ == "NoArgsIsHelpError":  # bare `dcode`: the help, as click shows it
                typer.echo(error.format_message(), err=True)
            else:
                typer.echo(f"dcode: error: {error.format_message()}", err=True)
            sys.exit(error.exit_code)
        except typer.Abort:
            sys.exit(INTERRUPTED)
        sys.exit(code if isinstance(code, int) else OK)


app: typer.Typer = typer.Typer(
    cls=OneLineErrors,
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain click errors: no boxes, no escape codes in captured stderr
    help="Generate whole files with a local diffusion code model.",
)


def fail(message: str, code: int) -> NoReturn:
    """One line on stderr, then exit with `code`."""
    typer.echo(f"dcode: error: {message}", err=True)
    raise typer.Exit(code)


def read_prompt(
    value: str | None, what: str = "prompt", hint: str = "pass it as an argument, or pipe it on stdin"
) -> str:
    """The argument's text, or stdin's when the argument is '-' or absent and stdin is piped."""
    if value is not None and value != "-":
        text = value
    elif value is None and sys.stdin.isatty():
        fail(f"no {what}: {hint}", USAGE)
    else:
        raw = sys.stdin.buffer.read()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            fail(f"stdin is not UTF-8 text (bad byte at offset {error.start})", USAGE)
    if not text.strip():
        fail(f"the {what} is empty", USAGE)
    return text


def language_for(explicit: str | None, output: Path | None) -> str:
    """--lang, else the -o suffix, else python."""
    from dcode import syntax

    try:
        found = syntax.detect_language(str(output) if output else None, None, explicit)
    except syntax.UnknownLanguage as error:
        fail(str(error), USAGE)
    return found or "python"


def output_target(raw: str | None, force: bool) -> Path | None:
    """-o as a Path after checking it can be written (a trailing slash names a folder: refused)."""
    from dcode.files import FileProblem, check_writable

    if raw is None:
        return None
    if raw.endswith(("/", os.sep)):
        fail(f"{raw} names a folder; give a file name", USAGE)
    try:
        check_writable(Path(raw), force)
    except FileProblem as error:
        fail(str(error), USAGE)
    return Path(raw)


def read_checkable(file: Path, lang: str | None) -> tuple[str, str]:
    """A readable UTF-8 file and its language (--lang, suffix or shebang), or a one-line usage error."""
    from dcode import syntax
    from dcode.files import FileProblem, read_source

    try:
        source = read_source(file)
        language = syntax.detect_language(str(file), source, lang)
    except (FileProblem, syntax.UnknownLanguage) as error:
        fail(str(error), USAGE)
    if language is None:
        fail(f"{file}: unknown language (use --lang)", USAGE)
    return source, language


def pick_device(name: str) -> tuple[object, object]:
    """(torch.device, dtype) for --device; a requested device that is absent is an error."""
    import torch

    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        fail("--device cuda: no CUDA device is available", USAGE)
    if name == "mps" and not torch.backends.mps.is_available():
        fail("--device mps: no Apple GPU is available", USAGE)
    if name not in ("cpu", "cuda", "mps"):
        fail(f"unknown --device {name!r} (choose from auto, cpu, cuda, mps)", USAGE)
    dtype = torch.bfloat16 if name == "cuda" else torch.float32
    return torch.device(name), dtype


def load_model(spec: str | None, device: str) -> Denoiser:
    from dcode.models import ModelError, load

    where, dtype = pick_device(device)
    try:
        return load(spec, where, dtype)  # type: ignore[arg-type]
    except ModelError as error:
        fail(str(error), USAGE)
    except OSError as error:
        fail(f"cannot load model {spec or 'dcode-tiny'}: {error}", RUNTIME)


def view_mode(quiet: bool, live: bool | None) -> Literal["auto", "none"]:
    """'auto' (Textual, or Rich Live when stdin is piped) when a view will draw, else 'none'."""
    return "auto" if show_progress(quiet, live) else "none"


def show_progress(quiet: bool, live: bool | None) -> bool:
    """The live view only on a terminal's stderr, never with -q, --no-live or TERM=dumb."""
    if quiet or live is False or os.environ.get("TERM") == "dumb":
        return False
    return sys.stderr.isatty()


def summary_line(metadata: dict[str, object], model: str) -> str:
    line = (
        f"dcode: {metadata['tokens']} tokens in {metadata['forward_passes']} passes "
        f"({metadata['tokens_per_forward']} tok/pass), {metadata['seconds']:.2f} s, "
        f"{metadata['tokens_per_second']} tok/s, {model}"
    )
    repaired = metadata.get("repair")
    if isinstance(repaired, dict) and repaired["rounds"]:
        line += (
            f"; repair: {repaired['issues_before']} -> {repaired['issues_after']} issues in "
            f"{repaired['rounds']} round(s), +{repaired['extra_forward_passes']} passes"
        )
    return line


# ---------------------------------------------------------------------------------------------
# Options shared by the commands that generate (new, edit): declared once, used as parameter types.

ModelOption = Annotated[
    str | None, typer.Option("--model", envvar="DCODE_MODEL", help="Model folder or cached id (default: dcode-tiny).")
]
DeviceOption = Annotated[str, typer.Option("--device", envvar="DCODE_DEVICE", help="auto, cpu, cuda or mps.")]
StrategyOption = Annotated[
    str, typer.Option("--strategy", envvar="DCODE_STRATEGY", help=f"Commit rule: {', '.join(RULES)}.")
]
OrderOption = Annotated[str, typer.Option("--order", envvar="DCODE_ORDER", help=f"Ordering: {', '.join(ORDERINGS)}.")]
StepsOption = Annotated[int | None, typer.Option("--steps", envvar="DCODE_STEPS", help="Passes for the schedule rule.")]
ThresholdOption = Annotated[float, typer.Option("--threshold", envvar="DCODE_THRESHOLD")]
EntropyBoundOption = Annotated[float, typer.Option("--entropy-bound", envvar="DCODE_ENTROPY_BOUND")]
BlockOption = Annotated[
    int | None, typer.Option("--block", envvar="DCODE_BLOCK", help="Semi-AR block for full-attention models.")
]
TemperatureOption = Annotated[float, typer.Option("--temperature", envvar="DCODE_TEMPERATURE")]
TopPOption = Annotated[float, typer.Option("--top-p", envvar="DCODE_TOP_P")]
RepetitionPenaltyOption = Annotated[
    float,
    typer.Option(
        "--repetition-penalty",
        envvar="DCODE_REPETITION_PENALTY",
        help="Divide the logits of tokens written in the last 64 answer positions by this (1 = off).",
    ),
]
HoldConflictsOption = Annotated[
    bool,
    typer.Option(
        "--hold-conflicts/--no-hold-conflicts",
        envvar="DCODE_HOLD_CONFLICTS",
        help="Threshold and entropy-bound rules: defer a token that repeats its neighbour written in "
        "the same pass, or an end with gaps before it.",
    ),
]
DraftOption = Annotated[
    int,
    typer.Option(
        "--draft",
        envvar="DCODE_DRAFT",
        min=0,
        help="Verify rule: drafted tokens checked per pass (0 = one token per pass, left to right).",
    ),
]
SeedOption = Annotated[int, typer.Option("--seed", envvar="DCODE_SEED")]
CacheOption = Annotated[bool, typer.Option("--cache/--no-cache", envvar="DCODE_CACHE")]
ApproxCacheOption = Annotated[
    str,
    typer.Option(
        "--approx-cache",
        envvar="DCODE_APPROX_CACHE",
        help=f"Full-attention models, Fast-dLLM cache: {', '.join(APPROX_CACHES)}.",
    ),
]
RepairOption = Annotated[
    bool, typer.Option("--repair/--no-repair", envvar="DCODE_REPAIR", help="Regenerate spans that do not parse.")
]
RepairRoundsOption = Annotated[int, typer.Option("--repair-rounds", envvar="DCODE_REPAIR_ROUNDS", min=0)]
RepairTriesOption = Annotated[
    int,
    typer.Option(
        "--repair-tries",
        envvar="DCODE_REPAIR_TRIES",
        min=1,
        help="Fillings per repair round until one helps, sampled with their own seeds.",
    ),
]
LiveOption = Annotated[
    bool | None, typer.Option("--live/--no-live", envvar="DCODE_LIVE", help="Live view (default: on a terminal).")
]
ExitWhenDoneOption = Annotated[
    bool, typer.Option("--exit-when-done", envvar="DCODE_EXIT_WHEN_DONE", help="Close the live view when finished.")
]
QuietOption = Annotated[bool, typer.Option("--quiet", "-q", envvar="DCODE_QUIET", help="No progress or summary.")]


def sampler_config(params: Mapping[str, Any]) -> SamplerConfig:
    """The sampler options among a command's parameters (by name, see SAMPLER_OPTIONS) as a
    SamplerConfig; options a command does not have keep their defaults. A bad value is a usage
    error before any model loads."""
    try:
        return SamplerConfig(**{field: params[name] for name, field in SAMPLER_OPTIONS.items() if name in params})
    except ValueError as error:
        fail(str(error), USAGE)


def run_model(
    ctx: typer.Context,
    spec: str | None,
    device: str,
    config: SamplerConfig,
    events: Callable[[Denoiser, SamplerConfig], Iterator[object]],
    language: str,
    view: Literal["auto", "none"],
    exit_when_done: bool,
    start: Callable[[Denoiser], int] | None = None,
    length: int | None = None,
) -> tuple[Denoiser, object]:
    """Load the model, fill in its family's defaults, and run a pipeline under the live view.

    Returns the model and the pipeline's final event; maps failures to exit codes (bad input 2,
    runtime 1, interrupted 130). `start` / `length` tell the view where the answer region is.
    """
    from dcode import pipeline, tui
    from dcode.render import Describer

    try:
        denoiser = load_model(spec, device)
        config = with_family_defaults(config, denoiser, ctx)
        facts = denoiser.facts
        describer = Describer(
            denoiser.tokenizer,
            facts.mask_id,
            start=start(denoiser) if start is not None else None,
            length=length,
            model=facts.name,
            device=denoiser.device.type,
            language=language,
            hidden=facts.eos_ids | {facts.pad_id},
        )
        result = tui.run_live(lambda: events(denoiser, config), describer, view=view, exit_when_done=exit_when_done)
    except typer.Exit:
        raise
    except pipeline.InputError as error:
        fail(str(error), USAGE)
    except KeyboardInterrupt:
        typer.echo("dcode: interrupted", err=True)
        raise typer.Exit(INTERRUPTED) from None
    except (RuntimeError, MemoryError) as error:
        fail(f"generation failed: {str(error).splitlines()[0] if str(error) else type(error).__name__}", RUNTIME)
    return denoiser, result


# `dcode new` / `dcode edit` parameters -> the SamplerConfig field each one sets.
SAMPLER_OPTIONS = {
    "order": "ordering",
    "strategy": "rule",
    "steps": "steps",
    "threshold": "threshold",
    "entropy_bound": "entropy_bound",
    "block": "block",
    "temperature": "temperature",
    "top_p": "top_p",
    "cache": "cache",
    "approx_cache": "approx_cache",
    "seed": "seed",
    "repetition_penalty": "repetition_penalty",
    "hold_conflicts": "hold_conflicts",
    "draft": "draft",
}


def explicit_sampler_fields(ctx: typer.Context) -> set[str]:
    """SamplerConfig fields the user set, on the command line or through a DCODE_* variable."""
    fields = set()
    for param, field in SAMPLER_OPTIONS.items():
        source = ctx.get_parameter_source(param)
        if source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP"):
            fields.add(field)
    return fields


def with_family_defaults(config: SamplerConfig, denoiser: Denoiser, ctx: typer.Context) -> SamplerConfig:
    """`config` with the model family's recommended settings for every option the user left unset;
    without `--strategy`, a rule's own option set alone picks that rule."""
    from dcode.models import as_dcode_new_runs

    try:
        config = as_dcode_new_runs(config, explicit_sampler_fields(ctx), denoiser.facts.defaults)
    except ValueError as error:
        fail(f"{denoiser.facts.name}: {error}", USAGE)
    if config.rule == "verify" and denoiser.facts.noise != "mask":
        fail(f"{denoiser.facts.name}: the verify strategy needs a masked-diffusion model", USAGE)
    return config


@app.command(hidden=True)
def version() -> None:
    """Print the version."""
    from importlib.metadata import version as installed

    typer.echo(installed("dcode"))


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        typer.echo("dcode: interrupted", err=True)
        sys.exit(INTERRUPTED)


# The commands register themselves on `app` when imported.
from dcode.cli import bench, checking, editing, generate, listing, serving  # noqa: E402, F401
from dcode.cli.generate import new  # noqa: E402, F401  (re-exported for tests)
