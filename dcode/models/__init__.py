"""Resolve a model spec (nothing, a folder) and load it with its family module.

Owns: where the embedded model lives and which family module reads a checkpoint.
Heavy imports (torch, transformers) happen inside load(), never at import time.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from dcode.models.base import Denoiser, ModelError, ModelFacts

if TYPE_CHECKING:
    import torch

__all__ = ["EMBEDDED", "EMBEDDED_NAME", "Denoiser", "ModelError", "ModelFacts", "load", "resolve"]

EMBEDDED_NAME = "dcode-tiny"
EMBEDDED = Path(__file__).resolve().parent.parent / "assets" / EMBEDDED_NAME
# config.json model_type values read by the Qwen2-layer family module.
QWEN2_TYPES = frozenset({"qwen2"})


def resolve(spec: str | None) -> tuple[Path, str]:
    """A model spec -> (local folder, display name). None or 'dcode-tiny' is the embedded model."""
    if spec is None or spec == EMBEDDED_NAME:
        return EMBEDDED, EMBEDDED_NAME
    folder = Path(spec).expanduser()
    if not folder.exists():
        raise ModelError(f"model folder not found: {spec}")
    if not folder.is_dir():
        raise ModelError(f"--model must be a folder holding config.json, got a file: {spec}")
    return folder, spec


def load(spec: str | None, device: torch.device | None = None, dtype: torch.dtype | None = None) -> Denoiser:
    """Load the model named by `spec` onto `device` (default CPU, float32)."""
    import torch

    from dcode.models import qwen2

    folder, name = resolve(spec)
    config = qwen2.read_config(folder)
    model_type = config.get("model_type")
    if model_type not in QWEN2_TYPES:
        raise ModelError(
            f"{folder}: unsupported model_type {model_type!r} (supported: {', '.join(sorted(QWEN2_TYPES))})"
        )
    return qwen2.load(folder, device or torch.device("cpu"), dtype or torch.float32, name)
