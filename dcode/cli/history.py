"""`dcode log`: the history of what dcode wrote (dcode.history's SQLite database), and `remember`,
which every writing command calls to add its record (`new`, `edit` and `repair` through
dcode.cli.delivery.recorded, `fix` once a round).

Where the database is: DCODE_LOG_PATH, else $XDG_DATA_HOME/dcode/logs.db, else
~/.local/share/dcode/logs.db. DCODE_LOG=0 or `--no-log` records nothing. A database that is
locked, corrupt or read-only costs one warning line on stderr, never the command's answer.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from dcode.cli.app import RUNTIME, USAGE, command_group, fail
from dcode.cli.options import with_options
from dcode.cli.resolve import Resolved
from dcode.options import JSON, LOG_LIST

if TYPE_CHECKING:
    from dcode.history import Entry


def log_path() -> Path:
    """DCODE_LOG_PATH, else the user's data folder (XDG_DATA_HOME, else ~/.local/share)/dcode/logs.db."""
    explicit = os.environ.get("DCODE_LOG_PATH")
    if explicit:
        return Path(explicit).expanduser()
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data) / "dcode" / "logs.db"


def remember(entry: Entry, log: bool = True, secrets: tuple[str | None, ...] = ()) -> int | None:
    """Add `entry` to the history unless `log` is off (--no-log, DCODE_LOG=0), the keys in `secrets`
    redacted; returns its id. A database problem is one warning line on stderr and None: never an exit."""
    from dcode import history

    if not log:
        return None
    try:
        return history.record(log_path(), entry, secrets=secrets)
    except history.HistoryError as error:
        typer.echo(f"dcode: warning: not recorded in the history: {error}", err=True)
        return None


def remember_result(
    command: str,
    result: Any,
    *,
    log: bool,
    exit_code: int | None,
    prompt: str | None = None,
    path: Path | None = None,
    model: str | None = None,
    device: str | None = None,
    dtype: str | None = None,
    endpoint: str | None = None,
    settings: Mapping[str, object] | None = None,
    quantize: str = "none",
) -> int | None:
    """Record a `new`, `edit` or `repair` result (dcode.events' Finished, Edited or Repaired, or an
    endpoint's record with the same `code` and `metadata()`): its code, counters and, for an edit,
    the lines it rewrote in `path`. Call it after the answer is delivered, with the exit code the
    command is about to return."""
    from dcode.edit import lines_of
    from dcode.history import Entry, Touched

    meta = result.metadata()
    repaired = meta.get("repair") if isinstance(meta.get("repair"), dict) else {}
    passes = meta.get("forward_passes", 0) + (repaired.get("extra_forward_passes") or 0)
    regions = (lines_of(result.code, result.new_region),) if hasattr(result, "new_region") else ()
    entry = Entry(
        command,
        prompt=prompt,
        model=model, dtype=dtype, device=device, endpoint=endpoint,
        settings=dict(settings or {}) | ({"quantize": quantize} if quantize != "none" else {}),  # what ran
        files=(Touched(str(path), regions),) if path is not None else (),
        answer=result.code,
        tokens=meta.get("tokens", meta.get("tokens_regenerated")),
        passes=passes or meta.get("extra_forward_passes"),
        seconds=meta.get("seconds", meta.get("extra_seconds")),
        exit_code=exit_code,
    )  # fmt: skip
    return remember(entry, log)


log_app = command_group(
    "log",
    "The history of what dcode wrote: the latest records, one answer, or where it is kept.",
    invoke_without_command=True,
    no_args_is_help=False,
)


def _read(work: Callable[[], object]) -> object:
    from dcode.history import HistoryError

    try:
        return work()
    except HistoryError as error:
        fail(str(error), RUNTIME)


def line(entry: Entry) -> str:
    """One record in `dcode log`: id, time, command (and fix round), model, files, what was asked."""
    from dcode.history import Entry

    assert isinstance(entry, Entry)
    command = entry.command + (f" #{entry.round}" if entry.round is not None else "")
    who = entry.model or "?"
    if entry.endpoint:
        who += f" at {entry.endpoint}"
    files = ", ".join(
        t.path + (":" if t.regions else "") + ",".join(f"{a}-{b}" if a != b else f"{a}" for a, b in t.regions[:3])
        for t in entry.files
    )
    asked = " ".join((entry.prompt or "").split())
    asked = asked if len(asked) <= 48 else asked[:47] + "…"
    said = f" -> {entry.verdict}" if entry.verdict else ""
    code = "" if entry.exit_code is None else f" (exit {entry.exit_code})"
    return f"{entry.id:>4}  {entry.time}  {command:<9} {who}  {files or '-'}  {asked!r}{said}{code}"


@dataclass(frozen=True)
class Listed:
    """`dcode log`'s own option."""

    count: int


@log_app.callback()
@with_options(*LOG_LIST, own=Listed)
def log_command(run: Resolved[Listed]) -> None:
    """List the latest records, newest first (`dcode log show ID` prints one answer)."""
    if run.subcommand is not None:
        return
    from dcode import history

    entries = _read(lambda: history.latest(log_path(), run.own.count))
    assert isinstance(entries, list)
    if run.output.as_json:
        typer.echo(json.dumps([e.as_json() for e in entries], indent=2))
        return
    for entry in entries:
        typer.echo(line(entry))


@log_app.command("show")
@with_options(JSON)
def show_command(
    id: Annotated[int, typer.Argument(help="The record's id (the first column of `dcode log`).")], run: Resolved[None]
) -> None:
    """Print one record's answer (the code written, or the diff of a fix round)."""
    from dcode import history

    entry = _read(lambda: history.get(log_path(), id))
    if not isinstance(entry, history.Entry):
        fail(f"no record {id} in the history ({log_path()})", USAGE)
    if run.output.as_json:
        typer.echo(json.dumps(entry.as_json(), indent=2))
    elif entry.answer:
        typer.echo(entry.answer, nl=not entry.answer.endswith("\n"))


@log_app.command("path")
def path_command() -> None:
    """Print where the history is kept."""
    typer.echo(str(log_path()))
