"""Weights quantised while they load: the linear layers in int8 or int4, through torchao.

Owns: the kinds --quantize takes, which checkpoint weights are quantised and what each takes in
memory (torch-free: `dcode models available` / `pull` and the loaders share `quantized` and
`WEIGHT_BYTES`), torchao's configuration per kind and device, refusing a device or a build without
the kernel (one line), the kind the loaders read while one load runs (`loading`), and reading a
checkpoint one weight at a time so that each linear layer is quantised as its weight arrives
(`stream_weights`: dcode's own torch models; transformers' classes get decoder.torchao_config, with
which transformers does the same per weight). Peak memory is then about the quantised model plus
one layer in the load dtype, never the whole model in it.

Knows nothing about families, sampling or the terminal. torch and torchao are imported inside the
functions: listing models stays torch-free.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from dcode.models.base import ModelError

if TYPE_CHECKING:
    import torch
    from torch import nn

    from dcode.models.checkpoint import Tensor

KINDS = ("auto", "none", "int8", "int4")  # what --quantize takes; auto is none until measured otherwise
Kind = Literal["none", "int8", "int4"]
QUANTIZED: tuple[Kind, ...] = ("int8", "int4")
# int4: weights sharing one scale and zero point (torchao's group_size). 32, 64 and 128 measured
# alike in speed and error on this CPU; 64 keeps a 3B model's int4 peak near 38% of bfloat16's,
# 32 at 41% (docs/models.md).
GROUP = 64
# Bytes a quantised weight takes: int8 one byte (plus a scale per output row, under 0.1%); int4
# half a byte plus a bfloat16 scale and zero point per GROUP weights.
WEIGHT_BYTES: dict[str, float] = {"int8": 1.0, "int4": 0.5 + 4 / GROUP}
DTYPE_BYTES: dict[str, float] = {"bfloat16": 2, "float16": 2, "float32": 4}

_current: contextvars.ContextVar[Kind] = contextvars.ContextVar("dcode_quantize", default="none")


def chosen(kind: str) -> Kind:
    """--quantize's value as the loaders take it: auto is none (measured: docs/models.md)."""
    if kind not in KINDS:
        raise ModelError(f"unknown quantisation {kind!r} (choose from {', '.join(KINDS)})")
    return "none" if kind == "auto" else kind  # type: ignore[return-value]


def quantized(name: str, shape: tuple[int, ...]) -> bool:
    """Whether the loaders quantise a checkpoint weight: a linear layer's (out, in) weight whose
    input width is a multiple of GROUP and output width of 16 (int4's kernels pack 16 rows; a
    router of 4 experts stays as it is). Embeddings (rows looked up, not multiplied) keep the
    dtype, and so does an output head tied to them. Example: ("model.layers.0.mlp.up_proj.weight",
    (704, 256)) -> True; ("model.embed_tokens.weight", (8192, 256)) -> False."""
    embedding = any(word in name for word in ("embed", "wte"))
    return (
        len(shape) == 2 and name.endswith(".weight") and not embedding and shape[1] % GROUP == 0 and shape[0] % 16 == 0
    )


def weight_bytes(tensors: Mapping[str, Tensor], dtype: str, kind: str) -> int:
    """Bytes a checkpoint's weights take once loaded in `dtype` with `kind`, from its headers."""
    per = DTYPE_BYTES.get(dtype, 2)
    total = 0.0
    for name, tensor in tensors.items():
        quantise = kind in WEIGHT_BYTES and quantized(name, tensor.shape)
        total += tensor.count * (WEIGHT_BYTES[kind] if quantise else per)
    return int(total)


def bytes_per_parameter(dtype: str, kind: str) -> float:
    """Bytes per parameter of a model whose parameters are all in linear layers (the catalogue's
    estimate, knowing the count alone; embeddings kept in the dtype add a few percent)."""
    return WEIGHT_BYTES[kind] if kind in WEIGHT_BYTES else DTYPE_BYTES[dtype]


@contextlib.contextmanager
def loading(kind: str) -> Iterator[Kind]:
    """The kind the loaders (native.load_checked, decoder.load_weights) quantise with while this
    block runs; family loaders pass no argument for it."""
    token = _current.set(chosen(kind))
    try:
        yield _current.get()
    finally:
        _current.reset(token)


def current() -> Kind:
    """The kind of the load now running (none outside `loading`)."""
    return _current.get()


# ---------------------------------------------------------------------------------------------
# torchao


