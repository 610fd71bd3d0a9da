"""Wall time of a short `dcode new` from a cold process, and what the imports alone cost.

    python benchmarks/startup.py              # 3 repeats of each, medians
    python benchmarks/startup.py --repeats 5 --json startup.json

The target is <= 3 s for a short request (128-token canvas) on 2 cores, model load included.
Each row is a fresh process, as a user's shell starts it; the rows before the `dcode new` ones
are the floor under it: the interpreter, torch, and what dcode-tiny's load needs beside it
(safetensors, tokenizers). The transformers row is what a start on transformers' Qwen2 module
would pay: dcode-tiny runs on dcode.models.native instead; other Qwen2-layer checkpoints load
with it.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from dcode.bench import provenance
from dcode.models import EMBEDDED

REQUEST = "a function that merges two sorted lists"
ROWS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "import torch": [sys.executable, "-c", "import torch"],
    "import torch + safetensors + tokenizers": [
        sys.executable,
        "-c",
        "import torch, safetensors.torch, tokenizers",
    ],
    "import torch + transformers Qwen2": [
        sys.executable,
        "-c",
        "import torch; from transformers.models.qwen2 import modeling_qwen2",
    ],
    "dcode new --length 128 --no-repair": ["dcode", "new", REQUEST, "--length", "128", "--no-repair", "-q"],
    "dcode new --length 128 (repair on)": ["dcode", "new", REQUEST, "--length", "128", "-q"],
}


def wall(command: list[str]) -> float:
    began = time.perf_counter()
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    dcode = shutil.which("dcode", path=str(Path(sys.executable).parent)) or shutil.which("dcode")
    if dcode is None:
        parser.error("the dcode command is not installed in this environment")
    results = {}
    for name, command in ROWS.items():
        command = [dcode, *command[1:]] if command[0] == "dcode" else command
        times = [wall(command) for _ in range(args.repeats)]
        results[name] = {"median_s": statistics.median(times), "runs_s": times}
        print(f"{name:<38}{statistics.median(times):>8.2f} s   (runs: {', '.join(f'{t:.2f}' for t in times)})")
    if args.json:
        measured = provenance(shlex.join(["python", "benchmarks/startup.py", *sys.argv[1:]]), EMBEDDED)
        report = {"provenance": measured, "cpus": os.cpu_count(), "rows": results}
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
