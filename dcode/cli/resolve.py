"""A command's options resolved once into one frozen, typed record: `resolve(ctx, options, own)`.

The record says what fills (a local model with its device, dtype and sampler settings, or an
endpoint), the repair settings, the view, the output, the test `fix` runs, what the history
records, how to name an option in an error, and the command's own options (`own`: a dataclass
whose fields are named as those options). Every bound of dcode.options is checked here, and a bad
sampler setting is a usage error here, before anything loads. This is the one module that asks
click where a value came from (the command line, a DCODE_* variable or the default); below a
command nothing sees typer's context or an options dict.

Knows no other module of dcode.cli (dcode.cli.app imports it): a bad value is an OptionError,
which dcode.cli.app prints as one `dcode: error:` line with exit code 2.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import typer

from dcode.config import EFFORTS, SamplerConfig
from dcode.option import Option
from dcode.options import SAMPLER, STANDARD, fields_set_by, sampler_settings

if TYPE_CHECKING:
    from dcode.constrain import Grammar

T = TypeVar("T", covariant=True)  # a Resolved[Selection] is a Resolved[object]


class OptionError(typer.TyperException):
    """A bad option value: dcode.cli.app prints it as one `dcode: error:` line, exit 2."""

    exit_code = 2


UNSET = ("DEFAULT", "DEFAULT_MAP")  # click's sources of a value the user did not give


@dataclass(frozen=True)
class Local:
    """A local model: which, on what, and the sampler settings the user gave."""

    model: str | None  # a folder, a cached id or a catalogue name (None: dcode-tiny)
    device: str  # auto, cpu, cuda, mps
    dtype: str  # auto, bfloat16, float16, float32
    sampler: SamplerConfig
    explicit: frozenset[str]  # SamplerConfig fields the user set: the family's defaults fill the others
    effort: str | None = None  # --effort: which of the family's decodings fills them (None: medium)
    quantize: str = "auto"  # auto, none, int8, int4 (dcode.models.quantize)


@dataclass(frozen=True)
class Remote:
    """A served model (--endpoint): where, the key sent to it, how to read its stream."""

    url: str
    model: str | None  # the served model's id (None: the server's first)
    key: str | None = field(repr=False)  # --endpoint-key; running.endpoint_filler falls back to the environment
    stream_mode: str
    timeout: float
    sampler: SamplerConfig
    standard: Mapping[str, Any]  # OpenAI's request fields (temperature, top_p, seed)
    sent: frozenset[str]  # of those, the ones the user set: a request carries only these (and temperature)
    served: Mapping[str, Any]  # the other sampler settings the user set, by field: a dcode server runs them
    effort: str | None = None  # --effort, sent as OpenAI's reasoning_effort (Mercury's name for it)


@dataclass(frozen=True)
class Repair:
    rounds: int  # 0 with --no-repair
    tries: int


@dataclass(frozen=True)
class View:
    quiet: bool
    live: bool | None  # None: on a terminal
    exit_when_done: bool


@dataclass(frozen=True)
class Output:
    path: str | None  # -o ("-": stdout)
    force: bool
    lang: str | None
    as_json: bool
    diff: bool


@dataclass(frozen=True)
class Testing:
    command: str | None  # --test
    rounds: int
    timeout: float  # seconds a run may take


@dataclass(frozen=True)
class Resolved(Generic[T]):
    """One command's options, resolved."""

    command: str  # as the history names it: "new", "edit", ...
    fills: Local | Remote
    repair: Repair
    view: View
    output: Output
    length: int | None
    testing: Testing
    log: bool
    recorded: Mapping[str, object]  # what the history keeps: options marked recorded that the user set
    own: T  # the command's own options
    line: str  # the command as a shell line, naming what the user set (a benchmark's provenance)
    subcommand: str | None  # a group's callback: the subcommand about to run
    secrets: tuple[str, ...] = field(default=(), repr=False)  # values of the options marked secret, to redact
    grammar: Grammar | None = None  # --schema / --json-object: what a whole answer follows (dcode.constrain)
    from_env: frozenset[str] = frozenset()
    flags: Mapping[str, str] = field(default_factory=dict)

    @property
    def tokens(self) -> int:
        """--length of a command whose length has a default (new, serve, bench)."""
        assert self.length is not None, f"{self.command} has no --length default"
        return self.length

    def named(self, name: str) -> str:
        """How an error names option `name`: the DCODE_* variable that set it, else its flag."""
        return self.flags.get(name, name)


