"""The Qwen2-layer family on transformers' own classes: dcode-tiny, Dream, SDAR / Fast-dLLM v2.

Owns: turning a local checkpoint folder (config.json, model.safetensors, tokenizer files) into a
denoiser with block-causal attention (a token sees every earlier block and its whole own block;
full attention, as in Dream, is the case of one block), and the exact key/value cache of finished
blocks. Knows nothing about sampling strategies, files or the terminal.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import AutoTokenizer, DynamicCache, Qwen2Config, Qwen2ForCausalLM
from transformers.utils import logging as transformers_logging

from dcode.models.base import ModelError, ModelFacts

# config.json keys that carry the attention block size, in the order they are tried.
BLOCK_KEYS = ("block_size", "bd_size", "block_length")


def block_causal_mask(
    query_start: int, query_len: int, key_len: int, block: int | None, device: torch.device
) -> torch.Tensor:
    """(1, 1, Lq, Lk) bool: query at absolute position q may see key k iff k // block <= q // block.

    block=None means full bidirectional attention (every query sees every key).
    Example: block=2, 4 tokens -> row 0 sees keys 0-1, row 2 sees keys 0-3.
    """
    if block is None:
        return torch.ones(1, 1, query_len, key_len, dtype=torch.bool, device=device)
    q = torch.arange(query_start, query_start + query_len, device=device) // block  # (Lq,)
    k = torch.arange(key_len, device=device) // block  # (Lk,)
    return (k[None, :] <= q[:, None])[None, None]


class KVCache:
    """Keys/values of the first `length` canvas positions; crop() forgets everything after."""

    def __init__(self, config: Qwen2Config) -> None:
        self.inner = DynamicCache(config=config)

    @property
    def length(self) -> int:
        return self.inner.get_seq_length()

    def crop(self, length: int) -> None:
        extra = self.length - length
        if extra > 0:
            self.inner.crop(-extra)


@dataclass
class Qwen2Denoiser:
    """Token ids -> logits for a Qwen2-layer diffusion checkpoint."""

    model: Qwen2ForCausalLM
    tokenizer: Any  # transformers PreTrainedTokenizerFast
    facts: ModelFacts

    @torch.inference_mode()
    def __call__(self, ids: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        """ids (B, L) at canvas positions [P, P+L) where P = cache.length -> logits (B, L, V).

        With a cache, the new positions' keys/values are appended to it; the caller crops.
        """
        start = cache.length if cache is not None else 0
        length = ids.shape[1]
        mask = block_causal_mask(start, length, start + length, self.facts.block, ids.device)
        positions = torch.arange(start, start + length, device=ids.device)[None]
        out = self.model(
            input_ids=ids,
            attention_mask=mask.expand(ids.shape[0], -1, -1, -1),
            position_ids=positions.expand(ids.shape[0], -1),
            cache=cache.inner if cache is not None else None,
            use_cache=cache is not None,
        )
        return out.logits.float()

    def new_cache(self) -> KVCache | None:
        """A cache when reusing keys/values is exact (block-causal attention), else None."""
        return KVCache(self.model.config) if self.facts.block is not None else None

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device


def read_config(folder: Path) -> dict[str, Any]:
    path = folder / "config.json"
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ModelError(f"{folder} is not a model folder: no config.json") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ModelError(f"{path} is not valid JSON: {error}") from None


def block_of(config: dict[str, Any]) -> int | None:
    """The attention block size from config.json; None (full attention) if none is given."""
    for key in BLOCK_KEYS:
        if isinstance(config.get(key), int) and config[key] > 0:
            return int(config[key])
    return None


def first_id(*candidates: object) -> int | None:
    """The first candidate that is an id (0 counts; None and missing keys do not)."""
    for candidate in candidates:
        if isinstance(candidate, int) and not isinstance(candidate, bool):
            return candidate
    return None


def load(folder: Path, device: torch.device, dtype: torch.dtype, name: str) -> Qwen2Denoiser:
    """Load a local Qwen2-layer checkpoint folder (safetensors only) as a denoiser."""
    transformers_logging.disable_progress_bar()  # stderr is for dcode's own progress
    transformers_logging.set_verbosity_error()
    config = read_config(folder)
    if not any(folder.glob("*.safetensors")):
        raise ModelError(f"{folder} has no .safetensors weights (pickle weights are not loaded)")
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    mask_id = first_id(config.get("mask_token_id"), tokenizer.mask_token_id)
    if mask_id is None:
        raise ModelError(f"{folder}: neither config.json nor the tokenizer names a mask token")
    model = Qwen2ForCausalLM.from_pretrained(str(folder), dtype=dtype, attn_implementation="sdpa", use_safetensors=True)
    model.to(device).eval()
    eos = config.get("eos_token_id")
    eos_ids = frozenset(int(e) for e in (eos if isinstance(eos, list) else [eos]) if e is not None)
    if not eos_ids and tokenizer.eos_token_id is not None:
        eos_ids = frozenset({int(tokenizer.eos_token_id)})
    pad_id = first_id(config.get("pad_token_id"), tokenizer.pad_token_id, *sorted(eos_ids))
    facts = ModelFacts(
        name=name,
        family="qwen2",
        mask_id=mask_id,
        eos_ids=eos_ids,
        pad_id=pad_id if pad_id is not None else mask_id,
        shifted=bool(config.get("shifted_logits", True)),
        block=block_of(config),
        max_length=int(config.get("max_position_embeddings") or 2048),
        vocab_size=int(config["vocab_size"]),
        prompt=str(config.get("dcode_prompt") or "new"),
    )
    return Qwen2Denoiser(model, tokenizer, facts)
