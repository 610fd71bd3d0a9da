"""A history of everything dcode wrote: one SQLite row per `new`, `edit`, `repair` and `fix` round.

Owns: the database's schema, writing a record (`record`), reading the latest ones (`latest`) and
one by id (`get`), and keeping secrets out (`scrub`: settings named like a key, token, secret or
password are dropped; an endpoint URL loses its user, password and query; `redact`: the keys dcode
holds are taken out of any text, here and in what `dcode fix` sends). A database written by a newer
dcode (more columns) is read for the columns this one knows. Every failure of the
database (locked, corrupt, read-only, a folder that cannot be made) is a HistoryError with a
one-line message, for the command to turn into a warning: the history never costs an answer.

Knows nothing about argv, the environment or the terminal: where the database lives and whether
to record at all are the command line's (dcode.cli.history).
"""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

LOCK_WAIT = 0.5  # seconds to wait for another dcode's write before giving up on this record
SCHEMA_VERSION = 1

SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    time TEXT NOT NULL,          -- UTC, ISO 8601 to the second
    command TEXT NOT NULL,       -- new, edit, repair, fix
    prompt TEXT,                 -- the request or instruction
    model TEXT,
    dtype TEXT,
    device TEXT,
    endpoint TEXT,               -- the server's URL, secrets removed; NULL for a local model
    settings TEXT NOT NULL,      -- JSON object of the options given, secrets removed
    files TEXT NOT NULL,         -- JSON list of {"path", "regions": [[first line, last line], ...]}
    answer TEXT,                 -- the code written, or the diff of a fix round
    tokens INTEGER,
    passes INTEGER,
    seconds REAL,
    exit_code INTEGER,
    round INTEGER,               -- fix: the round (0 = the first run of the tests)
    verdict TEXT                 -- fix: the test command's verdict after the round
)
"""


class HistoryError(Exception):
    """The database could not be read or written (one-line message)."""


@dataclass(frozen=True)
class Touched:
    """A file a command wrote, and the regions it rewrote (1-based first and last lines)."""

    path: str
    regions: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class Entry:
    """One record. `id` and `time` are set by `record`; None elsewhere means not known."""

    command: str
    prompt: str | None = None
    model: str | None = None
    dtype: str | None = None
    device: str | None = None
    endpoint: str | None = None
    settings: Mapping[str, object] = field(default_factory=dict)
    files: tuple[Touched, ...] = ()
    answer: str | None = None
    tokens: int | None = None
    passes: int | None = None
    seconds: float | None = None
    exit_code: int | None = None
    round: int | None = None
    verdict: str | None = None
    id: int | None = None
    time: str | None = None

    def as_json(self) -> dict[str, object]:
        """The record as `dcode log --json` prints it: id and time first."""
        out = asdict(self)
        out["files"] = files_json(self.files)
        out["settings"] = dict(self.settings)
        return {"id": out.pop("id"), "time": out.pop("time"), **out}


_SECRET = re.compile(r"key|token|secret|passw|credential|auth|cookie", re.IGNORECASE)


def scrub(settings: Mapping[str, object]) -> dict[str, object]:
    """Settings without any whose name looks secret (api_key, token, client_secret, password...).
    Example: scrub({"seed": 0, "api_key": "sk-1"}) -> {"seed": 0}."""
    return {name: value for name, value in settings.items() if not _SECRET.search(name)}


REDACTED = "[redacted]"


def redact(text: str, secrets: Iterable[str | None]) -> str:
    """`text` with each key dcode holds (an endpoint's key) replaced by [redacted]; strings under 4
    characters are not taken for keys. Example: redact("KEY=sk-9f2c", ["sk-9f2c"]) -> "KEY=[redacted]"."""
    for secret in sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return text


def clean_url(url: str | None) -> str | None:
    """An endpoint URL without user, password, query or fragment (where keys hide), as messages
    show it (remote.client.Endpoint.shown). Example: clean_url("https://me:sk@[::1]:8/v1?key=1")
    -> "https://[::1]:8/v1"."""
    if not url:
        return url
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, "", ""))


def utc_now() -> datetime:
    return datetime.now(UTC)


@contextlib.contextmanager
def connected(path: Path, create: bool = True) -> Iterator[sqlite3.Connection]:
    """A connection with the schema in place; any database failure as a HistoryError."""
    try:
        if create:
            path.parent.mkdir(parents=True, exist_ok=True)
        elif not path.exists():
            raise HistoryError(f"no history yet at {path}")
        connection = sqlite3.connect(path, timeout=LOCK_WAIT)
    except (OSError, sqlite3.Error) as error:
        raise HistoryError(f"cannot open the history {path}: {error}") from None
    try:
        with connection:
            if create and connection.execute("PRAGMA user_version").fetchone()[0] < SCHEMA_VERSION:
                connection.executescript(SCHEMA + f";PRAGMA user_version = {SCHEMA_VERSION};")
            yield connection
    except sqlite3.Error as error:
        raise HistoryError(f"history {path}: {error}") from None
    finally:
        connection.close()


def record(path: Path, entry: Entry, now: Callable[[], datetime] = utc_now, secrets: Iterable[str | None] = ()) -> int:
    """Write one record (secrets scrubbed, the keys in `secrets` redacted from every text); returns
    its id. HistoryError when the database fails."""
    secrets = tuple(secrets)
    hide = lambda value: redact(value, secrets) if isinstance(value, str) else value  # noqa: E731
    settings = {name: hide(value) for name, value in scrub(entry.settings).items()}
    row = {
        **{f.name: hide(getattr(entry, f.name)) for f in fields(Entry) if f.name not in ("id", "time")},
        "time": now().astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "endpoint": clean_url(entry.endpoint),
        "settings": json.dumps(settings, sort_keys=True, default=str),
        "files": json.dumps(files_json(entry.files)),
    }
    names = ", ".join(row)
    with connected(path) as db:
        cursor = db.execute(f"INSERT INTO records ({names}) VALUES ({', '.join('?' * len(row))})", list(row.values()))
        return int(cursor.lastrowid or 0)


def files_json(files: tuple[Touched, ...]) -> list[dict[str, object]]:
    """The files a record touched, as JSON holds them: {"path", "regions": [[start, end], ...]}."""
    return [{"path": t.path, "regions": [list(r) for r in t.regions]} for t in files]


KNOWN = frozenset(f.name for f in fields(Entry))
MOST = 2**63 - 1  # SQLite's largest integer: a larger id names no record, a larger count is all of them


def _entry(row: sqlite3.Row) -> Entry:
    values = {name: value for name, value in dict(row).items() if name in KNOWN}  # a newer schema's extras left out
    files = tuple(Touched(f["path"], tuple(tuple(r) for r in f["regions"])) for f in json.loads(values.pop("files")))
    return Entry(**{**values, "settings": json.loads(values.pop("settings")), "files": files})  # type: ignore[arg-type]


def latest(path: Path, count: int = 20) -> list[Entry]:
    """The `count` newest records, newest first; [] when there is no history yet."""
    if not path.exists():
        return []
    with connected(path, create=False) as db:
        db.row_factory = sqlite3.Row
        rows = db.execute("SELECT * FROM records ORDER BY id DESC LIMIT ?", (min(count, MOST),))
        return [_entry(r) for r in rows]


def get(path: Path, id: int) -> Entry | None:
    """The record `id`, or None."""
    if not path.exists() or not -MOST - 1 <= id <= MOST:
        return None
    with connected(path, create=False) as db:
        db.row_factory = sqlite3.Row
        row = db.execute("SELECT * FROM records WHERE id = ?", (id,)).fetchone()
        return _entry(row) if row is not None else None
