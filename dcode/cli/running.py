"""Running a command's flow: the filler its options name (an endpoint with --endpoint, else the
local model), the flow's stream under the live view, and its failures as exit codes.

The endpoint's key comes from --endpoint-key / DCODE_ENDPOINT_KEY, else INCEPTION_API_KEY for
Inception's host, else OPENAI_API_KEY; OPENAI_BASE_URL is never read: nothing is sent anywhere
unless --endpoint names the place. The key is never printed, logged or written to --json. With
--endpoint no local model loads and torch is not imported.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar

import typer

from dcode.cli.app import RUNTIME, USAGE, fail, interrupted
from dcode.cli.loading import load_model, with_family_defaults
from dcode.cli.resolve import Local, Remote, Resolved, View
from dcode.cli.stdio import view_mode
from dcode.events import Edited, Finished, Repaired

if TYPE_CHECKING:
    from dcode.constrain import Grammar
    from dcode.events import Event
    from dcode.filler import Filler
    from dcode.remote.filler import EndpointFiller

R = TypeVar("R", Finished, Edited, Repaired)  # the record a command's stream ends with


def run_flow(
    run: Resolved[object], flow: Callable[[Filler], Iterator[Event]], result: type[R], language: str
) -> tuple[Filler, R]:
    """Build the filler, run `flow(filler)` under the live view and return the filler and the
    stream's `result` record; failures are one line and an exit code (bad input 2, a server or
    the sampler failing 1, interrupted 130, terminated 143)."""
    from dcode.filler import FillError
    from dcode.flows import InputError

    try:
        filler = make_filler(run)
        last = live(filler, flow, language, run.view, run.view.exit_when_done)
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
    filler: Filler, flow: Callable[[Filler], Iterator[Event]], language: str, view: View, closes: bool
) -> Event | None:
    """`flow(filler)` under the live view (on a terminal's stderr, unless -q or --no-live); its last
    event. Its errors are the caller's: run_flow turns them into exit codes, `dcode fix` into a
    region skipped. `closes`: the view closes when the flow is done."""
    from dcode import tui
    from dcode.render import Describer

    mode = view_mode(view.quiet, view.live)
    reading = filler.reading()
    describer = Describer(
        reading.tokenizer, reading.mask_id, model=filler.model, device=filler.device, language=language,
        hidden=reading.hidden,
    )  # fmt: skip
    return tui.run_live(lambda: flow(filler), describer, view=mode, exit_when_done=closes)


def make_filler(run: Resolved[object]) -> Filler:
    """The filler the options name: the endpoint, or the local model; either with the grammar a
    whole answer follows (--schema, --json-object)."""
    fills = run.fills
    if isinstance(fills, Remote):
        return replace(endpoint_filler(fills, run.named), grammar=run.grammar)
    return model_filler(fills, run.grammar)


def model_filler(local: Local, grammar: Grammar | None = None) -> Filler:
    """The local model the options name, with its family's defaults under the user's settings."""
    from dcode.localfill import LocalFiller

    denoiser = load_model(local.model, local.device, local.dtype, local.quantize)
    config = with_family_defaults(local.sampler, denoiser, local.explicit, local.effort)
    return LocalFiller(denoiser, config, grammar=grammar)


def endpoint_filler(remote: Remote, named: Callable[[str], str]) -> EndpointFiller:
    """The endpoint the options name, its key and its model id; a bad option is a usage error."""
    from dcode.remote import Endpoint, RemoteError
    from dcode.remote.fill import Sampling, model_of
    from dcode.remote.filler import EndpointFiller
    from dcode.remote.streams import STREAM_MODES

    if remote.stream_mode not in STREAM_MODES:
        mode = remote.stream_mode
        fail(f"unknown {named('stream_mode')} {mode!r} (choose from {', '.join(STREAM_MODES)})", USAGE)
    try:
        endpoint = Endpoint.parse(remote.url, model=remote.model, timeout=remote.timeout)
    except RemoteError as error:
        fail(str(error), USAGE)
    key = remote.key
    if not key:  # Inception's key goes only to Inception; an OpenAI key never goes there
        key = os.environ.get("INCEPTION_API_KEY" if endpoint.inception else "OPENAI_API_KEY")
    endpoint = replace(endpoint, key=key or None)
    try:
        endpoint = replace(endpoint, model=model_of(endpoint))
    except RemoteError as error:
        fail(endpoint.redact(str(error)), USAGE if error.kind == "usage" else RUNTIME)
    except KeyboardInterrupt as error:
        interrupted(error)
    sampling = Sampling(0, **remote.standard, sent=remote.sent, effort=remote.effort)  # max_tokens: per request
    return EndpointFiller(endpoint, sampling, remote.stream_mode, dict(remote.served))  # type: ignore[arg-type]
