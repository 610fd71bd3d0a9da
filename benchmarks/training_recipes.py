"""Three ways to spend the same CPU time on a model of dcode-tiny's size and data, from scratch:

    python benchmarks/training_recipes.py --cpu-minutes 12 --threads 1
    python benchmarks/training_recipes.py --cpu-minutes 12 --threads 1 --json recipes.json

    autoregressive   next-token loss only, decoded token by token (greedy, transformers' generate
                     with its key/value cache): the quality yardstick, not a feature
    block-diffusion  the block-diffusion loss from the first step (BD3-LM from scratch)
    ar-then-bd       dcode-tiny's recipe: autoregressive for --ar-share of the time, then block diffusion

The budget is CPU seconds spent in training steps (time.process_time), so a recipe that shares the
machine with other work still gets the same compute. Each recipe trains in --runs/<name> with the
Trainer's own checkpoint and resumes there: rerun the same command and it continues up to the
budget (a finished one only evaluates). Then every model answers the python prompts of
benchmarks/prompts.jsonl on a 256-token canvas with repair off: the diffusion models one token per
pass and at threshold 0.9, the autoregressive one greedily. Reported: validation losses (live
weights) and dcode.bench's metrics (real code, key words, tokens per forward pass), as
benchmarks/sampling.py reports them. The shipped dcode-tiny is the last row, for reference
(it trained far longer; its tokens seen are in the row).
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
from dcode.models.base import Denoiser
from dcode.train.train import TrainConfig, Trainer

# Share of the budget dcode-tiny's recipe spends on autoregressive pretraining (its run: 6.5M of
# the first ~9M tokens were autoregressive, and an AR step costs about half a BD step per token).
AR_SHARE = 0.7
RECIPES = {"autoregressive": 1.0, "block-diffusion": 0.0, "ar-then-bd": AR_SHARE}
DIFFUSION_SETTINGS = ("one-per-pass", "threshold-0.9")  # dcode.bench's registry names
# dcode-tiny's model and data settings, with a warm-up that fits a budget of minutes (dcode-tiny's
# 200 steps would last longer than the whole run). The live weights are scored and exported: an
# average over 500 steps (dcode-tiny's EMA) would still be mostly the random start.
RECIPE_CONFIG = TrainConfig(warmup=20)
NEVER = 2**62  # an ar_tokens count no run reaches: autoregressive to the end


def train(
    data: Path, run: Path, budget: float, ar_share: float, config: TrainConfig, save_every: float = 300
) -> Trainer:
    """Train (or resume) one recipe until `budget` CPU seconds of steps (the Trainer counts them);
    the switch to block diffusion happens at the first step after ar_share * budget, and a
    two-phase recipe takes at least one block-diffusion step however soon the budget runs out (a
    slow first step on a busy machine can spend it all)."""
    run.mkdir(parents=True, exist_ok=True)
    switch = run / "switch.json"  # the token count where the phase switched, beside the checkpoint
    ar_tokens = NEVER if ar_share > 0 else 0
    if switch.exists() and (run / "checkpoint.pt").exists():
        ar_tokens = json.loads(switch.read_text())["ar_tokens"]
    trainer = Trainer(data, run, replace(config, ar_tokens=ar_tokens))
    trainer.model.train()
    saved = time.monotonic()
    two_phase = 0 < ar_share < 1
    while trainer.cpu_seconds < budget or (two_phase and trainer.phase == "ar"):
        if two_phase and trainer.phase == "ar" and trainer.cpu_seconds >= ar_share * budget:
            trainer.cfg = replace(trainer.cfg, ar_tokens=trainer.tokens)
            switch.write_text(json.dumps({"ar_tokens": trainer.tokens}) + "\n")
        trainer.one_step()
        if time.monotonic() - saved > save_every:
            trainer.save()
            saved = time.monotonic()
    trainer.save()
    return trainer


def evaluate(folder: Path, autoregressive: bool, prompts: list[str], length: int) -> dict[str, dict[str, float]]:
    if autoregressive:
        return {"greedy": answer_autoregressive(folder, prompts, length)}
    return diffusion_rows(load(str(folder)), prompts, length)


def diffusion_rows(model: Denoiser, prompts: list[str], length: int) -> dict[str, dict[str, float]]:
    """The diffusion models' rows: one token per pass and threshold 0.9, as dcode.bench runs them."""
    return {
        n: answer(model, prompts, length, with_family(REGISTRY[n], model.facts.defaults)) for n in DIFFUSION_SETTINGS
    }


