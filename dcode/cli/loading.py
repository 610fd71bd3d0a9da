"""A local model from the resolved options: the device, the weights, and the family's defaults
merged into the sampler settings. torch and transformers are imported here, inside the functions."""

from __future__ import annotations

from collections.abc import Set
from typing import TYPE_CHECKING

from dcode.cli.app import RUNTIME, USAGE, fail
from dcode.config import SamplerConfig, merge_family_defaults

if TYPE_CHECKING:
    from dcode.models import Denoiser


def pick_device(name: str, dtype: str = "auto") -> tuple[object, object]:
    """(torch.device, dtype) for --device and --dtype; a requested device that is absent is an error."""
    import torch

    from dcode.dtypes import DTYPES, cpu_flags, resolve_dtype

    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        fail("--device cuda: no CUDA device is available", USAGE)
    if name == "mps" and not torch.backends.mps.is_available():
        fail("--device mps: no Apple GPU is available", USAGE)
    if name not in ("cpu", "cuda", "mps"):
        fail(f"unknown --device {name!r} (choose from auto, cpu, cuda, mps)", USAGE)
    if dtype not in DTYPES:
        fail(f"unknown --dtype {dtype!r} (choose from {', '.join(DTYPES)})", USAGE)
    chosen = resolve_dtype(dtype, name, cpu_flags() if name == "cpu" else ())
    return torch.device(name), getattr(torch, chosen)


def load_model(spec: str | None, device: str, dtype: str = "auto", quantize: str = "auto") -> Denoiser:
    from dcode.models import ModelError, load

    where, chosen = pick_device(device, dtype)
    try:
        return load(spec, where, chosen, quantize=quantize)  # type: ignore[arg-type]
    except ModelError as error:
        fail(str(error), USAGE)
    except OSError as error:
        fail(f"cannot load model {spec or 'dcode-tiny'}: {error}", RUNTIME)


def with_family_defaults(
    config: SamplerConfig, denoiser: Denoiser, explicit: Set[str], effort: str | None = None
) -> SamplerConfig:
    """`config` with the model family's settings at `effort` (None: medium, its recommended ones)
    for every option the user left unset; without `--strategy`, a rule's own option set alone
    picks that rule."""
    try:
        config = merge_family_defaults(config, set(explicit), denoiser.facts.decoding(effort))
    except ValueError as error:
        fail(f"{denoiser.facts.name}: {error}", USAGE)
    if config.rule == "verify" and denoiser.facts.noise != "mask":
        fail(f"{denoiser.facts.name}: the verify strategy needs a masked-diffusion model", USAGE)
    return config
