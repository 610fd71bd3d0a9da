"""What every command of the command line shares: the Typer app, exit codes, reading the prompt,
loading the model and running a stream under the live view (run_model).

Each command lives in a small module beside this one (generate: new; checking: check, repair;
editing: edit; listing: models; bench: bench) and registers itself on `app`; dcode.cli imports
them all. Options are declared in dcode.options and built by dcode.cli.options.

Exit codes: 0 ok, 1 runtime error (a write that failed, stdout included), 2 usage error (bad
input), 3 syntax errors remain, 130 interrupted (Ctrl-C), 143 terminated (SIGTERM, cleaned up as
Ctrl-C is). The answer goes to stdout; progress goes to stderr, and only to a terminal.
Heavy imports (torch, transformers) happen inside the commands that need a model.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NoReturn, TypeVar

import typer
from typer.core import TyperGroup

from dcode.cli.options import annotation
from dcode.config import SamplerConfig, merge_family_defaults
from dcode.events import Edited, Finished, Repaired
from dcode.options import (
    DEVICE_OPTION,
    MODEL_OPTION,
    QUIET_OPTION,
    REPAIR_ROUNDS,
    SAMPLER,
    fields_set_by,
    sampler_settings,
)

if TYPE_CHECKING:
    from dcode.events import Event
    from dcode.models import Denoiser

R = TypeVar("R", Finished, Edited, Repaired)  # the record a command's stream ends with

OK, RUNTIME, USAGE, SYNTAX, INTERRUPTED, TERMINATED = 0, 1, 2, 3, 130, 143
DEFAULT_LENGTH = 256  # answer tokens when neither --length nor DCODE_LENGTH is given


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the main thread is: every Ctrl-C clean-up runs (temporary files,
    a backup that is no longer needed), then dcode exits with TERMINATED."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise Terminated


class OneLineErrors(TyperGroup):
    """Click's usage errors as one `dcode: error:` line (exit 2) instead of four lines; a write
    that fails (stdout on a full disk or closed) as one line (exit 1); SIGTERM as Ctrl-C (exit 143)."""

    def main(self, *args, standalone_mode: bool = True, **kwargs):  # type: ignore[no-untyped-def, override]
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)  # type: ignore[misc]
        previous = _install(signal.SIGTERM, _on_sigterm)
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)  # type: ignore[misc]
        except typer.TyperException as error:  # click's exceptions, vendored by typer
            if type(error).__name__ == "NoArgsIsHelpError":  # bare `dcode`: the help, as click shows it
                typer.echo(error.format_message(), err=True)
            else:
                typer.echo(f"dcode: error: {env_named(error)}", err=True)
            sys.exit(error.exit_code)
        except typer.Abort as error:
            sys.exit(TERMINATED if isinstance(error.__cause__, Terminated) else INTERRUPTED)
        except OSError as error:
            sys.exit(write_failed(error))
        finally:
            _install(signal.SIGTERM, previous)
        sys.exit(code if isinstance(code, int) else OK)


def _install(signum: int, handler: Any) -> Any:
    """Set a signal handler where Python allows it (the main thread); returns the old one."""
    if handler is None or threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signum, handler)


def env_named(error: Exception) -> str:
    """A click error's message naming where the bad value came from: click names the environment
    variable even for a value given as a flag; keep that only when the variable gave it."""
    message = str(error.format_message())  # type: ignore[attr-defined]
    ctx, param = getattr(error, "ctx", None), getattr(error, "param", None)
    envvar = getattr(param, "envvar", None)
    if ctx is None or param is None or not isinstance(envvar, str) or param.name is None:
        return message
    source = ctx.get_parameter_source(param.name)
    if source is None or source.name != "ENVIRONMENT":
        message = message.replace(f" (env var: {envvar!r})", "")
    return message


def option_named(ctx: typer.Context, name: str, flag: str) -> str:
    """How to name an option in an error about its value: the flag, or the DCODE_* variable
    (`DCODE_LENGTH=0` gets `DCODE_LENGTH`, `--length 0` gets `--length`)."""
    source = ctx.get_parameter_source(name)
    if source is not None and source.name == "ENVIRONMENT":
        envvar = next((p.envvar for p in ctx.command.params if p.name == name), None)
        if isinstance(envvar, str):
            return envvar
    return flag


# errno values of a write that cannot complete: a full disk, a closed or broken descriptor
_WRITE_ERRORS = frozenset({errno.ENOSPC, errno.EBADF, errno.EIO, errno.EFBIG, errno.EDQUOT, errno.EPIPE})


def write_failed(error: OSError) -> int:
    """One line for an OSError no command caught (a write to stdout: to a full disk, a closed
    descriptor); returns RUNTIME. stdout is then pointed at /dev/null, so the interpreter's last
    flush of what is still buffered does not print a traceback of its own."""
    reason = error.strerror or str(error) or type(error).__name__
    if error.filename is None and error.errno in _WRITE_ERRORS:
        _silence_stdout()
        typer.echo(f"dcode: error: cannot write to stdout: {reason}", err=True)
    else:
        typer.echo(f"dcode: error: {reason}" + (f": {error.filename}" if error.filename else ""), err=True)
    return RUNTIME


def _silence_stdout() -> None:
    with contextlib.suppress(OSError, ValueError, AttributeError):
        fd = sys.stdout.fileno()
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, fd)
        os.close(null)


class ClosedStdout:
    """sys.stdout when the process was started with it closed (`>&-`): every write fails as a
    write to a closed descriptor does, so the answer is never silently lost."""

    def write(self, text: str) -> int:
        raise OSError(errno.EBADF, "stdout is closed")

    def flush(self) -> None:
        pass  # nothing is ever buffered: write() failed

    def isatty(self) -> bool:
        return False


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
    elif sys.stdin is None:
        fail(f"no {what}: stdin is closed; {hint}", USAGE)
    elif value is None and sys.stdin.isatty():
        fail(f"no {what}: {hint}", USAGE)
    else:
        try:
            raw = sys.stdin.buffer.read()
        except OSError as error:
            fail(f"cannot read the {what} from stdin: {error.strerror or error}", USAGE)
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
    """-o as a Path after checking it can be written (a trailing slash names a folder: refused);
    None for stdout: no -o, or `-o -` (as `-` means stdin for a prompt)."""
    from dcode.files import FileProblem, check_writable

    if raw is None or raw == "-":
        return None
    if raw.endswith(("/", os.sep)):
        fail(f"{raw} names a folder; give a file name", USAGE)
    try:
        check_writable(Path(raw), force)
    except FileProblem as error:
        fail(str(error), USAGE)
    return Path(raw)


def result_target(file: Path, output: str | None, force: bool) -> tuple[Path | None, bool]:
    """Where an edit or a repair of FILE goes: (another file, False), (None, True) for `-o -`
    (stdout), or (None, False) for FILE in place, whose folder must then take the backup and the
    new file. `-o FILE` naming FILE itself (or a link to it) is in place, with the same guard."""
    from dcode.files import FileProblem, check_writable, same_file

    if output == "-":
        return None, True
    if output is not None and not same_file(Path(output), file):
        return output_target(output, force), False
    try:
        check_writable(file, True)
    except FileProblem as error:
        fail(str(error), USAGE)
    return None, False


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


def pick_device(name: str, dtype: str = "auto") -> tuple[object, object]:
    """(torch.device, dtype) for --device and --dtype; a requested device that is absent is an error."""
    import torch

    from dcode.dtypes import DTYPES, cpu_flags, resolve_dtype

    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        fail("--device cuda: no CUDA device is available", USAGE)
    if name == "mps" and not torch.backends.mps.is_available():
        fail("--device mps: no Apple GPU is available", USAGE)
    if name not in ("cpu", "cuda", "mps"):
        fail(f"unknown --device {name!r} (choose from auto, cpu, cuda, mps)", USAGE)
    if dtype not in DTYPES:
        fail(f"unknown --dtype {dtype!r} (choose from {', '.join(DTYPES)})", USAGE)
    chosen = resolve_dtype(dtype, name, cpu_flags() if name == "cpu" else ())
    return torch.device(name), getattr(torch, chosen)


def load_model(spec: str | None, device: str, dtype: str = "auto") -> Denoiser:
    from dcode.models import ModelError, load

    where, chosen = pick_device(device, dtype)
    try:
        return load(spec, where, chosen)  # type: ignore[arg-type]
    except ModelError as error:
        fail(str(error), USAGE)
    except OSError as error:
        fail(f"cannot load model {spec or 'dcode-tiny'}: {error}", RUNTIME)


def model_shown(denoiser: Denoiser) -> str:
    """The summary line's model part: its name and the dtype it ran in. Example: "dcode-tiny in bfloat16"."""
    from dcode.dtypes import running_dtype

    dtype = running_dtype(denoiser)
    return f"{denoiser.facts.name} in {dtype}" if dtype else denoiser.facts.name


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
# Options: declared once in dcode.options; commands take them with dcode.cli.options.with_options.
# These aliases are for commands that list one among their own parameters.

