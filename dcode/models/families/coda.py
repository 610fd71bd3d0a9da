"""CoDA (SalesforceAIResearch/CoDA, Salesforce/CoDA-v0-Instruct) on transformers' Qwen3 classes.

The release ships remote code (CoDALanguageModel/modeling_coda.py, adapted from transformers'
Qwen3): model_type "CoDA", Qwen3's weight names (q_norm / k_norm over each head, no biases,
head_dim 128, grouped-query attention), attention run by sdpa with is_causal False and no mask
(bidirectional), logits shifted by one position at inference (generation_utils.py), and
mask_token_id 151669 (<|mask|>) in config.json. Here the config is mapped onto Qwen3Config and run
through decoder.DecoderDenoiser with full attention. Licence CC-BY-NC-4.0: non-commercial use only.
Knows nothing about sampling, files or the terminal.

Sources (read to understand, nothing copied): SalesforceAIResearch/CoDA CoDALanguageModel/
(config.json, generation_config.json, tokenizer_config.json, modeling_coda.py, attention.py,
generation_utils.py) and its README (serving defaults; HumanEval 54.3, MBPP 47.2; CC-BY-NC-4.0).
Its Qwen3 chat template takes enable_thinking, but the scores' harness renders it without
(evaluation/lm_eval/lm_eval/models/diffllm.py apply_chat_template, at fa1d505; only post-training
passes enable_thinking=False), so FACTS sets no chat_options.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dcode.models.facts import ONE_TOKEN_PER_PASS, QWEN_TURN, THRESHOLD_LOW, FamilyFacts
from dcode.models.family import Entry, Family

if TYPE_CHECKING:
    import torch

    from dcode.models.decoder import DecoderDenoiser
    from dcode.testing.kit import Size

# Qwen3 layers, bidirectional (sdpa with is_causal False, no mask), logits shifted
# (generation_utils.py: cat([l[:, :1], l[:, :-1]])), mask_token_id 151669 (<|mask|>) in config.json,
# eos <|im_end|>; its serving defaults (README: ALG entropy, TEMPERATURE 0, BLOCK_LENGTH 32) unless
# generation_config's alg says otherwise.
FACTS = FamilyFacts(
    shifted=True,
    mask_token="<|mask|>",
    end_tokens=QWEN_TURN,
    defaults={"ordering": "entropy", "temperature": 0.0, "block": 32},
    default_length=40960,
    reads_alg=True,
    # high: one token per pass in its blocks of 32 (the README's serving settings name no step
    # count, so the decoding every parallel rule approximates); low: THRESHOLD_LOW (not measured here).
    efforts={"high": ONE_TOKEN_PER_PASS, "low": THRESHOLD_LOW},
)
CATALOGUE = (
    Entry("coda-1.7b", "Salesforce/CoDA-v0-Instruct", "coda", 1.7, 6.9, "CC-BY-NC-4.0 (non-commercial)", 54.3, 47.2,
          "float32 weights as released", "as its README reports them; the decoding was not read here"),
)  # fmt: skip


def load(folder: Path, device: torch.device, dtype: torch.dtype, name: str, config: dict[str, Any]) -> DecoderDenoiser:
    """Load a local CoDA checkpoint folder (safetensors, possibly sharded) as a denoiser."""
    from dcode.models.decoder import build, qwen_model

    model_class, model_config = qwen_model(config, folder, qwen3=True)
    return build(folder, config, model_class, model_config, device, dtype, name=name, family="coda")


# ---------------------------------------------------------------------------------------------
# The released format, for tests: random weights, a small tokenizer


def write_checkpoint(folder: Path, size: Size, device: torch.device, seed: int) -> int:
    """CoDA-v0-Instruct's format (SalesforceAIResearch/CoDA, CoDALanguageModel/): model_type "CoDA"
    with its auto_map and training keys, Qwen3 names (q_norm / k_norm, no biases, head_dim), an
    own lm_head, mask_token_id in config.json and pad 151643's token; tokenizer.json plus
    vocab.json / merges.txt (Qwen2Tokenizer, mask_token <|mask|>, eos and bos <|im_end|>);
    generation_config.json with the alg "original" it ships."""
    from dcode.testing.kit import qwen_chat_tokenizer, qwen_config, save_qwen_weights, write_json

    ids = qwen_chat_tokenizer(folder, size, ["<|mask|>"], "Qwen2Tokenizer")
    settings = json.loads((folder / "tokenizer_config.json").read_text())
    settings |= {"mask_token": "<|mask|>", "bos_token": "<|im_end|>", "padding_side": "right"}
    write_json(folder / "tokenizer_config.json", settings)
    count = save_qwen_weights(folder, size, device, seed, head=True, qwen3=True)
    config = {
        k: v
        for k, v in qwen_config(size, ids, tied=False).items()
        if k not in ("tie_word_embeddings", "bos_token_id", "eos_token_id")
    }
    config |= {
        "architectures": ["CoDALanguageModel"],
        "auto_map": {"AutoConfig": "model_config.CoDAConfig", "AutoModel": "modeling_coda.CoDALanguageModel"},
        "attention_bias": False, "attention_kernel": "flash_attention",
        "block_masking_probability": [0.25, 0.5, 0.5, 0.75, 0.25],
        "head_dim": size.hidden // size.heads, "mask_block_sizes": [4, 8, 16, 32], "mask_token_id": ids["<|mask|>"],
        "model_type": "CoDA", "pad_token_id": ids["<|endoftext|>"], "prefix_probability": 0,
        "sampling_eps": [0.001, 0.25, 0.5, 0.25, 0.001], "truncate_probability": 0, "transformers_version": "4.47.1",
    }  # fmt: skip
    write_json(folder / "config.json", config)
    generation = {
        "alg": "original", "alg_temp": 0.2, "diffusion_steps": 10, "eps": 0.001, "mask_token_id": ids["<|mask|>"],
        "max_tokens": 256, "output_history": False, "top_k": None, "top_p": None,
    }  # fmt: skip
    write_json(folder / "generation_config.json", generation)
    return count


FAMILY = Family(
    name="coda",
    model_types=frozenset({"coda"}),
    architectures=frozenset({"CoDALanguageModel"}),
    facts=FACTS,
    catalogue=CATALOGUE,
    load=load,
    checkpoints={"coda": write_checkpoint},
)