def torchao_config(kind: Kind, device: torch.device) -> Any:
    """torchao's configuration for `kind` on `device`, or a one-line ModelError saying what is
    missing and what works instead. int8: weight-only, one scale per output row (torchao's
    Int8WeightOnlyConfig). int4: weight-only, groups of GROUP; on a CPU the tinygemm CPU kernel
    (torchao's Int4OpaqueTensor), on CUDA the tinygemm CUDA kernel (tile_packed_to_4d)."""
    import torch

    if device.type not in ("cpu", "cuda"):
        raise ModelError(f"--quantize {kind} runs on cpu or cuda, not {device.type} (use --quantize none there)")
    torchao = import_torchao(kind)
    from torchao.quantization import Int4WeightOnlyConfig, Int8WeightOnlyConfig

    if kind == "int8":
        return Int8WeightOnlyConfig()
    if device.type == "cuda":
        return Int4WeightOnlyConfig(group_size=GROUP, int4_packing_format="tile_packed_to_4d")
    if not hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu"):
        raise ModelError(f"--quantize int4: this torch build lacks the int4 CPU kernel (torchao {torchao}); use int8")
    from torchao.prototype.quantization.int4.inference_workflow import PrototypeInt4WeightOnlyConfig

    return PrototypeInt4WeightOnlyConfig(group_size=GROUP)


def import_torchao(kind: str) -> str:
    """Import torchao quietly (it logs a warning per GPU-only extension it cannot load on a CPU
    machine); its version, or a one-line ModelError when it is not installed."""
    quiet()
    try:
        import torchao
        import torchao.quantization  # noqa: F401
    except ImportError:
        raise ModelError(
            f"--quantize {kind} needs torchao: pip install 'dcode[quantize]' (or run with --quantize none)"
        ) from None
    return str(torchao.__version__)


def quiet() -> None:
    """torchao's import logs a warning per GPU-only extension a CPU machine lacks, and torch one per
    enum torchao registers: stderr is for dcode's own lines. transformers imports torchao too
    (decoder.quiet_transformers calls this), whatever --quantize says."""
    logging.getLogger("torchao").setLevel(logging.ERROR)
    logging.getLogger("torch.utils._pytree").setLevel(logging.ERROR)


def quantize_layer(module: nn.Module, config: Any, name: str) -> None:
    """One linear layer's weight replaced by its quantised form, in place."""
    from torchao.quantization import quantize_

    try:
        quantize_(module, config)
    except (RuntimeError, ValueError, AssertionError) as error:
        raise ModelError(f"cannot quantise {name}: {' '.join(str(error).split())[:200]}") from None


def int8_cpu_kernel(model: nn.Module) -> None:
    """On a CPU, each int8 linear layer run by PyTorch's int8 kernels (int8_linear.Int8Linear: on a
    CPU with int8 dot-product instructions the activations quantised per row and multiplied in
    integers by `torch._int_mm`, else `torch._weight_int8pack_mm`) instead of torchao's eager path,
    which converts the whole weight back to the activations' dtype on every call: twice as slow as
    bfloat16 on an AVX-512 CPU and a weight-sized temporary per layer (docs/models.md). The same
    int8 values and per-row scales torchao chose; nothing is quantised again."""
    from torchao.quantization import Int8Tensor

    from dcode.models.int8_linear import Int8Linear

    for name, module in list(model.named_modules()):
        weight = getattr(module, "weight", None)
        if not isinstance(weight, Int8Tensor) or weight.act_quant_kwargs is not None:
            continue
        if weight.device.type == "cpu" and weight.block_size[-1] == weight.qdata.shape[-1]:  # one scale per row
            model.set_submodule(
                name, Int8Linear(weight.qdata, weight.scale, getattr(module, "bias", None), weight.dtype)
            )


# safetensors dtype codes -> torch's dtype names
TORCH_DTYPES = {
    "BF16": "bfloat16", "F16": "float16", "F32": "float32", "F64": "float64", "I64": "int64", "I32": "int32",
    "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool", "F8_E4M3": "float8_e4m3fn",
}  # fmt: skip


