"""`dcode check` (no model) and `dcode repair`: syntax errors found with tree-sitter, fixed by re-masking."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from dcode.cli.common import (
    OK,
    SYNTAX,
    USAGE,
    app,
    fail,
    read_checkable,
    result_target,
    run_model,
    sampler_config,
    view_mode,
)
from dcode.cli.delivery import finish_repair
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

if TYPE_CHECKING:
    from dcode.syntax import Issue


@app.command()
def check(
    files: Annotated[list[Path], typer.Argument(help="Files to check.")],
    lang: Annotated[str | None, typer.Option("--lang", envvar="DCODE_LANG", help="Language for every file.")] = None,
    as_json: Annotated[bool, typer.Option("--json", envvar="DCODE_JSON", help="Print issues as JSON.")] = False,
) -> None:
    """Check files for syntax errors (no model is loaded). Exit 0 clean, 3 errors, 2 unreadable."""
    import json

    from dcode import syntax

    unreadable = found = False
    report: list[dict[str, object]] = []
    for path in files:
        checked = check_one(path, lang)
        if checked is None:
            unreadable = True
            continue
        language, issues = checked
        found = found or bool(issues)
        if as_json:
            report.append({"path": str(path), "language": language, "issues": [vars(i) for i in issues]})
        else:
            for issue in issues:
                typer.echo(syntax.format_issue(str(path), issue))
    if as_json:
        typer.echo(json.dumps(report, indent=2))
    raise typer.Exit(USAGE if unreadable else SYNTAX if found else OK)


def check_one(path: Path, lang: str | None) -> tuple[str, list[Issue]] | None:
    """A file's language and issues; None (after one line on stderr) when it cannot be checked:
    unreadable, a folder, binary, of no known language. A pipe (`<(...)`, a FIFO) is read as cat
    reads it. Python files are decoded by Python's own rules (a BOM, a PEP 263 declaration, else
    UTF-8): what the interpreter rejects before parsing is an issue too; other languages must be UTF-8."""
    from dcode import syntax
    from dcode.files import FileProblem, read_bytes

    try:
        data = read_bytes(path, streams=True)
        language = syntax.detect_language(str(path), data.decode("utf-8", errors="replace"), lang)
    except FileProblem as error:
        typer.echo(f"dcode: error: {error}", err=True)
        return None
    except syntax.UnknownLanguage as error:
        fail(str(error), USAGE)
    if language is None:
        typer.echo(f"dcode: error: {path}: unknown language, not checked (use --lang)", err=True)
        return None
    if language == "python":
        source, problem = syntax.decode_python(data)
        return language, [problem] if problem is not None else syntax.find_issues(source, language)
    try:
        return language, syntax.find_issues(data.decode("utf-8"), language)
    except UnicodeDecodeError as error:
        typer.echo(f"dcode: error: {path} is not UTF-8 text (bad byte at offset {error.start})", err=True)
        return None


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
    from dcode import pipeline

    # 1) the input must be a readable, checkable, non-empty text file, and where the result goes
    # must be writable: checked before the model runs, as `dcode edit` does
    source, language = read_checkable(file, lang)
    if not source.strip():
        fail(f"{file} is empty: nothing to repair", USAGE)
    target, to_stdout = (None, False) if diff else result_target(file, output, force)
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

    # 3) deliver: a diff, stdout, or the file (only if it got better)
    finish_repair(source, done, file, target, to_stdout, {}, diff=diff, as_json=as_json, quiet=quiet)
