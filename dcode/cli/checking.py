"""`dcode check` (no model) and `dcode repair`: syntax errors found with tree-sitter, fixed by re-masking."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from dcode.cli import (
    OK,
    RUNTIME,
    SYNTAX,
    USAGE,
    app,
    fail,
    load_model,
)
from dcode.config import SamplerConfig

if TYPE_CHECKING:
    pass


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
def repair_command(
    file: Annotated[Path, typer.Argument(help="File to repair in place.")],
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the result here instead.")] = None,
    diff: Annotated[bool, typer.Option("--diff", help="Print a unified diff; write nothing.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing --output file.")] = False,
    lang: Annotated[str | None, typer.Option("--lang", envvar="DCODE_LANG")] = None,
    model: Annotated[str | None, typer.Option("--model", envvar="DCODE_MODEL")] = None,
    device: Annotated[str, typer.Option("--device", envvar="DCODE_DEVICE")] = "auto",
    rounds: Annotated[int, typer.Option("--repair-rounds", envvar="DCODE_REPAIR_ROUNDS", min=1)] = 3,
    temperature: Annotated[float, typer.Option("--temperature", envvar="DCODE_TEMPERATURE")] = 0.0,
    seed: Annotated[int, typer.Option("--seed", envvar="DCODE_SEED")] = 0,
    as_json: Annotated[bool, typer.Option("--json", envvar="DCODE_JSON")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", envvar="DCODE_QUIET")] = False,
) -> None:
    """Regenerate the spans of FILE that do not parse. Exit 0 fixed, 3 errors remain."""
    import difflib
    import json

    from dcode import pipeline, syntax
    from dcode.files import FileProblem, atomic_write, check_writable, read_source
    from dcode.repair import Repaired

    # 1) the input must be a readable, checkable, non-empty text file
    try:
        source = read_source(file)
        language = syntax.detect_language(str(file), source, lang)
        if output is not None and not diff:
            check_writable(output, force)
    except FileProblem as error:
        fail(str(error), USAGE)
    except syntax.UnknownLanguage as error:
        fail(str(error), USAGE)
    if language is None:
        fail(f"{file}: unknown language (use --lang)", USAGE)
    if not source.strip():
        fail(f"{file} is empty: nothing to repair", USAGE)
    try:
        config = SamplerConfig(temperature=temperature, seed=seed)
    except ValueError as error:
        fail(str(error), USAGE)

    # 2) repair
    try:
        denoiser = load_model(model, device)
        done = None
        for event in pipeline.repair_file(denoiser, source, language, file.name, config, rounds):
            if isinstance(event, Repaired):
                done = event
    except pipeline.InputError as error:
        fail(str(error), USAGE)
    assert done is not None

    # 3) deliver: a diff, or the file (only if it got better)
    changed = done.code != source
    if diff:
        lines = difflib.unified_diff(
            source.splitlines(keepends=True), done.code.splitlines(keepends=True), f"a/{file}", f"b/{file}"
        )
        sys.stdout.write("".join(lines))
    elif changed:
        try:
            atomic_write(output or file, done.code)
        except OSError as error:
            fail(f"cannot write {output or file}: {error.strerror}", RUNTIME)
    if as_json:
        typer.echo(json.dumps({"path": str(output or file), "changed": changed, **pipeline.repair_metadata(done)}))
    elif not quiet:
        typer.echo(
            f"dcode: {file}: {done.issues_before} -> {done.issues_after} syntax issue(s) in {done.rounds} round(s)"
            + ("" if changed or diff else ", file unchanged"),
            err=True,
        )
    raise typer.Exit(SYNTAX if done.issues_after else OK)
