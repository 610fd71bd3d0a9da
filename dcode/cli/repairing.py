"""`dcode repair`: regenerate the spans of a file that do not parse, with the local model or
through --endpoint; every other byte is kept."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from dcode.cli.app import USAGE, app, fail
from dcode.cli.delivery import finish_repair, recorded
from dcode.cli.options import with_options
from dcode.cli.running import identity, run_flow
from dcode.cli.targets import read_checkable, result_target
from dcode.events import Repaired
from dcode.options import REPAIR_FILE


@app.command("repair")
@with_options(*REPAIR_FILE)
def repair_command(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="File to repair in place.")],
    **chosen: Any,
) -> None:
    """Regenerate the spans of FILE that do not parse. Exit 0 fixed, 3 errors remain."""
    from dcode import flows

    # 1) the input must be a readable, checkable, non-empty text file, and where the result goes
    # must be writable: checked before the model runs, as `dcode edit` does
    source, language = read_checkable(file, chosen["lang"])
    if not source.strip():
        fail(f"{file} is empty: nothing to repair", USAGE)
    diff = chosen["diff"]
    target, to_stdout = (None, False) if diff else result_target(file, chosen["output"], chosen["force"])

    # 2) repair, with the live view showing the whole file
    rounds, tries = chosen["repair_rounds"], chosen["repair_tries"]
    filler, done = run_flow(
        ctx, chosen, lambda f: flows.repair_file(f, source, language, file.name, rounds, tries), Repaired, language
    )

    # 3) deliver: a diff, stdout, or the file (only if it got better)
    keys = identity(filler)[1]  # the model, and its dtype or its endpoint, as `new --json` says them
    say = {"diff": diff, "as_json": chosen["as_json"], "quiet": chosen["quiet"]}
    with recorded(ctx, filler, done, None, target or file):
        finish_repair(source, done, file, target, to_stdout, keys, **say)
