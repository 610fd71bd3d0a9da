"""Resolve a model spec (nothing, a folder, a Hugging Face id) and load it with its family module.

Owns: where the embedded model lives, which family reads a checkpoint (by config.json
`model_type`, else the classes `architectures` or `auto_map` name, or auto_map's modules; the
families are dcode.models.families' modules), finding an id in the local Hugging Face cache, and
listing the models there (and what a load would state about each, torch-free: read_facts), and
keeping a saved quantised copy of a checkpoint (save_quantized; which can: savable). Never
downloads and never runs code shipped with a checkpoint. Heavy imports (torch, transformers)
happen inside load(), never at import time; listing reads safetensors headers with json alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dcode.models import catalogue, checkpoint
from dcode.models import quantize as quantizing
from dcode.models.base import Denoiser, ModelError, ModelFacts
from dcode.models.families import FAMILIES
from dcode.models.plain_tokenizer import TokenTable, require_tokenizer

if TYPE_CHECKING:
    import torch

__all__ = [
    "EMBEDDED",
    "EMBEDDED_NAME",
    "FAMILIES",
    "Denoiser",
    "ModelError",
    "ModelFacts",
    "ModelInfo",
    "default_cache_dir",
    "family_of",
    "list_models",
    "load",
    "model_info",
    "read_facts",
    "require_family",
    "resolve",
]

EMBEDDED_NAME = "dcode-tiny"
EMBEDDED = Path(__file__).resolve().parent.parent / "assets" / EMBEDDED_NAME


def auto_map_entries(config: Mapping[str, Any]) -> list[str]:
    """config.json's auto_map values ("module.Class", or "org/repo--module.Class"), flattened."""
    auto_map = config.get("auto_map")
    values = auto_map.values() if isinstance(auto_map, dict) else ()
    return [e for v in values for e in (v if isinstance(v, list) else [v]) if isinstance(e, str)]


def class_names(config: Mapping[str, Any]) -> set[str]:
    """The model classes a config.json names: architectures, and auto_map's "module.Class" values."""
    names = config.get("architectures")
    found = {a for a in names if isinstance(a, str)} if isinstance(names, list) else set()
    return found | {entry.rsplit(".", 1)[-1] for entry in auto_map_entries(config)}


def module_names(config: Mapping[str, Any]) -> set[str]:
    """The modeling modules auto_map names. Example: "repo--modeling_x.Cls" -> "modeling_x"."""
    return {entry.rsplit(".", 1)[0].rsplit("--", 1)[-1] for entry in auto_map_entries(config) if "." in entry}


def family_of(config: Mapping[str, Any]) -> str | None:
    """The family that reads a config.json, by model_type, then by the classes it names; None if none."""
    model_type = str(config.get("model_type") or "").lower()
    for name, family in FAMILIES.items():
        if model_type in family.model_types:
            return name
    names, modules = class_names(config), module_names(config)
    for name, family in FAMILIES.items():
        if names & family.architectures or modules & family.modules:
            return name
    return None


def require_family(config: Mapping[str, Any], where: Path | str) -> str:
    """family_of(config), or a one-line ModelError naming the supported families."""
    family = family_of(config)
    if family is not None:
        return family
    model_type = config.get("model_type")
    raise ModelError(f"{where}: unsupported model_type {model_type!r} (supported: {', '.join(sorted(FAMILIES))})")


