"""Tokenized training data for dcode-tiny: build it once, then sample batches from it.

Owns: the on-disk arrays (one flat token array per field plus offsets), the example format
`<|prompt|> prompt <|code|> code <|eos|> <|pad|>...`, and batching for the autoregressive and the
block-diffusion phases. Knows nothing about the model.
"""

from __future__ import annotations

import random
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer

from dcode.train import corpus
from dcode.train.tokenizer import CODE, EOS, PAD, PROMPT, save_tokenizer, special_id, train_tokenizer

# Longest prompt kept, in tokens; longer docstrings are cut (prompts are short requests).
MAX_PROMPT = 48
# Longest unit kept for training, code plus EOS, in tokens.
MAX_CODE = 512
# Characters of unit code the tokenizer is trained on (a sample; more changes little).
TOKENIZER_SAMPLE_CHARS = 40_000_000


@dataclass(frozen=True)
class Examples:
    """Prompt and code token lists of many units, stored flat with offsets."""

    prompt_tokens: np.ndarray  # (P,) int32
    prompt_offsets: np.ndarray  # (N+1,) int64
    code_tokens: np.ndarray  # (C,) int32, each unit's code ends with EOS
    code_offsets: np.ndarray  # (N+1,) int64

    def __len__(self) -> int:
        return len(self.code_offsets) - 1

    def prompt(self, i: int) -> np.ndarray:
        return self.prompt_tokens[self.prompt_offsets[i] : self.prompt_offsets[i + 1]]

    def code(self, i: int) -> np.ndarray:
        return self.code_tokens[self.code_offsets[i] : self.code_offsets[i + 1]]

    def code_lengths(self) -> np.ndarray:
        return np.diff(self.code_offsets)

    def save(self, path: Path, compact: bool = False) -> None:
        """As .npz; compact: token ids as uint16, compressed (a third of the size, for carrying)."""
        arrays = {k: getattr(self, k) for k in self.__dataclass_fields__}
        if not compact:
            np.savez(path, **arrays)
            return
        for k in ("prompt_tokens", "code_tokens"):
            if arrays[k].size and int(arrays[k].max()) > np.iinfo(np.uint16).max:
                raise ValueError(f"{k} holds ids above 65535: they do not fit the compact format")
            arrays[k] = arrays[k].astype(np.uint16)
        np.savez_compressed(path, **arrays)

    @classmethod
    def load(cls, path: Path) -> Examples:
        """Either format; token ids come back as int32, offsets as int64."""
        with np.load(path) as arrays:
            return cls(
                **{
                    k: arrays[k].astype(np.int32 if k.endswith("tokens") else np.int64, copy=False)
                    for k in cls.__dataclass_fields__
                }
            )


def pack(data: Path, out: Path) -> None:
    """Copy a data folder in the compact format (tokenizer, train.npz, valid.npz): what a GPU
    machine is sent, well under the 64 MB that travel with the tree."""
    out.mkdir(parents=True, exist_ok=True)
    shutil.copytree(data / "tokenizer", out / "tokenizer", dirs_exist_ok=True)
    for split in ("train", "valid"):
        Examples.load(data / f"{split}.npz").save(out / f"{split}.npz", compact=True)


def flat(lists: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.zeros(len(lists) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(x) for x in lists])
    tokens = np.fromiter((t for x in lists for t in x), dtype=np.int32, count=int(offsets[-1]))
    return tokens, offsets


def encode_units(tokenizer: Tokenizer, units: list[corpus.Unit]) -> Examples:
    """Tokenize units, dropping those whose code does not fit MAX_CODE tokens with its EOS."""
    eos = special_id(tokenizer, EOS)
    prompts = tokenizer.encode_batch([u.prompt for u in units], add_special_tokens=False)
    codes = tokenizer.encode_batch([u.code for u in units], add_special_tokens=False)
    kept_prompts: list[list[int]] = []
    kept_codes: list[list[int]] = []
    for p, c in zip(prompts, codes, strict=True):
        if len(c.ids) + 1 > MAX_CODE:
            continue
        kept_prompts.append(p.ids[:MAX_PROMPT])
        kept_codes.append(c.ids + [eos])
    return Examples(*flat(kept_prompts), *flat(kept_codes))


