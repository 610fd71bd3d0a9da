"""iLLaDA (GSAI-ML/iLLaDA-8B-Instruct, -8B-Base) on transformers' Llama classes.

iLLaDA is not LLaDA's network under a new mask id: its remote code (ILLaDAForCausalLM in
modeling_illada.py, config ILLaDAConfig, model_type "illada") is a Llama-style stack under Llama's
weight names (model.embed_tokens, model.layers.N.self_attn.{q,k,v,o}_proj with `attention_bias`,
mlp.{gate,up,down}_proj with `mlp_bias`, input_layernorm / post_attention_layernorm, model.norm,
lm_head tied to the embedding), default RoPE over head_dim = hidden / heads, grouped-query
attention, and FULLY BIDIRECTIONAL attention (is_causal False) with each position's own logits
(not shifted): LLaDA-style masked diffusion. Its norms are RMSNorm(rms_norm_eps), or LayerNorm when
config.json sets `layer_norm_eps`; Llama's classes have RMSNorm only, so such a config is refused
in one line rather than run with the wrong norm. Here the config is mapped onto LlamaConfig, the
weights load into LlamaForCausalLM (never the checkpoint's own code) and decoder.DecoderDenoiser
runs it under a mask that lets every position see every other.

Sources, read to understand (nothing copied):
- Verified, the modeling code: a stored copy of the release's modeling_illada.py (ILLaDARMSNorm,
  ILLaDARotaryEmbedding refusing any RoPE but the default unscaled one, ILLaDAAttention /
  ILLaDASdpaAttention with is_causal=False and an optional 2-D / 4-D mask, the LayerNorm switch on
  `config.layer_norm_eps`, ILLaDAForCausalLM with `_tied_weights_keys = ["lm_head.weight"]`).
  configuration_illada.py itself is in no stored copy: the keys are those the modeling code reads.
- Verified, the authors' text: ML-GSAI/LLaDA's README (2026.06.24; as carried by the fork
  cekim10/LLaDA at 9182493): "By setting mask_id=5, iLLaDA can directly reuse the existing LLaDA
  inference code" (generate.py: greedy, low-confidence remasking, semi-autoregressive blocks);
  Apache 2.0. Its eval_illada.sh (same fork) scores iLLaDA-8B-Instruct's HumanEval with
  steps=32, block_length=32, var=True (one token per pass in blocks of 32, the answer growing a
  block at a time until it stops; MBPP with blocks of 16), gen_length 2048, a chat template and an
  "end of thinking" logit boost dcode does not have. The Base model card (a mirror of
  huggingface.co/GSAI-ML/iLLaDA-8B-Base): 32 layers, hidden 4096, 32 heads, 8 key/value heads, FFN
  14,336, vocabulary 155,136, context 8192, tied embedding and head, 7.62B parameters.
- Third-party, not the authors': a project's notes on Hub revision 5769f04 ("CHECKED 2026-10-02"):
  remote code ILLaDAForCausalLM for both auto classes, mask `<[MASK]>` = 5 named neither in
  config.json (no mask_token_id) nor as the tokenizer's mask token, saved with transformers 4.57.1,
  ~16.5 GB in bfloat16; a harness's checkpoint table (revision 5769f04922: mask 5, eos 2, pad 1,
  bos 0, logits at the same position, bidirectional); a training project that checks
  model_type == "illada" on the loaded Base model and patches its RMSNorm (so the release's
  layer_norm_eps is unset: RMSNorm).
- Assumed: the tokenizer is Seed's (the 155,136 vocabulary of Seed-Coder and Stable-DiffCoder,
  <[begin▁of▁sentence]> 0 / <[PAD▁TOKEN]> 1 / <[end▁of▁sentence]> 2) and so are its chat turns;
  the release's tokenizer_config.json and chat template were not read. dcode renders whatever
  template the release ships.
- Scores: none for iLLaDA-8B-Instruct in the authors' text found here (the abstract says
  HumanEval +16.5 over LLaDA, without the table), so the catalogue shows none.
Knows nothing about sampling, files or the terminal.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from dcode.models.base import ModelError
from dcode.models.checkpoint import need
from dcode.models.facts import ONE_TOKEN_PER_PASS, THRESHOLD_LOW, FamilyFacts
from dcode.models.families.stable_diffcoder import SEED_SPECIALS, seed_tokenizer
from dcode.models.family import Entry, Family

if TYPE_CHECKING:
    import torch

    from dcode.models.decoder import DecoderDenoiser
    from dcode.testing.kit import Size

# The README: LLaDA's generate.py with mask_id=5 (greedy, low-confidence remasking, blocks of 32 in
# its example); eval_illada.sh scores HumanEval with one token per pass in blocks of 32. The mask
# is 5 where no file names one (config.json has no mask_token_id, the tokenizer no mask token);
# answers end with config.json's eos (2). Full attention; each position's own logits; 8192 context.
FACTS = FamilyFacts(
    shifted=False,
    defaults={"ordering": "confidence", "temperature": 0.0, "block": 32},
    default_length=8192,
    mask_id=5,
    # high: eval_illada.sh's HumanEval decoding (steps = block_length = 32: one token per pass);
    # low: THRESHOLD_LOW (not measured on this model).
    efforts={"high": ONE_TOKEN_PER_PASS, "low": THRESHOLD_LOW},
)
# 7.62B: the Base model card's total (tied head), the loaded size. 16.5 GB: the third-party notes'
# download (7.62B in bfloat16 is 15.2 GB; 16.5 GB would be a head stored a second time), unverified.
CATALOGUE = (
    Entry("illada-8b", "GSAI-ML/iLLaDA-8B-Instruct", "illada", 7.62, 16.5, "Apache-2.0", None, None,
          "full attention, mask id 5",
          "greedy, one token per pass, blocks of 32 added as the answer grows (eval_illada.sh)"),
)  # fmt: skip

# ILLaDAConfig keys the modeling code reads that mean the same in LlamaConfig.
LLAMA_KEYS = (
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "hidden_act", "max_position_embeddings", "rms_norm_eps", "rope_theta",
    "attention_bias", "attention_dropout", "mlp_bias", "bos_token_id", "eos_token_id", "pad_token_id",
)  # fmt: skip
REQUIRED = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")


def refusal(config: dict[str, Any]) -> str | None:
    """What in config.json the Llama classes cannot run as modeling_illada.py does, else None."""
    if config.get("layer_norm_eps") is not None:
        eps = config["layer_norm_eps"]
        return f"layer_norm_eps={eps!r} asks for LayerNorm norms; dcode runs iLLaDA with RMSNorm (layer_norm_eps unset)"
    scaling = config.get("rope_scaling") or {}
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind != "default" or scaling.get("factor", 1.0) != 1.0:  # the release's code refuses these too
        return f"rope_scaling={scaling!r} is not supported (iLLaDA's code runs default RoPE without scaling)"
    return None


def llama_values(config: dict[str, Any], folder: Path) -> dict[str, Any]:
    """iLLaDA's config.json -> the values of an equivalent LlamaConfig (a ModelError says what cannot be)."""
    problem = refusal(config)
    if problem is not None:
        raise ModelError(f"{folder / 'config.json'}: {problem}")
    for key in REQUIRED:
        need(config, folder, key)
    values = {key: config[key] for key in LLAMA_KEYS if config.get(key) is not None}
    return values | {
        # modeling_illada.py: hidden // heads, whatever a head_dim key says
        "head_dim": config["hidden_size"] // config["num_attention_heads"],
        # ILLaDAForCausalLM ties its head unless config.json says otherwise (transformers' default);
        # a head stored anyway is the embedding's copy
        "tie_word_embeddings": bool(config.get("tie_word_embeddings", True)),
        "model_type": "llama",
    }