def default_cache_dir() -> Path:
    """huggingface_hub's cache folder (it reads HF_HUB_CACHE / HF_HOME; dcode does not)."""
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def resolve(spec: str | None, cache_dir: Path | str | None = None) -> tuple[Path, str]:
    """A model spec -> (local folder, display name). None or 'dcode-tiny' is the embedded model; an
    existing path is a folder; a catalogue name (`dcode models available`) stands for its id;
    'org/name' is looked up in the Hugging Face cache (`cache_dir`,
    default huggingface_hub's), never downloaded."""
    if spec is None or spec == EMBEDDED_NAME:
        return EMBEDDED, EMBEDDED_NAME
    folder = Path(spec).expanduser()
    if folder.exists():
        if not folder.is_dir():
            raise ModelError(f"--model must be a folder holding config.json, got a file: {spec}")
        return folder, spec
    entry = catalogue.BY_NAME.get(spec)
    if entry is not None:  # a short name: its id, which says what the files do not (bd3lm, mdlm)
        spec = entry.repo_id
    if checkpoint.is_repo_id(spec):
        spec = catalogue.current_id(spec)  # a moved org's old spelling reaches the same files
        cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        snapshot = cached(cache, spec)
        if snapshot is None:
            raise ModelError(
                f"{spec} is neither a folder nor in the Hugging Face cache ({cache}): "
                f"run `dcode models pull {spec}` to download it"
            )
        return snapshot, spec
    raise ModelError(f"model folder not found: {spec}")


def cached(cache: Path, repo_id: str) -> Path | None:
    """The cached snapshot of `repo_id`, or of a former spelling of it (a copy pulled before its
    org moved), or None."""
    for spelling in (repo_id, *catalogue.former_ids(repo_id)):
        snapshot = checkpoint.cached_snapshot(cache, spelling)
        if snapshot is not None:
            return snapshot
    return None


def load(
    spec: str | None,
    device: torch.device | None = None,
    dtype: torch.dtype | str | None = None,
    *,
    cache_dir: Path | str | None = None,
    quantize: str = "none",
) -> Denoiser:
    """Load the model named by `spec` onto `device` (default CPU) in `dtype` (default float32).
    `quantize`: a kind of dcode.models.quantize.KINDS; each linear layer is quantised as it is read.

    `spec`: None / 'dcode-tiny', a checkpoint folder, or a Hugging Face id in the local cache.
    `dtype`: a torch dtype, or a name of dcode.dtypes.DTYPES ("auto": dcode.dtypes.resolve_dtype
    for the device); the weights are cast to it, whatever the files hold.
    Raises ModelError (one line) for anything that is not a loadable checkpoint.
    """
    import torch

    quantizing.quiet()  # before transformers imports torchao, whatever `quantize` says
    where = device or torch.device("cpu")
    if isinstance(dtype, str):
        from dcode.dtypes import cpu_flags, resolve_dtype

        flags = cpu_flags() if where.type == "cpu" else frozenset()
        dtype = getattr(torch, resolve_dtype(dtype, where.type, flags))
    folder, name = resolve(spec, cache_dir)
    config = checkpoint.read_config(folder)
    family = require_family(config, folder)
    chosen = dtype if isinstance(dtype, torch.dtype) else torch.float32
    with quantizing.loading(quantize):  # the family's loader reads it (native.load_checked, decoder.load_weights)
        return FAMILIES[family].load(folder, where, chosen, name, config)


# ---------------------------------------------------------------------------------------------
# Listing, without torch


@dataclass(frozen=True)
class ModelInfo:
    name: str  # what --model accepts: "dcode-tiny" or a Hugging Face id
    path: Path  # the folder load() reads
    family: str  # a key of FAMILIES
    parameters: int | None  # counted from the safetensors headers, else estimated from config.json
    dtype: str | None  # the weights' dtype as torch names it ("bfloat16"); None without weights
    size_bytes: int  # bytes of the weight files present
    complete: bool  # every weight file is there and whole (False: an interrupted download)
    problem: str | None = None  # why load() refuses it (a cached model listed all the same); None: loadable


