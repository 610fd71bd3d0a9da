"""Where the result of `dcode new`, `edit` or `repair` goes and what the command says about it, for
a local model and through an endpoint alike: a diff, the file in place (an edit after a backup),
another file or stdout, never a broken version of a file that parsed; the `--json` report, the
summary line on stderr and the exit code; and the record of it all in the history (`recorded`).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from dcode.cli.app import OK, RUNTIME, SYNTAX, fail, interrupted
from dcode.cli.history import remember_result
from dcode.cli.resolve import Resolved
from dcode.events import Edited, Finished, Repaired

if TYPE_CHECKING:
    from dcode.filler import Filler

PLURAL = {"pass": "passes", "chunk": "chunks"}


def summary_line(metadata: Mapping[str, object], model: str, unit: str = "pass") -> str:
    """The line on stderr after new or edit; `unit` is "chunk" through a plain server. Example:
    "dcode: 64 tokens in 16 passes (4.0 tok/pass), 2.00 s, 32.0 tok/s, dcode-tiny"."""
    units = PLURAL[unit]
    line = (
        f"dcode: {metadata['tokens']} tokens in {metadata['forward_passes']} {units} "
        f"({metadata['tokens_per_forward']} tok/{unit}), {metadata['seconds']:.2f} s, "
        f"{metadata['tokens_per_second']} tok/s, {model}"
    )
    repaired = metadata.get("repair")
    if isinstance(repaired, dict) and repaired["rounds"]:
        line += (
            f"; repair: {repaired['issues_before']} -> {repaired['issues_after']} issues in "
            f"{repaired['rounds']} round(s), +{repaired['extra_forward_passes']} {units}"
        )
    return line


@contextlib.contextmanager
def recorded(
    run: Resolved[object],
    filler: Filler,
    result: Finished | Edited | Repaired,
    prompt: str | None = None,
    path: Path | None = None,
) -> Iterator[None]:
    """Deliver inside this: `result` goes into the history (dcode log) with the exit code the
    delivery ends with, unless --no-log or DCODE_LOG=0. The one place `new`, `edit` and `repair`
    record; a history that fails costs a warning line, never the answer or the exit code."""
    code: int | None = OK
    try:
        yield
    except typer.Exit as done:
        code = done.exit_code
        raise
    except BaseException:
        code = None  # a reader gone or an interrupt mid-write: the command's own handler says which
        raise
    finally:
        remember_result(
            run.command, result, log=run.log, exit_code=code, prompt=prompt, path=path, settings=run.recorded,
            **asdict(filler.identity()),
        )  # fmt: skip


def finish_new(
    finished: Finished, target: Path | None, model: str, keys: Mapping[str, object], as_json: bool, quiet: bool
) -> None:
    """Deliver a new file: -o FILE (atomically), else stdout; the --json report (`keys`: model,
    endpoint, language, path) or the code, the summary line, and exit 3 when syntax errors remain."""
    if target is not None:
        write_repaired(target, finished.code)
    if as_json:
        typer.echo(json.dumps({"code": finished.code, **keys, **finished.metadata()}, indent=2))
    elif target is None:
        sys.stdout.write(finished.code)
        sys.stdout.flush()
    if not quiet:
        typer.echo(summary_line(finished.metadata(), model, finished.unit), err=True)
    from dcode.models.catalogue import hint  # which model to pull, when dcode-tiny answered on a terminal

    name = str(keys.get("model", model))  # the model's own name, not the summary's "dcode-tiny in bfloat16"
    if line := hint(name, terminal=sys.stderr.isatty(), as_json=as_json, quiet=quiet, env=os.environ):
        typer.echo(line, err=True)
    if finished.syntax_errors:
        where = target or "the output"
        typer.echo(f"dcode: warning: {finished.syntax_errors} syntax error(s) remain in {where}", err=True)
        raise typer.Exit(SYNTAX)


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


def deliver(delivery: Delivery) -> Path | None:
    """Write the result where it goes; returns the backup of an in-place edit."""
    from dcode.edit import write_in_place
    from dcode.files import atomic_write

    try:
        if delivery.refused:
            sys.stderr.write(delivery.patch)
        elif delivery.to_stdout:
            sys.stdout.write(delivery.edited.code)
            sys.stdout.flush()
        elif delivery.target is not None:
            atomic_write(delivery.target, delivery.edited.code)
        elif delivery.changed and delivery.writes:
            return write_in_place(delivery.file, delivery.edited.code)
    except BrokenPipeError:
        raise
    except OSError as error:
        where = "stdout" if delivery.to_stdout else delivery.target or delivery.file
        fail(f"cannot write {where}: {error.strerror or error}", RUNTIME)
    except KeyboardInterrupt as error:
        interrupted(error)
    return None


def report_edit(delivery: Delivery, backup: Path | None, old_span: str, model: str, dry_run: bool, quiet: bool) -> None:
    """The lines on stderr after an edit, and its exit code (3: syntax errors in the result)."""
    from dcode.edit import describe

    edited, file, target = delivery.edited, delivery.file, delivery.target
    grew = edited.new_region[1] > edited.new_region[0]
    new_span = describe(edited.code, edited.new_region) if grew else "nothing"
    if dry_run:
        typer.echo("dcode: dry run: nothing written", err=True)
    if not quiet:
        typer.echo(summary_line(edited.metadata(), model, edited.unit), err=True)
        if delivery.written(backup) and target is not None:
            typer.echo(f"dcode: wrote {target} ({old_span} of {file} -> {new_span}); {file} untouched", err=True)
        elif backup is not None:
            typer.echo(f"dcode: edited {file} ({old_span} -> {new_span}); backup: {backup}", err=True)
        elif not delivery.changed:
            typer.echo(f"dcode: {file}: the edit changed nothing; nothing written", err=True)
    if delivery.changed and new_span == "nothing":
        typer.echo(f"dcode: warning: the edit deleted {old_span} of {file}", err=True)
    if delivery.refused:
        typer.echo(
            f"dcode: error: the edit leaves {edited.errors_after} syntax error(s) in {file}, which parsed before; "
            "nothing written (the diff is above)",
            err=True,
        )
        raise typer.Exit(SYNTAX)
    if edited.errors_after:
        had = f" (it had {edited.original_errors})" if edited.original_errors else ""
        where = f"the edited {file} would have" if not delivery.writes else f"{target or file} has"
        if delivery.to_stdout:
            where = "the edited code on stdout has"
        typer.echo(f"dcode: warning: {where} {edited.errors_after} syntax error(s){had}", err=True)
        raise typer.Exit(SYNTAX)


def finish_edit(
    delivery: Delivery, output: str | None, model: str, keys: Mapping[str, object], old_span: str, **say: bool
) -> None:
    """Deliver an edit, print its --json report (or its diff, when nothing is written) and its lines
    on stderr, and exit 3 when the result has syntax errors. `model`: as the summary line names it;
    `keys`: the report's model, language and selection keys; `say`: as_json, dry_run, quiet."""
    backup = deliver(delivery)
    if say["as_json"]:
        report = {
            "path": str(delivery.file),
            "output": output,
            "backup": str(backup) if backup is not None else None,
            "written": delivery.written(backup),
            "changed": delivery.changed,
            **keys,
            "diff": delivery.patch,
            **delivery.edited.metadata(),
        }
        typer.echo(json.dumps(report, indent=2))
    elif not delivery.writes:
        sys.stdout.write(delivery.patch)
        sys.stdout.flush()
    report_edit(delivery, backup, old_span, model, say["dry_run"], say["quiet"])


