"""`dcode check` (no model) and `dcode repair`: syntax errors found with tree-sitter, fixed by re-masking."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer

from dcode.cli.common import (
    OK,
    RUNTIME,
    SYNTAX,
    USAGE,
    app,
    fail,
    output_target,
    read_checkable,
    run_model,
    sampler_config,
    view_mode,
)
from dcode.cli.options import with_options
from dcode.cli.remote import ApiKeyOption, EndpointOption, StreamModeOption, TimeoutOption
from dcode.config import REPAIR_FILE_TRIES
from dcode.events import Repaired
from dcode.options import BY_NAME, MODEL, REPAIR_ROUNDS, REPAIR_TRIES_OPTION, VIEW

# `dcode repair` runs at least one round, and tries harder than a draft's repair: the file is the user's.
REPAIR_FILE_OPTIONS = (
    *MODEL,
    replace(REPAIR_ROUNDS, min=1),
    replace(REPAIR_TRIES_OPTION, default=REPAIR_FILE_TRIES),
    BY_NAME["temperature"],
    BY_NAME["seed"],
    *VIEW,
)


@app.command()
def check(
    files: Annotated[list[Path], typer.Argument(help="Files to check.")],
    lang: Annotated[str | None, typer.Option("--lang", envvar="DCODE_LANG", help="Language for every file.")] = None,
    as_json: Annotated[bool, typer.Option("--json", envvar="DCODE_JSON", help="Print issues as JSON.")] = False,
) -> None:
    """Check files for syntax errors (no model is loaded). Exit 0 clean, 3 errors, 2 unreadable."""
    import json

    from dcode import syntax
    from dcode.files import FileProblem, read_source

    unreadable = found = False
    report: list[dict[str, object]] = []
    for path in files:
        try:
            source = read_source(path)
            language = syntax.detect_language(str(path), source, lang)
        except FileProblem as error:
            typer.echo(f"dcode: error: {error}", err=True)
            unreadable = True
            continue
        except syntax.UnknownLanguage as error:
            fail(str(error), USAGE)
        if language is None:
            typer.echo(f"dcode: {path}: unknown language, not checked (use --lang)", err=True)
            continue
        issues = syntax.find_issues(source, language)
        found = found or bool(issues)
        if as_json:
            report.append({"path": str(path), "language": language, "issues": [vars(i) for i in issues]})
        else:
            for issue in issues:
                typer.echo(syntax.format_issue(str(path), issue))
    if as_json:
        typer.echo(json.dumps(report, indent=2))
    raise typer.Exit(USAGE if unreadable else SYNTAX if found else OK)


@app.command("repair")
@with_options(*REPAIR_FILE_OPTIONS)
def repair_command(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="File to repair in place.")],
    output: Annotated[str | None, typer.Option("--output", "-o", help="Write the result here instead.")] = None,
    diff: Annotated[bool, typer.Option("--diff", help="Print a unified diff; write nothing.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing --output file.")] = False,
    lang: Annotated[str | None, typer.Option("--lang", envvar="DCODE_LANG")] = None,
    as_json: Annotated[bool, typer.Option("--json", envvar="DCODE_JSON")] = False,
    endpoint: EndpointOption = None,
    api_key: ApiKeyOption = None,
    stream_mode: StreamModeOption = "auto",
    timeout: TimeoutOption = 60.0,
    **chosen: Any,
) -> None:
    """Regenerate the spans of FILE that do not parse. Exit 0 fixed, 3 errors remain."""
    if endpoint:  # a served model: the whole flow is dcode.cli.remote's, and no local model loads
        from dcode.cli import remote

        return remote.run_repair(ctx)
    import json

    from dcode import pipeline
    from dcode.edit import unified_diff
    from dcode.files import atomic_write

    # 1) the input must be a readable, checkable, non-empty text file
    source, language = read_checkable(file, lang)
    if not source.strip():
        fail(f"{file} is empty: nothing to repair", USAGE)
    target = None if diff else output_target(output, force)
    config = sampler_config(chosen)

    # 2) repair, with the live view showing the whole file
    rounds, tries, quiet = chosen["repair_rounds"], chosen["repair_tries"], chosen["quiet"]
    _, done = run_model(
        ctx,
        chosen["model"],
        chosen["device"],
        config,
        lambda m, c: pipeline.repair_file(m, source, language, file.name, c, rounds, tries),
        Repaired,
        language,
        view_mode(quiet, chosen["live"]),
        chosen["exit_when_done"],
    )

    # 3) deliver: a diff, or the file (only if it got better)
    changed = done.code != source
    if diff:
        sys.stdout.write(unified_diff(source, done.code, file))
    elif changed:
        try:
            atomic_write(target or file, done.code)
        except OSError as error:
            fail(f"cannot write {target or file}: {error.strerror}", RUNTIME)
    if as_json:
        typer.echo(json.dumps({"path": str(target or file), "changed": changed, **done.metadata()}))
    elif not quiet:
        typer.echo(
            f"dcode: {file}: {done.issues_before} -> {done.issues_after} syntax issue(s) in {done.rounds} round(s)"
            + ("" if changed or diff else ", file unchanged"),
            err=True,
        )
    raise typer.Exit(SYNTAX if done.issues_after else OK)
