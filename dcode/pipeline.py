"""`new` (and later edit / repair) as one stream of events: sampler steps, then a Finished record.

Owns: turning a request into a canvas (prompt template, chat template, masks), decoding the
answer, and the counters a report needs. Knows nothing about argv, the environment or the
terminal; consumers (CLI, live view, benchmarks) iterate the same stream.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources

import torch

from dcode.config import SamplerConfig
from dcode.models.base import Denoiser
from dcode.sampler import Step, denoise, trim_answer


class InputError(ValueError):
    """A request the model cannot serve (too long, empty): a usage error, reported in one line."""


@dataclass(frozen=True)
class Finished:
    code: str  # the answer, trailing end/pad tokens removed
    prompt_tokens: int
    tokens: int  # answer tokens kept
    canvas: int  # answer positions the sampler had to fill
    forward: int  # forward passes
    seconds: float  # sampling wall time

    @property
    def tokens_per_forward(self) -> float:
        return self.tokens / self.forward if self.forward else 0.0

    def metadata(self) -> dict[str, float | int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "tokens": self.tokens,
            "canvas": self.canvas,
            "forward_passes": self.forward,
            "tokens_per_forward": round(self.tokens_per_forward, 3),
            "seconds": round(self.seconds, 3),
            "tokens_per_second": round(self.tokens / self.seconds, 1) if self.seconds else 0.0,
        }


Event = Step | Finished


def template(name: str) -> str:
    """A prompt template shipped in dcode/prompts (the repo's top-level prompts/ folder)."""
    return resources.files("dcode.prompts").joinpath(f"{name}.txt").read_text(encoding="utf-8")


def prompt_ids(model: Denoiser, request: str, language: str) -> list[int]:
    """The request in the model's prompt template and chat template, as token ids."""
    text = template(model.facts.prompt).format(request=request.strip(), language=language).strip()
    tokenizer = model.tokenizer
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
        )
    return list(tokenizer.encode(text, add_special_tokens=False))


def decode(model: Denoiser, ids: list[int]) -> str:
    return str(model.tokenizer.decode(ids, skip_special_tokens=False))


def answer_text(model: Denoiser, canvas: torch.Tensor, start: int) -> tuple[str, int]:
    """Decoded answer and its token count: up to the first end token, pads and masks dropped."""
    facts = model.facts
    ids = trim_answer(canvas[start:], facts.eos_ids, frozenset({facts.pad_id, facts.mask_id}))
    return decode(model, ids), len(ids)


def check_length(model: Denoiser, prompt_tokens: int, length: int) -> None:
    limit = model.facts.max_length
    if length < 1:
        raise InputError("--length must be at least 1 token")
    if prompt_tokens + length > limit:
        raise InputError(
            f"--length {length} plus the {prompt_tokens}-token prompt exceeds the model's "
            f"context of {limit} tokens (at most {max(0, limit - prompt_tokens)} fit)"
        )


def new(model: Denoiser, request: str, language: str, length: int, config: SamplerConfig) -> Iterator[Event]:
    """Generate a whole file for `request`: every sampler step, then Finished."""
    if not request.strip():
        raise InputError("the prompt is empty")
    ids = prompt_ids(model, request, language)
    check_length(model, len(ids), length)
    canvas = torch.tensor(ids + [model.facts.mask_id] * length, dtype=torch.long)
    began = time.perf_counter()
    last: Step | None = None
    for last in denoise(model, canvas, len(ids), config):
        yield last
    assert last is not None
    code, kept = answer_text(model, last.canvas, len(ids))
    yield Finished(
        code=code.strip("\n") + "\n" if code.strip() else "",
        prompt_tokens=len(ids),
        tokens=kept,
        canvas=length,
        forward=last.forward,
        seconds=time.perf_counter() - began,
    )


def report_json(finished: Finished, extra: dict[str, object]) -> str:
    return json.dumps({"code": finished.code, **extra, **finished.metadata()}, indent=2)
