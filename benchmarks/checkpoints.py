"""Which weights to ship: model folders compared on requests from the validation split.

    python benchmarks/checkpoints.py dcode/assets/dcode-tiny /tmp/candidate --prompts 100

The public prompt set (benchmarks/prompts.jsonl) is what the issues measure, so choosing weights
by it would tune to it. This script draws its requests from the training data's validation split
(held-out files, never trained on): each unit's prompt as the training data phrased it. Every
model runs the same requests through `dcode new`'s pipeline with its own defaults and no repair;
it reports real code (at least two non-blank lines that compile()), key words and tokens per
pass, as benchmarks/sampling.py does.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer

sys.path.insert(0, str(Path(__file__).parent))  # sampling.py beside this file

from sampling import run  # noqa: E402

from dcode.config import SamplerConfig  # noqa: E402
from dcode.models import apply_defaults, load  # noqa: E402
from dcode.train import distill  # noqa: E402
from dcode.train.data import Examples  # noqa: E402


def requests(data: Path, count: int, seed: int = 0) -> list[str]:
    """`count` distinct prompts of data's validation split, drawn with a fixed seed."""
    tokenizer = Tokenizer.from_file(str(data / "tokenizer" / "tokenizer.json"))
    return distill.requests(Examples.load(data / "valid.npz"), tokenizer, count, seed)


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", help="model folders (or dcode-tiny)")
    parser.add_argument("--data", type=Path, default=Path(".train/data"))
    parser.add_argument("--prompts", type=int, default=100)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    prompts = requests(args.data, args.prompts)
    results: dict[str, dict[str, float]] = {}
    for name in args.models:
        model = load(name)
        config = apply_defaults(SamplerConfig(), model.facts.defaults, ())  # what `dcode new` runs
        results[name] = run(model, prompts, args.length, config)
    print(f"{len(prompts)} validation requests from {args.data}, canvas {args.length}, no repair")
    print(f"{'model':<40}{'TPF':>8}{'real code':>11}{'key words':>11}")
    for name, r in results.items():
        print(f"{name:<40}{r['tokens_per_forward']:>8.2f}{r['real_code_rate']:>11.0%}{r['key_words_rate']:>11.0%}")
    if args.json:
        args.json.write_text(json.dumps({"prompts": prompts, "results": results}, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
