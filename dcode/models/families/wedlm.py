"""WeDLM (Tencent/WeDLM, tencent/WeDLM-8B-Instruct) on transformers' Qwen2 / Qwen3 classes.

WeDLM keeps an autoregressive model's causal attention and decodes by reordering
(hf_compat/modeling_wedlm.py, _generate_one_block): the filled tokens go first and the masks
after them, each in canvas order and each keeping its own position id for the rotary
embedding; one causal pass over that order gives every mask's logits at its own slot, so a mask
sees every filled token, wherever it stands, and the masks before it. WeDLMDenoiser does that
reordering inside the call: the sampler hands it a canvas and gets logits in canvas order, not
shifted. The weights are Qwen2's names (q/k/v biases, the 7B) or Qwen3's (q_norm / k_norm, the
8B: config `qk_norm`); config.json rarely names the mask (FACTS). No key/value
cache: a position's slot, and so what it attends to, moves as masks are filled before it, so every
pass runs the whole canvas. Knows nothing about sampling, files or the terminal.

Sources (read to understand, nothing copied): Tencent/WeDLM hf_compat/ (configuration_wedlm.py,
modeling_wedlm.py), wedlm/engine/model_runner.py (mask 151665 when config.json names none),
example.py (temperature 0), Readme.md (HumanEval 80.49, Apache-2.0); ~8.2B parameters (Qwen3-8B's).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dcode.models.base import ModelError, ModelFacts
from dcode.models.facts import QWEN_TURN, THRESHOLD_LOW, FamilyFacts
from dcode.models.family import Entry, Family

if TYPE_CHECKING:
    import torch

    from dcode.testing.kit import Size

# Causal attention over the canvas reordered, filled tokens first and masks after, each at its own
# rotary position (WeDLMDenoiser); each mask's logits at its own slot (not shifted); the mask is
# config.json's mask_token_id, else 151665 (the engine's and finetune's constant); the engine
# decodes a window of 16 (wedlm_window_size) greedily (example.py: temperature 0).
FACTS = FamilyFacts(
    shifted=False,
    end_tokens=QWEN_TURN,
    defaults={"ordering": "confidence", "temperature": 0.0, "block": 16},
    default_length=32768,
    mask_id=151665,
    attention="filled-first",
    # high and medium: the engine's window of 16, greedy (example.py); low: THRESHOLD_LOW (not measured here).
    efforts={"low": THRESHOLD_LOW},
)
CATALOGUE = (
    Entry("wedlm-8b", "tencent/WeDLM-8B-Instruct", "wedlm", 8.2, 16.4, "Apache-2.0", 80.5, None,
          "causal, decodes filled tokens first; no cache in dcode",
          "as its Readme reports it; greedy, window 16 in example.py, the evaluation's own not read here"),
)  # fmt: skip


def filled_first(ids: torch.Tensor, mask_id: int) -> torch.Tensor:
    """The slot order WeDLM feeds: canvas positions (B, L) with the filled ones first and the
    masks after, each group in canvas order. Example: [a, M, b, M] -> positions [0, 2, 1, 3]."""
    import torch

    return torch.argsort((ids == mask_id).to(torch.int8), dim=1, stable=True)


@dataclass
class WeDLMDenoiser:
    """Token ids -> logits for a WeDLM checkpoint: causal attention over the canvas reordered."""

    model: Any  # transformers Qwen2ForCausalLM or Qwen3ForCausalLM
    tokenizer: Any
    facts: ModelFacts

    def __call__(self, ids: torch.Tensor, cache: Any = None) -> torch.Tensor:
        """ids (B, L), a whole canvas -> logits (B, L, V) in canvas order, float32."""
        import torch

        from dcode.models.native import block_causal_mask

        if cache is not None:
            raise ValueError("WeDLM runs the whole canvas every pass (no cache)")
        b, length = ids.shape
        with torch.inference_mode():
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
    from dcode.models.decoder import build, qwen_model

    qwen3 = bool(config.get("qk_norm"))  # Qwen3 layers (WeDLM-8B), else Qwen2.5 layers (WeDLM-7B)
    if not qwen3 and not config.get("attention_bias", True):
        raise ModelError(f"{folder / 'config.json'}: WeDLM without q/k norms or q/k/v biases is not a released layout")
    model_class, model_config = qwen_model(config, folder, qwen3=qwen3)
    loaded = build(folder, config, model_class, model_config, device, dtype, name=name, family="wedlm")
    return WeDLMDenoiser(loaded.model, loaded.tokenizer, loaded.facts)


# ---------------------------------------------------------------------------------------------
# The released format, for tests: random weights, a small tokenizer


def write_checkpoint(folder: Path, size: Size, device: torch.device, seed: int) -> int:
    """WeDLM-8B-Instruct's format (Tencent/WeDLM hf_compat/configuration_wedlm.py): model_type
    "wedlm", WeDLMForCausalLM, Qwen3 names (qk_norm true, attention_bias false, head_dim), untied
    head, a Qwen3 chat tokenizer. The release names no mask in config.json and its code falls back
    to 151665 (Qwen3's <tool_response>), a row a tiny embedding lacks: here config.json names the
    tiny vocabulary's <tool_response> as mask_token_id, a key WeDLMConfig has."""
    from dcode.testing.kit import qwen_chat_tokenizer, qwen_config, save_qwen_weights, write_json

    ids = qwen_chat_tokenizer(folder, size, ["<tool_response>"], "Qwen2Tokenizer")
    count = save_qwen_weights(folder, size, device, seed, head=True, qwen3=True)
    config = qwen_config(size, ids, tied=False) | {
        "architectures": ["WeDLMForCausalLM"],
        "auto_map": {
            "AutoConfig": "configuration_wedlm.WeDLMConfig",
            "AutoModelForCausalLM": "modeling_wedlm.WeDLMForCausalLM",
        },
        "attention_bias": False,
        "qk_norm": True,
        "head_dim": size.hidden // size.heads,
        "model_type": "wedlm",
        "mask_token_id": ids["<tool_response>"],
        "transformers_version": "4.57.1",
    }
    write_json(folder / "config.json", config)
    return count


FAMILY = Family(
    name="wedlm",
    model_types=frozenset({"wedlm"}),
    architectures=frozenset({"WeDLMForCausalLM"}),
    facts=FACTS,
    catalogue=CATALOGUE,
    load=load,
    checkpoints={"wedlm": write_checkpoint},
)
