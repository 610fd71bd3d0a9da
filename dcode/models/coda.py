"""CoDA (SalesforceAIResearch/CoDA, Salesforce/CoDA-v0-Instruct) on transformers' Qwen3 classes.

The release ships remote code (CoDALanguageModel/modeling_coda.py, adapted from transformers'
Qwen3): model_type "CoDA", Qwen3's weight names (q_norm / k_norm over each head, no biases,
head_dim 128, grouped-query attention), attention run by sdpa with is_causal False and no mask
(bidirectional), logits shifted by one position at inference (generation_utils.py), and
mask_token_id 151669 (<|mask|>) in config.json. Here the config is mapped onto Qwen3Config and run
through decoder.DecoderDenoiser with full attention. Licence CC-BY-NC-4.0: non-commercial use only.
The facts are stated in facts.py (SPECS["coda"]). Knows nothing about sampling, files or the terminal.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from dcode.models.decoder import DecoderDenoiser, build, qwen_model

if TYPE_CHECKING:
    import torch


def load(folder: Path, device: torch.device, dtype: torch.dtype, name: str, config: dict[str, Any]) -> DecoderDenoiser:
    """Load a local CoDA checkpoint folder (safetensors, possibly sharded) as a denoiser."""
    model_class, model_config = qwen_model(config, folder, qwen3=True)
    return build(folder, config, model_class, model_config, device, dtype, name=name, family="coda")
