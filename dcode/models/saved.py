"""Saved quantised copies: a checkpoint's int8 network written once as plain tensors in safetensors
(no pickles) beside the checkpoint, and read by a later `--quantize int8` load instead of
quantising again (`dcode models pull NAME --quantize int8`).

The layout (LAYOUT): the loaded network's tensors by their module's name: `<layer>.qdata` int8
(out, in) and `<layer>.scale` float32 (out,) for each int8 linear layer and embedding
(int8_linear.Int8Linear, Int8Embedding), every other tensor (norms, biases, a weight left as it
was) under its checkpoint name in the load dtype; a tensor that shares another's storage (a head
tied to the embedding) is written once. The header's metadata says the layout, the kind, the
dtype and `source`: the fingerprint of the weights it came from (`weights_id`); a copy whose
fingerprint, dtype or layout differ from the load's is not read (one stderr note, then the load
quantises as usual).

Only dcode's own torch networks (native.load_checked: Qwen2 block-causal, Tiny-A2D's bd3lm on
Qwen2.5, LLaDA2) hold plain int8 tensors; transformers' classes hold torchao's tensor subclasses,
which safetensors cannot hold without torchao's own (prototype) flattening, so those families
quantise on load (dcode.models.savable). int4's layers are torchao's too: no int4 copy.

Torch-free at import (listing reads `saved_kinds`); torch is imported inside `write` and `read_into`.
"""

from __future__ import annotations

import hashlib
import json
import struct
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from dcode.models.base import ModelError
from dcode.models.checkpoint import HEADER_LIMIT, weight_files

if TYPE_CHECKING:
    import torch
    from torch import nn

LAYOUT = "1"  # the tensor names and metadata above; a copy of another layout is not read
SAVED_KINDS = ("int8",)
FOLDER = "dcode-quantized"  # beside a Hub cache's snapshots, or inside a plain checkpoint folder


def copy_path(folder: Path, kind: str) -> Path:
    """Where a checkpoint's saved copy of `kind` lives: beside the Hub cache's snapshots
    (<cache>/models--org--name/dcode-quantized/<revision>/int8.safetensors), else in the folder's
    own dcode-quantized/ (never a *.safetensors of the folder itself: that would be a weight file)."""
    if folder.parent.name == "snapshots" and folder.parent.parent.name.startswith("models--"):
        return folder.parent.parent / FOLDER / folder.name / f"{kind}.safetensors"
    return folder / FOLDER / f"{kind}.safetensors"


def weights_id(folder: Path) -> str:
    """A fingerprint of a checkpoint's weight files: per file its name and, for a Hub cache's file
    (a link to blobs/<sha256>), the content hash the Hub gave it, else its size, modification time
    and header. Reading every byte would cost seconds per load of a large model; a rewritten file
    changes its time. Example: 16 hex digits, "3f9c0a2b7e1d4c58"."""
    digest = hashlib.sha256()
    for path in weight_files(folder):
        digest.update(path.name.encode())
        target = path.resolve()
        if target.parent.name == "blobs" and len(target.name) == 64:
            digest.update(target.name.encode())
            continue
        stat = path.stat()
        digest.update(f"{stat.st_size}:{stat.st_mtime_ns}".encode())
        with path.open("rb") as f:
            digest.update(f.read(8 + min(HEADER_LIMIT, struct.unpack("<Q", f.read(8))[0])))
    return digest.hexdigest()[:16]


