"""dcode's own format (dcode-tiny): Qwen2 layers under a config.json whose model_type is "qwen2",
with the diffusion keys dcode adds: the attention block (`block_size`; none = full attention),
`shifted_logits` (default true), `mask_token_id`, `dcode_prompt` and `dcode_defaults`.

Owns choosing who runs such a checkpoint. A block-causal one of the plain kind (native_fits) runs
on dcode.models.native, without importing transformers (2-3 s of start-up on a small CPU);
everything else on transformers' Qwen2ForCausalLM through decoder.DecoderDenoiser, which every
family module shares. Released block-diffusion checkpoints (SDAR, Fast-dLLM v2) have modules of
their own. Knows nothing about sampling, files or the terminal.

Sources: dcode's own (dcode.train writes this format; docs/models.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dcode.models.checkpoint import need, read_config, read_headers
from dcode.models.facts import FamilyFacts, positive
from dcode.models.family import Family

if TYPE_CHECKING:
    import torch

    from dcode.models.base import Denoiser
    from dcode.models.native import NativeDenoiser
    from dcode.testing.kit import Size

__all__ = ["FAMILY", "block_of", "load", "load_native", "native_fits", "plain_layers"]

# Qwen2 plus the diffusion keys dcode writes in config.json: the attention block, mask_token_id,
# shifted_logits (default true), dcode_prompt and dcode_defaults.
# Efforts (dcode-tiny, measured: docs/dcode-tiny.md): medium and high its dcode_defaults (the verify
# rule, whose answers are one token per pass's, the decoding its published numbers used); low the
# entropy bound 0.6, faster on a CPU than verify at 72% real code against 76%.
FACTS = FamilyFacts(
    shifted=None,
    block_keys=("block_size", "bd_size", "block_length"),
    efforts={"low": {"rule": "entropy-bound", "entropy_bound": 0.6}},
)


def block_of(config: Mapping[str, Any]) -> int | None:
    """The attention block size from config.json; None (full attention) if none is given."""
    return positive(config, FACTS.block_keys)


def native_fits(config: Mapping[str, Any]) -> bool:
    """Whether dcode.models.native computes exactly what transformers' Qwen2ForCausalLM would for
    this config: Qwen2 layers, block-causal attention, SwiGLU, default RoPE, no sliding window."""
    return config.get("model_type") == "qwen2" and block_of(config) is not None and plain_layers(config)


def plain_layers(config: Mapping[str, Any]) -> bool:
    """Whether the config's Qwen2 layers are the ones dcode.models.native runs: SwiGLU, default
    RoPE, no sliding window (the attention block is the caller's to check)."""
    rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
    layer_types = config.get("layer_types") or []
    return (
        config.get("hidden_act", "silu") == "silu"
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
    folder: Path,
    config: Mapping[str, Any],
    device: torch.device,
    dtype: torch.dtype,
    name: str,
    family: Family | None = None,
    plain: bool = True,
) -> NativeDenoiser:
    """The checkpoint on dcode.models.native, stating `family`'s facts (this module's unless
    given); its tokenizer read by `tokenizers` alone when plain (plain=False: transformers' always)."""
    from dcode.models import native, plain_tokenizer

    plain_tokenizer.require_tokenizer(folder)
    if plain and plain_tokenizer.fits(folder):
        tokenizer: Any = plain_tokenizer.PlainTokenizer(folder)
    else:
        from dcode.models.decoder import load_tokenizer

        tokenizer = load_tokenizer(folder)
    facts = (family or FAMILY).state(folder, config, tokenizer, name)
    return native.NativeDenoiser(native.load_weights(folder, config, device, dtype), tokenizer, facts)


# ---------------------------------------------------------------------------------------------
# The format, for tests: random weights, dcode's own tokenizer


def write_checkpoint(folder: Path, size: Size, device: torch.device, seed: int) -> int:
    """dcode-tiny's format: Qwen2ForCausalLM weights (tied head), block_size / mask_token_id /
    shifted_logits in config.json, dcode's tokenizer (<|pad|> <|eos|> <|mask|> <|prompt|> <|code|>)."""
    from dcode.testing.kit import STD, dcode_tokenizer, qwen2_shapes, random_weights, save_weights, write_json

    ids = dcode_tokenizer(folder, size)
    count = save_weights(
        random_weights(qwen2_shapes(size, size.tied_rows, head=False), seed, device, size.spread), folder, size.dtype
    )
    config = {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "vocab_size": size.tied_rows,
        "hidden_size": size.hidden,
        "intermediate_size": size.inner,
        "num_hidden_layers": size.layers,
        "num_attention_heads": size.heads,
        "num_key_value_heads": size.kv_heads,
        "hidden_act": "silu",
        "max_position_embeddings": size.max_positions,
        "initializer_range": STD,
        "rms_norm_eps": 1e-06,
        "use_cache": True,
        "tie_word_embeddings": True,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
        "use_sliding_window": False,
        "sliding_window": None,
        "max_window_layers": size.layers,
        "layer_types": ["full_attention"] * size.layers,
        "attention_dropout": 0.0,
        "pad_token_id": ids["pad"],
        "bos_token_id": None,
        "eos_token_id": ids["eos"],
        "dtype": size.dtype,
        "block_size": size.block,
        "mask_token_id": ids["mask"],
        "shifted_logits": True,
        "dcode_prompt": "new",
    }
    write_json(folder / "config.json", config)
    return count


FAMILY = Family(
    name="qwen2",
    model_types=frozenset({"qwen2"}),
    facts=FACTS,
    load=load,
    checkpoints={"qwen2": write_checkpoint},
)
