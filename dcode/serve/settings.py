"""A request's sampler settings, read by the names, types and defaults dcode.options declares.

Owns: the check that a value a request gives (OpenAI's `temperature`, `top_p`, `seed`, and any
sampler option by name in the `dcode` object) has its option's declared type (1.5 is not an
integer, true is not a number), the range check of SamplerConfig for that one field (so that a
refusal names the field), and the merge of a request's settings over the server's: the options a
request gives are the user's, the server's settings fill in the rest, and a rule's own option
given alone picks that rule (config.merge_family_defaults), as `--threshold 0.5` does on the
command line. Declares no option of its own. Pure Python: no torch, no web framework.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from dcode.config import SamplerConfig, merge_family_defaults
from dcode.option import Option
from dcode.options import SAMPLER, fields_set_by, sampler_settings

# A request names a sampler option as the command line does (`strategy`, `order`, `top_p`) or by
# the SamplerConfig field it sets (`rule`, `ordering`): dcode's client sends the field names.
BY_KEY: dict[str, Option] = {**{o.field: o for o in SAMPLER if o.field}, **{o.name: o for o in SAMPLER}}
TYPE_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}


class SettingError(ValueError):
    """A value a request gave for an option that the option cannot take; `param` names the field."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


def json_type(value: Any) -> str:
    """The JSON name of a value's type. Example: json_type(1.5) -> "number", json_type(True) -> "boolean"."""
    names = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def typed(option: Option, value: Any, param: str) -> Any:
    """`value` if it has `option`'s declared type (an integer counts as a number, a boolean as
    neither); SettingError naming `param` otherwise. Example: typed(BY_KEY["draft"], 1.5, "draft") raises."""
    if value is None and option.optional:
        return None
    kind = option.type
    fits = isinstance(value, kind) and not (isinstance(value, bool) and kind is not bool)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        fits, value = True, float(value)
    if not fits:
        what = TYPE_NAMES.get(kind, kind.__name__) + (" or null" if option.optional else "")
        raise SettingError(f"'{param}' must be {what}, got {json_type(value)}", param)
    if option.min is not None and value < option.min:
        raise SettingError(f"'{param}' must be at least {option.min}, got {value}", param)
    return value


def checked(option: Option, value: Any, param: str) -> Any:
    """`value`, type-checked, and accepted by SamplerConfig on its own (the range of the field)."""
    value = typed(option, value, param)
    try:
        sampler_settings({option.name: value})
    except (TypeError, ValueError) as error:
        raise SettingError(f"'{param}': {error}", param) from None
    return value


def read_options(given: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Sampler option values by option name from a request's `given` keys (option or field names);
    SettingError for an unknown key or a bad value. Example: {"rule": "schedule"} -> {"strategy": "schedule"}."""
    out: dict[str, Any] = {}
    for key, value in given.items():
        option = BY_KEY.get(key)
        if option is None:
            raise SettingError(f"unknown option '{prefix}{key}'", f"{prefix}{key}")
        out[option.name] = checked(option, value, f"{prefix}{key}")
    return out


def merged(server: SamplerConfig, options: Mapping[str, Any]) -> SamplerConfig:
    """The settings a request runs with: the sampler `options` it gave (by option name) over the
    server's `server` settings, a rule's own option given alone picking that rule.
    Example: a server on the verify rule, {"threshold": 0.5} -> the threshold rule at 0.5."""
    given = sampler_settings(options)
    return merge_family_defaults(given, fields_set_by(options), dataclasses.asdict(server))
