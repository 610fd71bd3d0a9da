"""`dcode new`: write a new file from a request, with the local model or through --endpoint;
with `-o FILE --test CMD`, then run dcode fix's loop on FILE."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from dcode.cli.app import SYNTAX, USAGE, app, fail, option_named
from dcode.cli.delivery import finish_new, recorded
from dcode.cli.fixing import checked_test, fix_written
from dcode.cli.options import with_options
from dcode.cli.running import identity, run_flow
from dcode.cli.stdio import read_prompt
from dcode.cli.targets import language_for, output_target
from dcode.events import Finished
from dcode.options import NEW


@app.command()
@with_options(*NEW)
def new(
    ctx: typer.Context,
    prompt: Annotated[str | None, typer.Argument(help="What to write; '-' or omit to read stdin.")] = None,
    **chosen: Any,
) -> None:
    """Write a new file from a request; with -o FILE --test CMD, then fix FILE until CMD passes
    (as `dcode fix`: exit 0 passes, 4 still fails)."""
    from dcode import flows

    # 1) validate everything that needs no model or server, so bad input costs nothing
    text = read_prompt(prompt)
    length = chosen["length"]
    if length < 1:
        fail(f"{option_named(ctx, 'length', '--length')} must be at least 1 token", USAGE)
    target = output_target(chosen["output"], chosen["force"])
    language = language_for(chosen["lang"], target)
    test = checked_test(ctx, chosen, needed=False)
    if test is not None and target is None:
        fail("--test runs on the written file: give it with -o FILE", USAGE)

    # 2) generate, drawing the live view on a terminal
    rounds = chosen["repair_rounds"] if chosen["repair"] else 0
    tries = chosen["repair_tries"]
    filler, finished = run_flow(
        ctx, chosen, lambda f: flows.new(f, text, language, length, rounds, tries), Finished, language
    )

    # 3) deliver: the file, then stdout
    shown, keys = identity(filler)
    keys |= {"language": language, "path": str(target) if target else None}
    try:
        with recorded(ctx, filler, finished, text, target):
            finish_new(finished, target, shown, keys, chosen["as_json"], chosen["quiet"])
    except typer.Exit as done:
        if test is None or done.exit_code != SYNTAX:
            raise

    # 4) --test: the written file through dcode fix's loop, with the same filler
    if test is not None and target is not None:
        fix_written(ctx, filler, target, test)
