"""Native Qwen2 / Qwen3 checkpoints: dcode-tiny and block-diffusion models (SDAR / Fast-dLLM v2 style).

Owns: reading a config.json whose model_type transformers knows ("qwen2", "qwen3") with the
diffusion keys dcode adds or these models carry: the attention block (`block_size`, `bd_size`,
`block_length`; none = full attention), `shifted_logits` (default true), `mask_token_id` and
`dcode_prompt`; and choosing who runs it. A block-causal Qwen2 checkpoint of the plain kind
(native_fits) runs on dcode.models.native, without importing transformers (2-3 s of start-up on a
small CPU); everything else on transformers' classes through decoder.DecoderDenoiser, which the
Dream and LLaDA modules share. Knows nothing about sampling strategies, files or the terminal.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from dcode.models import native, plain_tokenizer
from dcode.models.base import Denoiser
from dcode.models.checkpoint import need, read_config, read_headers
from dcode.models.facts import state_facts

__all__ = ["DEFAULTS", "block_of", "load", "native_fits"]

# config.json keys that carry the attention block size, in the order they are tried.
BLOCK_KEYS = ("block_size", "bd_size", "block_length")
# No family-wide sampler recommendation: the CLI's own defaults (Fast-dLLM threshold) apply, unless
# the checkpoint's config.json carries its own measured ones under "dcode_defaults" (dcode-tiny does).
DEFAULTS: dict[str, object] = {}


def block_of(config: Mapping[str, Any]) -> int | None:
    """The attention block size from config.json; None (full attention) if none is given."""
    for key in BLOCK_KEYS:
        if isinstance(config.get(key), int) and config[key] > 0:
            return int(config[key])
    return None


def native_fits(config: Mapping[str, Any]) -> bool:
    """Whether dcode.models.native computes exactly what transformers' Qwen2ForCausalLM would for
    this config: Qwen2 layers, block-causal attention, SwiGLU, default RoPE, no sliding window."""
    rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
    layer_types = config.get("layer_types") or []
    return (
        config.get("model_type") == "qwen2"
        and block_of(config) is not None
        and config.get("hidden_act", "silu") == "silu"
        and isinstance(rope, Mapping)
        and rope.get("rope_type", rope.get("type", "default")) == "default"
        and not config.get("use_sliding_window", False)
        and all(kind == "full_attention" for kind in layer_types)
    )


def load(
    folder: Path,
    device: torch.device,
    dtype: torch.dtype,
    name: str,
    config: dict[str, Any] | None = None,
    *,
    native_path: bool = True,
) -> Denoiser:
    """Load a local Qwen2 / Qwen3 checkpoint folder (safetensors only) as a denoiser.
    native_path=False: transformers' classes and tokenizer even where the native path fits (the
    baseline benchmarks/sampling.py --transformers measures against)."""
    config = config if config is not None else read_config(folder)
    model_type = str(config.get("model_type"))
    read_headers(folder)  # no weights, missing shards, bad or truncated files: one-line errors first
    for key in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads"):
        need(config, folder, key)  # transformers' defaults would build a 7B model instead
    fields: dict[str, Any] = {
        "name": name,
        "family": model_type,
        "shifted": bool(config.get("shifted_logits", True)),
        "block": block_of(config),
        "max_length": int(config.get("max_position_embeddings") or 2048),
        "defaults": {**DEFAULTS, **(config.get("dcode_defaults") or {})},
        "prompt": str(config.get("dcode_prompt") or "new"),
    }
    if native_path and native_fits(config):
        return load_native(folder, config, device, dtype, fields)
    from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

    from dcode.models.decoder import build, make_config

    classes = {"qwen2": (Qwen2Config, Qwen2ForCausalLM), "qwen3": (Qwen3Config, Qwen3ForCausalLM)}
    config_class, model_class = classes[model_type]  # qwen3 (SDAR): Qwen2 layers plus q/k RMSNorm, no qkv bias
    return build(folder, config, model_class, make_config(config_class, config, folder), device, dtype, **fields)


def load_native(
    folder: Path, config: Mapping[str, Any], device: torch.device, dtype: torch.dtype, fields: dict[str, Any]
) -> native.NativeDenoiser:
    """The checkpoint on dcode.models.native; its tokenizer read by `tokenizers` alone when plain."""
    if plain_tokenizer.fits(folder):
        tokenizer: Any = plain_tokenizer.PlainTokenizer(folder)
    else:
        from dcode.models.decoder import load_tokenizer

        tokenizer = load_tokenizer(folder)
    facts = state_facts(folder, config, tokenizer, int(config["vocab_size"]), **fields)
    return native.NativeDenoiser(native.load_weights(folder, config, device, dtype), tokenizer, facts)
