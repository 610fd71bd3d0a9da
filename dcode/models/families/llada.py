"""LLaDA (GSAI-ML/LLaDA-8B-Instruct, LLaDA 1.5) on transformers' Llama classes.

A LLaDA checkpoint is a LLaMA-shaped stack under OLMo's config keys and weight names, with remote
modeling code. Per block: x += attn_out(attention(q_proj, k_proj, v_proj of attn_norm(x))), then
x += ff_out(silu(ff_proj(h)) * up_proj(h)) with h = ff_norm(x), so ff_proj is the gate, up_proj
the up projection and ff_out the down projection. RMSNorm, rotary embeddings (rotate-half, as
transformers' Llama), no biases. Attention is fully bidirectional, logits are not shifted, the
mask token is `<|mdm_mask|>` (126336), answers end with <|eot_id|> (126348) and are padded with
<|endoftext|> (126081). Owns the config and name mapping, the family's facts and sampling defaults,
its catalogue entry and its released-format test checkpoint.

Sources (read to understand, nothing copied): GSAI-ML/LLaDA-8B-Instruct config.json (OLMo keys),
its modeling_llada.py names and generate.py (low-confidence remasking, greedy, blocks of 32);
ML-GSAI/LLaDA at b7e6c35 (its latest stored commit): EVAL.md's LLaDA-8B-Instruct table (HumanEval
49.4 at gen_length = block_length = 512, MBPP 41.0 at 256 / 256, "Internal toolkit"; the paper's
pure diffusion sampling, steps = gen_length), MIT. iLLaDA, which the README says reuses this
code with mask_id=5, is another network (Llama names, grouped-query attention): its own family,
dcode.models.families.illada.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dcode.models.base import ModelError
from dcode.models.checkpoint import need, read_headers
from dcode.models.facts import ONE_TOKEN_PER_PASS, THRESHOLD_LOW, FamilyFacts
from dcode.models.family import Entry, Family

if TYPE_CHECKING:
    import torch

    from dcode.models.decoder import DecoderDenoiser
    from dcode.testing.kit import Size

# generate.py: low-confidence remasking, greedy, semi-autoregressive blocks of 32; the mask
# <|mdm_mask|> 126336; answers end with <|eot_id|> 126348, padded with <|endoftext|> 126081.
FACTS = FamilyFacts(
    shifted=False,
    mask_token="<|mdm_mask|>",
    end_tokens=("<|eot_id|>", "<|endoftext|>"),
    defaults={"ordering": "confidence", "temperature": 0.0, "block": 32},
    vocab_keys=("embedding_size", "vocab_size"),
    length_keys=("max_sequence_length",),
    default_length=4096,
    # high: ML-GSAI/LLaDA EVAL.md's decoding (steps = gen_length: one token per pass, blocks of 32);
    # low: THRESHOLD_LOW (not measured on this model).
    efforts={"high": ONE_TOKEN_PER_PASS, "low": THRESHOLD_LOW},
)
CATALOGUE = (
    Entry("llada-8b", "GSAI-ML/LLaDA-8B-Instruct", "llada", 8.0, 16.0, "MIT", 49.4, 41.0, "",
          "greedy, one token per pass, one block of 512 (HumanEval) / 256 (MBPP) (EVAL.md)"),
)  # fmt: skip

LM_HEAD = "model.transformer.ff_out.weight"  # absent when the head is tied to wte (weight_tying)
# LLaDA's names -> transformers Llama's: (LLaDA part, Llama part) after "model.transformer." and
# after "model.transformer.blocks.N." / "model.layers.N.". From this table the loader builds the
# renaming regexes, and error messages the way back to the names in the user's files.
TOP_NAMES = (("wte.", "model.embed_tokens."), ("ln_f.", "model.norm."), ("ff_out.", "lm_head."))
LAYER_NAMES = (
    ("q_proj.", "self_attn.q_proj."),
    ("k_proj.", "self_attn.k_proj."),
    ("v_proj.", "self_attn.v_proj."),
    ("attn_out.", "self_attn.o_proj."),
    ("attn_norm.", "input_layernorm."),
    ("ff_norm.", "post_attention_layernorm."),
    ("ff_proj.", "mlp.gate_proj."),  # silu is applied to it: the gate
    ("up_proj.", "mlp.up_proj."),
    ("ff_out.", "mlp.down_proj."),
)
# Regexes as from_pretrained's key_mapping. Every source is anchored on "model.transformer.",
# which no target contains, so none chain.
RENAMES = {
    **{rf"^model\.transformer\.{re.escape(a)}": b for a, b in TOP_NAMES},
    **{rf"^model\.transformer\.blocks\.(\d+)\.{re.escape(a)}": rf"model.layers.\1.{b}" for a, b in LAYER_NAMES},
}
BACK = [(re.compile("^" + re.escape(b)), f"model.transformer.{a}") for a, b in TOP_NAMES] + [
    (re.compile(rf"^model\.layers\.(\d+)\.{re.escape(b)}"), rf"model.transformer.blocks.\1.{a}") for a, b in LAYER_NAMES
]


def original_name(key: str) -> str:
    """A Llama weight name -> the LLaDA name it is read from.
    Example: model.layers.1.mlp.up_proj.weight -> model.transformer.blocks.1.up_proj.weight."""
    for pattern, replacement in BACK:
        if pattern.match(key):
            return pattern.sub(replacement, key, count=1)
    return key


# OLMo options the Llama classes cannot express: (key, value that needs them, what it means).
UNSUPPORTED = (
    ("include_bias", True, "biases on every linear layer"),
    ("include_qkv_bias", True, "q/k/v biases"),
    ("alibi", True, "ALiBi positions"),
    ("rope", False, "no rotary embeddings"),
    ("attention_layer_norm", True, "q/k layer norms"),
    ("scale_logits", True, "scaled logits"),
    ("input_emb_norm", True, "a norm on the input embeddings"),
)
SUPPORTED_SETTINGS = {
    "block_type": (None, "llama"),
    "layer_norm_type": (None, "rms"),
    "activation_type": (None, "silu"),  # silu(ff_proj) * up_proj; OLMo's "swiglu" splits ff_proj instead
    "block_group_size": (None, 1),
    "clip_qkv": (None,),
}


def config_error(folder: Path, message: str) -> ModelError:
    return ModelError(f"{folder / 'config.json'}: {message}")


def llama_values(config: dict[str, Any], folder: Path, has_lm_head: bool) -> dict[str, Any]:
    """LLaDA's config.json -> the values of an equivalent LlamaConfig (a ModelError names what
    is missing or cannot be expressed)."""
    for key, value, meaning in UNSUPPORTED:
        if config.get(key) is value:
            raise config_error(folder, f"{key}={value!r} ({meaning}) is not supported")
    for key, allowed in SUPPORTED_SETTINGS.items():
        if config.get(key) not in allowed:
            raise config_error(folder, f"{key}={config[key]!r} is not supported (only {allowed[-1]!r})")
    hidden = need(config, folder, "d_model")
    heads = need(config, folder, "n_heads")
    kv_heads = 1 if config.get("multi_query_attention") else need(config, folder, "n_kv_heads", "n_heads")
    if config.get("mlp_hidden_size") is not None or config.get("mlp_ratio") is None:
        inner = need(config, folder, "mlp_hidden_size")
    else:
        inner = need(config, folder, "mlp_ratio") * hidden
    tied = config.get("weight_tying")
    eps = config.get("rms_norm_eps", config.get("layer_norm_eps"))
    return {
        "vocab_size": need(config, folder, "embedding_size", "vocab_size"),  # the padded embedding rows
        "hidden_size": hidden,
        "intermediate_size": inner,
        "num_hidden_layers": need(config, folder, "n_layers"),
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "hidden_act": "silu",
        "max_position_embeddings": int(config.get("max_sequence_length") or 4096),
        "rms_norm_eps": float(eps) if eps is not None else 1e-5,
        "rope_theta": float(config.get("rope_theta") or 10000.0),
        "tie_word_embeddings": bool(tied) if tied is not None else not has_lm_head,
        "attention_bias": False,
        "mlp_bias": False,
        "model_type": "llama",
    }


def load(folder: Path, device: torch.device, dtype: torch.dtype, name: str, config: dict[str, Any]) -> DecoderDenoiser:
    """Load a local LLaDA checkpoint folder (safetensors, possibly sharded) as a denoiser: full
    bidirectional attention, unshifted logits (FACTS)."""
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from dcode.models.decoder import build, make_config

    values = llama_values(config, folder, has_lm_head=LM_HEAD in read_headers(folder))
    mapping = RENAMES
    if values["tie_word_embeddings"]:
        # weight_tying: LLaDA's modeling builds no ff_out and reads logits off wte; a head saved
        # anyway is left unread, as there (it would otherwise untie the model).
        # The first pattern that matches renames a key, so this one goes before RENAMES'.
        mapping = {r"^model\.transformer\.ff_out\.weight$": "unread.ff_out.weight", **RENAMES}
    return build(
        folder, config, LlamaForCausalLM, make_config(LlamaConfig, values, folder), device, dtype,
        name=name, family="llada", key_mapping=mapping, tokenizer_class=PreTrainedTokenizerFast,
        original_name=original_name,
    )  # fmt: skip


# ---------------------------------------------------------------------------------------------
# The released format, for tests: random weights, a small tokenizer

LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}"
    "{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)
LLADA_SPECIALS = ["<|startoftext|>", "<|endoftext|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
LLADA_SPECIALS += ["<|mdm_mask|>"]

# LLaDA-8B-Instruct's config.json keys that do not depend on the tiny size (OLMo's names).
LLADA_CONFIG: dict[str, object] = {
    "activation_type": "silu",
    "alibi": False,
    "alibi_bias_max": 8.0,
    "architectures": ["LLaDAModelLM"],
    "attention_dropout": 0.0,
    "attention_layer_norm": False,
    "attention_layer_norm_with_affine": True,
    "auto_map": {
        "AutoConfig": "configuration_llada.LLaDAConfig",
        "AutoModelForCausalLM": "modeling_llada.LLaDAModelLM",
        "AutoModel": "modeling_llada.LLaDAModelLM",
    },
    "bias_for_layer_norm": False,
    "block_group_size": 1,
    "block_type": "llama",
    "embedding_dropout": 0.0,
    "flash_attention": False,
    "include_bias": False,
    "include_qkv_bias": False,
    "init_cutoff_factor": None,
    "init_device": "meta",
    "init_fn": "mitchell",
    "init_std": 0.02,  # kit.STD
    "input_emb_norm": False,
    "layer_norm_type": "rms",
    "layer_norm_with_affine": True,
    "mlp_ratio": 4,
    "model_type": "llada",
    "multi_query_attention": None,
    "precision": "amp_bf16",
    "residual_dropout": 0.0,
    "rms_norm_eps": 1e-05,
    "rope": True,
    "rope_full_precision": True,
    "rope_theta": 500000.0,
    "scale_logits": False,
    "transformers_version": "4.46.3",
    "use_cache": False,
}


def write_checkpoint(folder: Path, size: Size, device: torch.device, seed: int, *, tied: bool = False) -> int:
    """LLaDA-8B-Instruct's format: OLMo config keys, model.transformer.* names, no biases, untied
    head (ff_out), multi-head attention, tokenizer.json with <|mdm_mask|> and Llama 3's template.
    tied: weight_tying true and no ff_out (the head is wte)."""
    from dcode.testing.kit import random_weights, save_weights, train_bpe, write_json, write_tokenizer

    tokenizer = train_bpe(size, LLADA_SPECIALS)
    settings = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<|startoftext|>",
        "eos_token": "<|endoftext|>",
        "chat_template": LLAMA3_TEMPLATE,
        "model_max_length": 1000000000000000019884624838656,
    }
    ids = write_tokenizer(folder, tokenizer, settings, "json")
    hidden = size.hidden
    shapes: dict[str, tuple[int, ...]] = {
        "model.transformer.wte.weight": (size.rows, hidden),
        "model.transformer.ln_f.weight": (hidden,),
    }
    if not tied:
        shapes["model.transformer.ff_out.weight"] = (size.rows, hidden)
    for i in range(size.layers):
        p = f"model.transformer.blocks.{i}."
        shapes |= {
            p + "q_proj.weight": (hidden, hidden),
            p + "k_proj.weight": (hidden, hidden),
            p + "v_proj.weight": (hidden, hidden),
            p + "attn_out.weight": (hidden, hidden),
            p + "ff_proj.weight": (size.inner, hidden),
            p + "up_proj.weight": (size.inner, hidden),
            p + "ff_out.weight": (hidden, size.inner),
            p + "attn_norm.weight": (hidden,),
            p + "ff_norm.weight": (hidden,),
        }
    count = save_weights(random_weights(shapes, seed, device, size.spread), folder, size.dtype)
    config = {
        **LLADA_CONFIG,
        "d_model": hidden,
        "embedding_size": size.rows,
        "eos_token_id": ids["<|endoftext|>"],
        "mask_token_id": ids["<|mdm_mask|>"],
        "max_sequence_length": size.max_positions,
        "mlp_hidden_size": size.inner,
        "n_heads": size.heads,
        "n_kv_heads": size.heads,
        "n_layers": size.layers,
        "pad_token_id": ids["<|endoftext|>"],
        "torch_dtype": size.dtype,
        "vocab_size": size.rows,
        "weight_tying": tied,
    }
    write_json(folder / "config.json", config)
    return count


FAMILY = Family(
    name="llada",
    model_types=frozenset({"llada"}),
    architectures=frozenset({"LLaDAModelLM"}),
    facts=FACTS,
    catalogue=CATALOGUE,
    load=load,
    checkpoints={"llada": write_checkpoint},
)
