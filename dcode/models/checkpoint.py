"""Torch-free facts about checkpoint folders: config.json, safetensors headers, the Hugging Face cache.

Owns: reading config.json, finding a checkpoint's weight files (one file or index-listed shards),
reading safetensors headers with json alone (tensor names, shapes, dtypes), counting parameters,
and the hub cache layout `<cache>/models--org--name/{refs/main, snapshots/<hash>/}`. Imports
neither torch nor transformers, so listing models stays fast. Knows nothing about families.
"""

from __future__ import annotations

import json
import math
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dcode.models.base import ModelError

INDEX = "model.safetensors.index.json"
HEADER_LIMIT = 100_000_000  # safetensors refuses headers above 100 MB; so do we
# safetensors dtype codes -> torch's names (what `dcode models` shows).
DTYPES = {"BF16": "bfloat16", "F16": "float16", "F32": "float32", "F64": "float64", "F8_E4M3": "float8_e4m3fn"}
# A Hugging Face repo id: two parts of letters, digits, '-', '_', '.', not starting with '.' or '-'.
REPO_ID = re.compile(r"^(?![.-])[\w.-]{1,96}/(?![.-])[\w.-]{1,96}$")


@dataclass(frozen=True)
class Tensor:
    dtype: str  # safetensors code: BF16, F32, ...
    shape: tuple[int, ...]

    @property
    def count(self) -> int:
        return math.prod(self.shape)


def read_config(folder: Path) -> dict[str, Any]:
    """config.json as a dict; a one-line ModelError if it is missing or not a JSON object."""
    path = folder / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelError(f"{folder} is not a model folder: no config.json") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ModelError(f"{path} is not valid JSON: {error}") from None
    if not isinstance(config, dict):
        raise ModelError(f"{path} is not valid JSON: expected an object, got {type(config).__name__}")
    return config


def read_optional_json(path: Path) -> dict[str, Any]:
    """An optional JSON object file (tokenizer_config.json, generation_config.json) as a dict; {}
    when it is missing, unreadable or not an object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def need(config: dict[str, Any], where: Path, *keys: str) -> int:
    """The first of `keys` that config.json sets to a positive integer; else a ModelError naming them.
    Example: need(config, folder, "n_kv_heads", "n_heads") for a key with a documented fallback."""
    for key in keys:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
        if value is not None:
            raise ModelError(f"{where / 'config.json'}: {key!r} must be a positive integer, got {value!r}")
    alternatives = "".join(f" (or {k!r})" for k in keys[1:])
    raise ModelError(f"{where / 'config.json'} lacks {keys[0]!r}{alternatives}")


def weight_files(folder: Path) -> list[Path]:
    """The safetensors files of a checkpoint: the shards its index lists, else every *.safetensors.

    Raises ModelError when there are none or the index names a shard that is not there.
    """
    index = folder / INDEX
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            names = sorted(set(weight_map.values()))
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, AttributeError):
            raise ModelError(f"{index} is not a valid safetensors index (no weight_map)") from None
        missing = [n for n in names if not (folder / n).is_file()]
        if missing:
            raise ModelError(f"{folder} lacks weight shard {missing[0]} named by {INDEX} (incomplete download?)")
        return [folder / n for n in names]
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ModelError(f"{folder} has no .safetensors weights (pickle weights are not loaded)")
    return files


def read_header(path: Path) -> dict[str, Tensor]:
    """Tensor name -> dtype and shape, from a safetensors file's header alone.

    Layout: 8 bytes little-endian header length N, N bytes of JSON
    {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}, then the data.
    The data offsets must fit the file, so a truncated download is caught here, not mid-load.
    """
    try:
        with path.open("rb") as f:
            head = f.read(8)
            (length,) = struct.unpack("<Q", head) if len(head) == 8 else (-1,)
            if not 0 < length <= HEADER_LIMIT:
                raise ModelError(f"{path} is not a safetensors file")
            entries = json.loads(f.read(length))
        size = path.stat().st_size
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ModelError(f"{path} is not a safetensors file (bad header)") from None
    except OSError as error:
        raise ModelError(f"cannot read {path}: {error.strerror or error}") from None
    if not isinstance(entries, dict):
        raise ModelError(f"{path} is not a safetensors file (bad header)")
    tensors: dict[str, Tensor] = {}
    end = 0
    for name, entry in entries.items():
        if name == "__metadata__":
            continue
        try:
            tensors[name] = Tensor(str(entry["dtype"]), tuple(int(d) for d in entry["shape"]))
            end = max(end, int(entry["data_offsets"][1]))
        except (KeyError, TypeError, ValueError, IndexError):
            raise ModelError(f"{path} is not a safetensors file (bad entry {name!r})") from None
    if 8 + length + end > size:
        needed = 8 + length + end
        raise ModelError(f"{path} is truncated: {size} bytes, its header needs {needed} (incomplete download?)")
    return tensors


def read_headers(folder: Path) -> dict[str, Tensor]:
    """Every tensor of a checkpoint folder, from the headers of all its weight files."""
    tensors: dict[str, Tensor] = {}
    for path in weight_files(folder):
        tensors.update(read_header(path))
    return tensors


def refuse_misfit(folder: Path, problems: list[str]) -> None:
    """A one-line ModelError naming the first way the weights do not fit the config (and how many
    more there are); nothing when `problems` is empty. Example: ["missing lm_head.weight"]."""
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ModelError(f"{folder}: weights do not fit the config: {problems[0]}{more}")


def main_dtype(tensors: dict[str, Tensor]) -> str | None:
    """The dtype holding most parameters, by torch's name ('bfloat16'); None without tensors."""
    totals: dict[str, int] = {}
    for tensor in tensors.values():
        totals[tensor.dtype] = totals.get(tensor.dtype, 0) + tensor.count
    if not totals:
        return None
    code = max(totals, key=lambda c: totals[c])
    return DTYPES.get(code, code.lower())


