"""`--endpoint`: dcode new, edit and repair with a served model (dcode serve, Mercury 2, SGLang,
vLLM, LMDeploy). The options are declared here once; each command branches here first thing
when --endpoint (DCODE_ENDPOINT) is given, so no local model is loaded and torch is not imported.

Reads the key from --api-key / DCODE_API_KEY, else INCEPTION_API_KEY for Inception's host, else
OPENAI_API_KEY; OPENAI_BASE_URL is never read: nothing is sent anywhere unless --endpoint names
the place. The key is never printed, logged or written to --json.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer

from dcode.cli.common import (
    RUNTIME,
    SYNTAX,
    USAGE,
    fail,
    interrupted,
    language_for,
    output_target,
    read_checkable,
    read_prompt,
    result_target,
    summary_line,
    view_mode,
)

if TYPE_CHECKING:
    from dcode.remote import Endpoint

EndpointOption = Annotated[
    str | None,
    typer.Option(
        "--endpoint",
        envvar="DCODE_ENDPOINT",
        help="An OpenAI-compatible server (http://host:8000/v1) to generate with instead of a local model; "
        "--model then names the remote model.",
    ),
]
ApiKeyOption = Annotated[
    str | None,
    typer.Option(
        "--api-key",
        envvar="DCODE_API_KEY",
        show_envvar=False,
        help="Bearer key for --endpoint (else INCEPTION_API_KEY for api.inceptionlabs.ai, else OPENAI_API_KEY).",
    ),
]
StreamModeOption = Annotated[
    str,
    typer.Option(
        "--stream-mode",
        envvar="DCODE_STREAM_MODE",
        help="How to read --endpoint's stream: auto, replace (whole texts), append (deltas) or dcode (frames).",
    ),
]
TimeoutOption = Annotated[
    float,
    typer.Option(
        "--timeout", envvar="DCODE_TIMEOUT", help="--endpoint: seconds to connect, and the longest wait between chunks."
    ),
]


def connect(params: Mapping[str, Any]) -> Endpoint:
    """The Endpoint the options name, its key and its model id; a bad option is a usage error."""
    from dcode.remote import Endpoint, RemoteError
    from dcode.remote.fill import model_of
    from dcode.remote.streams import STREAM_MODES

    if params["stream_mode"] not in STREAM_MODES:
        fail(f"unknown --stream-mode {params['stream_mode']!r} (choose from {', '.join(STREAM_MODES)})", USAGE)
    if not params["timeout"] > 0:
        fail("--timeout must be more than 0 seconds", USAGE)
    try:
        endpoint = Endpoint.parse(params["endpoint"], model=params.get("model") or None, timeout=params["timeout"])
    except RemoteError as error:
        fail(str(error), USAGE)
    key = params.get("api_key")
    if not key:  # Inception's key goes only to Inception; an OpenAI key never goes there
        key = os.environ.get("INCEPTION_API_KEY" if endpoint.inception else "OPENAI_API_KEY")
    endpoint = replace(endpoint, key=key or None)
    return replace(endpoint, model=guarded(endpoint, lambda: model_of(endpoint)))


def guarded(endpoint: Endpoint, work: Callable[[], Any]) -> Any:
    """work(), with a RemoteError as one line (the key redacted) and ctrl+c as exit 130."""
    from dcode.remote import RemoteError

    try:
        return work()
    except RemoteError as error:
        fail(endpoint.redact(str(error)), USAGE if error.kind == "usage" else RUNTIME)
    except KeyboardInterrupt as error:
        interrupted(error)  # Ctrl-C 130, SIGTERM 143, as every other command


def run(endpoint: Endpoint, params: Mapping[str, Any], events: Callable[[], Iterator[object]], language: str) -> Any:
    """The events under the live view (or drained without one); returns the final record."""
    from dcode import tui
    from dcode.remote.flows import describer
    from dcode.render import DescribeEvent, EventSource

    # A served model's stream holds dcode.remote's records (frames, then the result), which the
    # view handles as it does local events: it draws what describe returns and keeps the last one.
    source, describe = (
        cast(EventSource, events),
        cast(DescribeEvent, describer(endpoint.model or "", endpoint.host, language)),
    )
    view = view_mode(params["quiet"], params["live"])
    return guarded(endpoint, lambda: tui.run_live(source, describe, view=view, exit_when_done=params["exit_when_done"]))


def sampling(params: Mapping[str, Any], max_tokens: int) -> Any:
    from dcode.remote.fill import Sampling

    return Sampling(max_tokens, params.get("temperature", 0.0), params.get("top_p", 1.0), params.get("seed", 0))


def explicit(ctx: typer.Context) -> dict[str, Any]:
    """The sampler options the user set (by flag or DCODE_* variable), by SamplerConfig field: a
    dcode server runs them (its `dcode` request field); other servers ignore them. Temperature,
    top-p and seed travel in the standard fields."""
    from dcode.cli.common import explicit_sampler_fields
    from dcode.options import SAMPLER

    chosen = explicit_sampler_fields(ctx) - {"temperature", "top_p", "seed"}
    return {o.field: ctx.params[o.name] for o in SAMPLER if o.field is not None and o.field in chosen}


def shown_model(endpoint: Endpoint) -> str:
    return f"{endpoint.model} at {endpoint.host}"


# ---------------------------------------------------------------------------------------------
# The commands


def run_new(ctx: typer.Context) -> None:
    """`dcode new --endpoint`: validate, generate remotely, deliver as a local run does."""
    params = ctx.params
    from dcode.files import atomic_write
    from dcode.remote import flows

    # 1) validate everything that needs no server, so bad input costs nothing
    text = read_prompt(params["prompt"])
    if params["length"] < 1:
        fail("--length must be at least 1 token", USAGE)
    target = output_target(params["output"], params["force"])
    language = language_for(params["lang"], target)
    endpoint = connect(params)

    # 2) generate through the endpoint, drawing the live view on a terminal
    rounds = params["repair_rounds"] if params["repair"] else 0
    ask = sampling(params, params["length"])
    mode = params["stream_mode"]
    done = run(
        endpoint,
        params,
        lambda: flows.new(endpoint, text, language, ask, mode, rounds, params["repair_tries"], explicit(ctx)),
        language,
    )
    assert isinstance(done, flows.Generated)

    # 3) deliver: the file, then stdout
    if target is not None:
        try:
            atomic_write(target, done.code)
        except OSError as error:
            fail(f"cannot write {target}: {error.strerror}", RUNTIME)
    metadata = done.metadata()
    if params["as_json"]:
        report = {"code": done.code, "model": endpoint.model, "endpoint": endpoint.shown, "language": language}
        typer.echo(json.dumps({**report, "path": str(target) if target else None, **metadata}, indent=2))
    elif target is None:
        sys.stdout.write(done.code)
        sys.stdout.flush()
    if not params["quiet"]:
        typer.echo(summary_line(metadata, shown_model(endpoint)), err=True)
    if done.syntax_errors:
        typer.echo(f"dcode: warning: {done.syntax_errors} syntax error(s) remain in {target or 'the output'}", err=True)
        raise typer.Exit(SYNTAX)


def run_repair(ctx: typer.Context) -> None:
    """`dcode repair --endpoint`: each broken span filled through the endpoint; bytes outside kept."""
    params = ctx.params
    from dcode.cli.delivery import finish_repair
    from dcode.events import Repaired
    from dcode.remote import flows

    file: Path = params["file"]
    source, language = read_checkable(file, params["lang"])
    if not source.strip():
        fail(f"{file} is empty: nothing to repair", USAGE)
    target, to_stdout = (None, False) if params["diff"] else result_target(file, params["output"], params["force"])
    endpoint = connect(params)
    ask = sampling(params, 64)  # max_tokens is set per span, from its size (flows.fill_budget)
    done = run(
        endpoint,
        params,
        lambda: flows.mend(
            endpoint, source, language, ask, params["repair_rounds"], params["repair_tries"], "file", file.name
        ),
        language,
    )
    assert isinstance(done, Repaired)
    keys = {"model": endpoint.model, "endpoint": endpoint.shown}
    say = {"diff": params["diff"], "as_json": params["as_json"], "quiet": params["quiet"]}
    finish_repair(source, done, file, target, to_stdout, keys, **say)


def run_edit(ctx: typer.Context) -> None:
    """`dcode edit --endpoint`: the region as one fill through the endpoint; delivered as locally."""
    params = ctx.params
    from dcode.cli.delivery import Delivery, finish_edit
    from dcode.edit import RegionError, describe, select
    from dcode.remote import flows
    from dcode.remote.flows import fill_budget

    # 1) validate everything that needs no server, so bad input costs nothing and touches no file
    file: Path = params["file"]
    lines, symbol = params["lines"], params["symbol"]
    if lines is not None and symbol is not None:
        fail("--lines and --symbol cannot be used together", USAGE)
    writes = not (params["diff"] or params["dry_run"])
    source, language = read_checkable(file, params["lang"])
    target, to_stdout = result_target(file, params["output"], params["force"]) if writes else (None, False)
    try:
        region = select(source, language, lines, symbol, where=str(file))
    except RegionError as error:
        fail(str(error), USAGE)
    text = read_prompt(params["instruct"], "instruction", "pass --instruct TEXT, or pipe it on stdin")
    if params["length"] is not None and params["length"] < 1:
        fail("--length must be at least 1 token", USAGE)
    endpoint = connect(params)

    # 2) one fill through the endpoint; FILE is not touched meanwhile
    old = source.encode()[region[0] : region[1]].decode()
    ask = sampling(params, params["length"] or fill_budget(old, 32))
    rounds = params["repair_rounds"] if params["repair"] else 0
    edited = run(
        endpoint,
        params,
        lambda: flows.edit(endpoint, source, region, text, language, ask, rounds, params["repair_tries"], str(file)),
        language,
    )
    assert isinstance(edited, flows.Changed)

    # 3) deliver as a local edit does
    plan = Delivery(file, source, edited, writes and edited.broke, writes, target, to_stdout)
    old_span = "the whole file" if lines is None and symbol is None else describe(source, region)
    selection = symbol if symbol is not None else old_span
    keys = {"model": endpoint.model, "endpoint": endpoint.shown, "language": language, "selection": selection}
    say = {"as_json": params["as_json"], "dry_run": params["dry_run"], "quiet": params["quiet"]}
    finish_edit(plan, params["output"], shown_model(endpoint), keys, old_span, **say)