def build(out: Path, vocab_size: int, include_packages: bool = True, tokenizer_from: Path | None = None) -> None:
    """Write out/tokenizer/, out/train.npz and out/valid.npz from the offline corpus. A tokenizer
    already in out/tokenizer/ is kept, else the one in `tokenizer_from` (a model folder: the
    shipped model's, so its training can go on) is copied there, else a new one is trained: the
    examples can be rebuilt (new prompts, more packages) for a model trained on those ids."""
    out.mkdir(parents=True, exist_ok=True)
    if tokenizer_from is not None and not (out / "tokenizer" / "tokenizer.json").exists():
        (out / "tokenizer").mkdir(exist_ok=True)
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(tokenizer_from / name, out / "tokenizer" / name)
    seen: set[str] = set()  # shared, so validation holds no copy of a training unit
    splits = {s: list(corpus.iter_units(s, include_packages, seen)) for s in ("train", "valid")}
    kept = out / "tokenizer" / "tokenizer.json"
    if kept.exists():
        tokenizer = Tokenizer.from_file(str(kept))
    else:
        sample, size = [], 0
        for unit in random.Random(0).sample(splits["train"], len(splits["train"])):
            if size > TOKENIZER_SAMPLE_CHARS:
                break
            sample.append(unit.code)
            size += len(unit.code)
        tokenizer = train_tokenizer(sample, vocab_size)
        save_tokenizer(tokenizer, out / "tokenizer")
    for split, units in splits.items():
        encode_units(tokenizer, units).save(out / f"{split}.npz")


class TrainingBatches:
    """Random batches of formatted examples for both training phases."""

    def __init__(self, examples: Examples, tokenizer: Tokenizer, seed: int) -> None:
        self.examples = examples
        self.rng = np.random.default_rng(seed)
        self.ids = {t: special_id(tokenizer, t) for t in (PAD, EOS, PROMPT, CODE)}
        self.lengths = examples.code_lengths()

    def sequence(self, i: int) -> tuple[np.ndarray, int]:
        """<|prompt|> prompt <|code|> code <|eos|>, and where the code starts."""
        head = np.concatenate([[self.ids[PROMPT]], self.examples.prompt(i), [self.ids[CODE]]]).astype(np.int64)
        return np.concatenate([head, self.examples.code(i)]), len(head)

    def packed(self, batch: int, context: int) -> torch.Tensor:
        """Autoregressive phase: examples concatenated and cut into (batch, context) rows."""
        need = batch * context
        parts, size = [], 0
        while size < need:
            seq, _ = self.sequence(int(self.rng.integers(len(self.examples))))
            parts.append(seq)
            size += len(seq)
        stream = np.concatenate(parts)[:need]
        return torch.from_numpy(stream).view(batch, context)

    def canvases(self, batch: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Block-diffusion phase: examples whose code fits `length` answer tokens, PAD-padded to the row length.

        Returns ids (B, T) and answer (B, T) bool, True on the code/EOS/pad positions the model
        must learn to fill (the prompt is never masked).
        """
        fits = np.flatnonzero(self.lengths <= length)
        picks = self.rng.choice(fits, size=batch)
        rows = [self.sequence(int(i)) for i in picks]
        width = max(start for _, start in rows) + length
        ids = torch.full((batch, width), self.ids[PAD], dtype=torch.long)
        answer = torch.zeros((batch, width), dtype=torch.bool)
        for b, (seq, start) in enumerate(rows):
            ids[b, : len(seq)] = torch.from_numpy(seq)
            answer[b, start:] = True
        return ids, answer
