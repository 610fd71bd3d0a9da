"""`dcode new`: write a new file from a request."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from dcode.cli.common import (
    DEFAULT_LENGTH,
    RUNTIME,
    SYNTAX,
    USAGE,
    app,
    fail,
    interrupted,
    language_for,
    model_shown,
    option_named,
    output_target,
    read_prompt,
    run_model,
    sampler_config,
    summary_line,
    view_mode,
)
from dcode.cli.options import with_options
from dcode.cli.remote import ApiKeyOption, EndpointOption, StreamModeOption, TimeoutOption
from dcode.events import Finished
from dcode.options import MODEL, REPAIR, SAMPLER, VIEW


@app.command()
@with_options(*MODEL, *SAMPLER, *REPAIR, *VIEW)
def new(
    ctx: typer.Context,
    prompt: Annotated[str | None, typer.Argument(help="What to write; '-' or omit to read stdin.")] = None,
    output: Annotated[
        str | None, typer.Option("--output", "-o", help="Write the code to this file (atomically).")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing --output file.")] = False,
    lang: Annotated[
        str | None,
        typer.Option("--lang", envvar="DCODE_LANG", help="Language (default: -o suffix, else python)."),
    ] = None,
    length: Annotated[
        int, typer.Option("--length", envvar="DCODE_LENGTH", help="Answer canvas in tokens.")
    ] = DEFAULT_LENGTH,
    as_json: Annotated[
        bool, typer.Option("--json", envvar="DCODE_JSON", help="Print code and metadata as JSON.")
    ] = False,
    endpoint: EndpointOption = None,
    api_key: ApiKeyOption = None,
    stream_mode: StreamModeOption = "auto",
    timeout: TimeoutOption = 60.0,
    **chosen: Any,
) -> None:
    """Write a new file from a request."""
    if endpoint:  # a served model: the whole flow is dcode.cli.remote's, and no local model loads
        from dcode.cli import remote

        return remote.run_new(ctx)
    from dcode.dtypes import running_dtype
    from dcode.files import atomic_write

    # 1) validate everything that needs no model, so bad input costs nothing
    text = read_prompt(prompt)
    config = sampler_config(chosen)
    if length < 1:
        fail(f"{option_named(ctx, 'length', '--length')} must be at least 1 token", USAGE)
    target = output_target(output, force)
    language = language_for(lang, target)

    # 2) load and generate, drawing the live view on a terminal
    from dcode import pipeline

    rounds = chosen["repair_rounds"] if chosen["repair"] else 0
    quiet = chosen["quiet"]
    denoiser, finished = run_model(
        ctx,
        chosen["model"],
        chosen["device"],
        config,
        lambda m, c: pipeline.new(m, text, language, length, c, rounds, chosen["repair_tries"]),
        Finished,
        language,
        view_mode(quiet, chosen["live"]),
        chosen["exit_when_done"],
    )

    # 3) deliver: the file, then stdout
    name = denoiser.facts.name
    metadata = finished.metadata()
    if target is not None:
        try:
            atomic_write(target, finished.code)
        except OSError as error:
            fail(f"cannot write {target}: {error.strerror or error}", RUNTIME)
        except KeyboardInterrupt as error:
            interrupted(error)
    if as_json:
        extra = {
            "model": name,
            "dtype": running_dtype(denoiser),
            "language": language,
            "path": str(target) if target else None,
        }
        typer.echo(pipeline.report_json(finished, extra))
    elif target is None:
        sys.stdout.write(finished.code)
        sys.stdout.flush()
    if not quiet:
        typer.echo(summary_line(metadata, model_shown(denoiser)), err=True)
    if finished.syntax_errors:
        where = target or "the output"
        typer.echo(f"dcode: warning: {finished.syntax_errors} syntax error(s) remain in {where}", err=True)
        raise typer.Exit(SYNTAX)
