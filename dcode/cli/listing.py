"""`dcode models` and `dcode models pull`: what dcode can run, and downloading more."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from dcode.cli.app import INTERRUPTED, OK, RUNTIME, USAGE, command_group, fail
from dcode.cli.options import with_options
from dcode.cli.resolve import Local, Resolved
from dcode.config import EFFORTS, described
from dcode.options import LIST, LIST_JSON, PULL

# What `dcode models pull` fetches: weights as safetensors, configs, tokenizer files, chat templates.
# Never pickles (*.bin, *.pt) and never the checkpoint's own Python code, which dcode does not run.
PULL_PATTERNS = ["*.json", "*.safetensors", "*.txt", "*.jinja", "*.model", "*.tiktoken"]


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


models_app = command_group("models", "List the models dcode can run, or download one.")


def beliefs(name: str, path: Path) -> dict[str, object]:
    """What dcode believes about a checkpoint before trusting it (dcode.models.read_facts), as JSON
    values: each special token as {"id", "token"}; or {"error": ...} when its files do not say."""
    from dcode.dtypes import cpu_dtype
    from dcode.models import ModelError, read_facts
    from dcode.models.facts import token_names
    from dcode.models.plain_tokenizer import TokenTable

    try:
        facts = read_facts(name, path)
        names = token_names(facts, TokenTable(path))
    except ModelError as error:
        return {"error": str(error)}

    def token(i: int) -> dict[str, object]:
        return {"id": i, "token": names.get(i)}

    return {
        "end": [token(i) for i in sorted(facts.eos_ids)],
        "pad": token(facts.pad_id),
        "mask": None if facts.noise == "uniform" else token(facts.mask_id),
        "noise": facts.noise,
        "shifted": facts.shifted,
        "block": facts.block,
        "block_origin": facts.block_origin,
        "attention": facts.attention,
        "max_length": facts.max_length,
        "vocab_size": facts.vocab_size,
        "cpu_dtype": cpu_dtype(),  # what --dtype auto runs it in on this machine's CPU (bfloat16 on CUDA)
        "efforts": {level: dict(facts.decoding(level)) for level in EFFORTS},  # what --effort runs
        "loaded_bytes": loaded_bytes(path, cpu_dtype()),  # per --quantize: the loader's own arithmetic
    }


def loaded_bytes(path: Path, dtype: str) -> dict[str, int]:
    """The memory the weights take once loaded in `dtype`, per --quantize (none, int8, int4), from
    the safetensors headers with the rule the loaders quantise by (dcode.models.quantize)."""
    from dcode.models import ModelError, checkpoint, quantize

    try:
        tensors = checkpoint.read_headers(path)
    except ModelError:
        return {}
    return {kind: quantize.weight_bytes(tensors, dtype, kind) for kind in ("none", *quantize.QUANTIZED)}


def belief_lines(facts: dict[str, object]) -> list[str]:
    """beliefs() as the indented lines under a model's row."""
    if "error" in facts:
        return [f"  facts: {facts['error']}"]

    def show(token: object) -> str:
        assert isinstance(token, dict)
        return f"{token['token'] or '?'} ({token['id']})"

    ends, efforts = facts["end"], facts["efforts"]
    assert isinstance(ends, list) and isinstance(efforts, dict)
    mask = "none: uniform noise" if facts["mask"] is None else show(facts["mask"])
    full = "causal, filled tokens first" if facts.get("attention") == "filled-first" else "full attention"
    block = facts["block"] or f"none ({full})"
    if facts["block"] and facts.get("block_origin") == "answer":
        block = f"{block} from the answer"  # blocks start where the answer does, not at position 0
    return [
        f"  end of answer: {', '.join(show(t) for t in ends) or 'none'}",
        f"  pad: {show(facts['pad'])}   mask: {mask}",
        f"  logits shifted: {'yes' if facts['shifted'] else 'no'}   block: {block}   max length: {facts['max_length']}",
        f"  runs in: {facts['cpu_dtype']} on this CPU, bfloat16 on CUDA (--dtype auto)",
        *(f"  --effort {level}: {described(settings)}" for level, settings in efforts.items()),
        *quantized_line(facts.get("loaded_bytes")),
    ]


def quantized_line(loaded: object) -> list[str]:
    """The line saying what the weights take per --quantize; none without weights."""
    if not isinstance(loaded, dict) or not loaded:
        return []
    sizes = ", ".join(f"{kind} {human_bytes(size)}" for kind, size in loaded.items())
    return [f"  weights loaded, per --quantize: {sizes}"]


@dataclass(frozen=True)
class Listing:
    """`dcode models`' own option."""

    verbose: bool


