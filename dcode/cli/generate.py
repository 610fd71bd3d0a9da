"""`dcode new`: write a new file from a request."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated

import typer

from dcode.cli import (
    DEFAULT_LENGTH,
    INTERRUPTED,
    RUNTIME,
    SYNTAX,
    USAGE,
    app,
    fail,
    language_for,
    load_model,
    output_target,
    read_prompt,
    summary_line,
    view_mode,
    with_family_defaults,
)
from dcode.config import ORDERINGS, RULES, SamplerConfig

if TYPE_CHECKING:
    pass


@app.command()
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
    model: Annotated[
        str | None,
        typer.Option("--model", envvar="DCODE_MODEL", help="Model folder (default: embedded dcode-tiny)."),
    ] = None,
    device: Annotated[str, typer.Option("--device", envvar="DCODE_DEVICE", help="auto, cpu, cuda or mps.")] = "auto",
    length: Annotated[
        int, typer.Option("--length", envvar="DCODE_LENGTH", help="Answer canvas in tokens.")
    ] = DEFAULT_LENGTH,
    strategy: Annotated[
        str, typer.Option("--strategy", envvar="DCODE_STRATEGY", help=f"Commit rule: {', '.join(RULES)}.")
    ] = "threshold",
    order: Annotated[
        str, typer.Option("--order", envvar="DCODE_ORDER", help=f"Ordering: {', '.join(ORDERINGS)}.")
    ] = "confidence",
    steps: Annotated[
        int | None, typer.Option("--steps", envvar="DCODE_STEPS", help="Passes for the schedule rule.")
    ] = None,
    threshold: Annotated[float, typer.Option("--threshold", envvar="DCODE_THRESHOLD")] = 0.9,
    entropy_bound: Annotated[float, typer.Option("--entropy-bound", envvar="DCODE_ENTROPY_BOUND")] = 0.1,
    block: Annotated[
        int | None,
        typer.Option("--block", envvar="DCODE_BLOCK", help="Semi-AR block for full-attention models."),
    ] = None,
    temperature: Annotated[float, typer.Option("--temperature", envvar="DCODE_TEMPERATURE")] = 0.0,
    top_p: Annotated[float, typer.Option("--top-p", envvar="DCODE_TOP_P")] = 1.0,
    seed: Annotated[int, typer.Option("--seed", envvar="DCODE_SEED")] = 0,
    cache: Annotated[bool, typer.Option("--cache/--no-cache", envvar="DCODE_CACHE")] = True,
    repair: Annotated[
        bool, typer.Option("--repair/--no-repair", envvar="DCODE_REPAIR", help="Regenerate spans that do not parse.")
    ] = True,
    repair_rounds: Annotated[int, typer.Option("--repair-rounds", envvar="DCODE_REPAIR_ROUNDS", min=0)] = 3,
    as_json: Annotated[
        bool, typer.Option("--json", envvar="DCODE_JSON", help="Print code and metadata as JSON.")
    ] = False,
    live: Annotated[
        bool | None, typer.Option("--live/--no-live", envvar="DCODE_LIVE", help="Live view (default: on a terminal).")
    ] = None,
    exit_when_done: Annotated[
        bool,
        typer.Option("--exit-when-done", envvar="DCODE_EXIT_WHEN_DONE", help="Close the live view when finished."),
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", envvar="DCODE_QUIET", help="No progress or summary.")] = False,
) -> None:
    """Write a new file from a request."""
    from dcode.files import atomic_write

    # 1) validate everything that needs no model, so bad input costs nothing
    text = read_prompt(prompt)
    try:
        config = SamplerConfig(
            ordering=order,  # type: ignore[arg-type]
            rule=strategy,  # type: ignore[arg-type]
            steps=steps,
            threshold=threshold,
            entropy_bound=entropy_bound,
            block=block,
            temperature=temperature,
            top_p=top_p,
            cache=cache,
            seed=seed,
        )
    except ValueError as error:
        fail(str(error), USAGE)
    if length < 1:
        fail("--length must be at least 1 token", USAGE)
    target = output_target(output, force)
    language = language_for(lang, target)

    # 2) load and generate, drawing the live view on a terminal
    from dcode import pipeline, tui
    from dcode.render import Describer

    try:
        denoiser = load_model(model, device)
        config = with_family_defaults(config, denoiser, ctx)
        facts = denoiser.facts
        describer = Describer(
            denoiser.tokenizer,
            facts.mask_id,
            length=length,
            model=facts.name,
            device=denoiser.device.type,
            language=language,
            hidden=facts.eos_ids | {facts.pad_id},
        )
        rounds = repair_rounds if repair else 0
        finished = tui.run_live(
            lambda: pipeline.new(denoiser, text, language, length, config, rounds),
            describer,
            view=view_mode(quiet, live),
            exit_when_done=exit_when_done,
        )
    except typer.Exit:
        raise
    except pipeline.InputError as error:
        fail(str(error), USAGE)
    except KeyboardInterrupt:
        typer.echo("dcode: interrupted", err=True)
        raise typer.Exit(INTERRUPTED) from None
    except (RuntimeError, MemoryError) as error:
        fail(
            f"generation failed: {str(error).splitlines()[0] if str(error) else type(error).__name__}",
            RUNTIME,
        )
    assert isinstance(finished, pipeline.Finished)

    # 3) deliver: the file, then stdout
    name = denoiser.facts.name
    metadata = finished.metadata()
    if target is not None:
        try:
            atomic_write(target, finished.code)
        except OSError as error:
            fail(f"cannot write {target}: {error.strerror}", RUNTIME)
    if as_json:
        extra = {"model": name, "language": language, "path": str(target) if target else None}
        typer.echo(pipeline.report_json(finished, extra))
    elif target is None:
        sys.stdout.write(finished.code)
        sys.stdout.flush()
    if not quiet:
        typer.echo(summary_line(metadata, name), err=True)
    if finished.syntax_errors:
        where = target or "the output"
        typer.echo(f"dcode: warning: {finished.syntax_errors} syntax error(s) remain in {where}", err=True)
        raise typer.Exit(SYNTAX)
