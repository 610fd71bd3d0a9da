"""`dcode edit`: change an existing file by instruction, in place, never losing the original."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from dcode.cli.app import USAGE, app, fail, option_named
from dcode.cli.delivery import Delivery, finish_edit, recorded
from dcode.cli.options import with_options
from dcode.cli.running import identity, run_flow
from dcode.cli.stdio import read_prompt
from dcode.cli.targets import read_checkable, result_target
from dcode.events import Edited
from dcode.options import EDIT


@app.command("edit")
@with_options(*EDIT)
def edit_command(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="File to change in place (the original is kept as FILE.orig).")],
    instruct: Annotated[
        str | None,
        typer.Option("--instruct", envvar="DCODE_INSTRUCT", help="What to change; '-' or omit to read stdin."),
    ] = None,
    lines: Annotated[str | None, typer.Option("--lines", help="Rewrite only lines A-B (1-based, inclusive).")] = None,
    symbol: Annotated[
        str | None, typer.Option("--symbol", help="Rewrite only this function, method or class (Class.method).")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the diff and say that nothing was written.")
    ] = False,
    **chosen: Any,
) -> None:
    """Change FILE as an instruction asks: the whole file, --lines A-B or --symbol NAME is
    regenerated and every other byte is kept. In place (backup FILE.orig) unless --diff, --dry-run
    or -o. Exit 0 done, 3 the edit broke the syntax (nothing written if FILE parsed before)."""
    from dcode import flows

    # 1) validate everything that needs no model, so bad input costs nothing and touches no file
    if lines is not None and symbol is not None:
        fail("--lines and --symbol cannot be used together", USAGE)
    diff = chosen["diff"]
    writes = not (diff or dry_run)
    source, language = read_checkable(file, chosen["lang"])
    output = chosen["output"]
    target, to_stdout = result_target(file, output, chosen["force"]) if writes else (None, False)
    region = pick_region(source, language, lines, symbol, file)
    text = read_prompt(instruct, "instruction", "pass --instruct TEXT, or pipe it on stdin")
    length = chosen["length"]
    if length is not None and length < 1:
        fail(f"{option_named(ctx, 'length', '--length')} must be at least 1 token", USAGE)

    # 2) generate, drawing the live view on a terminal; FILE is not touched meanwhile
    rounds = chosen["repair_rounds"] if chosen["repair"] else 0
    tries, name = chosen["repair_tries"], str(file)
    filler, edited = run_flow(
        ctx,
        chosen,
        lambda f: flows.edit(f, source, region, text, language, length, rounds, name, tries),
        Edited,
        language,
    )

    # 3) deliver: a diff, the file in place (after a backup), another file or stdout; never a
    # broken version of a file that parsed
    plan = Delivery(file, source, edited, writes and edited.broke, writes, target, to_stdout)
    old_span = "the whole file" if lines is None and symbol is None else describe_region(source, region)
    shown, keys = identity(filler)
    keys |= {"language": language, "selection": symbol if symbol is not None else old_span}
    say = {"as_json": chosen["as_json"], "dry_run": dry_run, "quiet": chosen["quiet"]}
    with recorded(ctx, filler, edited, text, target or file):
        finish_edit(plan, output, shown, keys, old_span, **say)


def pick_region(source: str, language: str, lines: str | None, symbol: str | None, file: Path) -> tuple[int, int]:
    from dcode.edit import RegionError, select

    try:
        return select(source, language, lines, symbol, where=str(file))
    except RegionError as error:
        fail(str(error), USAGE)


def describe_region(source: str, region: tuple[int, int]) -> str:
    from dcode.edit import describe

    return describe(source, region)
