"""Which weights (and decoding) to ship: model folders compared on requests nobody tunes on.

    python benchmarks/checkpoints.py dcode/assets/dcode-tiny /tmp/candidate --prompts 100
    python benchmarks/checkpoints.py dcode-tiny --decode '{}' --decode '{"entropy_bound": 1.0}'

The public prompt set (benchmarks/prompts.jsonl) is what the issues measure, so choosing by it
would tune to it. This script uses two other sets: requests drawn from the training data's
validation split (held-out files, never trained on; each unit's prompt as the training data
phrased it, docstring-style), and the 60 user-style requests of benchmarks/dev_prompts.jsonl
(written for choosing; none is an eval prompt). Every model runs the same requests through `dcode
new`'s pipeline with its own defaults (or those plus each --decode) and no repair; it reports
tokens per pass, real code (at least two non-blank lines that compile()) and key words, as
benchmarks/sampling.py does.
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

from dcode.bench import python_prompts  # noqa: E402
from dcode.config import SamplerConfig, merge_family_defaults  # noqa: E402
from dcode.models import load  # noqa: E402
from dcode.train import distill  # noqa: E402
from dcode.train.data import Examples  # noqa: E402

DEV = Path(__file__).with_name("dev_prompts.jsonl")


def requests(data: Path, count: int, seed: int = 0) -> list[str]:
    """`count` distinct prompts of data's validation split, drawn with a fixed seed."""
    tokenizer = Tokenizer.from_file(str(data / "tokenizer" / "tokenizer.json"))
    return distill.requests(Examples.load(data / "valid.npz"), tokenizer, count, seed)


def dev_requests() -> list[str]:
    """The user-style requests written for choosing (benchmarks/dev_prompts.jsonl, not the eval set)."""
    return python_prompts(DEV)


def main(argv: list[str] | None = None) -> dict[str, dict[str, dict[str, float]]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", help="model folders (or dcode-tiny)")
    parser.add_argument("--data", type=Path, default=Path(".train/data"))
    parser.add_argument("--prompts", type=int, default=100, help="validation requests")
    parser.add_argument("--dev", type=int, default=None, help="the first N dev requests (default: all 60)")
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument(
        "--decode",
        action="append",
        default=[],
        help="sampler fields over the model's defaults, as JSON, e.g. '{\"entropy_bound\": 1.0}' (repeatable)",
    )
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    sets = {"validation": requests(args.data, args.prompts), "dev": dev_requests()[: args.dev]}
    decodes = [json.loads(d) for d in args.decode] or [{}]
    results: dict[str, dict[str, dict[str, float]]] = {}
    for name in args.models:
        model = load(name)
        for fields in decodes:
            # what `dcode new` runs with these options
            config = merge_family_defaults(SamplerConfig(**fields), fields, model.facts.defaults)
            row = f"{name} {json.dumps(fields)}" if fields else name
            results[row] = {label: run(model, prompts, args.length, config) for label, prompts in sets.items()}
    counts = ", ".join(f"{len(p)} {label}" for label, p in sets.items())
    print(f"requests: {counts} (from {args.data} and {DEV.name}), canvas {args.length}, no repair")
    head = "".join(f"{label + ': TPF':>18}{'real':>7}{'words':>7}" for label in sets)
    print(f"{'model, decoding':<56}{head}")
    for row, by_set in results.items():
        cells = "".join(
            f"{r['tokens_per_forward']:>18.2f}{r['real_code_rate']:>7.0%}{r['key_words_rate']:>7.0%}"
            for r in by_set.values()
        )
        print(f"{row:<56}{cells}")
    if args.json:
        args.json.write_text(json.dumps({"requests": sets, "results": results}, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
