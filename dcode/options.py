"""Every option of the generating commands, declared once: name, flag, environment variable, help,
default and type. Imports neither torch nor typer.

The CLI builds the Typer options of `new`, `edit` and `repair` from these records
(dcode.cli.options.with_options), the README's option table is checked against them
(tests/test_cli.py), and a server reads a request's sampler settings by the same names
(`sampler_settings`, then config.merge_family_defaults with `fields_set_by(the names given)`).
A sampler option's default is SamplerConfig's own, so it is written in one place only:
dcode.config.

Groups: SAMPLER (the SamplerConfig fields a user sets), REPAIR (the repair pass), MODEL (which
model, on which device) and VIEW (progress on the terminal).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from dcode.config import APPROX_CACHES, ORDERINGS, REPAIR_TRIES, RULES, SamplerConfig

_SAMPLER_DEFAULTS = {f.name: f.default for f in fields(SamplerConfig)}


@dataclass(frozen=True)
class Option:
    """One command-line option. Example: Option("seed", "--seed", "DCODE_SEED", "...", int, 0)."""

    name: str  # the command's parameter name, and the key a server request uses
    flag: str  # "--seed", or "--cache/--no-cache" for a switch
    env: str  # the DCODE_* variable that sets it
    help: str
    type: type  # int, float, str or bool
    default: Any  # a SamplerConfig field's default for sampler options
    optional: bool = False  # None is a value (the default "not set")
    field: str | None = None  # the SamplerConfig field it sets (sampler options only)
    min: int | None = None  # smallest value accepted (checked by the command line)
    short: str | None = None  # a one-letter alias ("-q")
    shown: str | None = None  # the default as the README shows it, where str(default) would not do

    @property
    def shown_default(self) -> str:
        """The README's default column starts with this. Example: True -> "on", 0.9 -> "0.9"."""
        if self.shown is not None:
            return self.shown
        if isinstance(self.default, bool):
            return "on" if self.default else "off"
        return str(self.default)


def sampler(name: str, flag: str, help: str, field: str | None = None, **extra: Any) -> Option:
    """A sampler option: its type and default are those of SamplerConfig's field (same name unless given)."""
    field = field or name
    default = _SAMPLER_DEFAULTS[field]
    kind = extra.pop("type", type(default) if default is not None else int)
    return Option(name, flag, f"DCODE_{name.upper()}", help, kind, default, field=field, **extra)


SAMPLER: tuple[Option, ...] = (
    sampler("strategy", "--strategy", f"Commit rule: {', '.join(RULES)}.", field="rule", type=str),
    sampler("order", "--order", f"Ordering: {', '.join(ORDERINGS)}.", field="ordering", type=str),
    sampler("steps", "--steps", "Passes for the schedule rule.", optional=True, shown="one token per pass"),
    sampler("threshold", "--threshold", "Threshold rule: commit every token at least this probable (Fast-dLLM)."),
    sampler("entropy_bound", "--entropy-bound", "Entropy-bound rule: EB-sampler's gamma."),
    sampler("block", "--block", "Semi-AR block for full-attention models.", optional=True, shown="whole answer"),
    sampler("temperature", "--temperature", "Sampling temperature (0 = greedy)."),
    sampler("top_p", "--top-p", "Nucleus filter before sampling (1.0 = off)."),
    sampler(
        "repetition_penalty",
        "--repetition-penalty",
        "Divide the logits of tokens written in the last 64 answer positions by this (1 = off).",
    ),
    sampler(
        "hold_conflicts",
        "--hold-conflicts/--no-hold-conflicts",
        "Threshold and entropy-bound rules: defer a token that repeats its neighbour written in "
        "the same pass, or an end with gaps before it.",
    ),
    sampler(
        "draft",
        "--draft",
        "Verify rule: drafted tokens checked per pass (0 = one token per pass, left to right).",
        min=0,
    ),
    sampler("seed", "--seed", "Seed of every random draw: same seed, same output."),
    sampler("cache", "--cache/--no-cache", "Reuse keys/values of finished blocks."),
    sampler(
        "approx_cache",
        "--approx-cache",
        f"Full-attention models, Fast-dLLM cache: {', '.join(APPROX_CACHES)}.",
        type=str,
    ),
)

REPAIR_SWITCH = Option(
    "repair", "--repair/--no-repair", "DCODE_REPAIR", "Regenerate spans that do not parse.", bool, True
)
REPAIR_ROUNDS = Option(
    "repair_rounds", "--repair-rounds", "DCODE_REPAIR_ROUNDS", "Repair rounds, each widening the spans.", int, 3, min=0
)
REPAIR_TRIES_OPTION = Option(
    "repair_tries",
    "--repair-tries",
    "DCODE_REPAIR_TRIES",
    "Fillings per repair round until one helps, sampled with their own seeds.",
    int,
    REPAIR_TRIES,
    min=1,
)
REPAIR: tuple[Option, ...] = (REPAIR_SWITCH, REPAIR_ROUNDS, REPAIR_TRIES_OPTION)

MODEL_OPTION = Option(
    "model",
    "--model",
    "DCODE_MODEL",
    "Model folder or cached id (default: dcode-tiny).",
    str,
    None,
    optional=True,
    shown="dcode-tiny",
)
DEVICE_OPTION = Option("device", "--device", "DCODE_DEVICE", "auto, cpu, cuda or mps.", str, "auto")
DTYPE_OPTION = Option(
    "dtype",
    "--dtype",
    "DCODE_DTYPE",
    "auto, bfloat16, float16 or float32 (auto: bfloat16 on CUDA and on a CPU with native bfloat16).",
    str,
    "auto",
)
MODEL: tuple[Option, ...] = (MODEL_OPTION, DEVICE_OPTION, DTYPE_OPTION)

LIVE_OPTION = Option(
    "live",
    "--live/--no-live",
    "DCODE_LIVE",
    "Live view (default: on a terminal).",
    bool,
    None,
    optional=True,
    shown="on a terminal",
)
EXIT_WHEN_DONE_OPTION = Option(
    "exit_when_done", "--exit-when-done", "DCODE_EXIT_WHEN_DONE", "Close the live view when finished.", bool, False
)
QUIET_OPTION = Option("quiet", "--quiet", "DCODE_QUIET", "No progress or summary.", bool, False, short="-q")
VIEW: tuple[Option, ...] = (LIVE_OPTION, EXIT_WHEN_DONE_OPTION, QUIET_OPTION)

ALL: tuple[Option, ...] = (*MODEL, *SAMPLER, *REPAIR, *VIEW)
BY_NAME: dict[str, Option] = {option.name: option for option in ALL}


def fields_set_by(names: Iterable[str]) -> set[str]:
    """The SamplerConfig fields that the sampler options `names` set (other names are ignored),
    for config.merge_family_defaults. Example: fields_set_by(["strategy", "seed", "port"]) -> {"rule", "seed"}."""
    wanted = set(names)
    return {o.field for o in SAMPLER if o.field is not None and o.name in wanted}


def sampler_settings(values: Mapping[str, Any]) -> SamplerConfig:
    """A SamplerConfig from sampler option values by option name (`strategy`, `top_p`, ...);
    other keys are ignored and missing options keep their defaults. ValueError for a bad value.
    Example: sampler_settings({"strategy": "schedule", "steps": 8}) -> SamplerConfig(rule="schedule", steps=8)."""
    return SamplerConfig(**{o.field: values[o.name] for o in SAMPLER if o.field is not None and o.name in values})
