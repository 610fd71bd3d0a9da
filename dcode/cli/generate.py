"""`dcode new`: write a new file from a request."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from dcode.cli import (
    DEFAULT_LENGTH,
    RUNTIME,
    SYNTAX,
    USAGE,
    ApproxCacheOption,
    BlockOption,
    CacheOption,
    DeviceOption,
    DraftOption,
    EntropyBoundOption,
    ExitWhenDoneOption,
    HoldConflictsOption,
    LiveOption,
    ModelOption,
    OrderOption,
    QuietOption,
    RepairOption,
    RepairRoundsOption,
    RepairTriesOption,
    RepetitionPenaltyOption,
    SeedOption,
    StepsOption,
    StrategyOption,
    TemperatureOption,
    ThresholdOption,
    TopPOption,
    app,
    fail,
    interrupted,
    language_for,
    option_named,
    output_target,
    read_prompt,
    run_model,
    sampler_config,
    summary_line,
    view_mode,
)
from dcode.config import REPAIR_TRIES


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
    model: ModelOption = None,
    device: DeviceOption = "auto",
    length: Annotated[
        int, typer.Option("--length", envvar="DCODE_LENGTH", help="Answer canvas in tokens.")
    ] = DEFAULT_LENGTH,
    strategy: StrategyOption = "threshold",
    order: OrderOption = "confidence",
    steps: StepsOption = None,
    threshold: ThresholdOption = 0.9,
    entropy_bound: EntropyBoundOption = 0.1,
    block: BlockOption = None,
    temperature: TemperatureOption = 0.0,
    top_p: TopPOption = 1.0,
    repetition_penalty: RepetitionPenaltyOption = 1.0,
    hold_conflicts: HoldConflictsOption = True,
    draft: DraftOption = 15,
    seed: SeedOption = 0,
    cache: CacheOption = True,
    approx_cache: ApproxCacheOption = "dual",
    repair: RepairOption = True,
    repair_rounds: RepairRoundsOption = 3,
    repair_tries: RepairTriesOption = REPAIR_TRIES,
    as_json: Annotated[
        bool, typer.Option("--json", envvar="DCODE_JSON", help="Print code and metadata as JSON.")
    ] = False,
    live: LiveOption = None,
    exit_when_done: ExitWhenDoneOption = False,
    quiet: QuietOption = False,
) -> None:
    """Write a new file from a request."""
    from dcode.files import atomic_write

    # 1) validate everything that needs no model, so bad input costs nothing
    text = read_prompt(prompt)
    config = sampler_config(ctx.params)
    if length < 1:
        fail(f"{option_named(ctx, 'length', '--length')} must be at least 1 token", USAGE)
    target = output_target(output, force)
    language = language_for(lang, target)

    # 2) load and generate, drawing the live view on a terminal
    from dcode import pipeline

    rounds = repair_rounds if repair else 0
    denoiser, finished = run_model(
        ctx,
        model,
        device,
        config,
        lambda m, c: pipeline.new(m, text, language, length, c, rounds, repair_tries),
        language,
        view_mode(quiet, live),
        exit_when_done,
        length=length,
    )
    assert isinstance(finished, pipeline.Finished)

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
