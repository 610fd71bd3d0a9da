"""Native Qwen2 / Qwen3 checkpoints: dcode-tiny and block-diffusion models (SDAR / Fast-dLLM v2 style).

Owns: reading a config.json whose model_type transformers knows ("qwen2", "qwen3") with the
diffusion keys dcode adds or these models carry: the attention block (`block_size`, `bd_size`,
`block_length`; none = full attention), `shifted_logits` (default true), `mask_token_id` and
`dcode_prompt`. The denoiser itself (mask, cache, forward) is decoder.DecoderDenoiser, which the
Dream and LLaDA modules share. Knows nothing about sampling strategies, files or the terminal.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

from dcode.models.checkpoint import need, read_config, read_headers
from dcode.models.decoder import DecoderDenoiser, KVCache, block_causal_mask, build, first_id, make_config

__all__ = ["CLASSES", "DEFAULTS", "KVCache", "Qwen2Denoiser", "block_causal_mask", "block_of", "first_id", "load"]

Qwen2Denoiser = DecoderDenoiser  # the name the Dream module and older callers know

# model_type -> transformers' config and model classes for it.
CLASSES: dict[str, tuple[type[Any], type[Any]]] = {
    "qwen2": (Qwen2Config, Qwen2ForCausalLM),
    "qwen3": (Qwen3Config, Qwen3ForCausalLM),  # SDAR: Qwen2 layers plus q/k RMSNorm, no qkv bias
}
# config.json keys that carry the attention block size, in the order they are tried.
BLOCK_KEYS = ("block_size", "bd_size", "block_length")
# No family-wide sampler recommendation: the CLI's own defaults (Fast-dLLM threshold) apply, unless
# the checkpoint's config.json carries its own measured ones under "dcode_defaults" (dcode-tiny does).
DEFAULTS: dict[str, object] = {}


def block_of(config: dict[str, Any]) -> int | None:
    """The attention block size from config.json; None (full attention) if none is given."""
    for key in BLOCK_KEYS:
        if isinstance(config.get(key), int) and config[key] > 0:
            return int(config[key])
    return None


def load(
    folder: Path, device: torch.device, dtype: torch.dtype, name: str, config: dict[str, Any] | None = None
) -> DecoderDenoiser:
    """Load a local Qwen2 / Qwen3 checkpoint folder (safetensors only) as a denoiser."""
    config = config if config is not None else read_config(folder)
    model_type = str(config.get("model_type"))
    config_class, model_class = CLASSES[model_type]
    read_headers(folder)  # no weights, missing shards, bad or truncated files: one-line errors first
    for key in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads"):
        need(config, folder, key)  # transformers' defaults would build a 7B model instead
    return build(
        folder,
        config,
        model_class,
        make_config(config_class, config, folder),
        device,
        dtype,
        name=name,
        family=model_type,
        shifted=bool(config.get("shifted_logits", True)),
        block=block_of(config),
        max_length=int(config.get("max_position_embeddings") or 2048),
        defaults={**DEFAULTS, **(config.get("dcode_defaults") or {})},
        prompt=str(config.get("dcode_prompt") or "new"),
    )
