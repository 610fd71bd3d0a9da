"""What the live view costs: sampling wall time with the view on a real pseudo-terminal vs --no-live.

    python benchmarks/live_view.py --repeats 5                # one short request
    python benchmarks/live_view.py --prompts 6 --repeats 3    # six requests of the eval set, summed

Both runs use the same prompt, seed and settings; dcode's --json reports the draft's sampling
seconds, and the process's wall time is measured around it (stdout goes to a file, so the JSON is
clean while the view draws on the terminal). Runs alternate view / no view so drift in machine load
hits both equally; medians are compared.
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

from dcode.bench import python_prompts

PROMPTS = Path(__file__).resolve().parent / "prompts.jsonl"


def run(args: list[str], out: Path) -> tuple[float, float]:
    """dcode ARGS with stdin/stderr on an 80x24 pty and stdout to `out`: the JSON's sampling
    seconds, and the process's wall time (start-up, model load and the view included)."""
    began = time.perf_counter()
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
    return float(json.loads(out.read_text())["seconds"]), time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompt", default="a function that merges two sorted lists")
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--model", default=None)
    parser.add_argument("--prompts", type=int, default=0, help="use the first N python prompts of the eval set")
    args = parser.parse_args()
    prompts = [args.prompt]
    if args.prompts:
        prompts = python_prompts(PROMPTS)[: args.prompts]
    out = Path(tempfile.mkdtemp()) / "out.json"
    with_view, without = [], []  # per repeat: (sampling seconds, process seconds) summed over the prompts
    for _ in range(args.repeats):
        totals = {"view": [0.0, 0.0], "plain": [0.0, 0.0]}
        for prompt in prompts:
            common = ["new", prompt, "--length", str(args.length), "--json", "--no-repair", "--seed", "1"]
            common += ["--model", args.model] if args.model else []
            for kind, flags in (("view", ["--live", "--exit-when-done"]), ("plain", ["--no-live"])):
                sampled, wall = run([*common, *flags], out)
                totals[kind][0] += sampled
                totals[kind][1] += wall
        with_view.append(tuple(totals["view"]))
        without.append(tuple(totals["plain"]))
    print(f"{len(prompts)} prompt(s), {args.repeats} repeats, view on a real 80x24 pseudo-terminal vs --no-live")
    for i, what in enumerate(["sampling seconds", "process wall seconds"]):
        view, plain = [r[i] for r in with_view], [r[i] for r in without]
        on, off = statistics.median(view), statistics.median(plain)
        print(f"{what}, median of {args.repeats}: view {on:.3f}, --no-live {off:.3f}")
        print(f"  view cost: {100 * (on - off) / off:+.1f}%")
        print(f"  all runs: view {[round(v, 3) for v in view]}, no view {[round(v, 3) for v in plain]}")


if __name__ == "__main__":
    main()
