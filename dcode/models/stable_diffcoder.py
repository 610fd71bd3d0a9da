"""Stable-DiffCoder (ByteDance-Seed/Stable-DiffCoder-8B-Instruct, -8B-Base) on transformers' Llama classes.

A released checkpoint says model_type "llama", so it is told from a plain Llama by the class it
names: architectures ["StableDiffcoderForCausalLM"], or an auto_map value in the module
`modeling_stable_diffcoder` (models.FAMILIES; Diffulex tells them apart the same way). Its layers are
plain Llama layers under Llama's weight names: no q/k/v/o or MLP biases, full rotary positions,
an untied head. Its generate() runs them block-causal in blocks of 4 counted from position 0
and reads each position's own logits (shift=False). Here the config is mapped onto
LlamaConfig, the weights load into LlamaForCausalLM (never the checkpoint's own modeling code),
and decoder.DecoderDenoiser runs it block-causal with an exact cache of finished blocks. The
facts (mask, ends, block, defaults) are stated in facts.py (SPECS["stable_diffcoder"]).

Sources, read to understand:
- The authors' README (github ByteDance-Seed/Stable-DiffCoder): generate(..., block_length=4,
  temperature=0., remasking='low_confidence', shift=False, threshold=None,
  eos_id=tokenizer.eos_token_id), steps equal to gen_length (one token per pass); 8K context.
- From third-party code, not the authors' release: Diffulex (a dLLM serving engine)
  diffulex/model/config/stable_diffcoder.py (the detection, Llama config defaults: vocab 155136,
  hidden 4096, 32 layers, 8 KV heads, rope_theta 500000, no biases, untied, pad 1 / bos 0 / eos 2)
  and diffulex/model/stable_diffcoder.py (Llama weight names); a copy of modeling_stable_diffcoder.py
  (StableDiffcoderForCausalLM(LlamaForCausalLM), generate_block: mask_id=5, block_length=4, a
  block-causal mask of whole blocks from position 0); a code-model harness's SeedDiffCoder wrapper
  (_STABLE_DIFFCODER_MASK_ID = 5, <[MASK_TOKEN]>).
Knows nothing about sampling, files or the terminal.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from dcode.models.decoder import DecoderDenoiser

# config.json keys that mean the same in LlamaConfig (copied when set, transformers' defaults otherwise).
LLAMA_KEYS = (
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "hidden_act", "max_position_embeddings", "rms_norm_eps", "rope_theta",
    "rope_scaling", "rope_parameters", "tie_word_embeddings", "attention_bias", "attention_dropout", "mlp_bias",
    "bos_token_id", "eos_token_id", "pad_token_id",
)  # fmt: skip


def load(folder: Path, device: torch.device, dtype: torch.dtype, name: str, config: dict[str, Any]) -> DecoderDenoiser:
    """Load a local Stable-DiffCoder checkpoint folder (safetensors, possibly sharded) as a denoiser."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from dcode.models.decoder import build, make_config, qwen_values

    values = qwen_values(config, folder, LLAMA_KEYS, "llama")  # the Qwen families' mapping serves Llama keys too
    model_config = make_config(LlamaConfig, values, folder)
    return build(folder, config, LlamaForCausalLM, model_config, device, dtype, name=name, family="stable_diffcoder")
