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
from dcode.repair import Repaired, RepairRound, repair
from dcode.sampler import Step, denoise, trim_answer


class InputError(ValueError):
    """A request the model cannot serve (too long, empty): a usage error, reported in one line."""


@dataclass(frozen=True)
class Finished:
    code: str  # the answer, trailing end/pad tokens removed, repaired if repair ran
    prompt_tokens: int
    tokens: int  # answer tokens kept by the draft
    canvas: int  # answer positions the sampler had to fill
    forward: int  # forward passes of the draft
    seconds: float  # sampling wall time of the draft
    repair: Repaired | None = None  # what the repair pass did (None: off or nothing to check)

    @property
    def tokens_per_forward(self) -> float:
        return self.tokens / self.forward if self.forward else 0.0

    @property
    def syntax_errors(self) -> int | None:
        """Issues left in the code (None when it was not checked)."""
        return self.repair.issues_after if self.repair is not None else None

    def metadata(self) -> dict[str, object]:
        out: dict[str, object] = {
            "prompt_tokens": self.prompt_tokens,
            "tokens": self.tokens,
            "canvas": self.canvas,
            "forward_passes": self.forward,
            "tokens_per_forward": round(self.tokens_per_forward, 3),
            "seconds": round(self.seconds, 3),
            "tokens_per_second": round(self.tokens / self.seconds, 1) if self.seconds else 0.0,
        }
        if self.repair is not None:
            out["repair"] = repair_metadata(self.repair)
        return out


def repair_metadata(done: Repaired) -> dict[str, object]:
    return {
        "issues_before": done.issues_before,
        "issues_after": done.issues_after,
        "rounds": done.rounds,
        "spans": done.spans,
        "tokens_regenerated": done.tokens,
        "extra_forward_passes": done.forward,
        "extra_seconds": round(done.seconds, 3),
        "issues": [f"{i.line}:{i.column}: {i.message}" for i in done.issues],
        **({"note": done.note} if done.note else {}),
    }


Event = Step | RepairRound | Repaired | Finished


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


def new(
    model: Denoiser, request: str, language: str, length: int, config: SamplerConfig, repair_rounds: int = 3
) -> Iterator[Event]:
    """Generate a whole file for `request`: the draft's steps, the repair pass's steps and rounds
    (syntax is checked even with 0 rounds), then Finished."""
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
    text, kept = answer_text(model, last.canvas, len(ids))
    code = text.strip("\n") + "\n" if text.strip() else ""
    seconds = time.perf_counter() - began
    repaired: Repaired | None = None
    for event in repair(model, ids, code, language, config, rounds=repair_rounds):
        if isinstance(event, Repaired):
            repaired = event
        else:
            yield event
    yield Finished(
        code=repaired.code if repaired is not None else code,
        prompt_tokens=len(ids),
        tokens=kept,
        canvas=length,
        forward=last.forward,
        seconds=seconds,
        repair=repaired if repaired is not None and not repaired.note.startswith("not checked") else None,
    )


def repair_file(
    model: Denoiser, source: str, language: str, name: str, config: SamplerConfig, rounds: int
) -> Iterator[Step | RepairRound | Repaired]:
    """Repair an existing file: the request names the file; repair's steps, rounds, then Repaired."""
    ids = prompt_ids(model, f"the {language} file {name}", language)
    code_tokens = len(model.tokenizer.encode(source, add_special_tokens=False))
    if len(ids) + code_tokens > model.facts.max_length:
        raise InputError(
            f"{name} is {code_tokens} tokens; with the prompt that exceeds the model's context "
            f"of {model.facts.max_length} tokens by {len(ids) + code_tokens - model.facts.max_length}"
        )
    yield from repair(model, ids, source, language, config, rounds=rounds)


def report_json(finished: Finished, extra: dict[str, object]) -> str:
    return json.dumps({"code": finished.code, **extra, **finished.metadata()}, indent=2)
