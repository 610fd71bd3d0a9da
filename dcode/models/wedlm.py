"""WeDLM (Tencent/WeDLM, tencent/WeDLM-8B-Instruct) on transformers' Qwen2 / Qwen3 classes.

WeDLM keeps an autoregressive model's causal attention and decodes by reordering
(hf_compat/modeling_wedlm.py, _generate_one_block): the filled tokens go first and the masks
after them, each in canvas order and each keeping its own position id for the rotary
embedding; one causal pass over that order gives every mask's logits at its own slot, so a mask
sees every filled token, wherever it stands, and the masks before it. WeDLMDenoiser does that
reordering inside the call: the sampler hands it a canvas and gets logits in canvas order, not
shifted. The weights are Qwen2's names (q/k/v biases, the 7B) or Qwen3's (q_norm / k_norm, the
8B: config `qk_norm`); config.json rarely names the mask (facts.SPECS["wedlm"]). No key/value
cache: a position's slot, and so what it attends to, moves as masks are filled before it, so every
pass runs the whole canvas. Knows nothing about sampling, files or the terminal.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from dcode.models.base import ModelError, ModelFacts
from dcode.models.decoder import build, qwen_model
from dcode.models.native import block_causal_mask


def filled_first(ids: torch.Tensor, mask_id: int) -> torch.Tensor:
    """The slot order WeDLM feeds: canvas positions (B, L) with the filled ones first and the
    masks after, each group in canvas order. Example: [a, M, b, M] -> positions [0, 2, 1, 3]."""
    return torch.argsort((ids == mask_id).to(torch.int8), dim=1, stable=True)


@dataclass
class WeDLMDenoiser:
    """Token ids -> logits for a WeDLM checkpoint: causal attention over the canvas reordered."""

    model: Any  # transformers Qwen2ForCausalLM or Qwen3ForCausalLM
    tokenizer: Any
    facts: ModelFacts

    @torch.inference_mode()
    def __call__(self, ids: torch.Tensor, cache: Any = None) -> torch.Tensor:
        """ids (B, L), a whole canvas -> logits (B, L, V) in canvas order, float32."""
        if cache is not None:
            raise ValueError("WeDLM runs the whole canvas every pass (no cache)")
        b, length = ids.shape
        order = filled_first(ids, self.facts.mask_id)  # (B, L): slot -> canvas position
        causal = block_causal_mask(0, length, length, 1, ids.device)  # slot q sees slots <= q
        out = self.model(
            input_ids=torch.gather(ids, 1, order),
            attention_mask=causal.expand(b, -1, -1, -1),
            position_ids=order,
            use_cache=False,
        ).logits.float()  # (B, L, V) in slot order
        return torch.empty_like(out).scatter_(1, order[..., None].expand_as(out), out)

    def new_cache(self) -> None:
        return None

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device


def load(folder: Path, device: torch.device, dtype: torch.dtype, name: str, config: dict[str, Any]) -> WeDLMDenoiser:
    """Load a local WeDLM checkpoint folder (safetensors, possibly sharded) as a denoiser."""
    qwen3 = bool(config.get("qk_norm"))  # Qwen3 layers (WeDLM-8B), else Qwen2.5 layers (WeDLM-7B)
    if not qwen3 and not config.get("attention_bias", True):
        raise ModelError(f"{folder / 'config.json'}: WeDLM without q/k norms or q/k/v biases is not a released layout")
    model_class, model_config = qwen_model(config, folder, qwen3=qwen3)
    loaded = build(folder, config, model_class, model_config, device, dtype, name=name, family="wedlm")
    return WeDLMDenoiser(loaded.model, loaded.tokenizer, loaded.facts)
