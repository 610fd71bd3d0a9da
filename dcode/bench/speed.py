"""The speed suite: one model, one prompt set, every setting in the same process and session.

Owns: timing runs and summing them up. Diffusion runs go through flows.new (the one sampling
loop, repair off); the autoregressive baseline is transformers' own `generate` with its key/value
cache, on a model of the same class and config as the diffusion model's network with random
weights (speed does not depend on the weights). Knows nothing about argv or the terminal.

Every run decodes exactly `length` new tokens, so tok/s compare equal work: diffusion runs have
stop_at_eos off (the whole canvas is filled, as the reference loops do) unless early_stop is set,
and `generate` gets min_new_tokens = max_new_tokens = length.

Definitions, per run (one prompt, one setting, one repeat):
- forward passes: calls of the network (autoregressive: one per new token, the prefill included);
- tokens: positions decoded (diffusion: committed by the sampler; autoregressive: new tokens);
- ms per forward and tok/s: over the sampling time (diffusion: denoise plus decoding the answer,
  as events.Finished.seconds; autoregressive: `generate`);
- first draft: seconds from the start of the run until the first B answer positions hold no
  mask, B = the block the setting decodes in: the model's attention block (block-causal models),
  else the setting's semi-autoregressive block, else the whole answer. So with one block it is the
  first Step where nothing of the canvas is masked, and with blocks it is when the first block is
  fully drafted (counted from the answer's start, so a partial first attention block does not make
  it look early). For the autoregressive model: until its first B new tokens, B = the model's
  attention block, else the whole answer. The rows carry B as first_draft_tokens;
- wall: end-to-end seconds (prompt template, tokenizing, sampling, decoding, the syntax check);
- peak memory: extra memory at the run's peak over what was in use when it began. On CUDA,
  torch.cuda.max_memory_allocated after reset_peak_memory_stats; on Linux, the resident-set
  high-water mark (VmHWM) after resetting it through /proc/self/clear_refs; elsewhere the growth of
  getrusage's ru_maxrss, which stays 0 while a run remains under an earlier run's peak.
A setting's row is the median over repeats of each figure, each repeat summing all prompts.
"""

from __future__ import annotations

import copy
import resource
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from dcode import flows, localfill
from dcode.bench import Setting, settings, with_family
from dcode.config import SamplerConfig
from dcode.events import Event, Finished, Step, drain
from dcode.localfill import LocalFiller
from dcode.models import native
from dcode.models.base import Denoiser

if TYPE_CHECKING:
    from rich.progress import Progress

AUTOREGRESSIVE = "autoregressive"  # the name of (c) in every report
WARMUP_LENGTH = 16  # tokens of the untimed warm-up run per setting (allocator, kernels, caches)


@dataclass(frozen=True)
class Run:
    setting: str
    prompt: str  # the prompt's id
    repeat: int
    forward: int
    tokens: int
    answer_tokens: int  # tokens up to the first end token (what `dcode new` would print)
    sampling_seconds: float
    first_draft_seconds: float
    first_draft_tokens: int  # B of the first-draft definition
    wall_seconds: float
    peak_memory_mb: float


# ---------------------------------------------------------------------------------------------
# Memory

CUDA_PEAK = "cuda max_memory_allocated"
RSS_PEAK = "rss high-water mark (VmHWM)"
MAXRSS_GROWTH = "ru_maxrss growth"


def memory_kind(device: torch.device) -> str:
    """How PeakMemory measures on this device and system."""
    if device.type == "cuda":
        return CUDA_PEAK
    return RSS_PEAK if _reset_high_water() else MAXRSS_GROWTH


