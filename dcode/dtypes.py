"""Which floating-point type a model runs in: `--dtype auto|bfloat16|float16|float32`.

Owns the rule behind `auto`: bfloat16 on a CUDA GPU, and on a CPU whose bfloat16 matrix multiply
is done in hardware (Intel AMX-BF16, or AVX512-BF16 as on Cooper Lake and AMD Zen 4), since there
it is 2-5x faster than float32 (docs/benchmarks/cpu/); float32 everywhere else, where bfloat16
would be emulated and slower. The CPU is asked through the flags it reports (/proc/cpuinfo on
Linux); the rule itself is pure functions of those flags. Imports no torch.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

DtypeName = Literal["auto", "bfloat16", "float16", "float32"]
DTYPES: tuple[str, ...] = ("auto", "bfloat16", "float16", "float32")

# CPU flags (as Linux names them) of a native bfloat16 dot product: AMX tiles (Sapphire Rapids and
# later Xeons) or AVX512_BF16 (Cooper Lake, Zen 4). oneDNN, which runs torch's bfloat16 matmul on
# a CPU, uses either; without them it converts to float32 and back, slower than float32 itself.
NATIVE_BF16_FLAGS = frozenset({"amx_bf16", "avx512_bf16"})


def parse_cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The flags of the first processor in /proc/cpuinfo's text (x86 `flags`, Arm `Features`).
    Example: parse_cpu_flags("flags\\t: fpu avx512_bf16\\n") -> frozenset({"fpu", "avx512_bf16"})."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def native_bfloat16(flags: Iterable[str]) -> bool:
    """Whether a CPU with these flags multiplies bfloat16 matrices in hardware."""
    return bool(NATIVE_BF16_FLAGS & set(flags))


def resolve_dtype(name: str, device_type: str, cpu_flags: Iterable[str]) -> str:
    """The dtype a model runs in for --dtype `name` on a device of `device_type` ("cpu", "cuda",
    "mps"): an explicit name as given; `auto` bfloat16 on CUDA and on a CPU with native bfloat16,
    float32 elsewhere (Apple's MPS included). ValueError for an unknown name.
    Example: resolve_dtype("auto", "cpu", {"avx2"}) -> "float32"."""
    if name not in DTYPES:
        raise ValueError(f"unknown dtype {name!r} (choose from {', '.join(DTYPES)})")
    if name != "auto":
        return name
    if device_type == "cuda" or (device_type == "cpu" and native_bfloat16(cpu_flags)):
        return "bfloat16"
    return "float32"


def cpu_flags(path: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """This machine's CPU flags; none where the file is absent (macOS, Windows: float32 there)."""
    try:
        return parse_cpu_flags(path.read_text(errors="replace"))
    except OSError:
        return frozenset()


def cpu_model(path: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's model name as it reports it ("AMD EPYC"), for benchmark results; "" where unknown."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "")


def cpu_dtype() -> str:
    """What `--dtype auto` runs in on this machine's CPU."""
    return resolve_dtype("auto", "cpu", cpu_flags())


def running_dtype(model: Any) -> str | None:
    """The dtype a loaded denoiser computes in, read from its weights (the torch module it holds
    as `.model`): "bfloat16", "float32", ...; None for a model without one (a test fake)."""
    module = getattr(model, "model", None)
    parameters = getattr(module, "parameters", None)
    if parameters is None:
        return None
    for parameter in parameters():
        if parameter.is_floating_point():
            return str(parameter.dtype).removeprefix("torch.")
    return None