ModelOption = annotation(MODEL_OPTION)
DeviceOption = annotation(DEVICE_OPTION)
RepairRoundsOption = annotation(REPAIR_ROUNDS)
QuietOption = annotation(QUIET_OPTION)


def sampler_config(params: Mapping[str, Any]) -> SamplerConfig:
    """The sampler options among a command's parameters (by name, see dcode.options.SAMPLER) as a
    SamplerConfig; options a command does not have keep their defaults. A bad value is a usage
    error before any model loads."""
    try:
        return sampler_settings(params)
    except ValueError as error:
        fail(str(error), USAGE)


def run_model(
    ctx: typer.Context,
    spec: str | None,
    device: str,
    config: SamplerConfig,
    events: Callable[[Denoiser, SamplerConfig], Iterator[Event]],
    result: type[R],
    language: str,
    view: Literal["auto", "none"],
    exit_when_done: bool,
) -> tuple[Denoiser, R]:
    """Load the model, fill in its family's defaults, and run a pipeline under the live view.

    Returns the model and the stream's `result` record (its last event); maps failures to exit
    codes (bad input 2, runtime 1, interrupted 130). The stream's Started events tell the view
    where the answer is.
    """
    from dcode import pipeline, tui
    from dcode.render import Describer

    try:
        denoiser = load_model(spec, device, ctx.params.get("dtype", "auto"))
        config = with_family_defaults(config, denoiser, ctx)
        facts = denoiser.facts
        describer = Describer(
            denoiser.tokenizer,
            facts.mask_id,
            model=facts.name,
            device=denoiser.device.type,
            language=language,
            hidden=facts.eos_ids | {facts.pad_id},
        )
        last = tui.run_live(lambda: events(denoiser, config), describer, view=view, exit_when_done=exit_when_done)
    except typer.Exit:
        raise
    except pipeline.InputError as error:
        fail(str(error), USAGE)
    except KeyboardInterrupt as error:
        interrupted(error)
    except (RuntimeError, MemoryError) as error:
        fail(f"generation failed: {str(error).splitlines()[0] if str(error) else type(error).__name__}", RUNTIME)
    if not isinstance(last, result):
        fail(f"generation failed: the run ended without its {result.__name__} record", RUNTIME)
    return denoiser, last