def read_tensors(path: Path, wanted: set[str]) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) for each tensor of a safetensors file named in `wanted`, read one at a time
    with plain reads: a memory map (safetensors' safe_open) would keep every page it touched
    resident in this process until the file is closed, the whole checkpoint by the end of a load.
    Layout: 8 bytes little-endian header length N, N bytes of JSON {name: {dtype, shape,
    data_offsets}}, then the data (checkpoint.read_header has already checked it fits the file)."""
    import json
    import struct

    import torch

    with path.open("rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(length))
        for name, entry in sorted(
            header.items(), key=lambda item: item[1]["data_offsets"][0] if item[0] != "__metadata__" else -1
        ):
            if name not in wanted:
                continue
            begin, end = entry["data_offsets"]
            f.seek(8 + length + begin)
            data = bytearray(f.read(end - begin))
            dtype = getattr(torch, TORCH_DTYPES[entry["dtype"]])
            flat = torch.frombuffer(data, dtype=dtype) if data else torch.empty(0, dtype=dtype)
            yield name, flat.reshape(entry["shape"])


def stream_weights(
    model: nn.Module, folder: Path, keys: set[str], device: torch.device, dtype: torch.dtype, kind: Kind
) -> None:
    """The checkpoint's weights named `keys` (checkpoint names = `model`'s, built on the meta
    device) read one at a time from its safetensors shards (read_tensors), cast to `dtype` on
    `device`, each linear layer quantised as its weight arrives (`quantized`)."""
    from torch import nn

    from dcode.models.checkpoint import weight_files
    from dcode.models.int8_linear import Int8Embedding

    config = torchao_config(kind, device) if kind != "none" else None
    for path in weight_files(folder):
        try:
            for key, read in read_tensors(path, keys):
                owner, _, leaf = key.rpartition(".")
                module = model.get_submodule(owner)
                tensor = read.to(device=device, dtype=dtype)
                del read
                if config is not None and isinstance(module, nn.Embedding) and tensor.is_floating_point():
                    model.set_submodule(owner, Int8Embedding.of(tensor))  # int8 rows (whatever the kind)
                    continue
                place(module, leaf, tensor)
                if config is not None and isinstance(module, nn.Linear) and quantized(key, tuple(tensor.shape)):
                    quantize_layer(module, config, key)
                    give_back_freed()
        except (OSError, ValueError, KeyError) as error:
            raise ModelError(f"{folder}: cannot load weights: {str(error).splitlines()[0]}") from None


def place(module: nn.Module, leaf: str, tensor: torch.Tensor) -> None:
    """`tensor` in place of the (meta) parameter or buffer `leaf` of `module`, frozen."""
    from torch import nn

    if leaf in module._parameters:
        module._parameters[leaf] = nn.Parameter(tensor, requires_grad=False)
    else:
        module._buffers[leaf] = tensor


def give_back_freed() -> None:
    """Return the heap's freed pages to the system (glibc's malloc_trim; nothing elsewhere): the
    weights read in the load dtype and freed once quantised leave holes that glibc would keep,
    about 4% of a 3B model's int4 peak (docs/benchmarks/quantize)."""
    global _trim
    if _trim is None:
        import ctypes
        import ctypes.util

        try:
            _trim = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
        except (OSError, AttributeError):
            _trim = False
    if _trim:
        _trim(0)


_trim: Any = None  # glibc's malloc_trim once looked up; False where there is none


def tie_head(model: nn.Module, embedding: str) -> None:
    """model.lm_head reads the input embedding named `embedding`: its weight, or, for an int8
    embedding (stream_weights quantises dcode's own models' embeddings), an int8 head on the same
    matrix (no second copy of it)."""
    from dcode.models.int8_linear import Int8Embedding

    module = model.get_submodule(embedding)
    if isinstance(module, Int8Embedding):
        model.set_submodule("lm_head", module.head())
    else:
        model.get_submodule("lm_head").weight = module.weight


def describe(model: Any) -> str:
    """Which quantisation a loaded denoiser runs ("none", "int8", "int4"): set on its torch module by
    the loaders (`mark`); "none" for anything else (a test fake, a served model)."""
    return str(getattr(getattr(model, "model", None), "dcode_quantize", "none"))


def quantized_layers(module: nn.Module) -> int:
    """The linear layers of a network that hold quantised weights (torchao's tensors, or Int8Linear)."""
    from dcode.models.int8_linear import Int8Linear

    held = [getattr(m, "weight", None) for m in module.modules() if not isinstance(m, Int8Linear)]
    packed = sum(isinstance(m, Int8Linear) for m in module.modules())
    return packed + sum(type(w).__module__.startswith("torchao") for w in held)


def mark(module: nn.Module, kind: Kind) -> None:
    """Record on a loaded network which quantisation ran (int8 on a CPU switched to PyTorch's
    kernel: int8_cpu_kernel); a kind that quantised no layer is an error."""
    if kind == "int8":
        int8_cpu_kernel(module)
    if kind != "none" and quantized_layers(module) == 0:
        raise ModelError(f"--quantize {kind}: this model has no linear layer it can quantise; use --quantize none")
    module.dcode_quantize = kind  # type: ignore[assignment]
