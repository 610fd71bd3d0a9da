"""Tiny-A2D (ZHZisZZ/dllm, dllm/pipelines/a2d) on transformers' Qwen2 / Qwen3 classes.

dllm converts an autoregressive Qwen into a diffusion model by keeping its weights and names
(Qwen2ForCausalLM's / Qwen3ForCausalLM's: convert.py loads the AR state dict into
A2DQwen{2,3}LMHeadModel unchanged) and replacing the causal mask; its config says model_type
"a2d-qwen2" or "a2d-qwen3" and otherwise the source model's keys. The released checkpoints come in
two trainings that look alike on disk: bd3lm (block-causal, blocks of 32, the prompt left-padded to
a block boundary so blocks start where the answer does) and mdlm (full attention); only the
name tells them apart (facts.named_block). Logits are read at the same position; the mask is
<|mask|>, found in the tokenizer. A bd3lm release on Qwen2.5 runs on dcode.models.native (its
forward is Qwen2ForCausalLM's, and its output head runs only where the sampler reads); the others
map the config onto Qwen2Config / Qwen3Config and run through decoder.DecoderDenoiser. Knows
nothing about sampling, files or the terminal.

Sources (read to understand, nothing copied), ZHZisZZ/dllm at ca176752 (its latest stored commit):
dllm/pipelines/a2d (convert.py, models/qwen{2,3}/modeling_qwen{2,3}.py: A2DQwen{2,3}LMHeadModel on
the source Qwen's names), dllm/core/samplers/bd3lm.py, dllm/utils/models.py get_tokenizer (<|mask|>
added, not in config.json; <|im_end|> eot; since bcb6bed5, 2026-02-17, apply_chat_template defaults
to enable_thinking=False for A2DQwen2 and A2DQwen3 alike), examples/a2d/README.md (the HumanEval /
MBPP tables, "Reproduced" with dllm's framework) and examples/a2d/{bd3lm,mdlm}/eval.sh (how they
were measured: max_new_tokens=256, steps=256, block_size 32 for bd3lm and 256 for mdlm, cfg 0,
greedy); the org: b8d76ff7 ("Release v0.1.0", 2026-02-26) links every release under dllm-hub/, no
longer dllm-collection/. Licence Apache-2.0 (the model cards' metadata). Sizes: the Hub's file
listing (dllm-hub/Qwen2.5-Coder-0.5B-Instruct-diffusion-mdlm-v0.1: model.safetensors 1.26 GB; the
collection page: 0.6B and 0.8B parameters): the releases store the tied head a second time as
lm_head.weight, so 0.49B + 0.14B = 0.63B (Qwen2.5-Coder-0.5B) and 0.60B + 0.16B = 0.75B (Qwen3-0.6B)
parameters are on disk and in what `dcode models pull` prints. Whether their config.json still says
tie_word_embeddings true was not read here; dcode loads either way (decoder.qwen_values).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dcode.models.checkpoint import read_headers
from dcode.models.facts import ONE_TOKEN_PER_PASS, QWEN_TURN, THRESHOLD_LOW, FamilyFacts, named_block
from dcode.models.family import Entry, Family

if TYPE_CHECKING:
    import torch

    from dcode.models.base import Denoiser
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
    # dllm's get_tokenizer (since bcb6bed5): enable_thinking=False unless asked otherwise, so a
    # Qwen3 template writes an empty <think>\n\n</think>\n\n block after the assistant header (the
    # Qwen3-0.6B cards recommend it; the published scores were measured so). Qwen2.5's ignores it.
    chat_options={"enable_thinking": False},
    # high: the published scores' decoding (dllm's A2D evaluation: one token per pass, greedy,
    # blocks of 32); low: THRESHOLD_LOW (not measured on this model).
    efforts={"high": {**ONE_TOKEN_PER_PASS, "block": 32}, "low": THRESHOLD_LOW},
)
# examples/a2d/{bd3lm,mdlm}/eval.sh: one token per pass (steps = max_new_tokens = 256), greedy.
BD3LM_SCORED = "greedy, one token per pass, 256 tokens, blocks of 32 (dllm eval.sh)"
MDLM_SCORED = "greedy, one token per pass, 256 tokens, one block of 256 (dllm eval.sh)"
DUPLICATE_HEAD = "the tied head stored twice: 0.49B loaded, 0.63B on disk"
CATALOGUE = (
    # The CPU pick by the README's rule: block diffusion (exact cache of finished 32-token blocks), 0.5B.
    Entry("a2d-coder-0.5b", "dllm-hub/Qwen2.5-Coder-0.5B-Instruct-diffusion-bd3lm-v0.1",
          "a2d", 0.63, 1.26, "Apache-2.0", 39.0, 33.2, "block diffusion; " + DUPLICATE_HEAD, BD3LM_SCORED),
    Entry("a2d-coder-0.5b-mdlm", "dllm-hub/Qwen2.5-Coder-0.5B-Instruct-diffusion-mdlm-v0.1",
          "a2d", 0.63, 1.26, "Apache-2.0", 28.1, 23.0, "full attention; " + DUPLICATE_HEAD, MDLM_SCORED),
    Entry("a2d-qwen3-0.6b", "dllm-hub/Qwen3-0.6B-diffusion-bd3lm-v0.1",
          "a2d", 0.75, 1.50, "Apache-2.0", 46.3, 38.2, "block diffusion; general, not code-tuned", BD3LM_SCORED),
    Entry("a2d-qwen3-0.6b-mdlm", "dllm-hub/Qwen3-0.6B-diffusion-mdlm-v0.1",
          "a2d", 0.75, 1.50, "Apache-2.0", 30.5, 29.2, "full attention", MDLM_SCORED),
)  # fmt: skip


def is_qwen3(config: Mapping[str, Any]) -> bool:
    """A Tiny-A2D release on Qwen3's layers (transformers runs it)."""
    return str(config.get("model_type", "")).lower() == "a2d-qwen3" or "A2DQwen3LMHeadModel" in (
        config.get("architectures") or []
    )


