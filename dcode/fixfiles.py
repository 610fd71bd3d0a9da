"""The files of a `dcode fix`: what it read and wrote, the backups, the locks, and the promise that
it only ever undoes what it wrote.

Owns: the `Workspace` (each file's original, best and current text; FILE.orig taken once, before
the first write, by dcode.edit; atomic writes by dcode.files), the check before every write or
undo that the file on disk still holds exactly what dcode last wrote or read there (a file changed
by someone else meanwhile, an editor's save, a formatter, another tool, is left as they left it,
its backup kept, and never written again in this run), and one lock per file (`flock` on a file in
`locks`, a folder of the caller's choosing): a second fix of the same file is refused at once
with a one-line `Busy`, never queued behind the first.

Knows nothing about the test command, models, argv or the terminal.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from dcode.files import FileProblem, read_only


class Busy(FileProblem):
    """Another dcode fix holds the file's lock (one-line message, without the path)."""

    def __init__(self, path: Path, message: str) -> None:
        super().__init__(message)
        self.path = path


class Untouchable(FileProblem):
    """A file this fix must not write (read-only, changed by someone else, locked): one line,
    without the path (the caller names it)."""


CHANGED = "changed by someone else during the run; left as they left it"


def default_locks() -> Path:
    """A folder of this user's own for the lock files: the system's temporary folder, per user id."""
    return Path(tempfile.gettempdir()) / f"dcode-locks-{os.getuid()}"


def lock(path: Path, folder: Path) -> int:
    """Take the lock of `path` (an flock on a file in `folder` named after the resolved path), or
    raise Busy naming the process that holds it; returns the open descriptor, which holds the lock
    until it is closed (or the process ends, a SIGKILL too)."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    if folder.stat().st_uid != os.getuid():  # someone else's folder: their locks are not ours to trust
        raise FileProblem(f"{folder} belongs to another user; dcode fix does not keep its locks there")
    name = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:32] + ".lock"
    fd = os.open(folder / name, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
        os.close(fd)
        who = f" (pid {holder})" if holder.isdigit() else ""
        raise Busy(path, f"another dcode fix{who} is changing it; run this one when it ends") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd


def on_disk(path: Path) -> bytes | None:
    """The file's bytes now, None when it is gone or unreadable."""
    try:
        return path.read_bytes()
    except OSError:
        return None


@dataclass
class Workspace:
    """The files a fix has read or written: the original and best text of each, the backups taken
    (once a file, before its first write), what dcode last put on disk or read there (`current`),
    the files left to whoever changed them (`left`) and the locks held."""

    original: dict[Path, str] = field(default_factory=dict)
    best: dict[Path, str] = field(default_factory=dict)
    current: dict[Path, str] = field(default_factory=dict)
    backups: dict[Path, Path] = field(default_factory=dict)
    left: list[Path] = field(default_factory=list)
    locks: Path | None = None  # the folder of lock files; None: no locks
    held: dict[Path, int] = field(default_factory=dict)

    def read(self, path: Path) -> str:
        if path not in self.current:
            from dcode.files import read_source

            text = read_source(path)
            self.original[path] = self.best[path] = self.current[path] = text
        return self.current[path]

    def lock(self, path: Path) -> None:
        """Hold path's lock for the rest of the fix (Busy when another fix holds it)."""
        if self.locks is not None and path not in self.held:
            self.held[path] = lock(path, self.locks)

    def check(self, path: Path) -> None:
        """Untouchable unless dcode may write path now: locked by this fix, writable, and holding
        exactly what dcode last wrote or read there (else it joins `left`)."""
        if path in self.left:
            raise Untouchable(CHANGED)
        try:
            self.lock(path)
        except Busy:
            raise Untouchable("another dcode fix is changing it") from None
        with contextlib.suppress(OSError):
            if read_only(path, os.stat(path)):
                raise Untouchable("read-only; dcode does not replace it")
        self.read(path)
        if not self.unchanged(path):
            raise Untouchable(CHANGED)

    def unchanged(self, path: Path) -> bool:
        """Whether the file still holds what dcode last wrote or read; if not, it is left for good."""
        if on_disk(path) == self.current[path].encode():
            return True
        if path not in self.left:
            self.left.append(path)
        return False

    def write(self, path: Path, text: str) -> None:
        """Back the file up (FILE.orig) before its first write, then replace it atomically; Untouchable
        when it may not be written (see check)."""
        from dcode.edit import write_backup
        from dcode.files import atomic_write

        self.check(path)
        if path not in self.backups:
            self.backups[path] = write_backup(path)
        atomic_write(path, text)
        self.current[path] = text

    def keep(self) -> None:
        """What is on disk is the new best state."""
        self.best = dict(self.current)

    def restore(self) -> None:
        """Put the best state back on disk wherever it is not (an undone round, an interrupt), in
        each file that still holds what dcode wrote; one changed by someone else stays as it is."""
        from dcode.files import atomic_write

        for path, text in self.best.items():
            if self.current[path] != text and path not in self.left and self.unchanged(path):
                atomic_write(path, text)
                self.current[path] = text

    def settle(self) -> None:
        """At the end: every file dcode wrote is checked once more (one changed since joins `left`)."""
        for path in self.backups:
            if path not in self.left:
                self.unchanged(path)

    def drop_needless_backups(self) -> None:
        """A file that ends as it began needs no backup: it goes (only one this fix made, and
        never one of a file left to someone else, whose original it may be the only copy of)."""
        for path, backup in list(self.backups.items()):
            if path not in self.left and self.current[path] == self.original[path]:
                with contextlib.suppress(OSError):
                    backup.unlink()
                del self.backups[path]

    def release(self) -> None:
        for fd in self.held.values():
            os.close(fd)
        self.held.clear()

    def state(self) -> tuple[tuple[Path, str], ...]:
        """What is on disk now, comparable with another round's."""
        return tuple(sorted(self.current.items()))

    def written(self) -> dict[Path, str]:
        """Each file dcode changed (left ones too), as dcode last wrote it: what its diff shows."""
        return {p: self.current[p] for p in self.original if self.current[p] != self.original[p]}

    def changed(self) -> list[Path]:
        """The files dcode changed and that hold its text (not those left to someone else)."""
        return [p for p in self.original if self.current[p] != self.original[p] and p not in self.left]
