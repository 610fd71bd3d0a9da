"""Typer options built from the declarations of dcode.options, so that each option (flag,
environment variable, help, default, type) is written once.

`with_options(*options)` decorates a Typer command: it adds one keyword parameter per
dcode.options.Option, and the command receives their values in `**chosen`. `new`, `edit`,
`repair` and `serve` are built this way; a new command that generates takes the same options
with one line:

    from dcode.cli.options import with_options
    from dcode.options import EDIT

    @app.command()
    @with_options(*EDIT)
    def fix(ctx: typer.Context, file: Path, **chosen: Any) -> None:
        filler, edited = run_flow(ctx, chosen, lambda f: flows.edit(f, ...), Edited, language)

`annotation(option)` gives one option as an `Annotated[...]` parameter type, for a command that
declares it among its own parameters.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer

from dcode.options import DEVICE_OPTION, MODEL_OPTION, QUIET_OPTION, REPAIR_ROUNDS, Option

F = TypeVar("F", bound=Callable[..., Any])


def annotation(option: Option) -> Any:
    """`Annotated[type, typer.Option(...)]` for one declared option."""
    names = [option.flag, *([option.short] if option.short else [])]
    info = typer.Option(*names, envvar=option.env, help=option.help, min=option.min, max=option.max)
    kind = option.type | None if option.optional else option.type
    return Annotated[kind, info]


def with_options(*options: Option) -> Callable[[F], F]:
    """Add `options` to a Typer command after its own parameters; their values arrive in the
    command's `**chosen` (by option name). Typer reads the command's signature, so the decorator
    rewrites it: the command's own parameters, then one keyword parameter per option."""

    def add(command: F) -> F:
        signature = inspect.signature(command, eval_str=True)
        own = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        added = [
            inspect.Parameter(o.name, inspect.Parameter.KEYWORD_ONLY, default=o.default, annotation=annotation(o))
            for o in options
        ]
        parameters = [*own, *added]
        command.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in parameters}
        return command

    return add


# One option each, for commands that list them among their own parameters (dcode bench).
ModelOption = annotation(MODEL_OPTION)
DeviceOption = annotation(DEVICE_OPTION)
RepairRoundsOption = annotation(REPAIR_ROUNDS)
QuietOption = annotation(QUIET_OPTION)
