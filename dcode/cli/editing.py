"""`dcode edit`: change an existing file by instruction, in place, never losing the original."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from dcode.cli import (
    INTERRUPTED,
    RUNTIME,
    SYNTAX,
    USAGE,
    app,
    fail,
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


@app.command("edit")
def edit_command(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="File to change in place (the original is kept as FILE.orig).")],
    instruct: Annotated[
        str | None,
        typer.Option("--instruct", envvar="DCODE_INSTRUCT", help="What to change; '-' or omit to read stdin."),
    ] = None,
    lines: Annotated[str | None, typer.Option("--lines", help="Rewrite only lines A-B (1-based, inclusive).")] = None,
    symbol: Annotated[
        str | None, typer.Option("--symbol", help="Rewrite only this function, method or class (Class.method).")
    ] = None,
    output: Annotated[
        str | None, typer.Option("--output", "-o", help="Write the result here; FILE is left as it is.")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing --output file.")] = False,
    diff: Annotated[bool, typer.Option("--diff", help="Print a unified diff; write nothing.")] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the diff and say that nothing was written.")
    ] = False,
    lang: Annotated[
        str | None, typer.Option("--lang", envvar="DCODE_LANG", help="Language (default: from FILE).")
    ] = None,
    model: Annotated[
        str | None,
        typer.Option("--model", envvar="DCODE_MODEL", help="Model folder (default: embedded dcode-tiny)."),
    ] = None,
    device: Annotated[str, typer.Option("--device", envvar="DCODE_DEVICE", help="auto, cpu, cuda or mps.")] = "auto",
    length: Annotated[
        int | None,
        typer.Option(
            "--length", envvar="DCODE_EDIT_LENGTH", help="Masks for the region (default: its tokens + 50%, >= 16)."
        ),
    ] = None,
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
        bool, typer.Option("--json", envvar="DCODE_JSON", help="Print the diff and metadata as JSON.")
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
    """Change FILE as an instruction asks: the whole file, --lines A-B or --symbol NAME is
    regenerated and every other byte is kept. In place (backup FILE.orig) unless --diff, --dry-run
    or -o. Exit 0 done, 3 the edit broke the syntax (nothing written if FILE parsed before)."""
    import json

    from dcode import syntax
    from dcode.edit import RegionError, describe, select, unified_diff, write_in_place
    from dcode.files import FileProblem, atomic_write, check_writable, read_source

    # 1) validate everything that needs no model, so bad input costs nothing and touches no file
    if lines is not None and symbol is not None:
        fail("--lines and --symbol cannot be used together", USAGE)
    writes = not (diff or dry_run)
    try:
        source = read_source(file)
        language = syntax.detect_language(str(file), source, lang)
        if writes and output is None:
            check_writable(file, True)  # its folder must take the backup and the new file
    except FileProblem as error:
        fail(str(error), USAGE)
    except syntax.UnknownLanguage as error:
        fail(str(error), USAGE)
    if language is None:
        fail(f"{file}: unknown language (use --lang)", USAGE)
    target = output_target(output, force) if writes else None
    try:
        region = select(source, language, lines, symbol, where=str(file))
    except RegionError as error:
        fail(str(error), USAGE)
    text = read_prompt(instruct, "instruction", "pass --instruct TEXT, or pipe it on stdin")
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
    if length is not None and length < 1:
        fail("--length must be at least 1 token", USAGE)

    # 2) load and generate, drawing the live view on a terminal; FILE is not touched meanwhile
    from dcode import pipeline, tui
    from dcode.render import Describer

    try:
        denoiser = load_model(model, device)
        config = with_family_defaults(config, denoiser, ctx)
        facts = denoiser.facts
        describer = Describer(
            denoiser.tokenizer,
            facts.mask_id,
            start=len(pipeline.prompt_ids(denoiser, text, language)),  # the view shows the whole file
            model=facts.name,
            device=denoiser.device.type,
            language=language,
            hidden=facts.eos_ids | {facts.pad_id},
        )
        rounds = repair_rounds if repair else 0
        edited = tui.run_live(
            lambda: pipeline.edit(denoiser, source, region, text, language, config, length, rounds, name=str(file)),
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
    assert isinstance(edited, pipeline.Edited)

    # 3) deliver: a diff, the file in place (after a backup), or another file; never a broken
    # version of a file that parsed
    changed = edited.code != source
    patch = unified_diff(source, edited.code, file)
    refused = writes and edited.broke
    backup: Path | None = None
    try:
        if refused:
            sys.stderr.write(patch)
        elif target is not None:
            atomic_write(target, edited.code)
        elif changed and writes:
            backup = write_in_place(file, edited.code)
    except OSError as error:
        fail(f"cannot write {target or file}: {error.strerror or error}", RUNTIME)
    except KeyboardInterrupt:
        typer.echo("dcode: interrupted", err=True)
        raise typer.Exit(INTERRUPTED) from None
    written = not refused and (target is not None or backup is not None)
    old_span = "the whole file" if lines is None and symbol is None else describe(source, region)
    new_span = describe(edited.code, edited.new_region) if edited.new_region[1] > edited.new_region[0] else "nothing"
    metadata = edited.metadata()
    if as_json:
        report = {
            "path": str(file),
            "output": output,
            "backup": str(backup) if backup is not None else None,
            "written": written,
            "changed": changed,
            "model": denoiser.facts.name,
            "language": language,
            "selection": symbol if symbol is not None else old_span,
            "diff": patch,
            **metadata,
        }
        typer.echo(json.dumps(report, indent=2))
    elif not writes:
        sys.stdout.write(patch)
        sys.stdout.flush()
    if dry_run:
        typer.echo("dcode: dry run: nothing written", err=True)
    if not quiet:
        typer.echo(summary_line(metadata, denoiser.facts.name), err=True)
        if written and target is not None:
            typer.echo(f"dcode: wrote {target} ({old_span} of {file} -> {new_span}); {file} untouched", err=True)
        elif backup is not None:
            typer.echo(f"dcode: edited {file} ({old_span} -> {new_span}); backup: {backup}", err=True)
        elif not changed:
            typer.echo(f"dcode: {file}: the edit changed nothing; nothing written", err=True)
    if changed and new_span == "nothing":
        typer.echo(f"dcode: warning: the edit deleted {old_span} of {file}", err=True)
    if refused:
        typer.echo(
            f"dcode: error: the edit leaves {edited.errors_after} syntax error(s) in {file}, which parsed before; "
            "nothing written (the diff is above)",
            err=True,
        )
        raise typer.Exit(SYNTAX)
    if edited.errors_after:
        had = f" (it had {edited.original_errors})" if edited.original_errors else ""
        where = f"the edited {file} would have" if not writes else f"{target or file} has"
        typer.echo(f"dcode: warning: {where} {edited.errors_after} syntax error(s){had}", err=True)
        raise typer.Exit(SYNTAX)


# What `dcode models pull` fetches: weights as safetensors, configs, tokenizer files, chat templates.
# Never pickles (*.bin, *.pt) and never the checkpoint's own Python code, which dcode does not run.
