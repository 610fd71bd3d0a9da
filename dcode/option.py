"""What one command-line option is (dcode.options holds the table of them all): its name, flag,
environment variable, help, default, type, bounds and marks, and the two ways the table declares
one (`sampler`: a SamplerConfig field's option; `own`: a command's own). Imports neither torch
nor typer.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from dcode.config import SamplerConfig

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
    min: float | None = None  # smallest value accepted (dcode.cli.resolve checks every bound)
    max: float | None = None  # largest value accepted
    above: float | None = None  # a float must be more than this (and finite)
    unit: str = ""  # what an error says the bound counts: "--length must be at least 1 token"
    short: str | None = None  # a one-letter alias ("-q")
    shown: str | None = None  # the default as the README shows it, where str(default) would not do
    row: str | None = None  # the README row's option cell, where two options share a flag ("`--length` (edit)")
    recorded: bool = False  # the history keeps its value when the user set it (dcode log)
    secret: bool = False  # never recorded, printed or reported (the key sent to an endpoint)
    standard: bool = False  # one of OpenAI's request fields (temperature, top_p, seed): sent as such
    choices: tuple[str, ...] = ()  # the values accepted (dcode.cli.resolve checks them); () = any

    def __post_init__(self) -> None:
        if self.secret and self.recorded:
            raise ValueError(f"{self.flag}: a secret option cannot be recorded")

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
    """A sampler option: its type and default are those of SamplerConfig's field (same name unless
    given); recorded in the history when set. SamplerConfig checks its values."""
    field = field or name
    default = _SAMPLER_DEFAULTS[field]
    kind = extra.pop("type", type(default) if default is not None else int)
    return Option(name, flag, f"DCODE_{name.upper()}", help, kind, default, field=field, recorded=True, **extra)


def own(name: str, kind: type, default: Any, help: str, **extra: Any) -> Option:
    """A command's own option: --NAME and DCODE_NAME unless `flag` and `env` say otherwise."""
    flag = extra.pop("flag", "--" + name.replace("_", "-"))
    return Option(name, flag, extra.pop("env", f"DCODE_{name.upper()}"), help, kind, default, **extra)
