"""Typer commands: the only place that reads argv, the environment and stdin, and picks exit codes.

Exit codes: 0 ok, 1 runtime error, 2 usage error (bad input), 3 syntax errors remain, 130
interrupted. The answer goes to stdout; progress goes to stderr, and only to a terminal.
Heavy imports (torch, transformers) happen inside the commands that need a model.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal, NoReturn

import typer
from typer.core import TyperGroup

from dcode.config import ORDERINGS, RULES, SamplerConfig

if TYPE_CHECKING:
    from dcode.models import Denoiser

OK, RUNTIME, USAGE, SYNTAX, INTERRUPTED = 0, 1, 2, 3, 130
DEFAULT_LENGTH = 256  # answer tokens when neither --length nor DCODE_LENGTH is given


class OneLineErrors(TyperGroup):
    """Click's usage errors as one `dcode: error:` line (exit 2) instead of four lines."""

    def main(self, *args, standalone_mode: bool = True, **kwargs):  # type: ignore[no-untyped-def, override]
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)  # type: ignore[misc]
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)  # type: ignore[misc]
        except typer.TyperException as error:  # click's exceptions, vendored by typer
            if type(error).__name__ == "NoArgsIsHelpError":  # bare `dcode`: the help, as click shows it
                typer.echo(error.format_message(), err=True)
            else:
                typer.echo(f"dcode: error: {error.format_message()}", err=True)
            sys.exit(error.exit_code)
        except typer.Abort:
            sys.exit(INTERRUPTED)
        sys.exit(code if isinstance(code, int) else OK)


app = typer.Typer(
    cls=OneLineErrors,
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain click errors: no boxes, no escape codes in captured stderr
    help="Generate whole files with a local diffusion code model.",
)


def fail(message: str, code: int) -> NoReturn:
    """One line on stderr, then exit with `code`."""
    typer.echo(f"dcode: error: {message}", err=True)
    raise typer.Exit(code)


def read_prompt(
    value: str | None, what: str = "prompt", hint: str = "pass it as an argument, or pipe it on stdin"
) -> str:
    """The argument's text, or stdin's when the argument is '-' or absent and stdin is piped."""
    if value is not None and value != "-":
        text = value
    elif value is None and sys.stdin.isatty():
        fail(f"no {what}: {hint}", USAGE)
    else:
        raw = sys.stdin.buffer.read()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            fail(f"stdin is not UTF-8 text (bad byte at offset {error.start})", USAGE)
    if not text.strip():
        fail(f"the {what} is empty", USAGE)
    return text


def language_for(explicit: str | None, output: Path | None) -> str:
    """--lang, else the -o suffix, else python."""
    from dcode import syntax

    try:
        found = syntax.detect_language(str(output) if output else None, None, explicit)
    except syntax.UnknownLanguage as error:
        fail(str(error), USAGE)
    return found or "python"


def output_target(raw: str | None, force: bool) -> Path | None:
    """-o as a Path after checking it can be written (a trailing slash names a folder: refused)."""
    from dcode.files import FileProblem, check_writable

    if raw is None:
        return None
    if raw.endswith(("/", os.sep)):
        fail(f"{raw} names a folder; give a file name", USAGE)
    try:
        check_writable(Path(raw), force)
    except FileProblem as error:
        fail(str(error), USAGE)
    return Path(raw)


def pick_device(name: str) -> tuple[object, object]:
    """(torch.device, dtype) for --device; a requested device that is absent is an error."""
    import torch

    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        fail("--device cuda: no CUDA device is available", USAGE)
    if name == "mps" and not torch.backends.mps.is_available():
        fail("--device mps: no Apple GPU is available", USAGE)
    if name not in ("cpu", "cuda", "mps"):
        fail(f"unknown --device {name!r} (choose from auto, cpu, cuda, mps)", USAGE)
    dtype = torch.bfloat16 if name == "cuda" else torch.float32
    return torch.device(name), dtype


def load_model(spec: str | None, device: str) -> Denoiser:
    from dcode.models import ModelError, load

    where, dtype = pick_device(device)
    try:
        return load(spec, where, dtype)  # type: ignore[arg-type]
    except ModelError as error:
        fail(str(error), USAGE)
    except OSError as error:
        fail(f"cannot load model {spec or 'dcode-tiny'}: {error}", RUNTIME)


