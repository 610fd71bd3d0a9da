"""Run generated Python in a child process that cannot do much harm, and say how it ended.

Owns: the child's limits and isolation. The child is a fresh interpreter (`python -I`: no user
site, no PYTHON* variables) with a stripped environment, working in a new temporary folder that
is deleted afterwards. Before the generated code runs, the child itself
  1) moves into a new network namespace (unshare(CLONE_NEWNET), with CLONE_NEWUSER when it is not
     root) where one is permitted; silently goes on without one otherwise;
  2) caps its address space (RLIMIT_AS), CPU time (RLIMIT_CPU), file size and core dumps, hard
     limits included, so the code cannot raise them back;
  3) replaces socket.socket with a class whose constructor raises OSError, and create_connection,
     getaddrinfo and friends with a function raising it, so a connection attempt (or a DNS query)
     fails before any packet is sent.
The limits are applied by the child's first lines rather than in a preexec_fn: preexec_fn is not
safe in a parent with threads (torch keeps a pool), and the effect is the same, since the
generated code runs only afterwards. The parent adds a wall-clock timeout and kills the child's
whole process group. A run passes only if the code ran to its end: exit status 0 *and* a random
token the child prints after the code, so `sys.exit(0)` or `os._exit(0)` in the code is a failure.

The prelude stops accidents (a test that fetches a URL); the namespace, where permitted, is the
real fence. Neither is a defence against code written to escape.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Status = Literal["passed", "failed", "timeout", "memory"]
MEMORY_EXIT = 86  # the child's exit status after a MemoryError
NETWORK_MESSAGE = "network access is disabled in the dcode bench sandbox"
CLONE_NEWNET, CLONE_NEWUSER = 0x40000000, 0x10000000  # <linux/sched.h>

# The child's first lines; {placeholders} are filled by run_python(). Standard library only.
PRELUDE = """\
import os, sys


def _unshare_network():
    flags = ({newnet}, {newnet} | {newuser}) if os.geteuid() else ({newnet},)
    for flag in flags:
        try:
            if hasattr(os, "unshare"):  # Python >= 3.12
                os.unshare(flag)
                return True
            import ctypes

            if ctypes.CDLL(None, use_errno=True).unshare(flag) == 0:
                return True
        except (OSError, AttributeError):
            continue
    return False


def _limit(memory, cpu, fsize):
    import resource

    for kind, value in ((resource.RLIMIT_AS, memory), (resource.RLIMIT_CPU, cpu),
                        (resource.RLIMIT_FSIZE, fsize), (resource.RLIMIT_CORE, 0)):
        try:
            resource.setrlimit(kind, (value, value))
        except (ValueError, OSError):  # above an existing hard limit: keep that one
            resource.setrlimit(kind, (min(value, resource.getrlimit(kind)[1]),) * 2)


def _refuse(*args, **kwargs):
    raise OSError({message!r})


_unshare_network()
_limit({memory}, {cpu}, {fsize})
import socket, _socket


class _NoSocket(socket.socket):  # a class, so that modules subclassing socket (ssl) still import
    def __init__(self, *args, **kwargs):
        _refuse()


for _module in (socket, _socket):
    for _name in ("socket", "SocketType"):
        setattr(_module, _name, _NoSocket)
    for _name in ("create_connection", "create_server", "fromfd", "getaddrinfo", "gethostbyname",
                  "gethostbyname_ex", "gethostbyaddr", "getnameinfo"):
        if hasattr(_module, _name):
            setattr(_module, _name, _refuse)
del _module, _name
with open("solution.py", encoding="utf-8") as _file:
    _code = compile(_file.read(), "solution.py", "exec")
try:
    exec(_code, {{"__name__": "__main__", "__builtins__": __builtins__}})
except MemoryError:
    os._exit({memory_exit})
except SystemExit as _exit:
    sys.stderr.write(f"the code exited early ({{_exit.code!r}})\\n")
    os._exit(1)
sys.stdout.flush()
sys.stdout.write("\\n{token}\\n")
sys.stdout.flush()
"""


@dataclass(frozen=True)
class Limits:
    seconds: float = 10.0  # wall clock, after which the child's process group is killed
    memory_mb: int = 1024  # address space (RLIMIT_AS); Python itself needs ~30 MB of it
    cpu_seconds: int | None = None  # RLIMIT_CPU; None = the wall-clock limit rounded up, plus 1
    output_mb: int = 16  # largest file the code may write, stdout included (RLIMIT_FSIZE)


@dataclass(frozen=True)
class Outcome:
    status: Status  # passed: ran to the end with status 0; memory: hit RLIMIT_AS; timeout: wall or CPU limit
    returncode: int | None  # None when the parent killed it; negative: killed by that signal
    seconds: float
    detail: str  # the last line of stderr (the exception), or why it was stopped

    @property
    def passed(self) -> bool:
        return self.status == "passed"


def run_python(source: str, limits: Limits | None = None) -> Outcome:
    """Run `source` as a program in the sandbox and report how it ended."""
    limits = limits or Limits()
    token = secrets.token_hex(16)
    cpu = limits.cpu_seconds or int(limits.seconds) + 2
    prelude = PRELUDE.format(
        newnet=hex(CLONE_NEWNET),
        newuser=hex(CLONE_NEWUSER),
        message=NETWORK_MESSAGE,
        memory=limits.memory_mb * 2**20,
        cpu=cpu,
        fsize=limits.output_mb * 2**20,
        memory_exit=MEMORY_EXIT,
        token=token,
    )
    with tempfile.TemporaryDirectory(prefix="dcode-bench-") as folder:
        work = Path(folder)
        (work / "solution.py").write_text(source, encoding="utf-8")
        (work / "sandbox.py").write_text(prelude, encoding="utf-8")
        env = {"HOME": folder, "TMPDIR": folder, "LC_ALL": "C.UTF-8", "OMP_NUM_THREADS": "1"}
        began = time.perf_counter()
        with open(work / "stdout", "wb") as out, open(work / "stderr", "wb") as err:
            child = subprocess.Popen(
                [sys.executable, "-I", "-B", "sandbox.py"],
                cwd=folder,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,  # its own process group, so a fork bomb's children die too
            )
            try:
                code: int | None = child.wait(timeout=limits.seconds)
            except subprocess.TimeoutExpired:
                code = None
            finally:
                _kill_group(child.pid)
                child.wait()
        seconds = time.perf_counter() - began
        stdout = _tail(work / "stdout", 4096)
        stderr = _tail(work / "stderr", 4096)
    last = next((line for line in reversed(stderr.splitlines()) if line.strip()), "")
    if code is None:
        return Outcome("timeout", None, seconds, f"killed after {limits.seconds:g} s")
    if code == -signal.SIGXCPU or code == -signal.SIGKILL:
        return Outcome("timeout", code, seconds, f"CPU limit of {cpu} s")
    if code == MEMORY_EXIT or last.startswith("MemoryError"):
        return Outcome("memory", code, seconds, f"memory limit of {limits.memory_mb} MB")
    if code == 0 and stdout.rstrip().endswith(token):
        return Outcome("passed", 0, seconds, "")
    if code == 0:
        return Outcome("failed", 0, seconds, "the code exited before its end")
    return Outcome("failed", code, seconds, last or f"exit status {code}")


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is already gone
        os.killpg(pid, signal.SIGKILL)


def _tail(path: Path, size: int) -> str:
    with open(path, "rb") as file:
        file.seek(max(0, path.stat().st_size - size))
        return file.read().decode("utf-8", "replace")
