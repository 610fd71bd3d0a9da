"""Tiny-A2D (ZHZisZZ/dllm, dllm/pipelines/a2d) on transformers' Qwen2 / Qwen3 classes.

dllm converts an autoregressive Qwen into a diffusion model by keeping its weights and names
(Qwen2ForCausalLM's / Qwen3ForCausalLM's: convert.py loads the AR state dict into
A2DQwen{2,3}LMHeadModel unchanged) and replacing the causal mask; its config says model_type
"a2d-qwen2" or "a2d-qwen3" and otherwise the source model's keys. The released checkpoints come in
two trainings that look alike on disk: bd3lm (block-causal, blocks of 32, the prompt left-padded to
a block boundary so blocks start where the answer does) and mdlm (full attention); only the
name tells them apart (facts.named_block). Logits are read at the same position; the mask is
<|mask|>, found in the tokenizer. Here the config is mapped onto Qwen2Config / Qwen3Config and
run through decoder.DecoderDenoiser. Knows nothing about sampling, files or the terminal.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from dcode.models.decoder import DecoderDenoiser, build, qwen_model

if TYPE_CHECKING:
    import torch


def load(folder: Path, device: torch.device, dtype: torch.dtype, name: str, config: dict[str, Any]) -> DecoderDenoiser:
    """Load a local Tiny-A2D checkpoint folder (safetensors, possibly sharded) as a denoiser."""
    qwen3 = str(config.get("model_type", "")).lower() == "a2d-qwen3" or "A2DQwen3LMHeadModel" in (
        config.get("architectures") or []
    )
    model_class, model_config = qwen_model(config, folder, qwen3=qwen3)
    return build(folder, config, model_class, model_config, device, dtype, name=name, family="a2d")
