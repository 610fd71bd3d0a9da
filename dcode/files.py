"""Reading users' files safely and writing atomically. No torch, no model.

Owns: the checks a path must pass before any work starts (so bad input never costs compute or a
file), and atomic writes: a temporary file in the target's folder, fsync, then rename, keeping
the old file's mode. An interrupted run leaves the old file or no file, never half of one.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path


class FileProblem(ValueError):
    """A path that cannot be read or written as asked (one-line message)."""


def check_writable(path: Path, force: bool) -> None:
    """Raise FileProblem unless `path` can be created (or, with force, replaced)."""
    if path.is_dir():
        raise FileProblem(f"{path} is a directory")
    if path.exists() and not force:
        raise FileProblem(f"{path} exists (use --force to overwrite)")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise FileProblem(f"cannot write {path}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise FileProblem(f"cannot write {path}: folder {folder} is not writable")


def atomic_write(path: Path, text: str) -> None:
    """Replace `path` with `text` in one rename; keep the old file's permission bits."""
    folder = path.parent if str(path.parent) else Path(".")
    mode = stat.S_IMODE(path.stat().st_mode) if path.exists() else None
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".dcode-tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        if mode is not None:
            os.chmod(temp, mode)
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(temp, 0o666 & ~umask)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise


def read_source(path: Path, limit_bytes: int = 10_000_000) -> str:
    """A UTF-8 text file's contents; FileProblem for missing, folders, binary or undecodable."""
    if not path.exists():
        raise FileProblem(f"{path}: no such file")
    if path.is_dir():
        raise FileProblem(f"{path} is a directory")
    try:
        data = path.read_bytes()
    except OSError as error:
        raise FileProblem(f"{path}: cannot read ({error.strerror})") from None
    if len(data) > limit_bytes:
        raise FileProblem(f"{path} is {len(data):,} bytes, over the {limit_bytes:,}-byte limit")
    if b"\0" in data:
        raise FileProblem(f"{path} looks binary (it holds NUL bytes)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise FileProblem(f"{path} is not UTF-8 text (bad byte at offset {error.start})") from None
