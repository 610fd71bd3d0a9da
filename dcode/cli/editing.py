"""`dcode edit`: change an existing file by instruction, in place, never losing the original."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from dcode.cli.common import (
    USAGE,
    app,
    fail,
    model_shown,
    option_named,
    read_checkable,
    read_prompt,
    result_target,
    run_model,
    sampler_config,
    view_mode,
)
from dcode.cli.delivery import Delivery, finish_edit
from dcode.cli.options import with_options
from dcode.cli.remote import ApiKeyOption, EndpointOption, StreamModeOption, TimeoutOption
from dcode.dtypes import running_dtype
from dcode.events import Edited
from dcode.options import MODEL, REPAIR, SAMPLER, VIEW


@app.command("edit")
@with_options(*MODEL, *SAMPLER, *REPAIR, *VIEW)
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
    output: Annotated[
        str | None, typer.Option("--output", "-o", help="Write the result here; FILE is left as it is.")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing --output file.")] = False,
    diff: Annotated[bool, typer.Option("--diff", help="Print a unified diff; write nothing.")] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the diff and say that nothing was written.")
    ] = False,
    lang: Annotated[
        str | None, typer.Option("--lang", envvar="DCODE_LANG", help="Language (default: from FILE).")
    ] = None,
    length: Annotated[
        int | None,
        typer.Option(
            "--length", envvar="DCODE_EDIT_LENGTH", help="Masks for the region (default: its tokens + 50%, >= 16)."
        ),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", envvar="DCODE_JSON", help="Print the diff and metadata as JSON.")
    ] = False,
    endpoint: EndpointOption = None,
    api_key: ApiKeyOption = None,
    stream_mode: StreamModeOption = "auto",
    timeout: TimeoutOption = 60.0,
    **chosen: Any,
) -> None:
    """Change FILE as an instruction asks: the whole file, --lines A-B or --symbol NAME is
    regenerated and every other byte is kept. In place (backup FILE.orig) unless --diff, --dry-run
    or -o. Exit 0 done, 3 the edit broke the syntax (nothing written if FILE parsed before)."""
    if endpoint:  # a served model: the whole flow is dcode.cli.remote's, and no local model loads
        from dcode.cli import remote

        return remote.run_edit(ctx)
    # 1) validate everything that needs no model, so bad input costs nothing and touches no file
    if lines is not None and symbol is not None:
        fail("--lines and --symbol cannot be used together", USAGE)
    writes = not (diff or dry_run)
    source, language = read_checkable(file, lang)
    target, to_stdout = result_target(file, output, force) if writes else (None, False)
    region = pick_region(source, language, lines, symbol, file)
    text = read_prompt(instruct, "instruction", "pass --instruct TEXT, or pipe it on stdin")
    config = sampler_config(chosen)
    if length is not None and length < 1:
        fail(f"{option_named(ctx, 'length', '--length')} must be at least 1 token", USAGE)

    # 2) load and generate, drawing the live view on a terminal; FILE is not touched meanwhile
    from dcode import pipeline

    rounds = chosen["repair_rounds"] if chosen["repair"] else 0
    quiet, tries = chosen["quiet"], chosen["repair_tries"]
    denoiser, edited = run_model(
        ctx,
        chosen["model"],
        chosen["device"],
        config,
        lambda m, c: pipeline.edit(
            m, source, region, text, language, c, length, rounds, name=str(file), repair_tries=tries
        ),
        Edited,
        language,
        view_mode(quiet, chosen["live"]),
        chosen["exit_when_done"],
    )

    # 3) deliver: a diff, the file in place (after a backup), another file or stdout; never a
    # broken version of a file that parsed
    plan = Delivery(file, source, edited, writes and edited.broke, writes, target, to_stdout)
    old_span = "the whole file" if lines is None and symbol is None else describe_region(source, region)
    keys = {
        "model": denoiser.facts.name,
        "dtype": running_dtype(denoiser),
        "language": language,
        "selection": symbol if symbol is not None else old_span,
    }
    finish_edit(plan, output, model_shown(denoiser), keys, old_span, as_json=as_json, dry_run=dry_run, quiet=quiet)


def pick_region(source: str, language: str, lines: str | None, symbol: str | None, file: Path) -> tuple[int, int]:
    from dcode.edit import RegionError, select

    try:
        return select(source, language, lines, symbol, where=str(file))
    except RegionError as error:
        fail(str(error), USAGE)


def describe_region(source: str, region: tuple[int, int]) -> str:
    from dcode.edit import describe

    return describe(source, region)
