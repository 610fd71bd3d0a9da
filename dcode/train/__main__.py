"""`python -m dcode.train`: build the data, train (resumable), export dcode-tiny.

python -m dcode.train data                 # corpus -> .train/data (dcode-tiny's tokenizer + arrays)
python -m dcode.train fit --minutes 60     # resumes from .train/run/checkpoint.pt
python -m dcode.train export               # EMA weights -> dcode/assets/dcode-tiny
python -m dcode.train pack --out .train/gpu # the data, compact, for a GPU machine (benchmarks/gpu_train.sh)
python -m dcode.train distill --out .train/distill   # the model's own answers as data (docs/dcode-tiny.md)
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from dcode.models import EMBEDDED

if TYPE_CHECKING:
    from dcode.train.train import TrainConfig


def command_line() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m dcode.train")
    parser.add_argument("command", choices=["data", "fit", "export", "pack", "distill"])
    parser.add_argument("--data", type=Path, default=Path(".train/data"))
    parser.add_argument("--run", type=Path, default=Path(".train/run"))
    parser.add_argument("--out", type=Path, default=EMBEDDED)
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--requests", type=int, default=3000, help="distill: requests to ask --model")
    parser.add_argument("--model", type=Path, default=EMBEDDED, help="distill: the model whose answers are kept")
    parser.add_argument(
        "--seed", type=int, default=1, help="distill: which requests are drawn (and human units mixed in)"
    )
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument(
        "--new-tokenizer",
        action="store_true",
        help="data: train a tokenizer (--vocab) instead of using the shipped model's, whose ids it keeps",
    )
    parser.add_argument("--ar-tokens", type=int, default=None, help="switch to block diffusion after this many tokens")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = all cores)")
    parser.add_argument("--device", default="cpu", help="where to train: cpu, cuda, cuda:1, ...")
    parser.add_argument("--init", type=Path, default=None, help="a model folder to start a new run from")
    parser.add_argument("--batch", type=int, default=None, help="rows of `context` tokens per step")
    parser.add_argument("--canvases", default=None, help="BD answer lengths, e.g. 64,128,256,512")
    parser.add_argument("--certainty", type=float, default=None, help="fit: certainty-forcing weight (dParallel)")
    parser.add_argument(
        "--lr", type=float, default=None, help="fit: peak learning rate of both phases (give it again on resuming)"
    )
    parser.add_argument("--t-min", type=float, default=None, help="fit: lowest masking rate of a BD block")
    parser.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], default="float32", help="export")
    parser.add_argument(
        "--weights",
        choices=["ema", "live", "best"],
        default="best",
        help="export the EMA weights, the live ones, or whichever has the lower validation BD loss",
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = command_line()
    args = parser.parse_args(argv)

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.command == "data":
        from dcode.train.data import build

        build(args.data, args.vocab, tokenizer_from=None if args.new_tokenizer else EMBEDDED)
        return
    if args.command == "pack":
        if args.out == EMBEDDED:
            parser.error("pack needs --out FOLDER (where the compact data goes)")
        from dcode.train.data import pack

        pack(args.data, args.out)
        return
    if args.command == "distill":
        if args.out == EMBEDDED:
            parser.error("distill needs --out FOLDER (where its data folder goes)")
        from dcode.models import load
        from dcode.train.distill import build as distill

        distill(load(str(args.model)), args.data, args.out, args.requests, seed=args.seed)
        return
    from dcode.train.train import Trainer

    trainer = Trainer(args.data, args.run, train_config(args), device=args.device, init=args.init)
    if args.command == "fit":
        trainer.fit(args.minutes)
    else:
        ema = args.weights == "ema"
        if args.weights == "best":
            ema, on_ema, on_live = trainer.prefer_ema("valid_bd")
            print(f"validation BD loss: EMA {on_ema['valid_bd']:.4f}, live {on_live['valid_bd']:.4f}")
        trainer.export(args.out, ema=ema, dtype=getattr(torch, args.dtype))


def train_config(args: argparse.Namespace) -> TrainConfig:
    """TrainConfig's defaults with the fit options given on the command line."""
    from dcode.train.train import TrainConfig

    lengths = tuple(int(c) for c in args.canvases.split(",")) if args.canvases is not None else None
    given = {
        "ar_tokens": args.ar_tokens,
        "batch": args.batch,
        "answer_lengths": lengths,
        "certainty": args.certainty,
        "t_min": args.t_min,
        "lr": args.lr,
        "bd_lr": args.lr,
    }
    return replace(TrainConfig(), **{field: value for field, value in given.items() if value is not None})


if __name__ == "__main__":
    main()
