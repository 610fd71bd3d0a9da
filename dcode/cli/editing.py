"""`dcode edit`: change an existing file by instruction, in place, never losing the original."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from dcode.cli.common import (
    RUNTIME,
    SYNTAX,
    USAGE,
    app,
    fail,
    interrupted,
    option_named,
    read_checkable,
    read_prompt,
    result_target,
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
    backup = deliver(plan)
    old_span = "the whole file" if lines is None and symbol is None else describe_region(source, region)
    if as_json:
        report = {
            "path": str(file),
            "output": output,
            "backup": str(backup) if backup is not None else None,
            "written": plan.written(backup),
            "changed": plan.changed,
            "model": denoiser.facts.name,
            "language": language,
            "selection": symbol if symbol is not None else old_span,
            "diff": plan.patch,
            **edited.metadata(),
        }
        typer.echo(json.dumps(report, indent=2))
    elif not writes:
        sys.stdout.write(plan.patch)
        sys.stdout.flush()
    report_edit(plan, backup, old_span, denoiser.facts.name, dry_run, quiet)


def pick_region(source: str, language: str, lines: str | None, symbol: str | None, file: Path) -> tuple[int, int]:
    from dcode.edit import RegionError, select

    try:
        return select(source, language, lines, symbol, where=str(file))
    except RegionError as error:
        fail(str(error), USAGE)


def describe_region(source: str, region: tuple[int, int]) -> str:
    from dcode.edit import describe

    return describe(source, region)


@dataclass(frozen=True)
class Delivery:
    """What the command does with an edit's result."""

    file: Path
    source: str
    edited: Edited
    refused: bool  # the edit broke a file that parsed: nothing is written
    writes: bool  # not --diff or --dry-run
    target: Path | None  # -o FILE (another file)
    to_stdout: bool  # -o -

    @property
    def changed(self) -> bool:
        return self.edited.code != self.source

    @property
    def patch(self) -> str:
        from dcode.edit import unified_diff

        return unified_diff(self.source, self.edited.code, self.file)

    def written(self, backup: Path | None) -> bool:
        return not self.refused and (self.target is not None or self.to_stdout or backup is not None)


def deliver(plan: Delivery) -> Path | None:
    """Write the result where it goes; returns the backup of an in-place edit."""
    from dcode.edit import write_in_place
    from dcode.files import atomic_write

    try:
        if plan.refused:
            sys.stderr.write(plan.patch)
        elif plan.to_stdout:
            sys.stdout.write(plan.edited.code)
            sys.stdout.flush()
        elif plan.target is not None:
            atomic_write(plan.target, plan.edited.code)
        elif plan.changed and plan.writes:
            return write_in_place(plan.file, plan.edited.code)
    except BrokenPipeError:
        raise
    except OSError as error:
        where = "stdout" if plan.to_stdout else plan.target or plan.file
        fail(f"cannot write {where}: {error.strerror or error}", RUNTIME)
    except KeyboardInterrupt as error:
        interrupted(error)
    return None


def report_edit(plan: Delivery, backup: Path | None, old_span: str, model: str, dry_run: bool, quiet: bool) -> None:
    """The lines on stderr after an edit, and its exit code (3: syntax errors in the result)."""
    edited, file, target = plan.edited, plan.file, plan.target
    grew = edited.new_region[1] > edited.new_region[0]
    new_span = describe_region(edited.code, edited.new_region) if grew else "nothing"
    if dry_run:
        typer.echo("dcode: dry run: nothing written", err=True)
    if not quiet:
        typer.echo(summary_line(edited.metadata(), model), err=True)
        if plan.written(backup) and target is not None:
            typer.echo(f"dcode: wrote {target} ({old_span} of {file} -> {new_span}); {file} untouched", err=True)
        elif backup is not None:
            typer.echo(f"dcode: edited {file} ({old_span} -> {new_span}); backup: {backup}", err=True)
        elif not plan.changed:
            typer.echo(f"dcode: {file}: the edit changed nothing; nothing written", err=True)
    if plan.changed and new_span == "nothing":
        typer.echo(f"dcode: warning: the edit deleted {old_span} of {file}", err=True)
    if plan.refused:
        typer.echo(
            f"dcode: error: the edit leaves {edited.errors_after} syntax error(s) in {file}, which parsed before; "
            "nothing written (the diff is above)",
            err=True,
        )
        raise typer.Exit(SYNTAX)
    if edited.errors_after:
        had = f" (it had {edited.original_errors})" if edited.original_errors else ""
        where = f"the edited {file} would have" if not plan.writes else f"{target or file} has"
        if plan.to_stdout:
            where = "the edited code on stdout has"
        typer.echo(f"dcode: warning: {where} {edited.errors_after} syntax error(s){had}", err=True)
        raise typer.Exit(SYNTAX)


# What `dcode models pull` fetches: weights as safetensors, configs, tokenizer files, chat templates.
# Never pickles (*.bin, *.pt) and never the checkpoint's own Python code, which dcode does not run.
