"""What the live view costs: sampling wall time with the view on a real pseudo-terminal vs --no-live.

    python benchmarks/live_view.py --repeats 5

Both runs use the same prompt, seed and settings; dcode's --json reports the draft's sampling
seconds (stdout goes to a file, so the JSON is clean while the view draws on the terminal). Runs
alternate view / no view so drift in machine load hits both equally; medians are compared.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import pty
import select
import statistics
import struct
import sys
import tempfile
import termios
import time
from pathlib import Path


def run(args: list[str], out: Path) -> float:
    """dcode ARGS with stdin/stderr on an 80x24 pty and stdout to `out`; the JSON's seconds."""
    pid, fd = pty.fork()
    if pid == 0:
        os.dup2(os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), 1)
        os.execve(sys.executable, [sys.executable, "-m", "dcode.cli", *args], {**os.environ, "TERM": "xterm-256color"})
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if select.select([fd], [], [], 0.2)[0]:
            try:
                if not os.read(fd, 65536):
                    break
            except OSError:
                break
    os.waitpid(pid, 0)
    os.close(fd)
    return float(json.loads(out.read_text())["seconds"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompt", default="a function that merges two sorted lists")
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--model", default=None)
    args = parser.parse_args()
    common = ["new", args.prompt, "--length", str(args.length), "--json", "--no-repair", "--seed", "1"]
    if args.model:
        common += ["--model", args.model]
    out = Path(tempfile.mkdtemp()) / "out.json"
    with_view, without = [], []
    for _ in range(args.repeats):
        with_view.append(run([*common, "--live", "--exit-when-done"], out))
        without.append(run([*common, "--no-live"], out))
    on, off = statistics.median(with_view), statistics.median(without)
    print(f"sampling seconds, median of {args.repeats}: view {on:.3f}, --no-live {off:.3f}")
    print(f"view cost: {100 * (on - off) / off:+.1f}%  (all runs: view {with_view}, no view {without})")


if __name__ == "__main__":
    main()
