"""Decoding speed and real-code rate of one model under several commit rules, in one process.

    python benchmarks/sampling.py                      # dcode-tiny, python prompts, 256-token canvas
    python benchmarks/sampling.py --limit 5 --json out.json

For each setting it runs every prompt through the same pipeline the CLI uses and reports forward
passes, tokens per forward (TPF), tok/s, wall time and the share of outputs that are real code
(at least two non-blank lines that compile()). The one-token-per-pass schedule is the baseline
measured in the same run; ratios are against it.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from dataclasses import replace
from pathlib import Path

import torch

from dcode import pipeline
from dcode.config import SamplerConfig
from dcode.models import load

PROMPTS = Path(__file__).with_name("prompts.jsonl")
SETTINGS = {
    "one-per-pass": SamplerConfig(rule="schedule"),
    "threshold-0.9": SamplerConfig(rule="threshold", threshold=0.9),
    "threshold-0.7": SamplerConfig(rule="threshold", threshold=0.7),
    "entropy-bound": SamplerConfig(rule="entropy-bound", entropy_bound=0.1),
}


def is_real_code(code: str) -> bool:
    """At least two non-blank lines that compile() accepts (an empty output compiles but is not code)."""
    if sum(1 for line in code.splitlines() if line.strip()) < 2:
        return False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(code, "<bench>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return False
    return True


def run(model, prompts: list[str], length: int, config: SamplerConfig) -> dict[str, float]:
    forwards = tokens = real = 0
    seconds = 0.0
    for prompt in prompts:
        began = time.perf_counter()
        events = pipeline.new(model, prompt, "python", length, config, repair_rounds=0)
        finished = next(e for e in events if isinstance(e, pipeline.Finished))
        seconds += time.perf_counter() - began
        forwards += finished.forward
        tokens += finished.tokens
        real += is_real_code(finished.code)
    return {
        "prompts": len(prompts),
        "forward_passes": forwards,
        "tokens": tokens,
        "tokens_per_forward": tokens / max(1, forwards),
        "tokens_per_second": tokens / seconds if seconds else 0.0,
        "wall_seconds": seconds,
        "real_code_rate": real / len(prompts),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=None)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--no-cache", action="store_true")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = [json.loads(line) for line in PROMPTS.read_text().splitlines() if line.strip()]
    prompts = [r["prompt"] for r in rows if r["lang"] == "python"]
    if args.limit:
        prompts = prompts[: args.limit]
    model = load(args.model)
    results = {}
    for name, config in SETTINGS.items():
        config = replace(config, cache=not args.no_cache)
        results[name] = run(model, prompts, args.length, config)
    base = results["one-per-pass"]
    threads = torch.get_num_threads()
    print(f"model {model.facts.name}, {len(prompts)} python prompts, canvas {args.length}, threads {threads}")
    header = ("setting", "passes", "tokens", "TPF", "tok/s", "wall s", "real code", "speed-up")
    print(f"{header[0]:<15}" + "".join(f"{h:>9}" for h in header[1:]))
    for name, r in results.items():
        speedup = r["tokens_per_second"] / base["tokens_per_second"] if base["tokens_per_second"] else 0
        print(
            f"{name:<15}{r['forward_passes']:>9}{r['tokens']:>9}{r['tokens_per_forward']:>9.2f}"
            f"{r['tokens_per_second']:>9.1f}{r['wall_seconds']:>9.1f}{r['real_code_rate']:>9.0%}{speedup:>8.2f}x"
        )
    if args.json:
        report = {"model": model.facts.name, "length": args.length, "threads": threads, "results": results}
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