def view_mode(quiet: bool, live: bool | None) -> Literal["auto", "none"]:
    """'auto' (Textual, or Rich Live when stdin is piped) when a view will draw, else 'none'."""
    return "auto" if show_progress(quiet, live) else "none"


def show_progress(quiet: bool, live: bool | None) -> bool:
    """The live view only on a terminal's stderr, never with -q, --no-live or TERM=dumb."""
    if quiet or live is False or os.environ.get("TERM") == "dumb":
        return False
    return sys.stderr.isatty()


def summary_line(metadata: dict[str, object], model: str) -> str:
    line = (
        f"dcode: {metadata['tokens']} tokens in {metadata['forward_passes']} passes "
        f"({metadata['tokens_per_forward']} tok/pass), {metadata['seconds']:.2f} s, "
        f"{metadata['tokens_per_second']} tok/s, {model}"
    )
    repaired = metadata.get("repair")
    if isinstance(repaired, dict) and repaired["rounds"]:
        line += (
            f"; repair: {repaired['issues_before']} -> {repaired['issues_after']} issues in "
            f"{repaired['rounds']} round(s), +{repaired['extra_forward_passes']} passes"
        )
    return line


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


@app.command()
def check(
    files: Annotated[list[Path], typer.Argument(help="Files to check.")],
    lang: Annotated[str | None, typer.Option("--lang", envvar="DCODE_LANG", help="Language for every file.")] = None,
    as_json: Annotated[bool, typer.Option("--json", envvar="DCODE_JSON", help="Print issues as JSON.")] = False,
) -> None:
    """Check files for syntax errors (no model is loaded). Exit 0 clean, 3 errors, 2 unreadable."""
    import json

    from dcode import syntax
    from dcode.files import FileProblem, read_source

    unreadable = found = False
    report: list[dict[str, object]] = []
    for path in files:
        try:
            source = read_source(path)
            language = syntax.detect_language(str(path), source, lang)
        except FileProblem as error:
            typer.echo(f"dcode: error: {error}", err=True)
            unreadable = True
            continue
        except syntax.UnknownLanguage as error:
            fail(str(error), USAGE)
        if language is None:
            typer.echo(f"dcode: {path}: unknown language, not checked (use --lang)", err=True)
            continue
        issues = syntax.find_issues(source, language)
        found = found or bool(issues)
        if as_json:
            report.append({"path": str(path), "language": language, "issues": [vars(i) for i in issues]})
        else:
            for issue in issues:
                typer.echo(syntax.format_issue(str(path), issue))
    if as_json:
        typer.echo(json.dumps(report, indent=2))
    raise typer.Exit(USAGE if unreadable else SYNTAX if found else OK)


