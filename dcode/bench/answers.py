"""A prompt set answered under one decoding setting, scored by dcode.bench.metrics.

Owns: running every request through `dcode new`'s pipeline (the one sampling loop, repair off),
or token by token for the autoregressive yardstick, and adding the answers up. The scripts in
benchmarks/ (sampling, checkpoints, yardstick, training recipes) all score answers here, so their
rows mean the same. Knows nothing about argv or the terminal.
"""

from __future__ import annotations

import time
from pathlib import Path

from dcode import flows, localfill
from dcode.bench.metrics import Tally
from dcode.config import SamplerConfig
from dcode.events import Event, Finished, Step, drain
from dcode.localfill import LocalFiller
from dcode.models.base import Denoiser


def answered(
    model: Denoiser, prompt: str, language: str, length: int, config: SamplerConfig
) -> tuple[Finished, list[Step], float]:
    """One request through `dcode new`'s pipeline on a `length`-token canvas, no repair: its result,
    its passes, and the wall seconds of the whole request (template, sampling, decoding, the check)."""
    seen: list[Event] = []
    began = time.perf_counter()
    events = flows.new(LocalFiller(model, config), prompt, language, length, repair_rounds=0)
    finished = drain(events, seen.append, result=Finished)
    return finished, [event for event in seen if isinstance(event, Step)], time.perf_counter() - began


def answer(model: Denoiser, prompts: list[str], length: int, config: SamplerConfig) -> dict[str, float]:
    """Every python request answered with `config` (answered()): the metrics' row (prompts, passes,
    rows a pass, tokens, tokens/pass, tok/s, real code, key words)."""
    tally = Tally()
    for prompt in prompts:
        finished, steps, seconds = answered(model, prompt, "python", length, config)
        tally.add(prompt, finished.code, finished.forward, finished.tokens, seconds, sum(step.rows for step in steps))
    return tally.summary()


def answer_autoregressive(folder: Path, prompts: list[str], length: int) -> dict[str, float]:
    """The same requests answered greedily token by token by an exported model read as a causal
    language model (transformers' `generate` with its key/value cache; the same prompt template):
    the autoregressive yardstick's row, with the same metrics. One pass per new token, the
    prefill included."""
    import torch
    from transformers import Qwen2ForCausalLM

    from dcode.models import load

    model = load(str(folder))  # its tokenizer and facts; dcode runs the network block-causally, so:
    network = Qwen2ForCausalLM.from_pretrained(str(folder), local_files_only=True).eval()  # generate(): causal mask
    eos = sorted(model.facts.eos_ids)
    tally = Tally()
    with torch.inference_mode():
        for prompt in prompts:
            ids = torch.tensor([localfill.prompt_ids(model, prompt, "python")])
            began = time.perf_counter()
            out = network.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=length,
                do_sample=False,
                eos_token_id=eos,
                pad_token_id=model.facts.pad_id,
            )[0, ids.shape[1] :]
            seconds = time.perf_counter() - began
            code, count = localfill.answer_text(model, out, 0)  # up to the first end token
            tally.add(prompt, code, len(out), count, seconds)
    return tally.summary()
