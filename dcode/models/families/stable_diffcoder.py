"""Stable-DiffCoder (ByteDance-Seed/Stable-DiffCoder-8B-Instruct, -8B-Base) on transformers' Llama classes.

A released checkpoint says model_type "llama", so it is told from a plain Llama by the class it
names: architectures ["StableDiffcoderForCausalLM"], or an auto_map value in the module
`modeling_stable_diffcoder` (FAMILY.modules; Diffulex tells them apart the same way). The older
release (transformers 4.46.2; the authors' README still links it: Instruct revision b5fd5dc0, Base
1a32eee2) names SeedDiffcoderForCausalLM in `modeling_seed_diffcoder` under architectures
["LlamaForCausalLM"] and ships no generation_config.json: detected by its auto_map alike. Its layers are
plain Llama layers under Llama's weight names: no q/k/v/o or MLP biases, full rotary positions,
an untied head. Its generate() runs them block-causal in blocks of 4 counted from position 0
and reads each position's own logits (shift=False). Here the config is mapped onto
LlamaConfig, the weights load into LlamaForCausalLM (never the checkpoint's own modeling code),
and decoder.DecoderDenoiser runs it block-causal with an exact cache of finished blocks.

Sources, read to understand:
- The authors' README (github ByteDance-Seed/Stable-DiffCoder): generate(..., block_length=4,
  temperature=0., remasking='low_confidence', shift=False, threshold=None,
  eos_id=tokenizer.eos_token_id), steps equal to gen_length (one token per pass); 8K context.
- From third-party code, not the authors' release: Diffulex (a dLLM serving engine)
  diffulex/model/config/stable_diffcoder.py (the detection, Llama config defaults: vocab 155136,
  hidden 4096, 32 layers, 8 KV heads, rope_theta 500000, no biases, untied, pad 1 / bos 0 / eos 2)
  and diffulex/model/stable_diffcoder.py (Llama weight names); a copy of modeling_stable_diffcoder.py
  (StableDiffcoderForCausalLM(LlamaForCausalLM), generate_block: mask_id=5, block_length=4, a
  block-causal mask of whole blocks from position 0); a code-model harness's SeedDiffCoder wrapper
  (_STABLE_DIFFCODER_MASK_ID = 5, <[MASK_TOKEN]>); LlamaEdge's SeedInstructPrompt (the turns).
- The older format: the README at ece1ffb ("[2026/03/09] Update to adapt transformers
  v4.46.2->v5.3.0", the "old version (transformers==4.46.2)" links above); what that revision's
  config.json holds (SeedDiffcoderForCausalLM in modeling_seed_diffcoder, architectures
  LlamaForCausalLM, no generation_config.json) is as issue 35 reports it, not read here.
- The catalogue: the README (HumanEval 86.6, MBPP 85.7, measured with its generate() settings above),
  MIT. 8.25B parameters: Llama-8B layers with an untied 155,136-row vocabulary (2 x 155136 x 4096 =
  1.27B in embedding and head), 16.5 GB in bfloat16.
Knows nothing about sampling, files or the terminal.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dcode.models.facts import THRESHOLD_LOW, FamilyFacts
from dcode.models.family import Entry, Family

if TYPE_CHECKING:
    import torch

    from dcode.models.decoder import DecoderDenoiser
    from dcode.testing.kit import Size

# The authors' README: generate(..., block_length=4, temperature=0., remasking='low_confidence',
# shift=False, threshold=None, eos_id=tokenizer.eos_token_id) with steps = gen_length: greedy, most
# confident first, one token per pass (the fixed schedule), each position's own logits, blocks of 4
# from position 0 (blocks from 0 and mask 5 also in a copy of modeling_stable_diffcoder.py's
# generate_block: third-party code, not the authors' release). The mask: <[MASK_TOKEN]> in the
# tokenizer, else 5 (a code-model harness's _STABLE_DIFFCODER_MASK_ID; third-party). Ends:
# config.json / generation_config.json eos (2, <[end▁of▁sentence]>, in Diffulex's config defaults); 8K context.
FACTS = FamilyFacts(
    shifted=False,
    mask_token="<[MASK_TOKEN]>",
    defaults={"ordering": "confidence", "temperature": 0.0, "rule": "schedule"},
    default_length=8192,
    mask_id=5,
    block=4,
    # high and medium: that decoding, the one its scores used; low: THRESHOLD_LOW (not measured on this model).
    efforts={"low": THRESHOLD_LOW},
)
CATALOGUE = (
    Entry("stable-diffcoder-8b", "ByteDance-Seed/Stable-DiffCoder-8B-Instruct", "stable_diffcoder", 8.25, 16.5, "MIT",
          86.6, 85.7, "block diffusion, blocks of 4",
          "greedy, one token per pass, blocks of 4 (the README's generate())"),
)  # fmt: skip

LLAMA_KEYS = (
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "hidden_act", "max_position_embeddings", "rms_norm_eps", "rope_theta",
    "rope_scaling", "rope_parameters", "tie_word_embeddings", "attention_bias", "attention_dropout", "mlp_bias",
    "bos_token_id", "eos_token_id", "pad_token_id",
)  # fmt: skip


def load(folder: Path, device: torch.device, dtype: torch.dtype, name: str, config: dict[str, Any]) -> DecoderDenoiser:
    """Load a local Stable-DiffCoder checkpoint folder (safetensors, possibly sharded) as a denoiser."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from dcode.models.decoder import build, make_config, qwen_values

    values = qwen_values(config, folder, LLAMA_KEYS, "llama")  # the Qwen families' mapping serves Llama keys too
    model_config = make_config(LlamaConfig, values, folder)
    return build(folder, config, LlamaForCausalLM, model_config, device, dtype, name=name, family="stable_diffcoder")


