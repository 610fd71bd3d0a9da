"""Fast-dLLM v2 (Efficient-Large-Model/Fast_dLLM_v2_7B) on transformers' Qwen2 classes.

A released checkpoint says model_type "Fast_dLLM_Qwen" and ships remote modeling code (its
configuration.py / modeling.py): Qwen2.5 layers (q/k/v biases) under Qwen2's weight names,
block-causal attention in blocks of `bd_size` (32) at inference, logits shifted by one position
(the prediction for position i comes from hidden state i-1), and the mask token `|<MASK>|`
(151665) found in the tokenizer, not in config.json; generation stops on <|im_end|> (151645).
Here the config is mapped onto Qwen2Config and the weights load into Qwen2ForCausalLM, run
block-causal with an exact cache of finished blocks (decoder.DecoderDenoiser). The facts are
stated in facts.py (SPECS["fast_dllm_v2"]). Knows nothing about sampling, files or the terminal.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from dcode.models.decoder import DecoderDenoiser, build, qwen_model

if TYPE_CHECKING:
    import torch


def load(folder: Path, device: torch.device, dtype: torch.dtype, name: str, config: dict[str, Any]) -> DecoderDenoiser:
    """Load a local Fast-dLLM v2 checkpoint folder (safetensors, possibly sharded) as a denoiser."""
    model_class, model_config = qwen_model(config, folder, qwen3=False)
    return build(folder, config, model_class, model_config, device, dtype, name=name, family="fast_dllm_v2")