class PeakMemory:
    """Context manager: extra memory at the peak of the block, in MiB, in `.mb` (see the module
    docstring for the three ways it is measured; `.kind` names the one used)."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.kind = CUDA_PEAK if self.cuda else RSS_PEAK
        self.mb = 0.0
        self._base = 0

    def __enter__(self) -> PeakMemory:
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self._base = torch.cuda.memory_allocated()
        elif _reset_high_water():
            self._base = _status_kb("VmRSS") * 1024
        else:
            self.kind = MAXRSS_GROWTH
            self._base = _maxrss_bytes()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.cuda:
            torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated()
        elif self.kind == RSS_PEAK:
            peak = _status_kb("VmHWM") * 1024
        else:
            peak = _maxrss_bytes()
        self.mb = max(0, peak - self._base) / 2**20


def _reset_high_water() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")  # 5: reset the peak RSS (Linux >= 4.0)
        return _status_kb("VmHWM") > 0
    except OSError:
        return False


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise OSError(f"no {field} in /proc/self/status")


def _maxrss_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB elsewhere


# ---------------------------------------------------------------------------------------------
# One run of each kind


def diffusion_run(
    model: Denoiser, row: dict[str, str], length: int, config: SamplerConfig, name: str, repeat: int
) -> Run:
    """One request through flows.new, timed step by step."""
    facts = model.facts
    mask = facts.mask_id
    first_tokens = min(length, facts.block or config.block or length)
    tokens = forward = 0
    first: float | None = None

    def count(event: Event) -> None:
        nonlocal tokens, forward, first
        match event:
            case Step(canvas=canvas, committed=committed):
                tokens += len(committed)
                forward = event.forward
                start = len(canvas) - length
                if first is None and not bool((canvas[start : start + first_tokens] == mask).any()):
                    first = time.perf_counter() - began

    with PeakMemory(model.device) as memory:
        began = time.perf_counter()
        events = flows.new(LocalFiller(model, config), row["prompt"], row["lang"], length, repair_rounds=0)
        finished = drain(events, count, result=Finished)
        wall = time.perf_counter() - began
    return Run(
        name,
        row["id"],
        repeat,
        forward,
        tokens,
        finished.tokens,
        finished.seconds,
        first or wall,
        first_tokens,
        wall,
        memory.mb,
    )


def autoregressive_model(model: Denoiser, seed: int = 0) -> Any | None:
    """A *ForCausalLM of the diffusion network's class and config with random weights, on its
    device and dtype (transformers' Qwen2 for dcode's native one); None when the network is
    neither (the test fake,
    DiffusionGemma's own block-diffusion class)."""
    network = getattr(model, "model", None)
    if isinstance(network, native.Qwen2):  # dcode's own Qwen2 forward: its twin is transformers' class
        from transformers import Qwen2Config, Qwen2ForCausalLM

        config: Any = Qwen2Config.from_dict(network.config)
        causal_lm: Any = Qwen2ForCausalLM
    elif isinstance(network, torch.nn.Module) and type(network).__name__.endswith("ForCausalLM"):
        config, causal_lm = copy.deepcopy(network.config), type(network)
    else:
        return None
    parameter = next(network.parameters())
    config.use_cache = True
    torch.manual_seed(seed)
    with torch.device(parameter.device):
        twin = causal_lm._from_config(config, dtype=parameter.dtype)
    return twin.eval()


class _Clock:
    """A transformers streamer that notes when the `count`-th new token arrived."""

    def __init__(self, count: int, cuda: bool) -> None:
        self.count, self.cuda = count, cuda
        self.seen = -1  # generate() first puts the prompt
        self.began = time.perf_counter()
        self.at: float | None = None

    def put(self, value: torch.Tensor) -> None:
        self.seen += 1 if self.seen < 0 else value.numel()
        if self.at is None and self.seen >= self.count:
            if self.cuda:
                torch.cuda.synchronize()
            self.at = time.perf_counter() - self.began

    def end(self) -> None:
        pass


def autoregressive_run(
    model: Denoiser, twin: Any, row: dict[str, str], length: int, first_block: int, repeat: int
) -> Run:
    """The same request decoded token by token by `twin` with transformers' generate and its
    key/value cache, forced to `length` new tokens."""
    from transformers import GenerationConfig

    facts = model.facts
    device = model.device
    cuda = device.type == "cuda"
    generation = GenerationConfig(
        max_new_tokens=length,
        min_new_tokens=length,  # a random model would stop at a random end token otherwise
        do_sample=False,
        use_cache=True,
        pad_token_id=facts.pad_id,
        eos_token_id=sorted(facts.eos_ids) or None,
    )
    with PeakMemory(device) as memory:
        began = time.perf_counter()
        ids = torch.tensor([localfill.prompt_ids(model, row["prompt"], row["lang"])], device=device)
        first_tokens = min(first_block, length)
        clock = _Clock(first_tokens, cuda)
        sampling = time.perf_counter()
        with torch.inference_mode():
            out = twin.generate(ids, attention_mask=torch.ones_like(ids), generation_config=generation, streamer=clock)
        if cuda:
            torch.cuda.synchronize()
        sampling = time.perf_counter() - sampling
        new = out[0, ids.shape[1] :]
        localfill.decode(model, new.tolist())  # decoding is part of a run's wall time, as for diffusion
        wall = time.perf_counter() - began
    first = (clock.at or sampling) + (clock.began - began)
    n = len(new)
    return Run(AUTOREGRESSIVE, row["id"], repeat, n, n, n, sampling, first, first_tokens, wall, memory.mb)


# ---------------------------------------------------------------------------------------------
# The suite


def summarize(runs: list[Run]) -> dict[str, float]:
    """One setting's figures: per repeat, sums over its prompts; then the median over repeats."""
    by_repeat: dict[int, list[Run]] = {}
    for run in runs:
        by_repeat.setdefault(run.repeat, []).append(run)
    figures: dict[str, list[float]] = {}
    for group in by_repeat.values():
        n = len(group)
        forward = sum(r.forward for r in group)
        tokens = sum(r.tokens for r in group)
        sampling = sum(r.sampling_seconds for r in group)
        for key, value in {
            "forward_passes": forward / n,
            "tokens": tokens / n,
            "tokens_per_forward": tokens / max(1, forward),
            "ms_per_forward": 1000 * sampling / max(1, forward),
            "tokens_per_second": tokens / sampling if sampling else 0.0,
            "first_draft_seconds": sum(r.first_draft_seconds for r in group) / n,
            "first_draft_tokens": max(r.first_draft_tokens for r in group),
            "wall_seconds": sum(r.wall_seconds for r in group) / n,
            "peak_memory_mb": max(r.peak_memory_mb for r in group),
            "answer_tokens": sum(r.answer_tokens for r in group) / n,
        }.items():
            figures.setdefault(key, []).append(value)
    return {key: statistics.median(values) for key, values in figures.items()}


def run_speed(
    model: Denoiser,
    rows: list[dict[str, str]],
    length: int,
    repeats: int = 3,
    chosen: list[Setting] | None = None,
    autoregressive: bool = True,
    early_stop: bool = False,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Every setting (and the autoregressive baseline) on every prompt, `repeats` times, the
    settings interleaved within each repeat so drift (heat, other load) hits them alike."""
    facts = model.facts
    for row in rows:  # fail before any timing if a prompt does not fit
        localfill.check_length(model, len(localfill.prompt_ids(model, row["prompt"], row["lang"])), length)
    chosen = chosen if chosen is not None else settings(facts.block, facts.defaults, facts.noise)
    configs = {s.name: with_family(s, facts.defaults, stop_at_eos=early_stop and s.role == "fast") for s in chosen}
    twin = autoregressive_model(model) if autoregressive else None
    first_block = facts.block or length
    names = [*configs, *([AUTOREGRESSIVE] if twin is not None else [])]

    def one(name: str, row: dict[str, str], n: int, repeat: int) -> Run:
        if name == AUTOREGRESSIVE:
            return autoregressive_run(model, twin, row, n, first_block, repeat)
        return diffusion_run(model, row, n, configs[name], name, repeat)

    advance = ticker(progress, len(names) * (1 + repeats * len(rows)))

    # 1) warm-up: one short untimed run per setting
    for name in names:
        one(name, rows[0], min(WARMUP_LENGTH, length), -1)
        advance(f"{name} warm-up")
    # 2) the timed runs
    runs: list[Run] = []
    for repeat in range(repeats):
        for row in rows:
            for name in names:
                runs.append(one(name, row, length, repeat))
                advance(f"{name} {row['id']}")

    # 3) rows and ratios against (a) and (c)
    table = speed_table(chosen, configs, runs, names)
    device = model.device
    return {
        "suite": "speed",
        "model": facts.name,
        "device": device.type,
        "dtype": _dtype(model),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "length": length,
        "repeats": repeats,
        "prompts": len(rows),
        "early_stop": early_stop,
        "attention_block": facts.block,
        "memory": memory_kind(device),
        "autoregressive": None if twin is None else f"{type(twin).__name__}, random weights, generate() with KV cache",
        "settings": table,
        "runs": [asdict(r) for r in runs],
    }


def ticker(progress: Progress | None, total: int) -> Callable[[str], None]:
    """One step of the speed task on the progress bar, named; nothing without a bar."""
    task = progress.add_task("speed", total=total) if progress is not None else None

    def advance(what: str) -> None:
        if progress is not None and task is not None:
            progress.update(task, advance=1, description=f"speed: {what}")

    return advance


def speed_table(
    chosen: list[Setting], configs: dict[str, SamplerConfig], runs: list[Run], names: list[str]
) -> list[dict[str, Any]]:
    """A row a setting: its summed runs, its config, and a fast setting's ratios against the
    one-token-per-pass baseline and the autoregressive model."""
    table: list[dict[str, Any]] = []
    baseline = next((s.name for s in chosen if s.role == "baseline"), None)
    summaries = {name: summarize([r for r in runs if r.setting == name]) for name in names}
    roles = {s.name: s.role for s in chosen} | {AUTOREGRESSIVE: "autoregressive"}
    for name, summary in summaries.items():
        line: dict[str, Any] = {"setting": name, "role": roles[name], **{k: round(v, 4) for k, v in summary.items()}}
        if name in configs:
            line["config"] = {k: v for k, v in asdict(configs[name]).items() if k != "seed"}
        for label, other in (("vs_one_per_pass", baseline), ("vs_autoregressive", AUTOREGRESSIVE)):
            if roles[name] == "fast" and other in summaries and summaries[other]["tokens_per_second"]:
                line[label] = round(summary["tokens_per_second"] / summaries[other]["tokens_per_second"], 3)
        table.append(line)
    return table


def _dtype(model: Denoiser) -> str | None:
    network = getattr(model, "model", None)
    if not isinstance(network, torch.nn.Module):
        return None
    return str(next(network.parameters()).dtype).removeprefix("torch.")
