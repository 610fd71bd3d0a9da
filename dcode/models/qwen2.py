"""dcode's own format (dcode-tiny): Qwen2 layers under a config.json whose model_type is "qwen2",
with the diffusion keys dcode adds: the attention block (`block_size`; none = full attention),
`shifted_logits` (default true), `mask_token_id`, `dcode_prompt` and `dcode_defaults`.

Owns choosing who runs such a checkpoint. A block-causal one of the plain kind (native_fits) runs
on dcode.models.native, without importing transformers (2-3 s of start-up on a small CPU);
everything else on transformers' Qwen2ForCausalLM through decoder.DecoderDenoiser, which every
family module shares. Released block-diffusion checkpoints (SDAR, Fast-dLLM v2) have modules of
their own. The facts are stated in facts.py. Knows nothing about sampling, files or the terminal.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from dcode.models import native, plain_tokenizer
from dcode.models.base import Denoiser
from dcode.models.checkpoint import need, read_config, read_headers
from dcode.models.facts import SPECS, positive, require_tokenizer, state

__all__ = ["block_of", "load", "native_fits"]


def block_of(config: Mapping[str, Any]) -> int | None:
    """The attention block size from config.json; None (full attention) if none is given."""
    return positive(config, SPECS["qwen2"].block_keys)


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
    """Load a local checkpoint folder in dcode's Qwen2 format (safetensors only) as a denoiser.
    native_path=False: transformers' classes and tokenizer even where the native path fits (the
    baseline benchmarks/sampling.py --transformers measures against)."""
    config = config if config is not None else read_config(folder)
    read_headers(folder)  # no weights, missing shards, bad or truncated files: one-line errors first
    for key in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads"):
        need(config, folder, key)  # transformers' defaults would build a 7B model instead
    if native_path and native_fits(config):
        return load_native(folder, config, device, dtype, name)
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from dcode.models.decoder import build, make_config

    model_config = make_config(Qwen2Config, config, folder)
    return build(folder, config, Qwen2ForCausalLM, model_config, device, dtype, name=name, family="qwen2")


def load_native(
    folder: Path, config: Mapping[str, Any], device: torch.device, dtype: torch.dtype, name: str
) -> native.NativeDenoiser:
    """The checkpoint on dcode.models.native; its tokenizer read by `tokenizers` alone when plain."""
    require_tokenizer(folder)
    if plain_tokenizer.fits(folder):
        tokenizer: Any = plain_tokenizer.PlainTokenizer(folder)
    else:
        from dcode.models.decoder import load_tokenizer

        tokenizer = load_tokenizer(folder)
    facts = state("qwen2", folder, config, tokenizer, name)
    return native.NativeDenoiser(native.load_weights(folder, config, device, dtype), tokenizer, facts)