def unloadable(name: str, folder: Path, error: ModelError) -> ModelInfo:
    """A cached model load() refuses, with the reason (its folder's path left out of the message)."""
    reason = str(error)
    for prefix in (f"{folder / 'config.json'}: ", f"{folder / 'config.json'} ", f"{folder}: ", f"{folder} "):
        if reason.startswith(prefix):
            reason = reason[len(prefix) :]
            break
    files = [p for p in folder.glob("*.safetensors") if p.is_file()]
    size = sum(p.stat().st_size for p in files)
    return ModelInfo(name, folder, "?", None, None, size, complete=False, problem=reason)


def model_info(name: str, folder: Path) -> ModelInfo:
    """What `dcode models` shows about a checkpoint folder; ModelError if no family reads it.
    An interrupted download (missing shard, truncated file) is complete=False, not an error."""
    config = checkpoint.read_config(folder)
    family = require_family(config, folder)
    try:
        files = checkpoint.weight_files(folder)
        tensors = checkpoint.read_headers(folder)
        complete = True
    except ModelError:
        files, tensors, complete = [p for p in folder.glob("*.safetensors") if p.is_file()], {}, False
    counted = sum(t.count for t in tensors.values())
    return ModelInfo(
        name=name,
        path=folder,
        family=family,
        parameters=counted or checkpoint.estimate_parameters(config),
        dtype=checkpoint.main_dtype(tensors),
        size_bytes=sum(p.stat().st_size for p in files),
        complete=complete,
    )


def read_facts(name: str, folder: Path) -> ModelFacts:
    """The facts loading `folder` would state (special tokens, shift, block), from its files alone:
    no torch, no weights. ModelError when a load would fail on them too."""
    config = checkpoint.read_config(folder)
    return FAMILIES[require_family(config, folder)].state(folder, config, TokenTable(folder), name)


def list_models(cache_dir: Path | str | None = None) -> list[ModelInfo]:
    """The embedded model, then every model in the Hugging Face cache (`cache_dir`, default
    huggingface_hub's), by id (a copy cached under a moved org's old name under the current id,
    once); one that load() would refuse (another kind of model, a config.json
    that is not JSON, no tokenizer files) has `problem` set. Reads config.json and safetensors
    headers only."""
    found = [model_info(EMBEDDED_NAME, EMBEDDED)]
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    named: set[str] = set()
    for spelling, snapshot in checkpoint.cached_repos(cache):
        repo_id = catalogue.current_id(spelling)  # listed under the id --model and pull take now
        if repo_id in named:
            continue
        named.add(repo_id)
        snapshot = cached(cache, repo_id) or snapshot  # the current spelling's copy first, as load() reads
        try:
            info = model_info(repo_id, snapshot)
            if info.complete:  # an interrupted download says so instead
                require_tokenizer(snapshot)
        except ModelError as error:
            info = unloadable(repo_id, snapshot, error)
        found.append(info)
    return found


# ---------------------------------------------------------------------------------------------
# Saved quantised copies (dcode.models.saved)


def save_quantized(folder: Path, kind: str, dtype: str) -> Path:
    """Load `folder` with `kind` on the CPU in `dtype` (quantised as it loads) and keep its network
    as the folder's saved copy (dcode.models.saved); its path. One-line ModelError when it cannot."""
    from dcode.models import saved

    saved.copy_path(folder, kind).unlink(missing_ok=True)  # a stale copy: the load below quantises afresh
    network = load(str(folder), None, dtype, quantize=kind).model  # type: ignore[attr-defined]
    return saved.write(network, folder, kind, dtype)


def savable(family: str, config: Mapping[str, Any], name: str) -> bool:
    """Whether a checkpoint loads on dcode's own torch network (whose int8 layers are plain
    tensors): Qwen2 block-causal, Tiny-A2D's bd3lm on Qwen2.5, LLaDA2."""
    from dcode.models.families import a2d, qwen2

    if family == "llada2":
        return True
    if family == "qwen2":
        return qwen2.native_fits(config)
    try:
        return family == "a2d" and a2d.native_fits(config, Path(name), name)
    except ModelError:  # a name that does not say the attention: transformers' classes run it
        return False
