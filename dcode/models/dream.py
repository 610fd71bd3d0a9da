"""The Dream family on transformers' Qwen2 classes: Dream, Dream-Coder, DiffuCoder, Open-dCoder.

A Dream checkpoint is Qwen2 weights under its own config (model_type "Dream", architectures
["DreamModel"], Qwen2's keys plus mask_token_id) and remote modeling code; here the config is
mapped onto Qwen2Config and the weights load into Qwen2ForCausalLM run with full bidirectional
attention. Logits are shifted (position i is predicted from hidden state i-1); the mask token is
`<|mask|>` (151666 in the released checkpoints), read from config.json. Owns that mapping and the
family's sampling defaults; the forward pass is qwen2's. Knows nothing about sampling or files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen2Tokenizer

from dcode.models.checkpoint import need, read_headers
from dcode.models.decoder import DecoderDenoiser, build, make_config

# Dream-Coder's published settings (HumanEval 82.9): negative-entropy ordering (Dream `entropy`),
# temperature 0.1, top_p 0.95. As SamplerConfig fields; the CLI applies them to unset options.
DEFAULTS: dict[str, object] = {"ordering": "entropy", "temperature": 0.1, "top_p": 0.95}
MASK_TOKEN = "<|mask|>"
# An instruct answer ends with the end of its chat turn, then <|endoftext|> padding.
END_TOKENS = ("<|im_end|>", "<|endoftext|>")
# config.json keys that mean the same in Qwen2Config (copied when set, transformers' defaults otherwise).
QWEN2_KEYS = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "hidden_act",
    "max_position_embeddings",
    "rms_norm_eps",
    "rope_theta",
    "rope_scaling",
    "tie_word_embeddings",
    "attention_dropout",
    "use_sliding_window",
    "sliding_window",
    "max_window_layers",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
)
REQUIRED = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")


def qwen2_values(config: dict[str, Any], folder: Path, has_lm_head: bool) -> dict[str, Any]:
    """Dream's config.json -> the values of an equivalent Qwen2Config."""
    for key in REQUIRED:
        need(config, folder, key)
    values = {key: config[key] for key in QWEN2_KEYS if config.get(key) is not None}
    values.setdefault("tie_word_embeddings", not has_lm_head)  # Dream 7B: separate lm_head
    values["model_type"] = "qwen2"
    return values


def load(folder: Path, device: torch.device, dtype: torch.dtype, name: str, config: dict[str, Any]) -> DecoderDenoiser:
    """Load a local Dream-family checkpoint folder (safetensors, possibly sharded) as a denoiser."""
    values = qwen2_values(config, folder, has_lm_head="lm_head.weight" in read_headers(folder))
    return build(
        folder,
        config,
        Qwen2ForCausalLM,
        make_config(Qwen2Config, values, folder),
        device,
        dtype,
        name=name,
        family="dream",
        shifted=True,
        block=None,  # full bidirectional attention
        max_length=int(config.get("max_position_embeddings") or 2048),
        defaults=DEFAULTS,
        tokenizer_class=Qwen2Tokenizer,  # the released tokenizer_config names remote DreamTokenizer
        mask_token=MASK_TOKEN,
        end_tokens=END_TOKENS,
    )
