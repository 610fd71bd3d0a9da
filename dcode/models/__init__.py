"""Resolve a model spec (nothing, a folder, a Hugging Face id) and load it with its family module.

Owns: where the embedded model lives, which family module reads a checkpoint (by config.json
`model_type`, else the classes `architectures` or `auto_map` name, or auto_map's modules), finding an id in the local
Hugging Face cache, listing the models there (and what a load would state about each, torch-free:
read_facts), and merging a family's sampler defaults into the user's settings. Never downloads
and never runs code shipped with a checkpoint. Heavy imports (torch, transformers) happen inside
load(), never at import time; listing reads safetensors headers with json alone.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from dcode.models import catalogue, checkpoint, facts
from dcode.models.base import Denoiser, ModelError, ModelFacts

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
    "apply_defaults",
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


@dataclass(frozen=True)
class Family:
    module: str  # dcode.models.<module> has load(folder, device, dtype, name, config)
    model_types: frozenset[str]  # config.json model_type, lower-case
    architectures: frozenset[str]  # config.json architectures, tried when model_type is unknown
    # auto_map modules ("modeling_x" of "modeling_x.Class"), for a release whose model_type and
    # class names are another model's (Stable-DiffCoder's earlier "llama" + LlamaForCausalLM).
    modules: frozenset[str] = frozenset()


# Families dcode loads on transformers' own classes, by the name facts.family reports; detected
# from what the released config.json files say (model_type, else architectures or auto_map).
FAMILIES = {
    "dream": Family("dream", frozenset({"dream"}), frozenset({"DreamModel"})),
    "llada": Family("llada", frozenset({"llada"}), frozenset({"LLaDAModelLM"})),
    "qwen2": Family("qwen2", frozenset({"qwen2"}), frozenset()),  # dcode's own format (dcode-tiny)
    "sdar": Family("sdar", frozenset({"sdar"}), frozenset({"SDARForCausalLM"})),
    "fast_dllm_v2": Family("fast_dllm", frozenset({"fast_dllm_qwen"}), frozenset({"Fast_dLLM_QwenForCausalLM"})),
    # Tiny-A2D: Qwen2 / Qwen3 converted from autoregressive (dllm's A2DQwen{2,3}LMHeadModel).
    "a2d": Family(
        "a2d", frozenset({"a2d-qwen2", "a2d-qwen3"}), frozenset({"A2DQwen2LMHeadModel", "A2DQwen3LMHeadModel"})
    ),
    "coda": Family("coda", frozenset({"coda"}), frozenset({"CoDALanguageModel"})),
    "wedlm": Family("wedlm", frozenset({"wedlm"}), frozenset({"WeDLMForCausalLM"})),
    "llada2": Family("llada2", frozenset({"llada2_moe"}), frozenset({"LLaDA2MoeModelLM"})),
    # model_type "llama": told from a plain Llama by its class or its modeling module alone.
    "stable_diffcoder": Family(
        "stable_diffcoder",
        frozenset(),
        frozenset({"StableDiffcoderForCausalLM"}),
        frozenset({"modeling_stable_diffcoder"}),
    ),
    # Uniform-noise block diffusion (facts.noise == "uniform"), native in transformers >= 5.11.
    "diffusion_gemma": Family(
        "diffusion_gemma", frozenset({"diffusion_gemma"}), frozenset({"DiffusionGemmaForBlockDiffusion"})
    ),
}


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
    for family, spec in FAMILIES.items():
        if model_type in spec.model_types:
            return family
    names, modules = class_names(config), module_names(config)
    for family, spec in FAMILIES.items():
        if names & spec.architectures or modules & spec.modules:
            return family
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
        cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        snapshot = checkpoint.cached_snapshot(cache, spec)
        if snapshot is None:
            raise ModelError(
                f"{spec} is neither a folder nor in the Hugging Face cache ({cache}): "
                f"run `dcode models pull {spec}` to download it"
            )
        return snapshot, spec
    raise ModelError(f"model folder not found: {spec}")


def load(
    spec: str | None,
    device: torch.device | None = None,
    dtype: torch.dtype | str | None = None,
    *,
    cache_dir: Path | str | None = None,
) -> Denoiser:
    """Load the model named by `spec` onto `device` (default CPU) in `dtype` (default float32).

    `spec`: None / 'dcode-tiny', a checkpoint folder, or a Hugging Face id in the local cache.
    `dtype`: a torch dtype, or a name of dcode.dtypes.DTYPES ("auto": dcode.dtypes.resolve_dtype
    for the device); the weights are cast to it, whatever the files hold.
    Raises ModelError (one line) for anything that is not a loadable checkpoint.
    """
    import torch

    where = device or torch.device("cpu")
    if isinstance(dtype, str):
        from dcode.dtypes import cpu_flags, resolve_dtype

        flags = cpu_flags() if where.type == "cpu" else frozenset()
        dtype = getattr(torch, resolve_dtype(dtype, where.type, flags))
    folder, name = resolve(spec, cache_dir)
    config = checkpoint.read_config(folder)
    family = require_family(config, folder)
    module = importlib.import_module(f"dcode.models.{FAMILIES[family].module}")
    model: Denoiser = module.load(folder, where, dtype or torch.float32, name, config)
    return model


T = TypeVar("T")


def apply_defaults(config: T, defaults: Mapping[str, object], explicit: Collection[str]) -> T:
    """`config` (a dataclass, e.g. SamplerConfig) with a family's recommended value for every
    field in `defaults` the user did not set explicitly (`explicit`: field names).
    Example: apply_defaults(SamplerConfig(), {"temperature": 0.1}, {"temperature"}) changes nothing."""
    changes = {key: value for key, value in defaults.items() if key not in explicit}
    return dataclasses.replace(config, **changes)  # type: ignore[type-var]


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
    return facts.read_facts(require_family(config, folder), folder, config, name)


def list_models(cache_dir: Path | str | None = None) -> list[ModelInfo]:
    """The embedded model, then every model in the Hugging Face cache (`cache_dir`, default
    huggingface_hub's), by id; one that load() would refuse (another kind of model, a config.json
    that is not JSON, no tokenizer files) has `problem` set. Reads config.json and safetensors
    headers only."""
    found = [model_info(EMBEDDED_NAME, EMBEDDED)]
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    for repo_id, snapshot in checkpoint.cached_repos(cache):
        try:
            info = model_info(repo_id, snapshot)
            if info.complete:  # an interrupted download says so instead
                facts.require_tokenizer(snapshot)
        except ModelError as error:
            info = unloadable(repo_id, snapshot, error)
        found.append(info)
    return found
