"""DiffusionGemma (google/diffusiongemma-26B-A4B-it) on transformers' own DiffusionGemmaForBlockDiffusion.

Uniform-noise block diffusion: the answer is written in canvases of `canvas_length` tokens (256),
one after another. An encoder (a causal Gemma 4 stack) writes the keys/values of everything before
a canvas into a cache; a decoder sharing its weights reads that cache and denoises the canvas with
bidirectional attention, fed the previous pass's logits (self-conditioning). There is no mask
token: positions still to fill hold random tokens, drawn afresh before every pass (the sampler
does that; mask_id here is only its placeholder, never fed). Owns reading the checkpoint, the
context cache and the two calls the sampler makes (extend, then a decoder pass), the special ids
and the family's sampling defaults (transformers' generation_diffusion_gemma), and its
released-format test checkpoint. Knows nothing about sampling rules, files other than the
checkpoint's, or the terminal. Torch and transformers are imported where a checkpoint is run.

Sources (read to understand, nothing copied): transformers' DiffusionGemmaForBlockDiffusion and
generation_diffusion_gemma (DiffusionGemmaGenerationConfig's defaults; the checkpoint layout
save_pretrained writes; no mask token: uniform noise).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from dcode.models.base import ModelError, ModelFacts
from dcode.models.checkpoint import read_headers, read_optional_json
from dcode.models.facts import first_id, ids_of, positive, token_id
from dcode.models.family import Family

if TYPE_CHECKING:
    import torch
    from transformers import DiffusionGemmaForBlockDiffusion, PretrainedConfig

    from dcode.testing.kit import Size

# transformers' DiffusionGemmaGenerationConfig defaults, as SamplerConfig fields: sample with a
# linear temperature schedule 0.8 -> 0.4 over at most 48 passes per canvas, accept under the
# entropy bound 0.1 (lowest entropy first), stop once the argmax is stable and the mean entropy
# is below 0.005. A checkpoint's generation_config.json overrides them (gemma_defaults).
GEMMA_DEFAULTS: dict[str, object] = {
    "rule": "entropy-bound",
    "ordering": "entropy",
    "entropy_bound": 0.1,
    "temperature": 0.8,
    "cooling": 0.5,
    "max_block_steps": 48,
    "stop_entropy": 0.005,
    "hold_conflicts": False,  # as transformers' loop, which commits what the entropy bound picks
}
GEMMA_END_TOKENS = ("<end_of_turn>", "<turn|>")  # Gemma 3 spelling, Gemma 4 spelling
# The placeholder for positions still to fill: a token a code answer never holds.
PLACEHOLDER_TOKENS = ("<mask>", "<unk>")
CANVAS_LENGTH = 256  # transformers' default when config.json omits canvas_length


def gemma_special_ids(
    config: Mapping[str, Any], text: Mapping[str, Any], generation: Mapping[str, Any], tokenizer: Any, folder: Path
) -> tuple[int, frozenset[int], int]:
    """(placeholder id, end-of-answer ids, pad id) from config.json, generation_config.json and
    the tokenizer."""
    eos_ids = set().union(*(ids_of(c.get("eos_token_id")) for c in (config, text, generation)))
    if not eos_ids and tokenizer.eos_token_id is not None:
        eos_ids = {int(tokenizer.eos_token_id)}
    eos_ids |= {i for i in (token_id(tokenizer, t) for t in GEMMA_END_TOKENS) if i is not None}
    pad_id = first_id(text.get("pad_token_id"), config.get("pad_token_id"), tokenizer.pad_token_id, *sorted(eos_ids))
    named = (token_id(tokenizer, t) for t in PLACEHOLDER_TOKENS)
    placeholder = first_id(tokenizer.mask_token_id, *named, tokenizer.unk_token_id)
    if placeholder is None or placeholder in eos_ids or placeholder == pad_id:
        raise ModelError(f"{folder}: the tokenizer has no mask or unk token to stand for positions still to fill")
    return placeholder, frozenset(eos_ids), pad_id if pad_id is not None else placeholder


def gemma_defaults(generation: Mapping[str, Any]) -> dict[str, object]:
    """GEMMA_DEFAULTS with the checkpoint's own generation_config.json settings where it gives them."""

    def number(key: str) -> float | None:
        value = generation.get(key)
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    defaults = dict(GEMMA_DEFAULTS)
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