def load(folder: Path, device: torch.device, dtype: torch.dtype, name: str, config: dict[str, Any]) -> DecoderDenoiser:
    """Load a local iLLaDA checkpoint folder (safetensors, possibly sharded) as a denoiser: full
    bidirectional attention, unshifted logits (FACTS)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from dcode.models.decoder import build, make_config

    model_config = make_config(LlamaConfig, llama_values(config, folder), folder)
    return build(folder, config, LlamaForCausalLM, model_config, device, dtype, name=name, family="illada")


# ---------------------------------------------------------------------------------------------
# The released format, for tests: random weights, a small tokenizer

# Seed's special tokens with iLLaDA's mask spelling at 5 (the third-party notes' <[MASK]>); no
# tokenizer_config entry names it a mask token. Inferred: the release's tokenizer was not read.
ILLADA_SPECIALS = [*SEED_SPECIALS[:5], "<[MASK]>", *SEED_SPECIALS[6:]]
AUTO_MAP = {
    "AutoConfig": "configuration_illada.ILLaDAConfig",
    "AutoModel": "modeling_illada.ILLaDAForCausalLM",
    "AutoModelForCausalLM": "modeling_illada.ILLaDAForCausalLM",
}


def write_checkpoint(
    folder: Path, size: Size, device: torch.device, seed: int, *, biases: bool = False, head: bool = False,
    layer_norm: bool = False,
) -> int:  # fmt: skip
    """iLLaDA-8B-Instruct's format as its modeling code reads it: model_type "illada",
    ILLaDAForCausalLM under both auto classes, Llama's weight names, grouped-query attention, the
    head tied (no lm_head.weight; `head`: stored a second time, as 16.5 GB would mean), no
    mask_token_id, eos / pad / bos 2 / 1 / 0, and Seed's tokenizer with <[MASK]> at 5.
    biases: attention_bias and mlp_bias on (the release's values were not read; off, as Llama's).
    layer_norm: layer_norm_eps set (LayerNorm norms; dcode refuses it)."""
    from dcode.testing.kit import STD, qwen2_shapes, random_weights, save_weights, write_json

    ids = seed_tokenizer(folder, size, ILLADA_SPECIALS)
    shapes = {k: v for k, v in qwen2_shapes(size, size.rows, head=False).items() if not k.endswith(".bias")}
    if biases:
        shapes |= {k[: -len("weight")] + "bias": v[:1] for k, v in shapes.items() if k.endswith("_proj.weight")}
    weights = random_weights(shapes, seed, device, size.spread)
    if head:
        weights["lm_head.weight"] = weights["model.embed_tokens.weight"].clone()
    count = save_weights(weights, folder, size.dtype)
    config = {
        "architectures": ["ILLaDAForCausalLM"], "auto_map": AUTO_MAP, "model_type": "illada",
        "attention_bias": biases, "attention_dropout": 0.0, "mlp_bias": biases, "resid_pdrop": 0.0,
        "hidden_act": "silu", "vocab_size": size.rows, "hidden_size": size.hidden, "intermediate_size": size.inner,
        "num_hidden_layers": size.layers, "num_attention_heads": size.heads, "num_key_value_heads": size.kv_heads,
        "max_position_embeddings": size.max_positions, "initializer_range": STD, "rms_norm_eps": 1e-05,
        "layer_norm_eps": 1e-05 if layer_norm else None, "rope_scaling": None, "rope_theta": 500000.0,
        "tie_word_embeddings": True, "use_cache": False, "torch_dtype": size.dtype, "transformers_version": "4.57.1",
        "bos_token_id": ids[ILLADA_SPECIALS[0]], "pad_token_id": ids[ILLADA_SPECIALS[1]],
        "eos_token_id": ids[ILLADA_SPECIALS[2]],
    }  # fmt: skip
    write_json(folder / "config.json", config)
    return count


FAMILY = Family(
    name="illada",
    model_types=frozenset({"illada"}),
    architectures=frozenset({"ILLaDAForCausalLM"}),
    modules=frozenset({"modeling_illada"}),
    facts=FACTS,
    catalogue=CATALOGUE,
    load=load,
    checkpoints={"illada": write_checkpoint},
)
