"""DiffusionGemma (google/diffusiongemma-26B-A4B-it) on transformers' own DiffusionGemmaForBlockDiffusion.

Uniform-noise block diffusion: the answer is written in canvases of `canvas_length` tokens (256),
one after another. An encoder (a causal Gemma 4 stack) writes the keys/values of everything before
a canvas into a cache; a decoder sharing its weights reads that cache and denoises the canvas with
bidirectional attention, fed the previous pass's logits (self-conditioning). There is no mask
token: positions still to fill hold random tokens, drawn afresh before every pass (the sampler
does that; mask_id here is only its placeholder, never fed). Owns reading the checkpoint, the
context cache, the two calls the sampler makes (extend, then a decoder pass), the special ids and
the family's sampling defaults (transformers' generation_diffusion_gemma). Knows nothing about
sampling rules, files other than the checkpoint's, or the terminal.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch
from transformers import DiffusionGemmaConfig, DiffusionGemmaForBlockDiffusion, DynamicCache, PretrainedConfig
from transformers.models.diffusion_gemma.generation_diffusion_gemma import DiffusionGemmaGenerationConfig

from dcode.models.base import ModelError, ModelFacts
from dcode.models.checkpoint import read_headers, read_optional_json
from dcode.models.decoder import load_tokenizer, load_weights, make_config
from dcode.models.facts import first_id, token_id

# transformers' DiffusionGemmaGenerationConfig defaults, as SamplerConfig fields: sample with a
# linear temperature schedule 0.8 -> 0.4 over at most 48 passes per canvas, accept under the
# entropy bound 0.1 (lowest entropy first), stop once the argmax is stable and the mean entropy
# is below 0.005. A checkpoint's generation_config.json overrides them (sampling_defaults).
DEFAULTS: dict[str, object] = {
    "rule": "entropy-bound",
    "ordering": "entropy",
    "entropy_bound": 0.1,
    "temperature": 0.8,
    "cooling": 0.5,
    "max_block_steps": 48,
    "stop_entropy": 0.005,
    "hold_conflicts": False,  # as transformers' loop, which commits what the entropy bound picks
}
# Gemma's end of a chat turn (Gemma 3 spelling, Gemma 4 spelling); absent ones are skipped.
END_TOKENS = ("<end_of_turn>", "<turn|>")
# The placeholder for positions still to fill: a token a code answer never holds.
PLACEHOLDER_TOKENS = ("<mask>", "<unk>")
TEXT_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
CANVAS_LENGTH = 256  # transformers' default when config.json omits canvas_length


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


def config_error(folder: Path, message: str) -> ModelError:
    return ModelError(f"{folder / 'config.json'}: {message}")


def text_values(config: dict[str, Any], folder: Path) -> dict[str, Any]:
    """config.json's text_config, checked for the sizes transformers would otherwise default
    (to a 26B model's)."""
    text = config.get("text_config")
    if not isinstance(text, dict):
        raise config_error(folder, "a DiffusionGemma checkpoint (uniform-noise diffusion) needs a text_config object")
    for key in TEXT_KEYS:
        value = text.get(key)
        if not (isinstance(value, int) and not isinstance(value, bool) and value > 0):
            raise config_error(folder, f"text_config.{key} must be a positive integer, got {value!r}")
    return text


def ids_of(value: object) -> set[int]:
    """An id or a list of ids from a config value; anything else -> none."""
    values = value if isinstance(value, list) else [value]
    return {i for i in (first_id(v) for v in values) if i is not None}


def special_ids(
    config: dict[str, Any], text: dict[str, Any], generation: dict[str, Any], tokenizer: Any, folder: Path
) -> tuple[int, frozenset[int], int]:
    """(placeholder id, end-of-answer ids, pad id) from config.json, generation_config.json and
    the tokenizer."""
    eos_ids = set().union(*(ids_of(c.get("eos_token_id")) for c in (config, text, generation)))
    if not eos_ids and tokenizer.eos_token_id is not None:
        eos_ids = {int(tokenizer.eos_token_id)}
    eos_ids |= {i for i in (token_id(tokenizer, t) for t in END_TOKENS) if i is not None}
    pad_id = first_id(text.get("pad_token_id"), config.get("pad_token_id"), tokenizer.pad_token_id, *sorted(eos_ids))
    named = (token_id(tokenizer, t) for t in PLACEHOLDER_TOKENS)
    placeholder = first_id(tokenizer.mask_token_id, *named, tokenizer.unk_token_id)
    if placeholder is None or placeholder in eos_ids or placeholder == pad_id:
        raise ModelError(f"{folder}: the tokenizer has no mask or unk token to stand for positions still to fill")
    return placeholder, frozenset(eos_ids), pad_id if pad_id is not None else placeholder


def sampling_defaults(generation: dict[str, Any]) -> dict[str, object]:
    """DEFAULTS with the checkpoint's own generation_config.json settings where it gives them."""

    def number(key: str) -> float | None:
        value = generation.get(key)
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    defaults = dict(DEFAULTS)
    t_max, t_min = number("t_max"), number("t_min")
    if t_max is not None and t_min is not None and 0 <= t_min <= t_max and t_max > 0:
        defaults.update(temperature=t_max, cooling=t_min / t_max)
    steps = generation.get("max_denoising_steps")
    if isinstance(steps, int) and not isinstance(steps, bool) and steps > 0:
        defaults["max_block_steps"] = steps
    sampler = generation.get("sampler_config")
    bound = sampler.get("entropy_bound") if isinstance(sampler, dict) else None
    if isinstance(bound, (int, float)) and not isinstance(bound, bool) and bound >= 0:
        defaults["entropy_bound"] = float(bound)
    confidence = number("confidence_threshold")
    if confidence is not None and confidence >= 0:
        defaults["stop_entropy"] = confidence
    return defaults


def load(
    folder: Path, device: torch.device, dtype: torch.dtype, name: str, config: dict[str, Any]
) -> DiffusionGemmaDenoiser:
    """Load a local DiffusionGemma checkpoint folder (safetensors, possibly sharded) as a denoiser."""
    text = text_values(config, folder)
    read_headers(folder)  # no weights, missing shards, bad or truncated files: one-line errors first
    model_config = make_config(DiffusionGemmaConfig, config, folder)
    canvas = int(model_config.canvas_length or CANVAS_LENGTH)
    vocab_size = int(text["vocab_size"])
    generation = read_optional_json(folder / "generation_config.json")  # optional
    tokenizer = load_tokenizer(folder)
    placeholder, eos_ids, pad_id = special_ids(config, text, generation, tokenizer, folder)
    if not 0 <= placeholder < vocab_size:
        raise ModelError(f"{folder}: placeholder token id {placeholder} is outside the vocabulary of {vocab_size}")
    model = load_weights(
        DiffusionGemmaForBlockDiffusion,
        folder,
        model_config,
        device,
        dtype,
        generation_config=DiffusionGemmaGenerationConfig(),  # its loader rejects a plain one
    )
    facts = ModelFacts(
        name=name,
        family="diffusion_gemma",
        mask_id=placeholder,
        eos_ids=eos_ids,
        pad_id=pad_id,
        shifted=False,
        block=canvas,
        max_length=int(text.get("max_position_embeddings") or 131_072),
        vocab_size=vocab_size,
        noise="uniform",
        defaults=sampling_defaults(generation),
    )
    return DiffusionGemmaDenoiser(cast(Any, model), tokenizer, facts)