def read_metadata(path: Path) -> dict[str, str] | None:
    """A saved copy's header metadata and tensor names (under "tensors", comma-joined), or None
    when it is missing or not a safetensors file."""
    try:
        with path.open("rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(length)) if 0 < length <= HEADER_LIMIT else None
    except (OSError, struct.error, ValueError):
        return None
    if not isinstance(header, dict) or not isinstance(header.get("__metadata__"), dict):
        return None
    names = ",".join(name for name in header if name != "__metadata__")
    return {**header["__metadata__"], "tensors": names}


def mismatch(metadata: Mapping[str, str], folder: Path, kind: str, dtype: str) -> str | None:
    """Why a saved copy is not what a load of `folder` with `kind` in `dtype` would make; None when it is."""
    if metadata.get("dcode_layout") != LAYOUT:
        return f"its layout is {metadata.get('dcode_layout')!r}, this dcode reads {LAYOUT}"
    if metadata.get("kind") != kind:
        return f"it holds {metadata.get('kind')}, not {kind}"
    if metadata.get("dtype") != dtype:
        return (
            f"it was made for {metadata.get('dtype')}, this load runs in {dtype} (pull it again with --dtype {dtype})"
        )
    if metadata.get("source") != weights_id(folder):
        return "the checkpoint's weights changed since it was saved"
    return None


def saved_kinds(folder: Path) -> dict[str, str]:
    """{kind: dtype} of the saved copies of `folder` that match its weights (`dcode models`)."""
    found = {}
    for kind in SAVED_KINDS:
        metadata = read_metadata(copy_path(folder, kind))
        if metadata is not None and mismatch(metadata, folder, kind, metadata.get("dtype", "")) is None:
            found[kind] = metadata["dtype"]
    return found


def refusal(kind: str, family: str) -> str:
    """The one line `pull --quantize` answers when no copy of `kind` can be saved for `family`."""
    if kind not in SAVED_KINDS:
        return (
            f"--quantize {kind}: a saved copy holds int8 only (dcode's {kind} layers are torchao tensor "
            f"subclasses, not plain tensors); pull with --quantize int8, or run with --quantize {kind}, "
            "which quantises on load"
        )
    return (
        f"--quantize {kind}: {family} runs on transformers' classes, whose torchao layers cannot be saved "
        f"without pickles; pull without --quantize and run with --quantize {kind}, which quantises on load"
    )


# ---------------------------------------------------------------------------------------------
# torch


def write(network: nn.Module, folder: Path, kind: str, dtype: str) -> Path:
    """A loaded network of `folder` (quantised with `kind` on the CPU in `dtype`: dcode.models.save_quantized)
    written as its saved copy (module docstring), atomically; its path. A network holding anything
    but plain tensors is a one-line ModelError, nothing written."""
    import torch
    from safetensors.torch import save_file

    path = copy_path(folder, kind)
    tensors: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    for name, tensor in network.state_dict().items():
        if type(tensor) is not torch.Tensor:
            raise ModelError(
                f"--quantize {kind}: {name} is a {type(tensor).__name__}, not a plain tensor; no copy saved"
            )
        storage = tensor.untyped_storage().data_ptr()
        if storage not in seen:  # a tied head reads the embedding's own tensors
            seen.add(storage)
            tensors[name] = tensor.contiguous()
    metadata = {"format": "pt", "dcode_layout": LAYOUT, "kind": kind, "dtype": dtype, "source": weights_id(folder)}
    if folder.parent.name == "snapshots":
        metadata["revision"] = folder.name
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    save_file(tensors, str(partial), metadata=metadata)
    partial.replace(path)
    return path


def read_into(
    model: nn.Module, folder: Path, expected: set[str], device: torch.device, dtype: torch.dtype, kind: str
) -> bool:
    """Fill `model` (built on the meta device; `expected`: the checkpoint names it reads) from the
    folder's saved copy of `kind`; False, with nothing read, when there is none that fits: not int8
    or not on a CPU (Int8Linear is the CPU's int8 layer), no copy, or a copy of other weights, dtype,
    layout or names (those with one stderr note: the load then quantises as usual)."""
    path = copy_path(folder, kind)
    if kind not in SAVED_KINDS or device.type != "cpu" or not path.is_file():
        return False
    metadata = read_metadata(path)
    dtype_name = str(dtype).removeprefix("torch.")
    if metadata is None:
        problem: str | None = "it is not a safetensors file with dcode's metadata"
    else:
        problem = mismatch(metadata, folder, kind, dtype_name) or misnamed(metadata, expected)
    if problem or metadata is None:
        sys.stderr.write(f"dcode: not reading the saved {kind} copy {path}: {problem}; quantising on load\n")
        return False
    try:
        assemble(model, path, set(metadata["tensors"].split(",")), dtype)
    except (OSError, ValueError, RuntimeError, KeyError) as error:  # a truncated or damaged file
        raise ModelError(
            f"cannot read the saved {kind} copy {path}: {str(error).splitlines()[0]} (delete it)"
        ) from None
    return True


def misnamed(metadata: Mapping[str, str], expected: set[str]) -> str | None:
    """Why a copy's tensor names do not cover the checkpoint names a network reads; None when they do."""
    names = set(metadata["tensors"].split(","))
    int8 = {name.removesuffix(".qdata") for name in names if name.endswith(".qdata")}
    covered = {f"{owner}.weight" for owner in int8} | {f"{owner}.scale" for owner in int8}
    missing = sorted(expected - names - covered)
    if missing:
        return f"it lacks {missing[0]}"
    unused = sorted(names - expected - {f"{owner}.qdata" for owner in int8} - covered)
    return f"it holds {unused[0]}, which this network does not read" if unused else None


def assemble(model: nn.Module, path: Path, names: set[str], dtype: torch.dtype) -> None:
    """The copy's tensors (`names`, from its header) into `model`: int8 layers and embeddings
    rebuilt around their qdata and scale, every other tensor in place of its meta one."""
    from torch import nn

    from dcode.models.int8_linear import Int8Embedding, Int8Linear
    from dcode.models.quantize import place, read_tensors

    held = dict(read_tensors(path, names))  # the quantised model's size, read once: no second copy
    int8 = sorted(name.removesuffix(".qdata") for name in held if name.endswith(".qdata"))
    for key, tensor in held.items():
        owner, _, leaf = key.rpartition(".")
        if owner in int8 and leaf in ("qdata", "scale"):
            continue
        place(model.get_submodule(owner), leaf, tensor)
    for owner in int8:
        qdata, scale = held[f"{owner}.qdata"], held[f"{owner}.scale"]
        module = model.get_submodule(owner)
        if isinstance(module, nn.Embedding):
            model.set_submodule(owner, Int8Embedding(qdata, scale, dtype))
        else:
            model.set_submodule(owner, Int8Linear(qdata, scale, module._parameters.get("bias"), dtype))
