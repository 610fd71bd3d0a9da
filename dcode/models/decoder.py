"""A transformers decoder stack (Qwen2, Qwen3, Llama layers) as a denoiser, and the loading steps
every family module shares.

Owns: running a causal stack under a bidirectional or block-causal mask (native.block_causal_mask),
the exact key/value cache of finished blocks, Fast-dLLM's approximate window cache for full
attention, loading safetensors into a transformers class (with renamed keys where a family names
its weights differently) so that a weight the config needs but the files lack is an error rather
than a random tensor, and loading the tokenizer without remote code (the special ids: facts.py). Knows nothing
about sampling, files other than the checkpoint's, or the terminal. Family modules (dcode.models.families:
qwen2, dream, llada, ...) decide the config, the names and the facts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from huggingface_hub.errors import StrictDataclassError
from transformers import (
    AutoTokenizer,
    DynamicCache,
    GenerationConfig,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerFast,
)
from transformers.cache_utils import DynamicLayer
from transformers.utils import logging as transformers_logging

from dcode.models.base import ModelError, ModelFacts
from dcode.models.checkpoint import need, read_headers, refuse_misfit
from dcode.models.families import FAMILIES
from dcode.models.native import IGNORED_KEYS, block_causal_mask
from dcode.models.plain_tokenizer import TokenTable, require_tokenizer, settings_of


class KVCache:
    """Keys/values of the first `length` canvas positions; crop() forgets everything after.

    It holds one canvas. Several rows fed at once (the verify rule's drafts) share its positions:
    the call repeats them per row, and crop(), which keeps only positions every row has alike
    (finished blocks), goes back to one copy."""

    def __init__(self, config: PretrainedConfig) -> None:
        self.inner = DynamicCache(config=config)

    @property
    def length(self) -> int:
        return self.inner.get_seq_length()

    def crop(self, length: int) -> None:
        extra = self.length - length
        if extra > 0:
            self.inner.crop(-extra)
        self.widen(1)

    def widen(self, rows: int) -> None:
        """Hold the cached positions once per row fed side by side (from one copy: every row's are
        alike). A view, not a copy: the next forward's append copies them once anyway."""
        for layer in self.inner.layers:
            if isinstance(layer, DynamicLayer) and layer.keys is not None and layer.keys.shape[0] != rows:
                assert layer.values is not None
                layer.keys = layer.keys[:1].expand(rows, -1, -1, -1)
                layer.values = layer.values[:1].expand(rows, -1, -1, -1)


class ApproxKVCache:
    """Fast-dLLM's approximate cache for full attention (Wu et al. 2025, "Fast-dLLM", sec. 3.2):
    keys/values of every canvas position outside a window [lo, hi), taken from one full pass
    (DecoderDenoiser.refresh) and reused by the passes that feed the window alone
    (DecoderDenoiser.window). Approximate: under full attention a cached position's keys/values
    would shift a little as the window's tokens change, so the sampler refreshes at every block.
    The prefix cache is the window [lo, L); the dual cache a window [lo, hi) inside the canvas."""

    def __init__(self, config: PretrainedConfig) -> None:
        self.config = config
        self.inner = DynamicCache(config=config)
        self.window = (0, 0)

    @property
    def length(self) -> int:
        return self.inner.get_seq_length()  # cached positions: the canvas less the window


def drop_window(cache: DynamicCache, lo: int, hi: int) -> None:
    """Remove positions [lo, hi) from every layer's keys/values (B, H, L, D) -> (B, H, L - (hi - lo), D).
    Under full attention the order of cached keys does not matter (RoPE is applied before caching)."""
    for layer in cache.layers:
        assert isinstance(layer, DynamicLayer) and layer.keys is not None and layer.values is not None
        layer.keys = torch.cat([layer.keys[..., :lo, :], layer.keys[..., hi:, :]], dim=-2)
        layer.values = torch.cat([layer.values[..., :lo, :], layer.values[..., hi:, :]], dim=-2)


@dataclass
class DecoderDenoiser:
    """Token ids -> logits for a transformers *ForCausalLM run with a bidirectional or
    block-causal mask (the causal mask it was built with is replaced, not combined)."""

    model: PreTrainedModel  # Qwen2ForCausalLM, Qwen3ForCausalLM or LlamaForCausalLM
    tokenizer: Any  # transformers PreTrainedTokenizerFast
    facts: ModelFacts

    @torch.inference_mode()
    def __call__(self, ids: torch.Tensor, cache: KVCache | None = None, *, origin: int = 0) -> torch.Tensor:
        """ids (B, L) at canvas positions [P, P+L) where P = cache.length -> logits (B, L, V).
        origin: where the attention blocks start (facts.block_origin "answer": the answer's first position).

        With a cache, the new positions' keys/values are appended to it; the caller crops.
        """
        if cache is not None:
            cache.widen(ids.shape[0])
        start = cache.length if cache is not None else 0
        return self.forward(ids, start, cache.inner if cache is not None else None, origin=origin)

    def forward(
        self, ids: torch.Tensor, start: int, cache: DynamicCache | None, keys: int | None = None, origin: int = 0
    ) -> torch.Tensor:
        """ids (B, n) at canvas positions [start, start+n), attending to `keys` keys (default
        start + n: every cached position and the new ones) -> logits (B, n, V) in float32."""
        length = ids.shape[1]
        mask = block_causal_mask(start, length, keys or start + length, self.facts.block, ids.device, origin)
        positions = torch.arange(start, start + length, device=ids.device)[None]
        out = self.model(
            input_ids=ids,
            attention_mask=mask.expand(ids.shape[0], -1, -1, -1),
            position_ids=positions.expand(ids.shape[0], -1),
            cache=cache,
            use_cache=cache is not None,
        )
        return out.logits.float()

    def new_cache(self) -> KVCache | None:
        """A cache when reusing keys/values is exact (block-causal attention), else None."""
        return KVCache(self.model.config) if self.facts.block is not None else None

    def new_window_cache(self) -> ApproxKVCache | None:
        """Fast-dLLM's approximate cache, for full attention only (block-causal models have an exact one)."""
        return ApproxKVCache(self.model.config) if self.facts.block is None else None

    @torch.inference_mode()
    def refresh(self, ids: torch.Tensor, window: tuple[int, int], cache: ApproxKVCache) -> torch.Tensor:
        """One full pass over the canvas ids (B, L) -> logits (B, L, V); the cache keeps the keys/values
        of every position outside window = [lo, hi) for the window passes that follow."""
        lo, hi = window
        cache.inner, cache.window = DynamicCache(config=cache.config), (lo, hi)
        logits = self.forward(ids, 0, cache.inner)
        drop_window(cache.inner, lo, hi)
        return logits

    @torch.inference_mode()
    def window(self, ids: torch.Tensor, cache: ApproxKVCache) -> torch.Tensor:
        """ids (B, hi - lo): the canvas in the cache's window -> logits (B, hi - lo, V), every other
        position read from the cache (left as it was: the window's keys/values are dropped again)."""
        lo, hi = cache.window
        if ids.shape[1] != hi - lo:
            raise ValueError(f"the window [{lo}, {hi}) holds {hi - lo} tokens, got {ids.shape[1]}")
        logits = self.forward(ids, lo, cache.inner, keys=cache.length + ids.shape[1])
        cache.inner.crop(-ids.shape[1])  # DynamicCache: a negative count removes that many from the end
        return logits

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device


# ---------------------------------------------------------------------------------------------
# Loading


def unread(key: str) -> bool:
    """A checkpoint weight left unread on purpose: a recomputed buffer, or renamed to "unread."."""
    return key.endswith(IGNORED_KEYS) or key.startswith("unread.")


def quiet_transformers() -> None:
    transformers_logging.disable_progress_bar()  # stderr is for dcode's own progress
    transformers_logging.set_verbosity_error()


def make_config(config_class: type[PretrainedConfig], values: Mapping[str, Any], folder: Path) -> PretrainedConfig:
    """transformers' config from plain values; its validation errors as one line."""
    try:
        return config_class.from_dict(dict(values))
    except (TypeError, ValueError, StrictDataclassError) as error:
        raise ModelError(f"{folder / 'config.json'}: {' '.join(str(error).split())}") from None


def load_weights(
    model_class: type[PreTrainedModel],
    folder: Path,
    config: PretrainedConfig,
    device: torch.device,
    dtype: torch.dtype,
    key_mapping: Mapping[str, str] | None = None,
    generation_config: GenerationConfig | None = None,
    *,
    original_name: Callable[[str], str] | None = None,
) -> PreTrainedModel:
    """The checkpoint's safetensors (one file or shards) in `model_class`, built from `config`.
    Call checkpoint.read_headers(folder) first: it turns bad files into one-line errors.
    generation_config: handed to transformers instead of generation_config.json (dcode samples
    itself); a plain GenerationConfig unless the class insists on its own subclass. key_mapping:
    regex -> replacement on checkpoint names (transformers' own renaming). A weight the model needs
    but the files lack, a shape that does not fit, or a checkpoint weight that maps onto nothing is
    a ModelError (except a target named "unread.*": a weight the family's own modeling code never
    reads): each would otherwise give a silently wrong model. Its message names the weight as the
    user's files do (original_name: renamed -> as in the files)."""
    from dcode.models import quantize

    named = original_name or (lambda key: key)
    quiet_transformers()
    kind = quantize.current()  # --quantize: transformers quantises each linear layer as its weight is read
    extra = quantized_loading(kind, folder, config, device, key_mapping)
    try:
        loaded: Any = model_class.from_pretrained(
            str(folder),
            config=config,
            dtype=dtype,
            attn_implementation="sdpa",
            use_safetensors=True,
            local_files_only=True,
            trust_remote_code=False,
            key_mapping=dict(key_mapping) if key_mapping else None,
            ignore_mismatched_sizes=True,  # reported below as one line instead of a table
            output_loading_info=True,
            generation_config=generation_config or GenerationConfig(),
            device_map=str(device) if extra else None,  # quantised straight onto the device
            **extra,
        )
        model, info = loaded
    except OSError as error:  # safetensors or transformers failing on a file past the header check
        raise ModelError(f"{folder}: cannot load weights: {one_line(error)}") from None
    except RuntimeError as error:  # a layer torchao cannot quantise (transformers' conversion report)
        raise ModelError(f"{folder}: cannot quantise to {kind}: {one_line(error)[:200]}") from None
    problems = [
        *(f"missing {named(k)}" for k in sorted(info["missing_keys"])),
        *(
            f"{named(k[0])} has shape {tuple(k[1])}, the config needs {tuple(k[2])}"
            for k in sorted(info["mismatched_keys"])
        ),
        *(f"unused {named(k)}" for k in sorted(info["unexpected_keys"]) if not unread(k)),
    ]
    refuse_misfit(folder, problems)
    quantize.mark(model, kind)
    return model.to(device).eval()


def one_line(error: BaseException) -> str:
    """An exception's whole message on one line (transformers' run over several)."""
    return " ".join(str(error).split()) or type(error).__name__


def load_tokenizer(folder: Path, tokenizer_class: Any = None) -> Any:
    """The folder's tokenizer, never running code shipped with the checkpoint.

    tokenizer_class: the family's transformers class for its files (Dream's tokenizer_config names
    a remote DreamTokenizer; Qwen2Tokenizer reads the same vocab.json / merges.txt). None lets
    AutoTokenizer choose, except that a tokenizer_config asking for remote code (auto_map) or
    naming PreTrainedTokenizerFast gets PreTrainedTokenizerFast: transformers 5's AutoTokenizer
    gives a qwen2 folder Qwen2Tokenizer, whose own pre-tokenizer replaces the one in
    tokenizer.json (dcode-tiny's code-aware one, for instance). A folder without tokenizer files,
    or one whose tokenizer knows no tokens, is a one-line ModelError (transformers would load an
    empty tokenizer).
    """
    require_tokenizer(folder)
    quiet_transformers()  # AutoTokenizer warns about any model_type it does not know
    try:
        if tokenizer_class is None:
            settings = settings_of(folder)
            if not (folder / "tokenizer.json").is_file() and (folder / "merges.txt").is_file():
                if settings.get("tokenizer_class") in (None, "PreTrainedTokenizerFast") or "auto_map" in settings:
                    tokenizer_class = byte_level_class(folder)
            elif "auto_map" in settings or settings.get("tokenizer_class") == "PreTrainedTokenizerFast":
                tokenizer_class = PreTrainedTokenizerFast
        if tokenizer_class is None:
            tokenizer = AutoTokenizer.from_pretrained(str(folder), trust_remote_code=False, local_files_only=True)
        else:
            tokenizer = tokenizer_class.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError, TypeError) as error:
        raise ModelError(f"{folder}: cannot load the tokenizer: {one_line(error)}") from None
    if not tokenizer.get_vocab():
        raise ModelError(f"{folder}: the tokenizer files hold no tokens")
    return tokenizer


