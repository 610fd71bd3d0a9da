"""Tiny-A2D (ZHZisZZ/dllm, dllm/pipelines/a2d) on transformers' Qwen2 / Qwen3 classes.

dllm converts an autoregressive Qwen into a diffusion model by keeping its weights and names
(Qwen2ForCausalLM's / Qwen3ForCausalLM's: convert.py loads the AR state dict into
A2DQwen{2,3}LMHeadModel unchanged) and replacing the causal mask; its config says model_type
"a2d-qwen2" or "a2d-qwen3" and otherwise the source model's keys. The released checkpoints come in
two trainings that look alike on disk: bd3lm (block-causal, blocks of 32, the prompt left-padded to
a block boundary so blocks start where the answer does) and mdlm (full attention); only the
name tells them apart (facts.named_block). Logits are read at the same position; the mask is
<|mask|>, found in the tokenizer. Here the config is mapped onto Qwen2Config / Qwen3Config and
run through decoder.DecoderDenoiser. Knows nothing about sampling, files or the terminal.

Sources (read to understand, nothing copied): ZHZisZZ/dllm dllm/pipelines/a2d (convert.py,
models/qwen{2,3}/modeling_qwen{2,3}.py: A2DQwen{2,3}LMHeadModel on the source Qwen's names),
dllm/core/samplers/bd3lm.py, dllm/utils/models.py get_tokenizer (<|mask|> added, not in
config.json; <|im_end|> eot), examples/a2d/{bd3lm,mdlm}/sample.py; examples/a2d/README.md
(Table 1: HumanEval / MBPP of the Coder 0.5B releases, reproduced with dllm's framework; the
Qwen3 0.6B releases' evaluation table); licence Apache-2.0 (the model cards' metadata).
Parameters: the source models (Qwen2.5-Coder-0.5B-Instruct 0.49B, Qwen3-0.6B 0.60B, tied heads).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dcode.models.facts import ONE_TOKEN_PER_PASS, QWEN_TURN, THRESHOLD_LOW, FamilyFacts
from dcode.models.family import Entry, Family

if TYPE_CHECKING:
    import torch

    from dcode.models.decoder import DecoderDenoiser
    from dcode.testing.kit import Size

# Logits at the same position (right_shift_logits False), <|mask|> added to the tokenizer,
# <|im_end|> as eot; greedy low-confidence remasking. bd3lm (BD3LMSampler): blocks of 32, the
# prompt left-padded to a block boundary, so blocks start where the answer does; mdlm: full attention.
FACTS = FamilyFacts(
    shifted=False,
    mask_token="<|mask|>",
    end_tokens=QWEN_TURN,
    defaults={"ordering": "confidence", "temperature": 0.0},
    default_length=32768,
    named_blocks=(("bd3lm", 32), ("mdlm", None)),
    block_origin="answer",
    # high: the published scores' decoding (dllm's A2D evaluation: one token per pass, greedy,
    # blocks of 32); low: THRESHOLD_LOW (not measured on this model).
    efforts={"high": {**ONE_TOKEN_PER_PASS, "block": 32}, "low": THRESHOLD_LOW},
)
CATALOGUE = (
    # The CPU pick: block diffusion (exact cache of finished 32-token blocks), 0.5B.
    Entry("a2d-coder-0.5b", "dllm-collection/Qwen2.5-Coder-0.5B-Instruct-diffusion-bd3lm-v0.1",
          "a2d", 0.49, 0.99, "Apache-2.0", 39.0, 33.2, "block diffusion; the model for a CPU"),
    Entry("a2d-coder-0.5b-mdlm", "dllm-collection/Qwen2.5-Coder-0.5B-Instruct-diffusion-mdlm-v0.1",
          "a2d", 0.49, 0.99, "Apache-2.0", 28.1, 23.0, "full attention"),
    Entry("a2d-qwen3-0.6b", "dllm-collection/Qwen3-0.6B-diffusion-bd3lm-v0.1",
          "a2d", 0.60, 1.19, "Apache-2.0", 46.3, 38.2, "block diffusion; general, not code-tuned"),
    Entry("a2d-qwen3-0.6b-mdlm", "dllm-collection/Qwen3-0.6B-diffusion-mdlm-v0.1",
          "a2d", 0.60, 1.19, "Apache-2.0", 30.5, 29.2, "full attention"),
)  # fmt: skip


def load(folder: Path, device: torch.device, dtype: torch.dtype, name: str, config: dict[str, Any]) -> DecoderDenoiser:
    """Load a local Tiny-A2D checkpoint folder (safetensors, possibly sharded) as a denoiser."""
    from dcode.models.decoder import build, qwen_model

    qwen3 = str(config.get("model_type", "")).lower() == "a2d-qwen3" or "A2DQwen3LMHeadModel" in (
        config.get("architectures") or []
    )
    model_class, model_config = qwen_model(config, folder, qwen3=qwen3)
    return build(folder, config, model_class, model_config, device, dtype, name=name, family="a2d")


# ---------------------------------------------------------------------------------------------
# The released format, for tests: random weights, a small tokenizer

# Qwen3's template: enable_thinking=false writes an empty think block (dllm renders without it).
QWEN3_THINK_OFF = (
    "{{ '<|im_start|>assistant\\n' }}{% endif %}",
    "{{ '<|im_start|>assistant\\n' }}{% if enable_thinking is defined and enable_thinking is false %}"
    "{{ '<think>\\n\\n</think>\\n\\n' }}{% endif %}{% endif %}",
)


def write_checkpoint(folder: Path, size: Size, device: torch.device, seed: int, *, qwen3: bool = False) -> int:
    """Tiny-A2D's format (dllm's convert.py + save_pretrained of A2DQwen{2,3}LMHeadModel): the
    source Qwen's config keys under model_type "a2d-qwen2" / "a2d-qwen3", its weight names (Qwen2:
    q/k/v biases; Qwen3: q_norm / k_norm, head_dim), the head tied as in Qwen2.5-Coder-0.5B and
    Qwen3-0.6B; the tokenizer as Qwen ships it (vocab.json + merges.txt, Qwen2Tokenizer) with
    <|mask|> added (dllm get_tokenizer) and named mask_token; eos [<|im_end|>, <|endoftext|>] in
    generation_config.json. bd3lm or mdlm is the folder's name alone."""
    from dcode.testing.kit import (
        QWEN_TEMPLATE,
        qwen_config,
        save_qwen_weights,
        train_bpe,
        write_json,
        write_qwen_generation,
        write_tokenizer,
    )

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<|mask|>"]
    tokenizer = train_bpe(size, specials)
    settings = {
        "tokenizer_class": "Qwen2Tokenizer", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
        "mask_token": "<|mask|>", "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "chat_template": QWEN_TEMPLATE.replace(*QWEN3_THINK_OFF) if qwen3 else QWEN_TEMPLATE,
        "model_max_length": 32768, "errors": "replace", "split_special_tokens": False,
    }  # fmt: skip
    ids = write_tokenizer(folder, tokenizer, settings, "vocab")
    count = save_qwen_weights(folder, size, device, seed, head=False, qwen3=qwen3)
    kind = "Qwen3" if qwen3 else "Qwen2"
    config = qwen_config(size, ids, tied=True) | {
        "architectures": [f"A2D{kind}LMHeadModel"],
        "model_type": f"a2d-{kind.lower()}",
        "max_position_embeddings": size.max_positions,
        "transformers_version": "4.57.1",
    }
    if qwen3:
        config |= {"attention_bias": False, "head_dim": size.hidden // size.heads}
    write_json(folder / "config.json", config)
    write_qwen_generation(folder, ids)
    return count


FAMILY = Family(
    name="a2d",
    model_types=frozenset({"a2d-qwen2", "a2d-qwen3"}),
    architectures=frozenset({"A2DQwen2LMHeadModel", "A2DQwen3LMHeadModel"}),
    facts=FACTS,
    catalogue=CATALOGUE,
    load=load,
    # the name carries bd3lm / mdlm, as the released ids do
    checkpoints={
        "a2d_qwen2_bd3lm": write_checkpoint,
        "a2d_qwen2_mdlm": write_checkpoint,
        "a2d_qwen3_bd3lm": partial(write_checkpoint, qwen3=True),
        "a2d_qwen3_mdlm": partial(write_checkpoint, qwen3=True),
    },
)