def native_fits(config: Mapping[str, Any], folder: Path, name: str) -> bool:
    """Whether dcode.models.native runs this checkpoint: a block-causal (bd3lm) one on Qwen2.5's
    plain layers (its name says the block: named_block)."""
    from dcode.models.families import qwen2

    return not is_qwen3(config) and named_block(FACTS, folder, name) is not None and qwen2.plain_layers(config)


def load(
    folder: Path,
    device: torch.device,
    dtype: torch.dtype,
    name: str,
    config: dict[str, Any],
    *,
    native_path: bool = True,
) -> Denoiser:
    """Load a local Tiny-A2D checkpoint folder (safetensors, possibly sharded) as a denoiser: a
    block-causal (bd3lm) one on Qwen2.5's layers on dcode.models.native (the same logits as
    transformers' Qwen2ForCausalLM, the output head only where the sampler reads, no transformers
    model import), the rest on transformers' classes (native_path=False: those always)."""
    from dcode.models.families import qwen2

    if native_path and native_fits(config, folder, name):
        read_headers(folder)  # bad or truncated files: one-line errors first
        return qwen2.load_native(folder, config, device, dtype, name, FAMILY, plain=False)
    from dcode.models.decoder import build, qwen_model

    model_class, model_config = qwen_model(config, folder, qwen3=is_qwen3(config))
    return build(folder, config, model_class, model_config, device, dtype, name=name, family="a2d")


# ---------------------------------------------------------------------------------------------
# The released format, for tests: random weights, a small tokenizer

# Qwen3's template: enable_thinking=false writes an empty think block (dllm renders so: FACTS.chat_options).
QWEN3_THINK_OFF = (
    "{{ '<|im_start|>assistant\\n' }}{% endif %}",
    "{{ '<|im_start|>assistant\\n' }}{% if enable_thinking is defined and enable_thinking is false %}"
    "{{ '<think>\\n\\n</think>\\n\\n' }}{% endif %}{% endif %}",
)


def write_checkpoint(
    folder: Path, size: Size, device: torch.device, seed: int, *, qwen3: bool = False, head: bool = True
) -> int:
    """Tiny-A2D's format (dllm's convert.py + save_pretrained of A2DQwen{2,3}LMHeadModel): the
    source Qwen's config keys under model_type "a2d-qwen2" / "a2d-qwen3", its weight names (Qwen2:
    q/k/v biases; Qwen3: q_norm / k_norm, head_dim), the head tied as in Qwen2.5-Coder-0.5B and
    Qwen3-0.6B; the tokenizer as Qwen ships it (vocab.json + merges.txt, Qwen2Tokenizer) with
    <|mask|> added (dllm get_tokenizer) and named mask_token; eos [<|im_end|>, <|endoftext|>] in
    generation_config.json. bd3lm or mdlm is the folder's name alone. `head`: the embedding also
    stored as lm_head.weight, as the releases do (1.26 GB for 0.49B parameters)."""
    from dcode.testing.kit import (
        QWEN_TEMPLATE,
        qwen2_shapes,
        qwen_config,
        random_weights,
        save_weights,
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
    weights = random_weights(qwen2_shapes(size, size.rows, head=False, qwen3=qwen3), seed, device, size.spread)
    if head:
        weights["lm_head.weight"] = weights["model.embed_tokens.weight"].clone()
    count = save_weights(weights, folder, size.dtype)
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
    moved=(("dllm-collection", "dllm-hub"),),  # b8d76ff7: the org moved; names and -v0.1 unchanged
    load=load,
    # the name carries bd3lm / mdlm, as the released ids do
    checkpoints={
        "a2d_qwen2_bd3lm": write_checkpoint,
        "a2d_qwen2_mdlm": write_checkpoint,
        "a2d_qwen3_bd3lm": partial(write_checkpoint, qwen3=True),
        "a2d_qwen3_mdlm": partial(write_checkpoint, qwen3=True),
    },
)