def byte_level_class(folder: Path) -> Any:
    """The transformers class that builds a GPT-2-style byte-level BPE from vocab.json + merges.txt
    on the `tokenizers` library alone (AutoTokenizer, given no class it knows, would try a slow
    tokenizer and ask for sentencepiece or tiktoken): Qwen2Tokenizer, Qwen's pre-tokenizer, for a
    Qwen vocabulary (<|im_start|> among its tokens, as Qwen-based releases ship it), else GPT2Tokenizer."""
    from transformers import GPT2Tokenizer, Qwen2Tokenizer

    return Qwen2Tokenizer if "<|im_start|>" in TokenTable(folder).get_vocab() else GPT2Tokenizer


# config.json keys that mean the same in Qwen2Config (copied when set, transformers' defaults otherwise).
QWEN2_KEYS = (
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "hidden_act", "max_position_embeddings", "rms_norm_eps", "rope_theta", "rope_scaling",
    "tie_word_embeddings", "attention_dropout", "use_sliding_window", "sliding_window", "max_window_layers",
    "bos_token_id", "eos_token_id", "pad_token_id",
)  # fmt: skip
# Qwen3Config's: Qwen2's plus the head size and the (off) q/k/v/o bias switch.
QWEN3_KEYS = (*QWEN2_KEYS, "head_dim", "attention_bias")
REQUIRED = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")


