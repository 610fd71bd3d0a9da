"""`dcode edit`: change an existing file by instruction, in place, never losing the original."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from dcode.cli.common import (
    INTERRUPTED,
    RUNTIME,
    SYNTAX,
    USAGE,
    app,
    fail,
    output_target,
    read_checkable,
    read_prompt,
    run_model,
    sampler_config,
    summary_line,
    view_mode,
)
from dcode.cli.options import with_options
from dcode.cli.remote import ApiKeyOption, EndpointOption, StreamModeOption, TimeoutOption
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
    import json

    from dcode.edit import RegionError, describe, select, unified_diff, write_in_place
    from dcode.files import FileProblem, atomic_write, check_writable

    # 1) validate everything that needs no model, so bad input costs nothing and touches no file
    if lines is not None and symbol is not None:
        fail("--lines and --symbol cannot be used together", USAGE)
    writes = not (diff or dry_run)
    source, language = read_checkable(file, lang)
    if writes and output is None:
        try:
            check_writable(file, True)  # its folder must take the backup and the new file
        except FileProblem as error:
            fail(str(error), USAGE)
    target = output_target(output, force) if writes else None
    try:
        region = select(source, language, lines, symbol, where=str(file))
    except RegionError as error:
        fail(str(error), USAGE)
    text = read_prompt(instruct, "instruction", "pass --instruct TEXT, or pipe it on stdin")
    config = sampler_config(chosen)
    if length is not None and length < 1:
        fail("--length must be at least 1 token", USAGE)

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

    # 3) deliver: a diff, the file in place (after a backup), or another file; never a broken
    # version of a file that parsed
    changed = edited.code != source
    patch = unified_diff(source, edited.code, file)
    refused = writes and edited.broke
    backup: Path | None = None
    try:
        if refused:
            sys.stderr.write(patch)
        elif target is not None:
            atomic_write(target, edited.code)
        elif changed and writes:
            backup = write_in_place(file, edited.code)
    except OSError as error:
        fail(f"cannot write {target or file}: {error.strerror or error}", RUNTIME)
    except KeyboardInterrupt:
        typer.echo("dcode: interrupted", err=True)
        raise typer.Exit(INTERRUPTED) from None
    written = not refused and (target is not None or backup is not None)
    old_span = "the whole file" if lines is None and symbol is None else describe(source, region)
    new_span = describe(edited.code, edited.new_region) if edited.new_region[1] > edited.new_region[0] else "nothing"
    metadata = edited.metadata()
    if as_json:
        report = {
            "path": str(file),
            "output": output,
            "backup": str(backup) if backup is not None else None,
            "written": written,
            "changed": changed,
            "model": denoiser.facts.name,
            "language": language,
            "selection": symbol if symbol is not None else old_span,
            "diff": patch,
            **metadata,
        }
        typer.echo(json.dumps(report, indent=2))
    elif not writes:
        sys.stdout.write(patch)
        sys.stdout.flush()
    if dry_run:
        typer.echo("dcode: dry run: nothing written", err=True)
    if not quiet:
        typer.echo(summary_line(metadata, denoiser.facts.name), err=True)
        if written and target is not None:
            typer.echo(f"dcode: wrote {target} ({old_span} of {file} -> {new_span}); {file} untouched", err=True)
        elif backup is not None:
            typer.echo(f"dcode: edited {file} ({old_span} -> {new_span}); backup: {backup}", err=True)
        elif not changed:
            typer.echo(f"dcode: {file}: the edit changed nothing; nothing written", err=True)
    if changed and new_span == "nothing":
        typer.echo(f"dcode: warning: the edit deleted {old_span} of {file}", err=True)
    if refused:
        typer.echo(
            f"dcode: error: the edit leaves {edited.errors_after} syntax error(s) in {file}, which parsed before; "
            "nothing written (the diff is above)",
            err=True,
        )
        raise typer.Exit(SYNTAX)
    if edited.errors_after:
        had = f" (it had {edited.original_errors})" if edited.original_errors else ""
        where = f"the edited {file} would have" if not writes else f"{target or file} has"
        typer.echo(f"dcode: warning: {where} {edited.errors_after} syntax error(s){had}", err=True)
        raise typer.Exit(SYNTAX)


# What `dcode models pull` fetches: weights as safetensors, configs, tokenizer files, chat templates.
# Never pickles (*.bin, *.pt) and never the checkpoint's own Python code, which dcode does not run.