def explicit_sampler_fields(ctx: typer.Context) -> set[str]:
    """SamplerConfig fields the user set, on the command line or through a DCODE_* variable."""
    given = []
    for option in SAMPLER:
        source = ctx.get_parameter_source(option.name)
        if source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP"):
            given.append(option.name)
    return fields_set_by(given)


def with_family_defaults(config: SamplerConfig, denoiser: Denoiser, ctx: typer.Context) -> SamplerConfig:
    """`config` with the model family's recommended settings for every option the user left unset;
    without `--strategy`, a rule's own option set alone picks that rule."""
    try:
        config = merge_family_defaults(config, explicit_sampler_fields(ctx), denoiser.facts.defaults)
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
    guard_standard_streams()
    try:
        app()
    except KeyboardInterrupt as error:
        terminated = isinstance(error, Terminated)
        typer.echo(f"dcode: {'terminated' if terminated else 'interrupted'}", err=True)
        sys.exit(TERMINATED if terminated else INTERRUPTED)


def guard_standard_streams() -> None:
    """A process started with stdin, stdout or stderr closed (`<&-`, `>&-`): the descriptor is
    held on /dev/null, so no file dcode opens takes its number, and a closed stdout fails every
    write (ClosedStdout) instead of losing the answer. A closed stdin stays None (read_prompt
    says so)."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            opened = os.open(os.devnull, os.O_RDWR)
            if opened != fd:  # a lower descriptor was free after all
                os.dup2(opened, fd)
                os.close(opened)
    if sys.stdout is None:
        sys.stdout = ClosedStdout()  # type: ignore[assignment]


def interrupted(error: KeyboardInterrupt) -> NoReturn:
    """Ctrl-C (exit 130) or SIGTERM (exit 143), after the caller's clean-up ran: one line."""
    terminated = isinstance(error, Terminated)
    typer.echo(f"dcode: {'terminated' if terminated else 'interrupted'}", err=True)
    raise typer.Exit(TERMINATED if terminated else INTERRUPTED)
