"""`dcode new`: write a new file from a request, with the local model or through --endpoint;
with `-o FILE --test CMD`, then run dcode fix's loop on FILE."""

from __future__ import annotations

from typing import Annotated

import typer

from dcode.cli.app import RUNTIME, SYNTAX, USAGE, app, fail
from dcode.cli.delivery import finish_new, recorded
from dcode.cli.fixing import checked_test, fix_written
from dcode.cli.options import with_options
from dcode.cli.resolve import Resolved
from dcode.cli.running import run_flow
from dcode.cli.stdio import read_prompt
from dcode.cli.targets import language_for, output_target
from dcode.constrain import Grammar, ask_for, validate
from dcode.events import Finished
from dcode.options import NEW


def refuse_invalid(finished: Finished, grammar: Grammar, length: int) -> None:
    """Exit 1, writing nothing, when the answer does not follow --schema / --json-object: a local
    draft that ran out of room before the grammar completed, or a server's invalid answer."""
    if finished.extra.get("grammar") == "incomplete":
        fail(f"the answer ran out of room before its JSON was complete (--length {length}): raise --length", RUNTIME)
    if not validate(grammar, finished.code):
        wanted = "valid against the schema" if grammar.kind == "json_schema" else f"a {grammar.named}"
        fail(f"the answer is not {wanted}; nothing written", RUNTIME)


@app.command()
@with_options(*NEW)
def new(
    prompt: Annotated[str | None, typer.Argument(help="What to write; '-' or omit to read stdin.")] = None,
    *,
    run: Resolved[None],
) -> None:
    """Write a new file from a request; with -o FILE --test CMD, then fix FILE until CMD passes
    (as `dcode fix`: exit 0 passes, 4 still fails)."""
    from dcode import flows

    # 1) validate everything that needs no model or server, so bad input costs nothing
    text = read_prompt(prompt)
    length, out, grammar = run.tokens, run.output, run.grammar
    target = output_target(out.path, out.force)
    language = language_for(out.lang or ("json" if grammar else None), target)
    test = checked_test(run, needed=False)
    if test is not None and target is None:
        fail("--test runs on the written file: give it with -o FILE", USAGE)

    # 2) generate, drawing the live view on a terminal
    rounds, tries = run.repair.rounds, run.repair.tries
    ask = text if grammar is None else ask_for(grammar, text)
    filler, finished = run_flow(run, lambda f: flows.new(f, ask, language, length, rounds, tries), Finished, language)
    if grammar is not None:
        refuse_invalid(finished, grammar, length)

    # 3) deliver: the file, then stdout
    who = filler.identity()
    keys = who.report | {"language": language, "path": str(target) if target else None}
    try:
        with recorded(run, filler, finished, text, target):
            finish_new(finished, target, who.shown, keys, out.as_json, run.view.quiet)
    except typer.Exit as done:
        if test is None or done.exit_code != SYNTAX:
            raise

    # 4) --test: the written file through dcode fix's loop, with the same filler
    if test is not None and target is not None:
        fix_written(run, filler, target, test)