def gemma_text(config: Mapping[str, Any], folder: Path) -> dict[str, Any]:
    """config.json's text_config, checked for the sizes transformers would otherwise default
    (to a 26B model's)."""
    text = config.get("text_config")
    if not isinstance(text, dict):
        kind = "a DiffusionGemma checkpoint (uniform-noise diffusion)"
        raise ModelError(f"{folder / 'config.json'}: {kind} needs a text_config object")
    for key in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads"):
        value = text.get(key)
        if not (isinstance(value, int) and not isinstance(value, bool) and value > 0):
            raise ModelError(f"{folder / 'config.json'}: text_config.{key} must be a positive integer, got {value!r}")
    return text


def gemma_state(folder: Path, config: Mapping[str, Any], tokenizer: Any, name: str) -> ModelFacts:
    """The facts of a DiffusionGemma checkpoint: canvases of canvas_length tokens, uniform noise."""
    text = gemma_text(config, folder)
    generation = read_optional_json(folder / "generation_config.json")
    placeholder, eos_ids, pad_id = gemma_special_ids(config, text, generation, tokenizer, folder)
    vocab_size = int(text["vocab_size"])
    if not 0 <= placeholder < vocab_size:
        raise ModelError(f"{folder}: placeholder token id {placeholder} is outside the vocabulary of {vocab_size}")
    return ModelFacts(
        name=name,
        family="diffusion_gemma",
        mask_id=placeholder,
        eos_ids=eos_ids,
        pad_id=pad_id,
        shifted=False,
        block=positive(config, ("canvas_length",)) or CANVAS_LENGTH,
        max_length=positive(text, ("max_position_embeddings",)) or 131_072,
        vocab_size=vocab_size,
        noise="uniform",
        defaults=gemma_defaults(generation),
    )


# ---------------------------------------------------------------------------------------------
# The model