# ---------------------------------------------------------------------------------------------
# The released format, for tests: random weights, a small tokenizer

# Stable-DiffCoder's special tokens. Pinned: bos 0, pad 1, eos 2 (Diffulex's config defaults) and
# <[MASK_TOKEN]> 5 (a harness's _STABLE_DIFFCODER_MASK_ID), all third-party code. Where the other
# Seed-Coder tokens sit in the release is not known here; they fill ids 3, 4 and 6 on.
SEED_SPECIALS = ["<[begin▁of▁sentence]>", "<[PAD▁TOKEN]>", "<[end▁of▁sentence]>", "<[SEP▁TOKEN]>"]
SEED_SPECIALS += ["<[fim-prefix]>", "<[MASK_TOKEN]>", "<[fim-suffix]>", "<[fim-middle]>"]
# Seed-Coder-Instruct's turns as a third-party prompt builder writes them (LlamaEdge's
# SeedInstructPrompt): inferred, the release's own template was not read here.
SEED_TEMPLATE = (
    "{% for message in messages %}{{ '<[begin▁of▁sentence]>' + message['role'] + '\\n' + message['content'] | trim"
    " + '<[end▁of▁sentence]>' }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<[begin▁of▁sentence]>assistant\\n' }}{% endif %}"
)


def seed_tokenizer(folder: Path, size: Size, specials: list[str] = SEED_SPECIALS) -> dict[str, int]:
    """tokenizer.json with `specials` at ids 0..7 (the BPE trained after them) and a
    tokenizer_config.json naming bos, eos and pad (the first three) as Seed-Coder's do (no
    mask_token: dcode finds <[MASK_TOKEN]> by its spelling). Returns special token -> id."""
    from dcode.testing.kit import train_bpe_first

    tokenizer, ids = train_bpe_first(size, specials)
    tokenizer.save(str(folder / "tokenizer.json"))
    decoder = {str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                        "special": True} for t, i in ids.items()}  # fmt: skip
    settings = {
        "added_tokens_decoder": decoder, "bos_token": specials[0], "eos_token": specials[2],
        "pad_token": specials[1], "chat_template": SEED_TEMPLATE, "clean_up_tokenization_spaces": False,
        "model_max_length": 8192, "tokenizer_class": "PreTrainedTokenizerFast",
    }  # fmt: skip
    (folder / "tokenizer_config.json").write_text(json.dumps(settings, indent=2, ensure_ascii=False) + "\n")
    return ids


def write_checkpoint(folder: Path, size: Size, device: torch.device, seed: int, *, older: bool = False) -> int:
    """Stable-DiffCoder-8B-Instruct's format as third-party code reads it (Diffulex's
    stable_diffcoder config and model): model_type "llama", StableDiffcoderForCausalLM with an
    auto_map to modeling_stable_diffcoder, Llama's names without any bias, an untied head, rope_theta
    500000, bos / pad / eos 0 / 1 / 2 in config.json and generation_config.json (the latter's
    content inferred), and a tokenizer with <[MASK_TOKEN]> at 5 (seed_tokenizer). `older`: the
    transformers-4.46 release: SeedDiffcoderForCausalLM in modeling_seed_diffcoder, architectures
    ["LlamaForCausalLM"], no generation_config.json (as issue 35 reports it)."""
    from dcode.testing.kit import STD, qwen2_shapes, random_weights, save_weights

    ids = seed_tokenizer(folder, size)
    shapes = {k: v for k, v in qwen2_shapes(size, size.rows, head=True).items() if not k.endswith(".bias")}
    count = save_weights(random_weights(shapes, seed, device, size.spread), folder, size.dtype)
    bos, pad, eos = (ids[t] for t in SEED_SPECIALS[:3])
    config = {
        "architectures": ["StableDiffcoderForCausalLM"], "model_type": "llama",
        "auto_map": {"AutoModelForCausalLM": "modeling_stable_diffcoder.StableDiffcoderForCausalLM"},
        "attention_bias": False, "attention_dropout": 0.0, "mlp_bias": False, "hidden_act": "silu",
        "vocab_size": size.rows, "hidden_size": size.hidden, "intermediate_size": size.inner,
        "num_hidden_layers": size.layers, "num_attention_heads": size.heads, "num_key_value_heads": size.kv_heads,
        "head_dim": size.hidden // size.heads, "max_position_embeddings": size.max_positions,
        "initializer_range": STD, "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 500000.0,
        "tie_word_embeddings": False, "use_cache": True, "pretraining_tp": 1,
        "bos_token_id": bos, "pad_token_id": pad, "eos_token_id": eos, "torch_dtype": size.dtype,
    }  # fmt: skip
    if older:
        config |= {
            "architectures": ["LlamaForCausalLM"], "transformers_version": "4.46.2",
            "auto_map": {"AutoModelForCausalLM": "modeling_seed_diffcoder.SeedDiffcoderForCausalLM"},
        }  # fmt: skip
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    if older:
        return count
    generation = {"bos_token_id": bos, "pad_token_id": pad, "eos_token_id": eos}
    (folder / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
    return count


FAMILY = Family(
    name="stable_diffcoder",
    # model_type "llama": told from a plain Llama by its class or its modeling module alone.
    model_types=frozenset(),
    architectures=frozenset({"StableDiffcoderForCausalLM", "SeedDiffcoderForCausalLM"}),
    modules=frozenset({"modeling_stable_diffcoder", "modeling_seed_diffcoder"}),
    facts=FACTS,
    catalogue=CATALOGUE,
    load=load,
    checkpoints={"stable_diffcoder": write_checkpoint, "stable_diffcoder_older": partial(write_checkpoint, older=True)},
)
