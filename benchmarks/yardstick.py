"""The autoregressive yardstick at equal compute: train it to token milestones anywhere, score it here.

    python benchmarks/yardstick.py train --data .train/gpu --run .train/ar --device cuda --batch 32 \\
        --milestones 31400000,110000000 --minutes 5 --out OUT
    python benchmarks/yardstick.py evaluate OUT/ar-31.4M OUT/ar-110.0M

`train`: a model of dcode-tiny's size (TrainConfig's defaults) trained on next-token loss only, from
scratch, on the same data as dcode-tiny. Each time its tokens seen pass a milestone it is exported
(float16) to OUT/ar-<tokens>M, with whichever of its EMA and live weights has the lower validation
AR loss; if the time runs out first, what it has is exported to OUT/ar-<tokens>M too. Milestones
are the point: dcode-tiny's tokens seen (equal tokens) and the tokens an autoregressive step rate
buys in dcode-tiny's CPU time (equal CPU time; an AR step costs about a third of a BD step per
token on a CPU), which takes a GPU to spend on a benchmark. The run resumes from --run.

`evaluate`: each folder answers the python prompts of benchmarks/prompts.jsonl greedily, token by
token (dcode.bench.answers.answer_autoregressive: transformers' generate with its cache, the same
prompt template), and the shipped dcode-tiny answers them at its default decoding for comparison,
scored by dcode.bench's metrics: real code, key words, tokens per forward pass.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

import torch

from dcode.bench import PROMPTS, REGISTRY, python_prompts, with_family
from dcode.bench.answers import answer, answer_autoregressive
from dcode.models import EMBEDDED, load
from dcode.train.train import TrainConfig, Trainer

NEVER = 2**62  # an ar_tokens count no run reaches: autoregressive to the end


def label(tokens: int) -> str:
    """Folder name of an export at `tokens` tokens seen. Example: label(34_619_392) == 'ar-34.62M'."""
    return f"ar-{tokens / 1e6:.4g}M"


def export_best(trainer: Trainer, out: Path) -> dict:
    """Export the weights (EMA or live) with the lower validation AR loss; return what was written."""
    use_ema, ema, live = trainer.prefer_ema("valid_ar")
    folder = out / label(trainer.tokens)
    trainer.export(folder, ema=use_ema, dtype=torch.float16)
    record = {"folder": folder.name, "tokens": trainer.tokens, "steps": trainer.step, "seconds": round(trainer.seconds)}
    record.update(weights="ema" if use_ema else "live", **(ema if use_ema else live))
    print(json.dumps(record), flush=True)
    return record


def train(args: argparse.Namespace, config: TrainConfig) -> list[dict]:
    trainer = Trainer(args.data, args.run, replace(config, ar_tokens=NEVER, batch=args.batch), device=args.device)
    milestones = sorted(int(float(m)) for m in args.milestones.split(",") if m.strip())
    deadline = time.monotonic() + args.minutes * 60
    exported: list[dict] = []
    for milestone in milestones:
        if trainer.tokens >= milestone:  # passed in the same step as an earlier one, or before a resume
            continue
        trainer.fit(max(0.0, deadline - time.monotonic()) / 60, tokens=milestone)
        exported.append(export_best(trainer, args.out))
        if trainer.tokens < milestone:  # out of time: what it reached is the result
            break
    return exported


def evaluate(args: argparse.Namespace) -> dict[str, dict]:
    prompts = python_prompts(PROMPTS)[: args.limit or None]
    report: dict[str, dict] = {}
    for folder in args.folders:
        trained = json.loads((folder / "config.json").read_text()).get("dcode_training", {})
        scores = answer_autoregressive(folder, prompts, args.length)
        report[folder.name] = {"tokens_seen": trained.get("tokens_seen"), **scores}
    shipped = load(None)
    trained = json.loads((EMBEDDED / "config.json").read_text())["dcode_training"]
    config = with_family(REGISTRY["model-defaults"], shipped.facts.defaults)  # what `dcode new` runs
    report["dcode-tiny (its defaults)"] = {
        "tokens_seen": trained["tokens_seen"],
        **answer(shipped, prompts, args.length, config),
    }
    print(f"{len(prompts)} python prompts, canvas {args.length}, threads {torch.get_num_threads()}")
    print(f"{'model':<32}{'tokens':>10}{'TPF':>8}{'real code':>11}{'key words':>11}{'s/answer':>10}")
    for name, r in report.items():
        print(
            f"{name:<32}{r['tokens_seen'] / 1e6:>9.1f}M{r['tokens_per_forward']:>8.2f}"
            f"{r['real_code_rate']:>11.0%}{r['key_words_rate']:>11.0%}{r['wall_seconds'] / len(prompts):>10.2f}"
        )
    if args.json:
        summary = {"prompts": len(prompts), "length": args.length, "models": report}
        args.json.write_text(json.dumps(summary, indent=2) + "\n")
    return report


def main(argv: list[str] | None = None, config: TrainConfig | None = None) -> object:
    """`config`: the model and training settings (dcode-tiny's by default; the tests pass tiny ones)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train to token milestones and export at each")
    t.add_argument("--data", type=Path, default=Path(".train/data"))
    t.add_argument("--run", type=Path, required=True)
    t.add_argument("--out", type=Path, required=True)
    t.add_argument("--device", default="cpu")
    t.add_argument("--batch", type=int, default=TrainConfig.batch, help="rows of 256 tokens per step")
    t.add_argument("--milestones", required=True, help="comma-separated token counts, e.g. 31.4e6,110e6")
    t.add_argument("--minutes", type=float, required=True, help="wall-time limit")
    e = sub.add_parser("evaluate", help="score exported yardsticks against the shipped dcode-tiny")
    e.add_argument("folders", type=Path, nargs="+")
    e.add_argument("--length", type=int, default=256)
    e.add_argument("--limit", type=int, default=0, help="first N prompts only")
    e.add_argument("--threads", type=int, default=0)
    e.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.command == "train":
        return train(args, config or TrainConfig())
    if args.threads:
        torch.set_num_threads(args.threads)
    return evaluate(args)


if __name__ == "__main__":
    main()
