"""Every option of the generating commands, declared once: name, flag, environment variable, help,
default and type. Imports neither torch nor typer.

The CLI builds the Typer options of `new`, `edit`, `repair`, `fix` and `log` from these records
(dcode.cli.options.with_options; NEW, EDIT, REPAIR_FILE, FIX and LOG_LIST are each command's whole list), the
README's option table is checked against them (tests/test_cli.py), and a server reads a request's
sampler settings by the same names (`sampler_settings`, then config.merge_family_defaults with
`fields_set_by(the names given)`). A sampler option's default is SamplerConfig's own, so it is
written in one place only: dcode.config.

Groups: SAMPLER (the SamplerConfig fields a user sets), REPAIR (the repair pass), MODEL (which
model, on which device), ENDPOINT (a served model instead: where, the key sent to it, how to read
its stream), OUTPUT (where the result goes and in what form), VIEW (progress on the terminal),
TESTING (the command `fix` and `new --test` run, and the loop's bounds) and LOG (the history).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from dcode.config import APPROX_CACHES, ORDERINGS, REPAIR_FILE_TRIES, REPAIR_TRIES, RULES, SamplerConfig

_SAMPLER_DEFAULTS = {f.name: f.default for f in fields(SamplerConfig)}


@dataclass(frozen=True)
class Option:
    """One command-line option. Example: Option("seed", "--seed", "DCODE_SEED", "...", int, 0)."""

    name: str  # the command's parameter name, and the key a server request uses
    flag: str  # "--seed", or "--cache/--no-cache" for a switch
    env: str | None  # the DCODE_* variable that sets it (None: a flag only, as -o and --force)
    help: str
    type: type  # int, float, str or bool
    default: Any  # a SamplerConfig field's default for sampler options
    optional: bool = False  # None is a value (the default "not set")
    field: str | None = None  # the SamplerConfig field it sets (sampler options only)
    min: int | None = None  # smallest value accepted (checked by the command line)
    max: float | None = None  # largest value accepted (checked by the command line)
    short: str | None = None  # a one-letter alias ("-q")
    shown: str | None = None  # the default as the README shows it, where str(default) would not do
    row: str | None = None  # the README row's option cell, where two options share a flag ("`--length` (edit)")

    @property
    def cell(self) -> str:
        """The option cell of its README row. Example: "`-q, --quiet`"."""
        return self.row or (f"`{self.short}, {self.flag}`" if self.short else f"`{self.flag}`")

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
        "pack",
        "--pack/--no-pack",
        "With the cache: a pass's rows packed into one sequence, logits only where read (same answers).",
    ),
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

ENDPOINT_OPTION = Option(
    "endpoint",
    "--endpoint",
    "DCODE_ENDPOINT",
    "An OpenAI-compatible server (http://host:8000/v1) to generate with instead of a local model; "
    "--model then names the served model.",
    str,
    None,
    optional=True,
    shown="none: the local model",
)
# The key dcode *sends* to --endpoint. `dcode serve --api-key` is another thing: the key a server
# *requires*; the two have different names so that one shell can set both.
ENDPOINT_KEY = Option(
    "endpoint_key",
    "--endpoint-key",
    "DCODE_ENDPOINT_KEY",
    "Bearer key sent to --endpoint (else INCEPTION_API_KEY for api.inceptionlabs.ai, else OPENAI_API_KEY).",
    str,
    None,
    optional=True,
    shown="INCEPTION_API_KEY / OPENAI_API_KEY",
)
STREAM_MODE = Option(
    "stream_mode",
    "--stream-mode",
    "DCODE_STREAM_MODE",
    "How to read --endpoint's stream: auto, replace (whole texts), append (deltas) or dcode (frames).",
    str,
    "auto",
)
TIMEOUT = Option(
    "timeout",
    "--timeout",
    "DCODE_TIMEOUT",
    "--endpoint: seconds to connect, and the longest wait between chunks.",
    float,
    60.0,
)
ENDPOINT: tuple[Option, ...] = (ENDPOINT_OPTION, ENDPOINT_KEY, STREAM_MODE, TIMEOUT)

DEFAULT_LENGTH = 256  # answer tokens of `dcode new` when neither --length nor DCODE_LENGTH is given
LENGTH = Option("length", "--length", "DCODE_LENGTH", "Answer canvas in tokens.", int, DEFAULT_LENGTH)
EDIT_LENGTH = Option(
    "length",
    "--length",
    "DCODE_EDIT_LENGTH",
    "Masks for the region (default: its tokens + 50%, >= 16).",
    int,
    None,
    optional=True,
    shown="the region's tokens + 50%",
    row="`--length` (edit)",
)
OUTPUT_OPTION = Option(
    "output",
    "--output",
    None,
    "Write the result to this file, atomically ('-': stdout); edit and repair then leave FILE as it is.",
    str,
    None,
    optional=True,
    short="-o",
    shown="stdout",
)
FORCE = Option("force", "--force", None, "Overwrite an existing --output file.", bool, False)
LANG = Option(
    "lang",
    "--lang",
    "DCODE_LANG",
    "Language (default: from the file's name, the -o suffix, else python).",
    str,
    None,
    optional=True,
    shown="the file's, else python",
)
JSON = Option("as_json", "--json", "DCODE_JSON", "Print the result and its metadata as JSON.", bool, False)
OUTPUT: tuple[Option, ...] = (OUTPUT_OPTION, FORCE, LANG, JSON)
DIFF = Option("diff", "--diff", None, "Print a unified diff; write nothing.", bool, False)  # edit and repair

# The history (dcode log): every writing command records its run unless this is off.
LOG = Option("log", "--log/--no-log", "DCODE_LOG", "Record this run in the history (dcode log).", bool, True)

# dcode fix, and dcode new with -o FILE: the command that must pass, and the loop's bounds.
TEST = Option(
    "test",
    "--test",
    "DCODE_TEST",
    "The command that must pass (run through the shell, here); new: needs -o FILE.",
    str,
    None,
    optional=True,
    shown="none",
)
ROUNDS = Option("rounds", "--rounds", "DCODE_FIX_ROUNDS", "Rounds of regenerate-and-test.", int, 3, min=0)
TEST_TIMEOUT = Option(
    "test_timeout",
    "--test-timeout",
    "DCODE_TEST_TIMEOUT",
    "Seconds a run of --test may take before it is killed.",
    float,
    300.0,
    max=7 * 24 * 3600.0,  # a week: inf or 1e300 would overflow the clocks that wait for it
)
TESTING: tuple[Option, ...] = (TEST, ROUNDS, TEST_TIMEOUT)
FIX_DIFF = Option(
    "diff", "--diff", None, "Print the change (a unified diff) on stdout.", bool, False, row="`--diff` (fix)"
)

# dcode log
COUNT = Option("count", "--count", None, "How many of the latest records.", int, 10, min=1, short="-n")

# Each generating command's options after its own parameters, in the order `--help` lists them.
NEW: tuple[Option, ...] = (LENGTH, *OUTPUT, *MODEL, *ENDPOINT, *SAMPLER, *REPAIR, *VIEW, *TESTING, LOG)
EDIT: tuple[Option, ...] = (EDIT_LENGTH, DIFF, *OUTPUT, *MODEL, *ENDPOINT, *SAMPLER, *REPAIR, *VIEW, LOG)
# `dcode repair` runs at least one round, and tries harder than a draft's repair: the file is the user's.
REPAIR_FILE: tuple[Option, ...] = (
    DIFF,
    *OUTPUT,
    *MODEL,
    *ENDPOINT,
    *(o for o in SAMPLER if o.name in ("temperature", "seed")),
    replace(REPAIR_ROUNDS, min=1),
    replace(REPAIR_TRIES_OPTION, default=REPAIR_FILE_TRIES),
    *VIEW,
    LOG,
)
# `dcode fix PATHS`: each region through edit's flow, so edit's model, sampler and repair options.
FIX: tuple[Option, ...] = (
    *TESTING, FIX_DIFF, JSON, LOG, EDIT_LENGTH, *MODEL, *ENDPOINT, *SAMPLER, *REPAIR, *VIEW
)  # fmt: skip
LOG_LIST: tuple[Option, ...] = (COUNT, JSON)  # `dcode log`; `dcode log show ID` takes JSON

ALL: tuple[Option, ...] = (
    *MODEL, *ENDPOINT, *OUTPUT, DIFF, LENGTH, EDIT_LENGTH, *SAMPLER, *REPAIR, *VIEW, *TESTING, FIX_DIFF, LOG, COUNT
)  # fmt: skip
BY_NAME: dict[str, Option] = {option.name: option for option in ALL if option not in (EDIT_LENGTH, FIX_DIFF)}


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
