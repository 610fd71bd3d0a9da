"""The Typer app and how dcode ends: exit codes, one-line errors, Ctrl-C and SIGTERM, closed streams.

Each command lives in a small module beside this one (generate: new; editing: edit; repairing:
repair; checking: check; listing: models; serving: serve; bench: bench) and registers itself on
`app`; dcode.cli imports them all. Options are declared in dcode.options, built by
dcode.cli.options and resolved into one typed record by dcode.cli.resolve.

Exit codes: 0 ok, 1 runtime error (a write that failed, stdout included), 2 usage error (bad
input), 3 syntax errors remain, 130 interrupted (Ctrl-C), 143 terminated (SIGTERM, cleaned up as
Ctrl-C is). The answer goes to stdout; progress goes to stderr, and only to a terminal.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import sys
import threading
from typing import Annotated, Any, NoReturn

import typer
from typer.core import TyperGroup

from dcode.cli.resolve import env_named

OK, RUNTIME, USAGE, SYNTAX, INTERRUPTED, TERMINATED = 0, 1, 2, 3, 130, 143


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


def command_group(
    name: str, help: str, *, no_args_is_help: bool = False, invoke_without_command: bool = False
) -> typer.Typer:
    """A group of subcommands under `dcode NAME` (bench, log, models), with the app's plain errors."""
    group = typer.Typer(
        help=help,
        rich_markup_mode=None,
        pretty_exceptions_enable=False,
        no_args_is_help=no_args_is_help,
        invoke_without_command=invoke_without_command,
    )
    app.add_typer(group, name=name)
    return group


def installed_version() -> str:
    from importlib.metadata import version as installed

    return installed("dcode")


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"dcode {installed_version()}")
        raise typer.Exit(OK)


@app.callback()
def root(
    version: Annotated[
        bool, typer.Option("--version", is_eager=True, callback=_print_version, help="Print the version and exit.")
    ] = False,
) -> None:
    """Generate whole files with a local diffusion code model."""


@app.command(hidden=True)
def version() -> None:
    """Print the version."""
    typer.echo(installed_version())


def fail(message: str, code: int) -> NoReturn:
    """One line on stderr, then exit with `code`."""
    typer.echo(f"dcode: error: {message}", err=True)
    raise typer.Exit(code)


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
