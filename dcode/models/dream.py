"""The Dream family on transformers' Qwen2 classes: Dream, Dream-Coder, DiffuCoder, Open-dCoder.

A Dream checkpoint is Qwen2 weights under its own config (model_type "Dream", architectures
["DreamModel"], Qwen2's keys plus mask_token_id) and remote modeling code; here the config is
mapped onto Qwen2Config and the weights load into Qwen2ForCausalLM run with full bidirectional
attention. Logits are shifted (position i is predicted from hidden state i-1); the mask token is
`<|mask|>` (151666 in the released checkpoints), read from config.json. Owns that mapping; the
family's special tokens and sampling defaults are stated in facts.py. Knows nothing about sampling.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from transformers import Qwen2Tokenizer

from dcode.models.decoder import DecoderDenoiser, build, qwen_model


def load(folder: Path, device: torch.device, dtype: torch.dtype, name: str, config: dict[str, Any]) -> DecoderDenoiser:
    """Load a local Dream-family checkpoint folder (safetensors, possibly sharded) as a denoiser:
    full bidirectional attention, shifted logits (facts.SPECS["dream"])."""
    model_class, model_config = qwen_model(config, folder, qwen3=False)
    # The released tokenizer_config names a remote DreamTokenizer; Qwen2Tokenizer reads its files.
    return build(
        folder, config, model_class, model_config, device, dtype, name=name, family="dream",
        tokenizer_class=Qwen2Tokenizer,
    )  # fmt: skip
