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
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NoReturn

import typer
from typer.core import TyperGroup

from dcode.config import SamplerConfig

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


app = typer.Typer(
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
    "seed": "seed",
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
    """`config` with the model family's recommended settings for every option the user left unset."""
    from dcode.models import apply_defaults

    try:
        return apply_defaults(config, denoiser.facts.defaults, explicit_sampler_fields(ctx))
    except ValueError as error:
        fail(f"{denoiser.facts.name}: {error}", USAGE)


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
from dcode.cli import checking, editing, generate, listing  # noqa: E402, F401
from dcode.cli.generate import new  # noqa: E402, F401  (re-exported for tests)
