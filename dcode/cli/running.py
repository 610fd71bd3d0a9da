"""Running a command's flow: the filler its options name (an endpoint with --endpoint, else the
local model), the flow's stream under the live view, and its failures as exit codes.

The endpoint's key comes from --endpoint-key / DCODE_ENDPOINT_KEY, else INCEPTION_API_KEY for
Inception's host, else OPENAI_API_KEY; OPENAI_BASE_URL is never read: nothing is sent anywhere
unless --endpoint names the place. The key is never printed, logged or written to --json. With
--endpoint no local model loads and torch is not imported.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

import typer

from dcode.cli.app import RUNTIME, USAGE, fail, interrupted, option_named
from dcode.cli.loading import explicit_sampler_fields, load_model, sampler_config, with_family_defaults
from dcode.cli.stdio import view_mode
from dcode.dtypes import running_dtype
from dcode.events import Edited, Finished, Repaired
from dcode.options import SAMPLER

if TYPE_CHECKING:
    from dcode.events import Event
    from dcode.filler import Filler
    from dcode.remote.filler import EndpointFiller
    from dcode.render import Describer

R = TypeVar("R", Finished, Edited, Repaired)  # the record a command's stream ends with


def run_flow(
    ctx: typer.Context,
    chosen: Mapping[str, Any],
    flow: Callable[[Filler], Iterator[Event]],
    result: type[R],
    language: str,
) -> tuple[Filler, R]:
    """Build the filler, run `flow(filler)` under the live view and return the filler and the
    stream's `result` record; failures are one line and an exit code (bad input 2, a server or
    the sampler failing 1, interrupted 130, terminated 143)."""
    from dcode.filler import FillError
    from dcode.flows import InputError

    try:
        filler = endpoint_filler(ctx, chosen) if chosen.get("endpoint") else model_filler(ctx, chosen)
        last = live(filler, flow, language, chosen, chosen["exit_when_done"])
    except typer.Exit:
        raise
    except InputError as error:
        fail(str(error), USAGE)
    except FillError as error:  # a server's RemoteError, or a fill refused
        fail(str(error), USAGE if getattr(error, "kind", "runtime") == "usage" else RUNTIME)
    except KeyboardInterrupt as error:
        interrupted(error)
    except (RuntimeError, MemoryError) as error:
        fail(f"generation failed: {str(error).splitlines()[0] if str(error) else type(error).__name__}", RUNTIME)
    if not isinstance(last, result):
        fail(f"generation failed: the run ended without its {result.__name__} record", RUNTIME)
    return filler, last


def live(
    filler: Filler, flow: Callable[[Filler], Iterator[Event]], language: str, chosen: Mapping[str, Any], closes: bool
) -> Event | None:
    """`flow(filler)` under the live view (on a terminal's stderr, unless -q or --no-live); its last
    event. Its errors are the caller's: run_flow turns them into exit codes, `dcode fix` into a
    region skipped. `closes`: the view closes when the flow is done."""
    from dcode import tui

    view = view_mode(chosen["quiet"], chosen["live"])
    return tui.run_live(lambda: flow(filler), describer(filler, language), view=view, exit_when_done=closes)


def describer(filler: Filler, language: str) -> Describer:
    """The live view's Describer: a local model's decodes its tokens; an endpoint's draws its frames."""
    from dcode.render import Describer

    model = getattr(filler, "denoiser", None)
    if model is None:
        return Describer(None, -1, model=filler.model, device=filler.device, language=language)
    facts = model.facts
    hidden = facts.eos_ids | {facts.pad_id}
    return Describer(
        model.tokenizer, facts.mask_id, model=filler.model, device=filler.device, language=language, hidden=hidden
    )


def model_filler(ctx: typer.Context, chosen: Mapping[str, Any]) -> Filler:
    """The local model the options name, with its family's defaults under the user's settings."""
    from dcode.pipeline import ModelFiller

    config = sampler_config(chosen)  # a bad value is a usage error before the model loads
    denoiser = load_model(chosen["model"], chosen["device"], chosen.get("dtype", "auto"))
    return ModelFiller(denoiser, with_family_defaults(config, denoiser, ctx))


def endpoint_filler(ctx: typer.Context, chosen: Mapping[str, Any]) -> EndpointFiller:
    """The endpoint the options name, its key and its model id; a bad option is a usage error."""
    from dcode.remote import Endpoint, RemoteError
    from dcode.remote.fill import SAMPLING_FIELDS, Sampling, model_of
    from dcode.remote.filler import EndpointFiller
    from dcode.remote.streams import STREAM_MODES

    config = sampler_config(chosen)
    if chosen["stream_mode"] not in STREAM_MODES:
        named = option_named(ctx, "stream_mode", "--stream-mode")
        fail(f"unknown {named} {chosen['stream_mode']!r} (choose from {', '.join(STREAM_MODES)})", USAGE)
    if not chosen["timeout"] > 0:
        fail(f"{option_named(ctx, 'timeout', '--timeout')} must be more than 0 seconds", USAGE)
    try:
        endpoint = Endpoint.parse(chosen["endpoint"], model=chosen.get("model") or None, timeout=chosen["timeout"])
    except RemoteError as error:
        fail(str(error), USAGE)
    key = chosen.get("endpoint_key")
    if not key:  # Inception's key goes only to Inception; an OpenAI key never goes there
        key = os.environ.get("INCEPTION_API_KEY" if endpoint.inception else "OPENAI_API_KEY")
    endpoint = replace(endpoint, key=key or None)
    try:
        endpoint = replace(endpoint, model=model_of(endpoint))
    except RemoteError as error:
        fail(endpoint.redact(str(error)), USAGE if error.kind == "usage" else RUNTIME)
    except KeyboardInterrupt as error:
        interrupted(error)
    given = frozenset(explicit_sampler_fields(ctx) & SAMPLING_FIELDS)  # only these travel: a strict server refuses some
    sampling = Sampling(0, config.temperature, config.top_p, config.seed, given)  # max_tokens: per request
    return EndpointFiller(endpoint, sampling, chosen["stream_mode"], served_settings(ctx, chosen))


def served_settings(ctx: typer.Context, chosen: Mapping[str, Any]) -> dict[str, Any]:
    """The sampler options the user set (by flag or DCODE_* variable), by SamplerConfig field: a
    dcode server runs them (its `dcode` request field); other servers ignore them. Temperature,
    top-p and seed travel in the standard fields."""
    given = explicit_sampler_fields(ctx) - {"temperature", "top_p", "seed"}
    return {o.field: chosen[o.name] for o in SAMPLER if o.field is not None and o.field in given}


def identity(filler: Filler) -> tuple[str, dict[str, object]]:
    """How the summary line names the filler's model ("dcode-tiny in bfloat16", "mercury-2 at
    host"), and the report's keys for it (the dtype it ran in; an endpoint's address, never its key)."""
    known = who(filler)
    if known["endpoint"] is not None:
        return f"{filler.model} at {filler.device}", {"model": filler.model, "endpoint": known["endpoint"]}
    dtype = known["dtype"]
    return (f"{filler.model} in {dtype}" if dtype else filler.model), {"model": filler.model, "dtype": dtype}


def who(filler: Filler) -> dict[str, str | None]:
    """What the history keeps of the filler: the model and its device and dtype, or the endpoint's
    address (dcode.history cleans it of any user, password or query; the key is never in it)."""
    endpoint = getattr(filler, "endpoint", None)
    if endpoint is not None:
        return {"model": filler.model, "device": None, "dtype": None, "endpoint": endpoint.shown}
    dtype = running_dtype(getattr(filler, "denoiser", None))
    return {"model": filler.model, "device": filler.device, "dtype": dtype, "endpoint": None}
