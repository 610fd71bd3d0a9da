"""`dcode repair`: regenerate the spans of a file that do not parse, with the local model or
through --endpoint; every other byte is kept."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dcode.cli.app import USAGE, app, fail
from dcode.cli.delivery import finish_repair, recorded
from dcode.cli.options import with_options
from dcode.cli.resolve import Resolved
from dcode.cli.running import run_flow
from dcode.cli.targets import read_checkable, result_target
from dcode.events import Repaired
from dcode.options import REPAIR_FILE


@app.command("repair")
@with_options(*REPAIR_FILE)
def repair_command(file: Annotated[Path, typer.Argument(help="File to repair in place.")], run: Resolved[None]) -> None:
    """Regenerate the spans of FILE that do not parse. Exit 0 fixed, 3 errors remain."""
    from dcode import flows

    # 1) the input must be a readable, checkable, non-empty text file, and where the result goes
    # must be writable: checked before the model runs, as `dcode edit` does
    out = run.output
    source, language = read_checkable(file, out.lang)
    if not source.strip():
        fail(f"{file} is empty: nothing to repair", USAGE)
    target, to_stdout = (None, False) if out.diff else result_target(file, out.path, out.force)

    # 2) repair, with the live view showing the whole file
    rounds, tries = run.repair.rounds, run.repair.tries
    filler, done = run_flow(
        run, lambda f: flows.repair_file(f, source, language, file.name, rounds, tries), Repaired, language
    )

    # 3) deliver: a diff, stdout, or the file (only if it got better)
    keys = filler.identity().report  # the model, and its dtype or its endpoint, as `new --json` says them
    say = {"diff": out.diff, "as_json": out.as_json, "quiet": run.view.quiet}
    with recorded(run, filler, done, None, target or file):
        finish_repair(source, done, file, target, to_stdout, keys, **say)
