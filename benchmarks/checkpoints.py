"""Which weights (and decoding) to ship: model folders compared on requests nobody tunes on.

    python benchmarks/checkpoints.py dcode-tiny .train/distilled --prompts 100
    python benchmarks/checkpoints.py dcode-tiny --decode '{}' --decode '{"entropy_bound": 1.0}'

The public prompt set (benchmarks/prompts.jsonl) is what the issues measure, so choosing by it
would tune to it. This script uses two other sets: requests drawn from the training data's
validation split (held-out files, never trained on; each unit's prompt as the training data
phrased it, docstring-style), and the 60 user-style requests of benchmarks/dev_prompts.jsonl
(written for choosing; none is an eval prompt). Every model runs the same requests through `dcode
new`'s pipeline with its own defaults (or those plus each --decode) and no repair, scored by
dcode.bench's metrics as benchmarks/sampling.py is: tokens per pass, real code, key words.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer

from dcode.bench import custom, provenance, python_prompts, with_family
from dcode.bench.answers import answer
from dcode.bench.report import provenance_markdown
from dcode.models import load, resolve
from dcode.train import distill
from dcode.train.data import Examples

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
    parser.add_argument("--markdown", type=Path, default=None, help="also write the table, headed by how it was made")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    sets = {"validation": requests(args.data, args.prompts), "dev": dev_requests()[: args.dev]}
    decodes = [json.loads(d) for d in args.decode] or [{}]
    results: dict[str, dict[str, dict[str, float]]] = {}
    for name in args.models:
        model = load(name)
        for fields in decodes:
            row = f"{name} {json.dumps(fields)}" if fields else name
            config = with_family(custom(row, fields), model.facts.defaults)  # what `dcode new` runs with them
            results[row] = {label: answer(model, prompts, args.length, config) for label, prompts in sets.items()}
    counts = ", ".join(f"{len(p)} {label}" for label, p in sets.items())
    markdown = f"requests: {counts} (from {args.data} and {DEV.name}), canvas {args.length}, no repair\n\n"
    markdown += table(results, list(sets))
    print(markdown, end="")
    command = shlex.join(["python", "benchmarks/checkpoints.py", *(sys.argv[1:] if argv is None else argv)])
    measured = provenance(command, resolve(args.models[0])[0])  # the first model's weights
    if args.markdown:
        args.markdown.write_text(provenance_markdown(measured) + "\n" + markdown)
    if args.json:
        args.json.write_text(
            json.dumps({"provenance": measured, "requests": sets, "results": results}, indent=2) + "\n"
        )
    return results


def table(results: dict[str, dict[str, dict[str, float]]], sets: list[str]) -> str:
    """Markdown: one row per model and decoding, tokens per pass / real code / key words per request set."""
    head = ["model, decoding"] + [
        f"{label}: {what}" for label in sets for what in ("tokens/pass", "real code", "key words")
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row, by_set in results.items():
        cells = [
            f"{r['tokens_per_forward']:.2f} | {r['real_code_rate']:.0%} | {r['key_words_rate']:.0%}"
            for r in by_set.values()
        ]
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
