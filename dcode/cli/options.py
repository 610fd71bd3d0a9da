"""Typer options built from the declarations of dcode.options, so that each option (flag,
environment variable, help, default, type) is written once, and resolved once.

`with_options(*options, own=Record)` decorates a Typer command: it adds one keyword parameter per
dcode.options.Option, resolves their values (dcode.cli.resolve) and calls the command with its own
parameters and `run`, the resolved record. Every command is built this way; a new command that
generates takes the same options with one line:

    from dcode.cli.options import with_options
    from dcode.cli.resolve import Resolved
    from dcode.options import EDIT

    @app.command()
    @with_options(*EDIT)
    def fix(file: Path, run: Resolved[None]) -> None:
        filler, edited = run_flow(run, lambda f: flows.edit(f, ...), Edited, language)
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer

from dcode.cli.resolve import resolve
from dcode.option import Option

F = TypeVar("F", bound=Callable[..., Any])


def annotation(option: Option) -> Any:
    """`Annotated[type, typer.Option(...)]` for one declared option (its bounds: dcode.cli.resolve)."""
    names = [option.flag, *([option.short] if option.short else [])]
    info = typer.Option(*names, envvar=option.env, help=option.help)
    kind = option.type | None if option.optional else option.type
    return Annotated[kind, info]


def with_options(*options: Option, own: type | None = None) -> Callable[[F], F]:
    """Add `options` to a Typer command after its own parameters, and call it with those and `run`
    (the options resolved; `own`: the record of the command's own options). Typer reads the
    signature, so the wrapper's is the command's own parameters, then one keyword per option."""

    def add(command: F) -> F:
        signature = inspect.signature(command, eval_str=True)
        mine = [p for p in signature.parameters.values() if p.name != "run"]
        context = inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context)
        added = [
            inspect.Parameter(o.name, inspect.Parameter.KEYWORD_ONLY, default=o.default, annotation=annotation(o))
            for o in options
        ]

        @functools.wraps(command)
        def wrapper(ctx: typer.Context, **values: Any) -> Any:
            return command(**{p.name: values[p.name] for p in mine}, run=resolve(ctx, options, own))

        parameters = [context, *mine, *added]
        wrapper.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in parameters}
        return wrapper  # type: ignore[return-value]

    return add