def qwen_values(config: Mapping[str, Any], folder: Path, keys: tuple[str, ...], model_type: str) -> dict[str, Any]:
    """A remote-code Qwen-layered config.json (Dream, SDAR, Fast-dLLM v2) -> the values of the
    transformers config of `model_type` ("qwen2", "qwen3"); the sizes transformers would default
    (to a 7B model's) must be there. Reads the safetensors headers: without an lm_head the head is
    tied, whatever the config says is left to transformers."""
    for key in REQUIRED:
        need(dict(config), folder, key)
    values = {key: config[key] for key in keys if config.get(key) is not None}
    values.setdefault("tie_word_embeddings", "lm_head.weight" not in read_headers(folder))
    values["model_type"] = model_type
    return values


def qwen_model(
    config: Mapping[str, Any], folder: Path, *, qwen3: bool
) -> tuple[type[PreTrainedModel], PretrainedConfig]:
    """A Qwen-layered checkpoint's transformers class, Qwen3ForCausalLM (qwen3) or Qwen2ForCausalLM,
    and its config from config.json (qwen_values); only the one asked for is imported (seconds)."""
    if qwen3:
        from transformers import Qwen3Config, Qwen3ForCausalLM

        return Qwen3ForCausalLM, make_config(Qwen3Config, qwen_values(config, folder, QWEN3_KEYS, "qwen3"), folder)
    from transformers import Qwen2Config, Qwen2ForCausalLM

    return Qwen2ForCausalLM, make_config(Qwen2Config, qwen_values(config, folder, QWEN2_KEYS, "qwen2"), folder)