def finish_repair(
    source: str,
    done: Repaired,
    file: Path,
    target: Path | None,
    to_stdout: bool,
    keys: Mapping[str, object],
    **say: bool,
) -> None:
    """Deliver a repair: a diff (--diff), stdout (-o -), or the file or -o FILE (only if it got
    better); its --json report (`keys`: the model keys of a served repair) or its line on stderr;
    exit 3 when issues remain. `say`: diff, as_json, quiet."""
    from dcode.edit import unified_diff

    changed = done.code != source
    if say["diff"]:
        sys.stdout.write(unified_diff(source, done.code, file))
        sys.stdout.flush()
    elif to_stdout:
        sys.stdout.write(done.code)
        sys.stdout.flush()
    elif changed:
        write_repaired(target or file, done.code)
    if say["as_json"]:
        typer.echo(json.dumps({"path": str(target or file), "changed": changed, **keys, **done.metadata()}))
    elif not say["quiet"]:
        typer.echo(
            f"dcode: {file}: {done.issues_before} -> {done.issues_after} syntax issue(s) in {done.rounds} round(s)"
            + ("" if changed or say["diff"] or to_stdout else ", file unchanged"),
            err=True,
        )
    raise typer.Exit(SYNTAX if done.issues_after else OK)


def write_repaired(path: Path, code: str) -> None:
    """Write path atomically (a new file, or a repair replacing it); a failure is one line (exit 1),
    Ctrl-C or SIGTERM leave no temp file."""
    from dcode.files import atomic_write

    try:
        atomic_write(path, code)
    except OSError as error:
        fail(f"cannot write {path}: {error.strerror or error}", RUNTIME)
    except KeyboardInterrupt as error:
        interrupted(error)
