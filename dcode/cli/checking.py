"""`dcode check`: syntax errors found with tree-sitter; no model is loaded."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from dcode.cli.app import OK, SYNTAX, USAGE, app, fail
from dcode.cli.options import with_options
from dcode.cli.resolve import Resolved
from dcode.options import CHECK

if TYPE_CHECKING:
    from dcode.syntax import Issue


@app.command()
@with_options(*CHECK)
def check(files: Annotated[list[Path], typer.Argument(help="Files to check.")], run: Resolved[None]) -> None:
    """Check files for syntax errors (no model is loaded). Exit 0 clean, 3 errors, 2 unreadable."""
    import json

    from dcode import syntax

    lang, as_json = run.output.lang, run.output.as_json

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