def table(report: dict[str, dict]) -> str:
    header = (
        "recipe",
        "decoding",
        "cpu min",
        "tokens",
        "valid AR",
        "valid BD",
        "passes",
        "TPF",
        "real code",
        "key words",
    )
    lines = [f"{header[0]:<20}{header[1]:<15}" + "".join(f"{h:>10}" for h in header[2:])]
    for name, row in report.items():
        for decoding, r in row["decoding"].items():
            cpu, ar, bd = (
                "-" if row[key] is None else f"{row[key] / scale:.{digits}f}"
                for key, scale, digits in (("cpu_seconds", 60, 1), ("valid_ar", 1, 3), ("valid_bd", 1, 3))
            )
            lines.append(
                f"{name:<20}{decoding:<15}{cpu:>10}{row['tokens_seen'] / 1e6:>9.2f}M"
                f"{ar:>10}{bd:>10}{r['forward_passes']:>10}"
                f"{r['tokens_per_forward']:>10.2f}{r['real_code_rate']:>10.0%}{r['key_words_rate']:>10.0%}"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None, config: TrainConfig | None = None) -> dict[str, dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu-minutes", type=float, default=12.0, help="training budget of each recipe")
    parser.add_argument("--ar-share", type=float, default=AR_SHARE, help="ar-then-bd: share of the budget spent AR")
    parser.add_argument("--recipes", default=",".join(RECIPES), help="comma-separated subset")
    parser.add_argument("--data", type=Path, default=Path(".train/data"))
    parser.add_argument("--runs", type=Path, default=Path(".train/recipes"))
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--limit", type=int, default=0, help="first N prompts only")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--no-shipped", action="store_true", help="leave out the shipped dcode-tiny row")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    chosen = [r.strip() for r in args.recipes.split(",") if r.strip()]
    unknown = [r for r in chosen if r not in RECIPES]
    if unknown:
        parser.error(f"unknown recipe {unknown[0]!r} (choose from {', '.join(RECIPES)})")
    prompts = python_prompts(PROMPTS)[: args.limit or None]
    config = config or RECIPE_CONFIG
    budget = args.cpu_minutes * 60

    report: dict[str, dict] = {}
    for name in chosen:
        share = args.ar_share if name == "ar-then-bd" else RECIPES[name]
        trainer = train(args.data, args.runs / name, budget, share, config)
        folder = args.runs / name / "model"
        trainer.export(folder, ema=False)
        report[name] = {
            "cpu_seconds": trainer.cpu_seconds,
            "ar_tokens": min(trainer.cfg.ar_tokens, trainer.tokens),
            "tokens_seen": trainer.tokens,
            "steps": trainer.step,
            **trainer.validate(ema=False),
            "decoding": evaluate(folder, name == "autoregressive", prompts, args.length),
        }
        print(table({name: report[name]}).splitlines()[-1], flush=True)
    if not args.no_shipped:
        shipped = load(None)
        training = json.loads((EMBEDDED / "config.json").read_text())["dcode_training"]
        report["dcode-tiny shipped"] = {
            "cpu_seconds": None,
            "tokens_seen": int(training["tokens_seen"]),
            "valid_ar": None,
            "valid_bd": None,
            "decoding": diffusion_rows(shipped, prompts, args.length),
        }
    threads = torch.get_num_threads()
    print(
        f"\n{len(prompts)} python prompts, canvas {args.length}, threads {threads}, budget {args.cpu_minutes} CPU min"
    )
    print(table(report))
    if args.json:
        out = {"prompts": len(prompts), "length": args.length, "threads": threads, "cpu_minutes": args.cpu_minutes}
        args.json.write_text(json.dumps({**out, "recipes": report}, indent=2) + "\n")
    return report


if __name__ == "__main__":
    main()