def estimate_parameters(config: dict[str, Any]) -> int | None:
    """Parameters of a LLaMA/Qwen-shaped decoder from config.json alone (biases and norms ignored).

    Understands Qwen2-style keys (hidden_size, ...) and OLMo/LLaDA-style keys (d_model, ...).
    """

    def pick(*keys: str) -> int | None:
        for key in keys:
            value = config.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
        return None

    hidden = pick("hidden_size", "d_model")
    layers = pick("num_hidden_layers", "n_layers")
    heads = pick("num_attention_heads", "n_heads")
    vocab = pick("embedding_size", "vocab_size")
    if not (hidden and layers and heads and vocab):
        return None
    kv_heads = pick("num_key_value_heads", "n_kv_heads") or heads
    inner = pick("intermediate_size", "mlp_hidden_size") or 4 * hidden
    head_dim = pick("head_dim") or hidden // heads
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim  # q, o ; k, v
    tied = config.get("tie_word_embeddings", config.get("weight_tying", False))
    return vocab * hidden * (1 if tied else 2) + layers * (attention + 3 * hidden * inner)


# ---------------------------------------------------------------------------------------------
# The Hugging Face hub cache


def is_repo_id(spec: str) -> bool:
    """'org/name' as the Hugging Face hub spells repo ids (no '--' or '..' inside)."""
    return bool(REPO_ID.match(spec)) and "--" not in spec and ".." not in spec


def repo_folder(cache_dir: Path, repo_id: str) -> Path:
    return cache_dir / ("models--" + repo_id.replace("/", "--"))


def snapshot_of(repo: Path) -> Path | None:
    """The snapshot refs/main points at, else the newest snapshot; None when there is none."""
    snapshots = repo / "snapshots"
    try:
        ref = (repo / "refs" / "main").read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        ref = ""
    if ref and (snapshots / ref).is_dir():
        return snapshots / ref
    try:
        found = [p for p in snapshots.iterdir() if p.is_dir()]
    except OSError:
        return None
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def cached_snapshot(cache_dir: Path, repo_id: str) -> Path | None:
    """The local folder of a cached repo's snapshot that holds a config.json, or None."""
    snapshot = snapshot_of(repo_folder(cache_dir, repo_id))
    return snapshot if snapshot is not None and (snapshot / "config.json").is_file() else None


def cached_repos(cache_dir: Path) -> list[tuple[str, Path]]:
    """(repo id, snapshot folder) of every model repo in the cache with a config.json, by id."""
    try:
        repos = sorted(p for p in cache_dir.iterdir() if p.name.startswith("models--") and p.is_dir())
    except OSError:
        return []
    out = []
    for repo in repos:
        repo_id = repo.name[len("models--") :].replace("--", "/")
        snapshot = cached_snapshot(cache_dir, repo_id)
        if snapshot is not None:
            out.append((repo_id, snapshot))
    return out
