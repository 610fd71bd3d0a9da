"""SDAR (JetLM/SDAR-1.7B-Chat, -4B-Chat, -8B-Chat) on transformers' Qwen3 classes.

A released SDAR checkpoint says model_type "sdar", architectures ["SDARForCausalLM"], and ships
remote modeling code (JetAstra/SDAR, training/model/*): Qwen3 layers (q/k RMSNorm, no biases)
under Qwen3's weight names, block-causal attention in blocks of `block_size` (4), the mask token
`<|MASK|>` (151669) in config.json, end of answer from generation_config.json ([151645, 151643]).
Its generate.py samples each position from the logits at that same position: not shifted.
Here the config is mapped onto Qwen3Config and the weights load into Qwen3ForCausalLM, run
block-causal with an exact cache of finished blocks (decoder.DecoderDenoiser). The facts are
stated in facts.py (SPECS["sdar"]). Knows nothing about sampling, files or the terminal.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from dcode.models.decoder import DecoderDenoiser, build, qwen_model

if TYPE_CHECKING:
    import torch


def load(folder: Path, device: torch.device, dtype: torch.dtype, name: str, config: dict[str, Any]) -> DecoderDenoiser:
    """Load a local SDAR checkpoint folder (safetensors, possibly sharded) as a denoiser."""
    model_class, model_config = qwen_model(config, folder, qwen3=True)
    return build(folder, config, model_class, model_config, device, dtype, name=name, family="sdar")
