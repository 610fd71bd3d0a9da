"""--quantize measured: peak memory of a 3B load, ms per pass, and dcode-tiny's answers per quantisation.

Prints numbers (a benchmark, not a timed test) and writes them as JSON under --out:

  memory   peak resident memory (ru_maxrss) of `dcode new --json` in its own process, loading a
           random-weight checkpoint at Qwen2.5-3B's shape (hidden 2048, 36 layers, 16/2 heads,
           intermediate 11008, vocabulary 151936, tied head) in a released format (--family:
           qwen2 is dcode's own torch loader, a2d_qwen2_bd3lm transformers'), with none/int8/int4.
  speed    ms per forward pass, 1 row, random weights: the 0.5B shape (Qwen2.5-0.5B, a 32-token
           block over a 256-token cache) and SDAR-1.7B's (Qwen3-1.7B layers, a 4-token block over
           256), none/int8/int4, median of --repeats.
  agree    dcode-tiny's answers to the public prompts (benchmarks/prompts.jsonl) with int8 and int4
           against bfloat16's: identical answers, and answers that parse (dcode.syntax.find_issues).

  python benchmarks/quantize.py memory speed agree --out docs/benchmarks/quantize
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

KINDS = ("none", "int8", "int4")
ROOT = Path(__file__).resolve().parents[1]
# name -> (hidden, layers, heads, kv_heads, inner, vocab, block, cache): the shapes the issue names
SHAPES = {
    "qwen2.5-3b": (2048, 36, 16, 2, 11008, 151936, 4, 0),
    "qwen2.5-0.5b": (896, 24, 14, 2, 4864, 151936, 32, 256),
    "sdar-1.7b": (2048, 28, 16, 8, 6144, 151936, 4, 256),
}


def write(family: str, shape: str, folder: Path) -> str:
    """A random checkpoint of `family` at `shape` in bfloat16; the sha256 of its first weight file."""
    from dcode.testing import checkpoints

    hidden, layers, heads, kv, inner, vocab, block, _ = SHAPES[shape]
    size = replace(
        checkpoints.SIZES["100m"], hidden=hidden, layers=layers, heads=heads, kv_heads=kv, inner=inner,
        rows=vocab, tied_rows=vocab, block=block, dtype="bfloat16",
    )  # fmt: skip
    if not (folder / "config.json").exists():
        checkpoints.write(family, folder, size)
    first = sorted(folder.glob("*.safetensors"))[0]
    digest = hashlib.sha256()
    with first.open("rb") as f:
        digest.update(f.read(1 << 24))  # the header and the first 16 MB: enough to name the weights
    return digest.hexdigest()[:16]


def peak_rss(folder: Path, kind: str) -> dict[str, object]:
    """`dcode new --json` with --quantize `kind` in a child process; its peak RSS (MB) and seconds."""
    child = (
        "import resource, subprocess, sys, time; t = time.time();"
        "r = subprocess.run(sys.argv[1:], capture_output=True, text=True);"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, time.time() - t, r.returncode);"
        "sys.stderr.write(r.stderr[-400:])"
    )
    command = [
        sys.executable, "-m", "dcode.cli", "new", "a function that adds two numbers", "--model", str(folder),
        "--length", "8", "--no-repair", "--json", "--no-log", "--dtype", "bfloat16", "--quantize", kind,
    ]  # fmt: skip
    done = subprocess.run([sys.executable, "-c", child, *command], capture_output=True, text=True, check=True)
    kb, seconds, code = done.stdout.split()
    return {"kind": kind, "peak_rss_mb": round(int(kb) / 1024), "seconds": round(float(seconds), 1), "exit": int(code)}


def memory(out: Path, family: str, scratch: Path) -> dict[str, object]:
    folder = scratch / f"{family}-3b"
    weights = write(family, "qwen2.5-3b", folder)
    rows = [peak_rss(folder, kind) for kind in KINDS]
    base = rows[0]["peak_rss_mb"]
    for row in rows:
        row["of_bfloat16"] = round(row["peak_rss_mb"] / base, 2)  # type: ignore[operator]
        print(f"memory {family} 3B {row['kind']}: {row['peak_rss_mb']} MB peak ({row['of_bfloat16']:.0%} of none)")
    return {"family": family, "shape": "qwen2.5-3b", "weights_sha256_16mb": weights, "rows": rows}


def speed(shape: str, family: str, scratch: Path, repeats: int) -> dict[str, object]:
    import torch

    from dcode.models import load

    folder = scratch / f"{family}-{shape}"
    weights = write(family, shape, folder)
    *_, block, cached = SHAPES[shape]
    rows = []
    for kind in KINDS:
        model = load(str(folder), dtype=torch.bfloat16, quantize=kind)
        ids = torch.randint(3, 1000, (1, cached + block))
        cache = model.new_cache()
        times = []
        for _ in range(repeats + 1):
            if cache is not None:
                cache.crop(0)
                model(ids[:, :cached], cache)
            start = time.perf_counter()
            model(ids[:, cached:], cache) if cache is not None else model(ids)
            times.append((time.perf_counter() - start) * 1000)
        ms = statistics.median(times[1:])
        rows.append({"kind": kind, "ms_per_pass": round(ms, 1)})
        print(f"speed {shape} ({family}) block {block} over {cached}: {kind} {ms:.0f} ms")
        del model
    return {
        "shape": shape,
        "family": family,
        "block": block,
        "cached": cached,
        "weights_sha256_16mb": weights,
        "rows": rows,
    }


def agree(limit: int) -> dict[str, object]:
    from dcode.syntax import find_issues

    prompts = [json.loads(line) for line in (ROOT / "benchmarks" / "prompts.jsonl").read_text().splitlines()][:limit]
    answers: dict[str, list[str]] = {}
    for kind in KINDS:
        answers[kind] = []
        for p in prompts:
            command = [
                sys.executable, "-m", "dcode.cli", "new", p["prompt"], "--lang", p["lang"], "--json", "--no-log",
                "--dtype", "bfloat16", "--quantize", kind, "--no-repair",
            ]  # fmt: skip
            done = subprocess.run(command, capture_output=True, text=True)
            answers[kind].append(json.loads(done.stdout)["code"] if done.stdout else "")
    rows = []
    for kind in KINDS:
        same = sum(a == b for a, b in zip(answers[kind], answers["none"], strict=True))
        parses = sum(not find_issues(code, p["lang"]) for code, p in zip(answers[kind], prompts, strict=True))
        rows.append({"kind": kind, "identical_to_none": same, "parse": parses, "prompts": len(prompts)})
        print(f"agree dcode-tiny {kind}: {same}/{len(prompts)} identical to bfloat16, {parses} parse")
    return {"model": "dcode-tiny", "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("parts", nargs="+", choices=("memory", "speed", "agree"))
    parser.add_argument("--out", type=Path, default=Path("bench-results/quantize"))
    parser.add_argument("--family", default="qwen2", help="memory: the checkpoint format (qwen2, a2d_qwen2_bd3lm)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--limit", type=int, default=10, help="agree: the first N prompts")
    parser.add_argument("--scratch", type=Path, default=None, help="where the random checkpoints go (kept)")
    args = parser.parse_args()
    scratch = args.scratch or Path(tempfile.mkdtemp(prefix="dcode-quantize-"))
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())  # fmt: skip
    report: dict[str, object] = {
        "command": " ".join(["python", "benchmarks/quantize.py", *sys.argv[1:]]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
    }  # fmt: skip
    if "memory" in args.parts:
        report["memory"] = memory(args.out, args.family, scratch)
    if "speed" in args.parts:
        report["speed"] = [
            speed("qwen2.5-0.5b", "qwen2", scratch, args.repeats),
            speed("sdar-1.7b", "sdar", scratch, args.repeats),
        ]
    if "agree" in args.parts:
        report["agree"] = agree(args.limit)
    args.out.mkdir(parents=True, exist_ok=True)
    name = "-".join(args.parts) + (f"-{args.family}" if "memory" in args.parts else "")
    (args.out / f"{name}.json").write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