class ContextCache:
    """Keys/values the encoder wrote for canvas positions [0, length); decoder passes only read
    them. It only grows: finished text before a block never changes."""

    def __init__(self, config: PretrainedConfig) -> None:
        from transformers import DynamicCache

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

    def extend(self, ids: torch.Tensor, cache: ContextCache) -> None:
        """Encode clean ids (B, n) at canvas positions [P, P+n), P = cache.length, into the cache."""
        import torch

        start = cache.length
        positions = torch.arange(start, start + ids.shape[1], device=ids.device)[None].expand(ids.shape[0], -1)
        with torch.inference_mode():
            self.model.model.encoder(input_ids=ids, cache=cache.inner, position_ids=positions)

    def __call__(
        self, ids: torch.Tensor, cache: ContextCache | None = None, *, previous: torch.Tensor | None = None
    ) -> torch.Tensor:
        """A noisy canvas ids (B, n) at positions [P, P+n), P = cache.length -> logits (B, n, V).

        Reads the context from the cache and never writes it, so every pass over one canvas sees
        the same context. previous (B, n, V): the last pass's temperature-scaled logits for this
        canvas (self-conditioning); None on a canvas's first pass.
        """
        import torch

        if cache is None or cache.length == 0:
            raise ValueError("DiffusionGemma denoises a canvas after its context: extend() a cache first")
        start = cache.length
        positions = torch.arange(start, start + ids.shape[1], device=ids.device)[None].expand(ids.shape[0], -1)
        dtype = self.model.model.decoder.embed_tokens.weight.dtype  # as transformers' generate casts it
        with torch.inference_mode():
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
    (its facts: gemma_state)."""
    from transformers import DiffusionGemmaConfig, DiffusionGemmaForBlockDiffusion
    from transformers.models.diffusion_gemma.generation_diffusion_gemma import DiffusionGemmaGenerationConfig

    from dcode.models.decoder import load_tokenizer, load_weights, make_config

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


# ---------------------------------------------------------------------------------------------
# The released format, for tests: random weights, a small tokenizer

GEMMA_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% set role = 'model' if message['role'] == 'assistant' "
    "else message['role'] %}{{ '<|turn>' + role + '\\n' + message['content'] | trim + '<turn|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|turn>model\\n' }}{% endif %}"
)
GEMMA_SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<|turn>", "<turn|>"]


def write_checkpoint(folder: Path, size: Size, device: torch.device, seed: int) -> int:
    """transformers' own format (save_pretrained of DiffusionGemmaForBlockDiffusion: encoder,
    decoder and head tied, written once; generation_config.json), a small MoE text model, a
    one-layer vision tower, and a tokenizer with Gemma's special tokens and turn template."""
    import torch
    from transformers import DiffusionGemmaConfig, DiffusionGemmaForBlockDiffusion
    from transformers.utils import logging

    from dcode.testing.kit import STD, train_bpe, write_tokenizer

    logging.disable_progress_bar()  # "Writing model shards" would clutter the log

    tokenizer = train_bpe(size, GEMMA_SPECIALS)
    settings = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<bos>",
        "eos_token": "<eos>",
        "pad_token": "<pad>",
        "unk_token": "<unk>",
        "mask_token": "<mask>",
        "additional_special_tokens": ["<|turn>", "<turn|>"],
        "chat_template": GEMMA_TEMPLATE,
        "model_max_length": 1000000000000000019884624838656,
        "padding_side": "left",
    }
    ids = write_tokenizer(folder, tokenizer, settings, "json")
    layers = size.g_layers
    layer_types = [
        "full_attention" if (i + 1) % 6 == 0 or i == layers - 1 else "sliding_attention" for i in range(layers)
    ]
    text = {
        "vocab_size": size.rows, "hidden_size": size.g_hidden, "intermediate_size": size.g_inner,
        "num_hidden_layers": layers, "num_attention_heads": size.g_heads, "num_key_value_heads": size.g_kv_heads,
        "head_dim": size.g_head_dim, "global_head_dim": size.g_global_head_dim,
        "num_global_key_value_heads": size.g_global_kv_heads, "max_position_embeddings": size.max_positions,
        "sliding_window": size.g_sliding_window, "layer_types": layer_types, "num_experts": size.g_experts,
        "top_k_experts": size.g_top_k, "moe_intermediate_size": size.g_moe_inner, "initializer_range": STD,
        "pad_token_id": ids["<pad>"], "eos_token_id": ids["<eos>"], "bos_token_id": ids["<bos>"],
    }  # fmt: skip
    vision = {
        "model_type": "gemma4_vision", "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
        "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 8, "position_embedding_size": 16,
    }  # fmt: skip
    config = DiffusionGemmaConfig(
        text_config=text, vision_config=vision, canvas_length=size.g_canvas, initializer_range=STD
    )
    torch.manual_seed(seed)
    with torch.device(device):
        model = DiffusionGemmaForBlockDiffusion(config)
    gen = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for _, param in model.named_parameters():  # tied parameters are listed once
            if param.dim() >= 2:  # matrices and expert stacks; norms and scales keep their init (1)
                param.copy_(torch.randn(param.shape, generator=gen, device=device) * STD)
    torch.nn.Module.to(model, getattr(torch, size.dtype))  # in place
    model.save_pretrained(folder)  # config.json, generation_config.json, model.safetensors
    return sum(p.numel() for p in model.parameters())


FAMILY = Family(
    name="diffusion_gemma",
    # Uniform-noise block diffusion (ModelFacts.noise == "uniform"), native in transformers >= 5.11.
    model_types=frozenset({"diffusion_gemma"}),
    architectures=frozenset({"DiffusionGemmaForBlockDiffusion"}),
    state_facts=gemma_state,
    load=load,
    checkpoints={"diffusion_gemma": write_checkpoint},
)
