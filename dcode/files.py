"""Reading users' files safely and writing atomically. No torch, no model.

Owns: the checks a path must pass before any work starts (so bad input never costs compute or a
file), and atomic writes: a temporary file in the target's folder, fsync, then rename, keeping
the old file's mode. An interrupted run leaves the old file or no file, never half of one.

Only regular files are written: a device, a FIFO or a folder is refused (writing "over" /dev/null
would replace it). Only regular files are read, except where a caller asks for streams too (`dcode
check` reads a pipe or `<(...)` as cat does). A symlink is followed, read and
written through. A file without write permission is refused, not replaced. A temporary file is
named `.NAME.PID.XXXXXXXX.dcode-tmp` beside its target; one left by a process that no longer
runs (a SIGKILL can't be caught) is removed by the next write to that target.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

TEMP_SUFFIX = ".dcode-tmp"


class FileProblem(ValueError):
    """A path that cannot be read or written as asked (one-line message)."""


def _kind(mode: int) -> str:
    """'a FIFO', 'a character device', ... for a stat mode that is not a regular file."""
    kinds = [
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ]
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def regular_or_absent(path: Path) -> os.stat_result | None:
    """The stat of path (a symlink followed) if it is a regular file, None if nothing is there;
    FileProblem for anything else."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise FileProblem(f"{path}: {error.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        kind = _kind(info.st_mode)
        if kind == "a directory":
            raise FileProblem(f"{path} is a directory")
        raise FileProblem(f"{path} is {kind}, not a regular file")
    return info


def read_only(path: Path, info: os.stat_result) -> bool:
    """Whether a file has no write permission for us (for root, whom access() lets write
    anything: no write bit at all, as chmod 444 says)."""
    if os.geteuid() == 0:
        return not info.st_mode & 0o222
    return not os.access(path, os.W_OK)


def target_of(path: Path) -> Path:
    """Where a write to path lands: a symlink's target (followed to the end), else path."""
    return Path(os.path.realpath(path)) if os.path.islink(path) else path


def check_writable(path: Path, force: bool) -> None:
    """Raise FileProblem unless `path` can be created (or, with force, replaced): a regular file
    or nothing, with write permission, in a writable folder. A symlink is checked as its target."""
    target = target_of(path)
    info = regular_or_absent(target)
    if os.path.lexists(path) and not force:
        raise FileProblem(f"{path} exists (use --force to overwrite)")
    if info is not None and read_only(target, info):
        raise FileProblem(f"{path} is read-only; dcode does not replace it (chmod u+w {path} to allow that)")
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise FileProblem(f"cannot write {path}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise FileProblem(f"cannot write {path}: folder {folder} is not writable")


def temp_file(path: Path) -> str:
    """A new empty temporary file beside path, named after it and this process (see the module
    docstring); stale ones of dead processes are removed first."""
    folder = path.parent if str(path.parent) else Path(".")
    remove_stale_temps(path)
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=TEMP_SUFFIX, dir=folder)
    os.close(fd)
    return temp


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def remove_stale_temps(path: Path) -> list[Path]:
    """Remove the temporary files for path left by dcode processes that no longer run; returns them."""
    folder = path.parent if str(path.parent) else Path(".")
    prefix = f".{path.name}."
    removed = []
    with contextlib.suppress(OSError):
        for name in os.listdir(folder):
            if not (name.startswith(prefix) and name.endswith(TEMP_SUFFIX)):
                continue
            pid = name[len(prefix) :].split(".", 1)[0]
            if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
                with contextlib.suppress(OSError):
                    os.unlink(folder / name)
                    removed.append(folder / name)
    return removed


def atomic_write(path: Path, text: str) -> None:
    """Replace `path` with `text` in one rename; keep the old file's permission bits. A symlink is
    written through; anything but a regular file (or nothing) at path is refused (FileProblem)."""
    path = target_of(path)
    info = regular_or_absent(path)
    mode = stat.S_IMODE(info.st_mode) if info is not None else None
    temp = temp_file(path)
    try:
        with open(temp, "w", encoding="utf-8", newline="") as out:
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


def same_file(a: Path, b: Path) -> bool:
    """Whether two paths name one existing file (through symlinks and hard links)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def read_bytes(path: Path, limit_bytes: int = 10_000_000, streams: bool = False) -> bytes:
    """A regular file's bytes; FileProblem for missing, folders, FIFOs, devices, too big or binary.
    With streams, a FIFO or character device (a pipe, `<(...)`, /dev/stdin) is read too, as cat
    reads it: to its end, so one nobody writes to waits, as cat does."""
    if not os.path.lexists(path):
        raise FileProblem(f"{path}: no such file")
    piped = streams and stream(path)
    info = None if piped else regular_or_absent(path)
    if info is None and not piped:
        raise FileProblem(f"{path}: a symlink to nothing")
    if info is not None and info.st_size > limit_bytes:
        raise FileProblem(f"{path} is {info.st_size:,} bytes, over the {limit_bytes:,}-byte limit")
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit_bytes + 1)  # a stream may never end
    except OSError as error:
        raise FileProblem(f"{path}: cannot read ({error.strerror})") from None
    if len(data) > limit_bytes:
        raise FileProblem(f"{path} is over the {limit_bytes:,}-byte limit")
    if b"\0" in data:
        raise FileProblem(f"{path} looks binary (it holds NUL bytes)")
    return data


def stream(path: Path) -> bool:
    """Whether path (a symlink followed) is a FIFO or a character device: read, never written."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)


def read_source(path: Path, limit_bytes: int = 10_000_000) -> str:
    """A UTF-8 text file's contents (a BOM kept); FileProblem as read_bytes, or undecodable."""
    data = read_bytes(path, limit_bytes)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise FileProblem(f"{path} is not UTF-8 text (bad byte at offset {error.start})") from None
