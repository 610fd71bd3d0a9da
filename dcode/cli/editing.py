"""`dcode edit`: change an existing file by instruction, in place, never losing the original."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from dcode.cli.app import USAGE, app, fail
from dcode.cli.delivery import Delivery, finish_edit, recorded
from dcode.cli.options import with_options
from dcode.cli.resolve import Resolved
from dcode.cli.running import run_flow
from dcode.cli.stdio import read_prompt
from dcode.cli.targets import read_checkable, result_target
from dcode.events import Edited
from dcode.options import EDIT


@dataclass(frozen=True)
class Selection:
    """`dcode edit`'s own options: the instruction and the part of FILE it rewrites."""

    instruct: str | None
    lines: str | None
    symbol: str | None
    dry_run: bool


@app.command("edit")
@with_options(*EDIT, own=Selection)
def edit_command(
    file: Annotated[Path, typer.Argument(help="File to change in place (the original is kept as FILE.orig).")],
    run: Resolved[Selection],
) -> None:
    """Change FILE as an instruction asks: the whole file, --lines A-B or --symbol NAME is
    regenerated and every other byte is kept. In place (backup FILE.orig) unless --diff, --dry-run
    or -o. Exit 0 done, 3 the edit broke the syntax (nothing written if FILE parsed before)."""
    from dcode import merge

    # 1) validate everything that needs no model, so bad input costs nothing and touches no file
    chosen, out = run.own, run.output
    if chosen.lines is not None and chosen.symbol is not None:
        fail("--lines and --symbol cannot be used together", USAGE)
    writes = not (out.diff or chosen.dry_run)
    source, language = read_checkable(file, out.lang)
    target, to_stdout = result_target(file, out.path, out.force) if writes else (None, False)
    region = pick_region(source, language, chosen.lines, chosen.symbol, file)
    text = read_prompt(chosen.instruct, "instruction", "pass --instruct TEXT, or pipe it on stdin")

    # 2) generate, drawing the live view on a terminal; FILE is not touched meanwhile
    length, rounds, tries, name = run.length, run.repair.rounds, run.repair.tries, str(file)
    # (an update snippet: each part placed and regenerated, as `dcode serve`'s apply path does)
    filler, edited = run_flow(
        run, lambda f: merge.edit(f, source, region, text, language, length, rounds, name, tries), Edited, language
    )

    # 3) deliver: a diff, the file in place (after a backup), another file or stdout; never a
    # broken version of a file that parsed
    delivery = Delivery(file, source, edited, writes and edited.broke, writes, target, to_stdout)
    whole = chosen.lines is None and chosen.symbol is None
    old_span = "the whole file" if whole else describe_region(source, region)
    who = filler.identity()
    keys = who.report | {"language": language, "selection": chosen.symbol if chosen.symbol is not None else old_span}
    say = {"as_json": out.as_json, "dry_run": chosen.dry_run, "quiet": run.view.quiet}
    with recorded(run, filler, edited, text, target or file):
        finish_edit(delivery, out.path, who.shown, keys, old_span, **say)


def pick_region(source: str, language: str, lines: str | None, symbol: str | None, file: Path) -> tuple[int, int]:
    from dcode.edit import RegionError, select

    try:
        return select(source, language, lines, symbol, where=str(file))
    except RegionError as error:
        fail(str(error), USAGE)


def describe_region(source: str, region: tuple[int, int]) -> str:
    from dcode.edit import describe

    return describe(source, region)