@models_app.callback(invoke_without_command=True)
@with_options(*LIST, own=Listing)
def models_command(run: Resolved[Listing]) -> None:
    """List the embedded model and every checkpoint of a supported family in the Hugging Face cache
    (HF_HUB_CACHE / HF_HOME). Nothing is loaded: sizes come from the safetensors headers, and
    --verbose reads the special tokens from the config and tokenizer files."""
    import json

    from dcode.models import list_models, saved

    if run.subcommand is not None:
        return
    as_json, verbose = run.output.as_json, run.own.verbose
    found = list_models()
    facts = {i.name: beliefs(i.name, i.path) for i in found if i.problem is None} if verbose else {}
    copies = {i.name: saved.saved_kinds(i.path) for i in found if i.problem is None and i.complete}
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
                "saved_quantized": copies.get(i.name, {}),  # kind -> the dtype its saved copy is for
                **({"error": i.problem} if i.problem is not None else {}),
                **({"facts": facts[i.name]} if verbose and i.problem is None else {}),
            }
            for i in found
        ]
        typer.echo(json.dumps(rows, indent=2))
        raise typer.Exit(OK)
    table = [("NAME", "FAMILY", "PARAMS", "DTYPE", "SIZE", "")]
    for i in found:
        note = "" if i.complete else f"incomplete: run `dcode models pull {i.name}`"
        if i.problem is not None:
            note = f"cannot load: {i.problem}"
        elif copies.get(i.name):
            note = "saved " + ", ".join(f"{kind} copy ({dtype})" for kind, dtype in copies[i.name].items())
        table.append((i.name, i.family, human_count(i.parameters), i.dtype or "-", human_bytes(i.size_bytes), note))
    widths = [max(len(cell) for cell in column) for column in zip(*table, strict=True)]
    for number, row in enumerate(table):
        typer.echo("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
        if verbose and number > 0 and row[0] in facts:
            for line in belief_lines(facts[row[0]]):
                typer.echo(line)


def available_table(rows: list[dict[str, object]]) -> list[tuple[str, ...]]:
    """catalogue.rows() as the cells of `dcode models available`."""

    def score(value: object) -> str:
        return f"{value:.1f}" if isinstance(value, float) else "-"

    table: list[tuple[str, ...]] = [
        (
            "NAME",
            "ID",
            "FAMILY",
            "PARAMS",
            "DOWNLOAD",
            "LICENCE",
            "BF16",
            "FP32",
            "INT8",
            "INT4",
            "HUMANEVAL/MBPP",
            "FITS",
        )
    ]
    for r in rows:
        memory = r["memory_gb"]
        assert isinstance(memory, dict)
        family = str(r["family"]) if r["loads"] else "not yet"
        cells = (str(r["name"]), str(r["id"]), family, f"{r['parameters_b']}B", f"{r['download_gb']} GB")
        table.append(
            (*cells, str(r["licence"]), *(f"{memory[form]:.1f} GB" for form in ("bfloat16", "float32", "int8", "int4")))
            + (f"{score(r['humaneval'])}/{score(r['mbpp'])}", str(r["fits"]))
        )
    return table


@models_app.command("available")
@with_options(LIST_JSON)
def models_available(run: Resolved[None]) -> None:
    """The released diffusion code models dcode knows by name (pull one with `dcode models pull
    NAME`, run it with --model NAME): size, licence, the authors' HumanEval/MBPP pass@1, the
    memory its weights take, and whether that fits this machine's RAM or GPU. Works offline."""
    import json

    from dcode.models import catalogue

    ram, gpu = catalogue.ram_gb(), catalogue.gpu_gb()
    rows = catalogue.rows(ram, gpu)
    if run.output.as_json:
        machine = {"ram_gb": round(ram, 1) if ram else None, "gpu_gb": round(gpu, 1) if gpu else None}
        typer.echo(json.dumps({"machine": machine, "models": rows}, indent=2))
        raise typer.Exit(OK)
    table = available_table(rows)
    widths = [max(len(cell) for cell in column) for column in zip(*table, strict=True)]
    for row in table:
        typer.echo("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    memory = f"{ram:.1f} GB of RAM" if ram else "RAM unknown"
    typer.echo(f"dcode: this machine: {memory}, {f'a {gpu:.1f} GB GPU' if gpu else 'no GPU'}", err=True)


@dataclass(frozen=True)
class Pull:
    """`dcode models pull`'s own option."""

    revision: str | None


ModelId = Annotated[str, typer.Argument(help="A name from `dcode models available`, or a Hugging Face id (org/name).")]


@models_app.command("pull")
@with_options(*PULL, own=Pull)
def models_pull(model_id: ModelId, run: Resolved[Pull]) -> None:
    """Download a checkpoint into the Hugging Face cache (safetensors, configs and tokenizer only;
    no pickles, no remote code). Prints the local folder on stdout. Run it again to resume."""
    from dcode.models import ModelError, catalogue, checkpoint, model_info, require_family, savable, saved

    # 1) validate without the network
    revision, quiet = run.own.revision, run.view.quiet
    kind, dtype = copy_wanted(run)
    entry = catalogue.find(model_id)
    if entry is not None and not entry.family:
        fail(f"{entry.repo_id}: dcode does not load {entry.name} yet (see docs/models.md)", USAGE)
    model_id = entry.repo_id if entry is not None else catalogue.current_id(model_id)
    if not checkpoint.is_repo_id(model_id):
        fail(f"neither a name from `dcode models available` nor a Hugging Face id (org/name): {model_id}", USAGE)

    import huggingface_hub
    from huggingface_hub import errors as hub_errors
    from huggingface_hub.utils import disable_progress_bars  # huggingface_hub.utils is not imported by itself

    # huggingface_hub draws its tqdm bars on stderr; only a terminal gets them.
    if quiet or not sys.stderr.isatty() or os.environ.get("TERM") == "dumb":
        disable_progress_bars()

    # 2) config.json first: a family dcode cannot run is refused before gigabytes are fetched
    try:
        head = huggingface_hub.snapshot_download(model_id, revision=revision, allow_patterns=["config.json"])
        family = require_family(config := checkpoint.read_config(Path(head)), model_id)
        if kind != "none" and not savable(family, config, model_id):
            fail(saved.refusal(kind, family), USAGE)
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

    # 3) report: the folder on stdout, a summary on stderr; 4) the quantised copy
    pulled(model_id, folder, info, quiet)
    if kind != "none":
        save_copy(folder, kind, dtype, quiet)


def copy_wanted(run: Resolved[Pull]) -> tuple[str, str]:
    """pull's --quantize (none: no copy) and the dtype the copy is made for; a kind no copy
    holds (int4) is one line, exit 2, before the network."""
    from dcode.dtypes import cpu_flags, resolve_dtype
    from dcode.models import ModelError, quantize, saved

    assert isinstance(run.fills, Local)
    kind = "none" if run.fills.quantize == "auto" else run.fills.quantize
    if kind != "none" and kind not in saved.SAVED_KINDS:
        fail(saved.refusal(kind, ""), USAGE)
    try:
        if kind != "none":
            quantize.import_torchao(kind)  # torchao missing: said before gigabytes are fetched
    except ModelError as error:
        fail(str(error), USAGE)
    try:
        return kind, resolve_dtype(run.fills.dtype, "cpu", cpu_flags())
    except ValueError as error:
        fail(f"{run.named('dtype')}: {error}", USAGE)


def save_copy(folder: Path, kind: str, dtype: str, quiet: bool) -> None:
    """Write (or keep, when it is current) the checkpoint's saved copy of `kind` for `dtype`."""
    import time

    from dcode.models import ModelError, save_quantized, saved

    path = saved.copy_path(folder, kind)
    metadata = saved.read_metadata(path)
    if metadata is not None and saved.mismatch(metadata, folder, kind, dtype) is None:
        if not quiet:
            typer.echo(f"dcode: a saved {kind} copy ({dtype}) is current: {path}", err=True)
        return
    start = time.perf_counter()
    try:
        path = save_quantized(folder, kind, dtype)
    except ModelError as error:
        fail(str(error), RUNTIME)
    if not quiet:
        size, seconds = human_bytes(path.stat().st_size), time.perf_counter() - start
        typer.echo(f"dcode: saved a {kind} copy ({dtype}, {size}) in {seconds:.1f} s: {path}", err=True)


def pulled(model_id: str, folder: Path, info: Any, quiet: bool) -> None:
    """A finished pull: its folder on stdout; what it is and what it takes loaded on stderr."""
    if not info.complete:
        fail(f"{model_id}: the download is incomplete ({folder}); run `dcode models pull {model_id}` again", RUNTIME)
    typer.echo(str(folder))
    if not quiet:
        typer.echo(
            f"dcode: {model_id}: {info.family}, {human_count(info.parameters)} parameters, "
            f"{info.dtype}, {human_bytes(info.size_bytes)}",
            err=True,
        )
        loaded = loaded_bytes(folder, "bfloat16")  # what it takes loaded, per --quantize
        typer.echo(
            f"dcode: loaded in bfloat16: {', '.join(f'{k} {human_bytes(v)}' for k, v in loaded.items())}", err=True
        )
