"""Self-distillation, the last stage of dcode-tiny's recipe: the model's own answers as training data.

A block-diffusion model commits several tokens in one pass only where it is sure of each of them;
trained on human code, which it cannot predict that surely, dcode-tiny rarely is (about one token
per pass at threshold 0.7). Fine-tuned on its own greedy answers to training requests, kept only
when they are real code and mixed with as many human units, it grows sure of what it would write
anyway and commits more per pass at the same quality: the idea of dParallel's certainty-forcing
distillation (Chen et al., 2025), whose entropy term `fit --certainty` adds to the block-diffusion
loss. Measured in docs/dcode-tiny.md.

Owns: drawing requests from a data folder's split, sampling the model's answers through `dcode
new`'s pipeline (one token per pass, greedy, no repair), and writing a data folder of those answers
plus human units for `python -m dcode.train fit`. Knows nothing about the training loop.
"""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

from tokenizers import Tokenizer

from dcode import flows
from dcode.config import SamplerConfig
from dcode.events import Finished, drain
from dcode.localfill import LocalFiller
from dcode.models.base import Denoiser
from dcode.syntax import is_real_code
from dcode.train.corpus import Unit
from dcode.train.data import Examples, encode_units, flat

LONGEST_REQUEST = 200  # characters: longer prompts are whole module docstrings, not requests
# How the answers are sampled: one token per pass left to right, greedy, the model's most careful
# decoding, which the verify rule writes in fewer passes (left to right writes more real code on the
# validation and dev requests than one per pass by confidence: docs/dcode-tiny.md).
LEFT_TO_RIGHT = SamplerConfig(rule="verify")


def requests(examples: Examples, tokenizer: Tokenizer, count: int, seed: int) -> list[str]:
    """`count` distinct prompts of examples (up to LONGEST_REQUEST characters), in an order drawn
    with `seed`."""
    order = list(range(len(examples)))
    random.Random(seed).shuffle(order)
    out: dict[str, None] = {}
    for i in order:
        text = tokenizer.decode(examples.prompt(i).tolist(), skip_special_tokens=False).strip()
        if text and len(text) <= LONGEST_REQUEST:
            out[text] = None
        if len(out) == count:
            break
    return list(out)


def join(parts: Sequence[tuple[Examples, Sequence[int]]]) -> Examples:
    """The chosen units of several Examples, in order, as one."""
    prompts = [ex.prompt(i).tolist() for ex, chosen in parts for i in chosen]
    codes = [ex.code(i).tolist() for ex, chosen in parts for i in chosen]
    return Examples(*flat(prompts), *flat(codes))


def answer(model: Denoiser, request: str, length: int, config: SamplerConfig) -> str:
    """The model's answer to request as `dcode new --no-repair` writes it with config."""
    events = flows.new(LocalFiller(model, config), request, "python", length, repair_rounds=0)
    return drain(events, result=Finished).code


def build(
    model: Denoiser,
    data: Path,
    out: Path,
    count: int,
    length: int = 256,
    seed: int = 1,
    log: Callable[[str], None] = print,
    config: SamplerConfig = LEFT_TO_RIGHT,
) -> tuple[int, int]:
    """Ask the model `count` requests from data's train split, keep its real-code answers, and write
    out/ (tokenizer, train.npz: those answers plus as many human train units, valid.npz: data's
    own). Answers go to out/answers.jsonl as they come, so a stopped run resumes where it was.
    Returns (answers kept, requests asked)."""
    tokenizer = Tokenizer.from_file(str(data / "tokenizer" / "tokenizer.json"))
    train = Examples.load(data / "train.npz")
    out.mkdir(parents=True, exist_ok=True)
    shutil.copytree(data / "tokenizer", out / "tokenizer", dirs_exist_ok=True)
    shutil.copy(data / "valid.npz", out / "valid.npz")
    # 1) the model's answers, appended one line each
    path = out / "answers.jsonl"
    done = {row["request"]: row for row in map(json.loads, path.read_text().splitlines())} if path.exists() else {}
    with path.open("a", encoding="utf-8") as file:
        for request in requests(train, tokenizer, count, seed):
            if request in done:
                continue
            code = answer(model, request, length, config)
            done[request] = {"request": request, "code": code, "real": is_real_code(code)}
            file.write(json.dumps(done[request]) + "\n")
            file.flush()
            if len(done) % 100 == 0:
                log(f"{len(done)} requests, {sum(r['real'] for r in done.values())} real-code answers")
    # 2) the kept answers plus as many human units, as a data folder
    kept = [
        Unit(r["request"], r["code"].rstrip("\n") + "\n", "function", "own answer") for r in done.values() if r["real"]
    ]
    own = encode_units(tokenizer, kept)
    human = random.Random(seed + 1).sample(range(len(train)), min(len(own), len(train)))
    join([(own, range(len(own))), (train, human)]).save(out / "train.npz")
    log(f"{out}: {len(own)} own answers (of {len(done)} requests) + {len(human)} human units")
    return len(own), len(done)