def build(
    folder: Path,
    config: Mapping[str, Any],
    model_class: type[PreTrainedModel],
    model_config: PretrainedConfig,
    device: torch.device,
    dtype: torch.dtype,
    *,
    name: str,
    family: str,
    key_mapping: Mapping[str, str] | None = None,
    tokenizer_class: type | None = None,
    original_name: Callable[[str], str] | None = None,
) -> DecoderDenoiser:
    """Load tokenizer and weights and state the facts (FAMILIES[family].state): the one path every
    family module takes. The family module has already called checkpoint.read_headers(folder)."""
    tokenizer = load_tokenizer(folder, tokenizer_class)
    facts = FAMILIES[family].state(folder, config, tokenizer, name)
    model = load_weights(model_class, folder, model_config, device, dtype, key_mapping, original_name=original_name)
    return DecoderDenoiser(model, tokenizer, facts)


def quantized_loading(
    kind: str, folder: Path, config: PretrainedConfig, device: torch.device, key_mapping: Mapping[str, str] | None
) -> dict[str, Any]:
    """from_pretrained's extra arguments for --quantize `kind` (none: no extra)."""
    if kind == "none":
        return {}
    tied = bool(getattr(config, "tie_word_embeddings", False))
    return {"quantization_config": torchao_config(kind, device, read_headers(folder), key_mapping, tied)}


def torchao_config(
    kind: str,
    device: torch.device,
    tensors: Mapping[str, Any],
    key_mapping: Mapping[str, str] | None,
    tied: bool = False,
) -> Any:
    """transformers' TorchAoConfig for `kind`: each linear layer whose weight `quantized` takes
    (checkpoint names, renamed by `key_mapping`) quantised as its weight is read, the output head
    too (transformers would keep it otherwise) unless it is tied to the embedding: it is the
    embedding's own tensor then, and a release that stores it a second time (Tiny-A2D) has it
    compared with the embedding on tying, which a quantised tensor cannot do."""
    import re

    from transformers import TorchAoConfig

    from dcode.models import quantize

    kept = []
    for name, tensor in tensors.items():
        if len(tensor.shape) == 2 and name.endswith(".weight") and not quantize.quantized(name, tensor.shape):
            for pattern, replacement in (key_mapping or {}).items():
                name = re.sub(pattern, replacement, name)
            kept.append(name.removesuffix(".weight"))
    if tied:
        kept.append("lm_head")
    return TorchAoConfig(quantize.torchao_config(quantize.chosen(kind), device), modules_to_not_convert=kept)
