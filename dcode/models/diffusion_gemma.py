"""DiffusionGemma (google/diffusiongemma-26B-A4B-it) on transformers' own DiffusionGemmaForBlockDiffusion.

Uniform-noise block diffusion: the answer is written in canvases of `canvas_length` tokens (256),
one after another. An encoder (a causal Gemma 4 stack) writes the keys/values of everything before
a canvas into a cache; a decoder sharing its weights reads that cache and denoises the canvas with
bidirectional attention, fed the previous pass's logits (self-conditioning). There is no mask
token: positions still to fill hold random tokens, drawn afresh before every pass (the sampler
does that; mask_id here is only its placeholder, never fed). Owns reading the checkpoint, the
context cache and the two calls the sampler makes (extend, then a decoder pass); the special ids
and the family's sampling defaults (transformers' generation_diffusion_gemma) are stated in
facts.py. Knows nothing about sampling rules, files other than the checkpoint's, or the terminal.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch
from transformers import DiffusionGemmaConfig, DiffusionGemmaForBlockDiffusion, DynamicCache, PretrainedConfig
from transformers.models.diffusion_gemma.generation_diffusion_gemma import DiffusionGemmaGenerationConfig

from dcode.models.base import ModelFacts
from dcode.models.checkpoint import read_headers
from dcode.models.decoder import load_tokenizer, load_weights, make_config
from dcode.models.facts import gemma_state, gemma_text


class ContextCache:
    """Keys/values the encoder wrote for canvas positions [0, length); decoder passes only read
    them. It only grows: finished text before a block never changes."""

    def __init__(self, config: PretrainedConfig) -> None:
        self.inner = DynamicCache(config=config)

    @property
    def length(self) -> int:
        return self.inner.get_seq_length()

    def crop(self, length: int) -> None:
        if length < self.length:  # sliding-window layers have already dropped what a crop would need
            raise ValueError("a DiffusionGemma context cache cannot be cropped")


@dataclass
class DiffusionGemmaDenoiser:
    """dcode.models.base.UniformDenoiser over DiffusionGemmaForBlockDiffusion."""

    model: DiffusionGemmaForBlockDiffusion
    tokenizer: Any
    facts: ModelFacts

    @torch.inference_mode()
    def extend(self, ids: torch.Tensor, cache: ContextCache) -> None:
        """Encode clean ids (B, n) at canvas positions [P, P+n), P = cache.length, into the cache."""
        start = cache.length
        positions = torch.arange(start, start + ids.shape[1], device=ids.device)[None].expand(ids.shape[0], -1)
        self.model.model.encoder(input_ids=ids, cache=cache.inner, position_ids=positions)

    @torch.inference_mode()
    def __call__(
        self, ids: torch.Tensor, cache: ContextCache | None = None, *, previous: torch.Tensor | None = None
    ) -> torch.Tensor:
        """A noisy canvas ids (B, n) at positions [P, P+n), P = cache.length -> logits (B, n, V).

        Reads the context from the cache and never writes it, so every pass over one canvas sees
        the same context. previous (B, n, V): the last pass's temperature-scaled logits for this
        canvas (self-conditioning); None on a canvas's first pass.
        """
        if cache is None or cache.length == 0:
            raise ValueError("DiffusionGemma denoises a canvas after its context: extend() a cache first")
        start = cache.length
        positions = torch.arange(start, start + ids.shape[1], device=ids.device)[None].expand(ids.shape[0], -1)
        dtype = self.model.model.decoder.embed_tokens.weight.dtype  # as transformers' generate casts it
        out = self.model(
            decoder_input_ids=ids,
            cache=cache.inner,
            self_conditioning_logits=previous.to(dtype) if previous is not None else None,
            decoder_position_ids=positions,
        )
        return out.logits.float()

    def new_cache(self) -> ContextCache:
        return ContextCache(self.model.config.get_text_config(decoder=True))

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device


# ---------------------------------------------------------------------------------------------
# Loading


def load(
    folder: Path, device: torch.device, dtype: torch.dtype, name: str, config: dict[str, Any]
) -> DiffusionGemmaDenoiser:
    """Load a local DiffusionGemma checkpoint folder (safetensors, possibly sharded) as a denoiser
    (its facts: facts.gemma_state)."""
    gemma_text(config, folder)  # the sizes transformers would otherwise default, first
    read_headers(folder)  # no weights, missing shards, bad or truncated files: one-line errors first
    model_config = make_config(DiffusionGemmaConfig, config, folder)
    tokenizer = load_tokenizer(folder)
    facts = gemma_state(folder, {**config, "canvas_length": model_config.canvas_length}, tokenizer, name)
    model = load_weights(
        DiffusionGemmaForBlockDiffusion,
        folder,
        model_config,
        device,
        dtype,
        generation_config=DiffusionGemmaGenerationConfig(),  # its loader rejects a plain one
    )
    return DiffusionGemmaDenoiser(cast(Any, model), tokenizer, facts)