@app.command("repair")
def repair_command(
    file: Annotated[Path, typer.Argument(help="File to repair in place.")],
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the result here instead.")] = None,
    diff: Annotated[bool, typer.Option("--diff", help="Print a unified diff; write nothing.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing --output file.")] = False,
    lang: Annotated[str | None, typer.Option("--lang", envvar="DCODE_LANG")] = None,
    model: Annotated[str | None, typer.Option("--model", envvar="DCODE_MODEL")] = None,
    device: Annotated[str, typer.Option("--device", envvar="DCODE_DEVICE")] = "auto",
    rounds: Annotated[int, typer.Option("--repair-rounds", envvar="DCODE_REPAIR_ROUNDS", min=1)] = 3,
    temperature: Annotated[float, typer.Option("--temperature", envvar="DCODE_TEMPERATURE")] = 0.0,
    seed: Annotated[int, typer.Option("--seed", envvar="DCODE_SEED")] = 0,
    as_json: Annotated[bool, typer.Option("--json", envvar="DCODE_JSON")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", envvar="DCODE_QUIET")] = False,
) -> None:
    """Regenerate the spans of FILE that do not parse. Exit 0 fixed, 3 errors remain."""
    import difflib
    import json

    from dcode import pipeline, syntax
    from dcode.files import FileProblem, atomic_write, check_writable, read_source
    from dcode.repair import Repaired

    # 1) the input must be a readable, checkable, non-empty text file
    try:
        source = read_source(file)
        language = syntax.detect_language(str(file), source, lang)
        if output is not None and not diff:
            check_writable(output, force)
    except FileProblem as error:
        fail(str(error), USAGE)
    except syntax.UnknownLanguage as error:
        fail(str(error), USAGE)
    if language is None:
        fail(f"{file}: unknown language (use --lang)", USAGE)
    if not source.strip():
        fail(f"{file} is empty: nothing to repair", USAGE)
    try:
        config = SamplerConfig(temperature=temperature, seed=seed)
    except ValueError as error:
        fail(str(error), USAGE)

    # 2) repair
    try:
        denoiser = load_model(model, device)
        done = None
        for event in pipeline.repair_file(denoiser, source, language, file.name, config, rounds):
            if isinstance(event, Repaired):
                done = event
    except pipeline.InputError as error:
        fail(str(error), USAGE)
    assert done is not None

    # 3) deliver: a diff, or the file (only if it got better)
    changed = done.code != source
    if diff:
        lines = difflib.unified_diff(
            source.splitlines(keepends=True), done.code.splitlines(keepends=True), f"a/{file}", f"b/{file}"
        )
        sys.stdout.write("".join(lines))
    elif changed:
        try:
            atomic_write(output or file, done.code)
        except OSError as error:
            fail(f"cannot write {output or file}: {error.strerror}", RUNTIME)
    if as_json:
        typer.echo(json.dumps({"path": str(output or file), "changed": changed, **pipeline.repair_metadata(done)}))
    elif not quiet:
        typer.echo(
            f"dcode: {file}: {done.issues_before} -> {done.issues_after} syntax issue(s) in {done.rounds} round(s)"
            + ("" if changed or diff else ", file unchanged"),
            err=True,
        )
    raise typer.Exit(SYNTAX if done.issues_after else OK)


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
PULL_PATTERNS = ["*.json", "*.safetensors", "*.txt", "*.jinja", "*.model", "*.tiktoken"]
# `dcode new` / `dcode edit` parameters -> the SamplerConfig field each one sets.
SAMPLER_OPTIONS = {
    "order": "ordering",
    "strategy": "rule",
    "steps": "steps",
    "threshold": "threshold",
    "entropy_bound": "entropy_bound",
    "block": "block",
    "temperature": "temperature",
    "top_p": "top_p",
    "cache": "cache",
    "seed": "seed",
}


def explicit_sampler_fields(ctx: typer.Context) -> set[str]:
    """SamplerConfig fields the user set, on the command line or through a DCODE_* variable."""
    fields = set()
    for param, field in SAMPLER_OPTIONS.items():
        source = ctx.get_parameter_source(param)
        if source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP"):
            fields.add(field)
    return fields


def with_family_defaults(config: SamplerConfig, denoiser: Denoiser, ctx: typer.Context) -> SamplerConfig:
    """`config` with the model family's recommended settings for every option the user left unset."""
    from dcode.models import apply_defaults

    try:
        return apply_defaults(config, denoiser.facts.defaults, explicit_sampler_fields(ctx))
    except ValueError as error:
        fail(f"{denoiser.facts.name}: {error}", USAGE)


def human_count(n: int | None) -> str:
    """7615616512 -> '7.6B', 5800000 -> '5.8M'."""
    if n is None:
        return "?"
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return str(n)


def human_bytes(n: int) -> str:
    """15231233024 -> '15.2 GB'."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


models_app = typer.Typer(
    help="List the models dcode can run, or download one.",
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)
app.add_typer(models_app, name="models")


@models_app.callback(invoke_without_command=True)
def models_command(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", envvar="DCODE_JSON", help="Print the list as JSON.")] = False,
) -> None:
    """List the embedded model and every checkpoint of a supported family in the Hugging Face cache
    (HF_HUB_CACHE / HF_HOME). Nothing is loaded: sizes come from the safetensors headers."""
    import json

    from dcode.models import list_models

    if ctx.invoked_subcommand is not None:
        return
    found = list_models()
    if as_json:
        rows = [
            {
                "name": i.name,
                "family": i.family,
                "parameters": i.parameters,
                "dtype": i.dtype,
                "size_bytes": i.size_bytes,
                "complete": i.complete,
                "path": str(i.path),
            }
            for i in found
        ]
        typer.echo(json.dumps(rows, indent=2))
        raise typer.Exit(OK)
    table = [("NAME", "FAMILY", "PARAMS", "DTYPE", "SIZE", "")]
    for i in found:
        note = "" if i.complete else f"incomplete: run `dcode models pull {i.name}`"
        table.append((i.name, i.family, human_count(i.parameters), i.dtype or "-", human_bytes(i.size_bytes), note))
    widths = [max(len(cell) for cell in column) for column in zip(*table, strict=True)]
    for row in table:
        typer.echo("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


@models_app.command("pull")
def models_pull(
    model_id: Annotated[str, typer.Argument(help="Hugging Face id, e.g. Dream-org/Dream-Coder-v0-Instruct-7B.")],
    revision: Annotated[str | None, typer.Option("--revision", help="Branch, tag or commit (default: main).")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", envvar="DCODE_QUIET", help="No progress or summary.")] = False,
) -> None:
    """Download a checkpoint into the Hugging Face cache (safetensors, configs and tokenizer only;
    no pickles, no remote code). Prints the local folder on stdout. Run it again to resume."""
    from dcode.models import ModelError, checkpoint, model_info, require_family

    # 1) validate without the network
    if not checkpoint.is_repo_id(model_id):
        fail(f"not a Hugging Face id (org/name): {model_id}", USAGE)

    import huggingface_hub
    from huggingface_hub import errors as hub_errors

    # huggingface_hub draws its tqdm bars on stderr; only a terminal gets them.
    if quiet or not sys.stderr.isatty() or os.environ.get("TERM") == "dumb":
        huggingface_hub.utils.disable_progress_bars()

    # 2) config.json first: a family dcode cannot run is refused before gigabytes are fetched
    try:
        head = huggingface_hub.snapshot_download(model_id, revision=revision, allow_patterns=["config.json"])
        require_family(checkpoint.read_config(Path(head)), model_id)
        folder = Path(huggingface_hub.snapshot_download(model_id, revision=revision, allow_patterns=PULL_PATTERNS))
        info = model_info(model_id, folder)
    except ModelError as error:
        fail(str(error), USAGE)
    except hub_errors.GatedRepoError:
        fail(f"{model_id} is gated: accept its terms at https://huggingface.co/{model_id}, then `hf auth login`", USAGE)
    except hub_errors.RepositoryNotFoundError:
        fail(f"no model {model_id} on the Hugging Face Hub (if it is private: `hf auth login`)", USAGE)
    except hub_errors.RevisionNotFoundError:
        fail(f"{model_id} has no revision {revision}", USAGE)
    except (hub_errors.OfflineModeIsEnabled, hub_errors.LocalEntryNotFoundError):
        fail(f"cannot download {model_id}: offline (HF_HUB_OFFLINE is set, or the Hub is unreachable)", RUNTIME)
    except OSError as error:  # HfHubHTTPError, network and disk errors
        fail(
            f"download of {model_id} failed: {str(error).splitlines()[0] if str(error) else type(error).__name__}",
            RUNTIME,
        )
    except KeyboardInterrupt:
        typer.echo(f"dcode: interrupted; `dcode models pull {model_id}` resumes", err=True)
        raise typer.Exit(INTERRUPTED) from None

    # 3) report: the folder on stdout, a summary on stderr
    if not info.complete:
        fail(f"{model_id}: the download is incomplete ({folder}); run `dcode models pull {model_id}` again", RUNTIME)
    typer.echo(str(folder))
    if not quiet:
        typer.echo(
            f"dcode: {model_id}: {info.family}, {human_count(info.parameters)} parameters, "
            f"{info.dtype}, {human_bytes(info.size_bytes)}",
            err=True,
        )


@app.command(hidden=True)
def version() -> None:
    """Print the version."""
    from importlib.metadata import version as installed

    typer.echo(installed("dcode"))


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        typer.echo("dcode: interrupted", err=True)
        sys.exit(INTERRUPTED)


if __name__ == "__main__":
    main()