def resolve(ctx: typer.Context, options: tuple[Option, ...], own: type[T] | None = None) -> Resolved[T]:
    """The record of a command's parsed options (`ctx.params`, declared by `options`); a bad value
    is a usage error naming where it came from."""
    values, table = dict(ctx.params), {o.name: o for o in options}
    given = frozenset(n for n in values if _source(ctx, n) not in UNSET)
    from_env = frozenset(n for n in values if _source(ctx, n) == "ENVIRONMENT")
    flags = {o.name: (o.env if o.name in from_env and o.env else o.flag.split("/")[0]) for o in options}
    for option in options:
        problem = out_of_bounds(option, values.get(option.name))
        if problem:
            raise OptionError(f"{flags[option.name]} must be {problem}")
        if option.choices and option.name in values and values[option.name] not in option.choices:
            given_value = values[option.name]
            raise OptionError(f"unknown {flags[option.name]} {given_value!r} (choose from {', '.join(option.choices)})")

    def value(name: str, default: Any = None) -> Any:
        return values.get(name, table[name].default if name in table else default)

    try:
        config = sampler_settings(values)
    except ValueError as error:
        raise OptionError(str(error)) from None
    explicit = frozenset(fields_set_by(given))
    effort = value("effort")
    if effort is not None and effort not in EFFORTS:
        raise OptionError(f"{flags['effort']} must be one of {', '.join(EFFORTS)}, not {effort!r}")
    fills: Local | Remote = Local(
        value("model"), value("device", "auto"), value("dtype", "auto"), config, explicit, effort,
        value("quantize", "auto"),
    )  # fmt: skip
    if value("endpoint"):
        standard = {o.field or o.name: getattr(config, o.field or o.name) for o in SAMPLER if o.name in STANDARD}
        served = {o.field: values[o.name] for o in SAMPLER if o.field in explicit and o.name not in STANDARD}
        fills = Remote(
            value("endpoint"), value("model") or None, value("endpoint_key"), value("stream_mode", "auto"),
            value("timeout", 60.0), config, MappingProxyType(standard), frozenset(standard) & explicit,
            MappingProxyType(served), effort,
        )  # fmt: skip
    recorded = {n: values[n] for n in sorted(given) if n in table and table[n].recorded and _scalar(values[n])}
    return Resolved(
        command=ctx.info_name or "?",
        fills=fills,
        repair=Repair(value("repair_rounds", 0) if value("repair", True) else 0, value("repair_tries", 1)),
        view=View(bool(value("quiet", False)), value("live"), bool(value("exit_when_done", False))),
        output=Output(
            value("output"), bool(value("force")), value("lang"), bool(value("as_json")), bool(value("diff"))
        ),
        length=value("length"),
        testing=Testing(value("test"), value("rounds", 0), value("test_timeout", 0.0)),
        log=bool(value("log", True)),
        recorded=MappingProxyType(recorded),
        own=own(**{f.name: values[f.name] for f in fields(own) if f.name in values}) if own else None,  # type: ignore[arg-type]
        line=command_line(ctx, given),
        subcommand=ctx.invoked_subcommand,
        secrets=tuple(str(values[o.name]) for o in options if o.secret and values.get(o.name)),
        from_env=from_env,
        flags=MappingProxyType(flags),
        grammar=grammar_of(value("schema"), bool(value("json_object", False)), flags),
    )


def grammar_of(schema: str | None, json_object: bool, flags: Mapping[str, str]) -> Grammar | None:
    """The grammar --schema FILE or --json-object asks for (not both); a schema file that cannot be
    read, is not JSON, or is not a JSON Schema the engine enforces is a usage error naming it."""
    if schema is None and not json_object:
        return None
    from dcode.constrain import Grammar, GrammarError, schema_file

    if schema is not None and json_object:
        raise OptionError(f"give {flags['schema']} or {flags['json_object']}, not both")
    if schema is None:
        return Grammar.json_object()
    try:
        return schema_file(schema)
    except GrammarError as error:
        raise OptionError(f"{flags['schema']} {schema}: {error}") from None


def out_of_bounds(option: Option, value: object) -> str | None:
    """What `value` must be, when it breaks `option`'s bounds; None when it keeps them.
    Example: LENGTH, 0 -> "at least 1 token"."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    unit = f" {option.unit}" if option.unit else ""
    bounded = (option.min, option.max, option.above) != (None, None, None)
    if bounded and isinstance(value, float) and not math.isfinite(value):
        return f"a finite number{' of' + unit if unit else ''}"
    if option.above is not None and not value > option.above:
        return f"more than {option.above:g}{unit}"
    if option.min is not None and value < option.min:
        return f"at least {option.min:g}{unit}"
    if option.max is not None and value > option.max:
        return f"at most {option.max:g}{unit}"
    return None


def _scalar(value: object) -> bool:
    return isinstance(value, bool | int | float | str)


def _source(ctx: typer.Context, name: str) -> str | None:
    source = ctx.get_parameter_source(name)
    return source.name if source is not None else None


def explicit_sampler_fields(ctx: typer.Context) -> set[str]:
    """SamplerConfig fields the user set, on the command line or through a DCODE_* variable."""
    return fields_set_by(o.name for o in SAMPLER if o.name in ctx.params and _source(ctx, o.name) not in UNSET)


def env_named(error: Exception) -> str:
    """A click error's message naming where the bad value came from: click names the environment
    variable even for a value given as a flag; keep that only when the variable gave it."""
    message = str(error.format_message())  # type: ignore[attr-defined]
    ctx, param = getattr(error, "ctx", None), getattr(error, "param", None)
    envvar = getattr(param, "envvar", None)
    if ctx is None or param is None or not isinstance(envvar, str) or param.name is None:
        return message
    if _source(ctx, param.name) != "ENVIRONMENT":
        message = message.replace(f" (env var: {envvar!r})", "")
    return message


def command_line(ctx: typer.Context, given: frozenset[str]) -> str:
    """The running command as a shell line, from what click parsed (not sys.argv, which is the
    caller's when dcode runs inside another program): `dcode bench speed --limit 5 ...`, naming
    every option the command line or a DCODE_* variable set."""
    words = ["dcode", *ctx.command_path.split()[1:]]
    for param in ctx.command.params:
        if param.name not in given:
            continue
        value = ctx.params.get(param.name)
        if param.param_type_name != "option":
            words.append(str(value))
        elif getattr(param, "is_flag", False):
            flag = param.opts[0] if value else (param.secondary_opts or param.opts)[0]
            words.append(flag)
        elif value is not None:
            words += [param.opts[0], ",".join(map(str, value)) if isinstance(value, list | tuple) else str(value)]
    return shlex.join(words)
