"""dcode new in a real pseudo-terminal: the live view draws on the terminal, stdout stays code only."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from dcode.tui_app import REPLAY_FRAMES

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX pseudo-terminal")


def run_in_terminal(args: list[str], stdout_path: Path, timeout: float = 60.0) -> tuple[int, bytes]:
    """Run `python -m dcode.cli ARGS` with stdin/stderr on a pty (80x24) and stdout to a file."""
    pid, fd = pty.fork()
    if pid == 0:  # child
        out = os.open(stdout_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out, 1)
        env = {**os.environ, "TERM": "xterm-256color", "OMP_NUM_THREADS": "1"}
        env.pop("NO_COLOR", None)
        os.execve(sys.executable, [sys.executable, "-m", "dcode.cli", *args], env)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    screen = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            screen += chunk
    else:
        os.kill(pid, 9)
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), screen


def test_live_view_draws_on_the_terminal_and_stdout_gets_only_code(tmp_path: Path, tiny_checkpoint: Path) -> None:
    out = tmp_path / "out.txt"
    args = ["new", "a stack class", "--model", str(tiny_checkpoint), "--length", "24", "--no-repair"]
    code, screen = run_in_terminal([*args, "--exit-when-done"], out)
    assert code in (0, 3), screen[-2000:]  # 3: the random model wrote code that does not parse
    text = screen.decode("utf-8", "replace")
    assert "\x1b[" in text  # the view drew with escape codes on the terminal
    assert "pass" in text and "tiny" in text  # its status bar: pass n and the model name
    assert "dcode: 24 tokens" in text or "dcode: " in text  # the summary line after the view closes
    # the passes, at a pace a person can follow (all, or REPLAY_FRAMES spread over a run too fast
    # for them), then the final frame on screen before the view closed
    drawn = {int(n) for n in re.findall(r"pass (\d+)\b", text)}
    found = re.search(r"tokens in (\d+) passes", text)
    assert found is not None and len(drawn) >= min(int(found[1]), REPLAY_FRAMES - 1), sorted(drawn)
    assert "done" in text
    written = out.read_text()
    assert "\x1b" not in written  # stdout got the code only
    # the same run without a terminal gives the same code
    result = subprocess.run(
        [sys.executable, "-m", "dcode.cli", *args, "-q"],
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        timeout=120,
    )
    assert result.returncode == code
    assert written == result.stdout


def test_no_live_on_a_terminal_draws_nothing(tmp_path: Path, tiny_checkpoint: Path) -> None:
    out = tmp_path / "out.txt"
    args = ["new", "a stack class", "--model", str(tiny_checkpoint), "--length", "16", "--no-repair", "--no-live"]
    code, screen = run_in_terminal(args, out)
    assert code in (0, 3)
    assert b"\x1b" not in screen
    assert screen.decode().strip().startswith("dcode: 16 tokens in")


def test_dcode_tiny_on_a_terminal_names_the_model_to_pull(tmp_path: Path) -> None:
    """The hint line follows the summary when the embedded model answered and stderr is a terminal."""
    args = ["new", "a stack class", "--length", "16", "--no-repair", "--no-live"]
    code, screen = run_in_terminal(args, tmp_path / "out.txt")
    assert code in (0, 3)
    lines = screen.decode().strip().splitlines()
    assert lines[0].startswith("dcode: 16 tokens in") and "dcode-tiny" in lines[0]
    assert lines[1].startswith("dcode: hint: dcode-tiny is a 7M-parameter demonstration")
