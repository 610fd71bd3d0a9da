"""SDAR (JetLM/SDAR-1.7B-Chat, -4B-Chat, -8B-Chat) on transformers' Qwen3 classes.

A released SDAR checkpoint says model_type "sdar", architectures ["SDARForCausalLM"], and ships
remote modeling code (JetAstra/SDAR, training/model/*): Qwen3 layers (q/k RMSNorm, no biases)
under Qwen3's weight names, block-causal attention in blocks of `block_size` (4), the mask token
`<|MASK|>` (151669; in config.json where a checkpoint names it, else the tokenizer's), end of
answer from generation_config.json ([151645, 151643]).
Its generate.py samples each position from the logits at that same position: not shifted.
Here the config is mapped onto Qwen3Config and the weights load into Qwen3ForCausalLM, run
block-causal with an exact cache of finished blocks (decoder.DecoderDenoiser).
Knows nothing about sampling, files or the terminal.

Sources (read to understand, nothing copied): JetAstra/SDAR at c2041a8 (its latest stored commit):
training/model/ (configuration_sdar.py, modeling_sdar.py: Qwen3 names with q_norm / k_norm) and
generate.py (eos [151645, 151643], <|MASK|> 151669; low-confidence dynamic unmasking inside
4-token blocks); README.md: the releases (1.7B / 4B / 8B -Chat, and "[2025-09-09] ... block sizes
of 8, 16, 32, 64 on the Hugging Face"), the evaluation setup ("greedy decoding with block_length = 4,
denoising_steps = 4"), its prompt rendered with apply_chat_template(..., add_generation_prompt=True)
and no enable_thinking (so none here).
Scores: the README's Table 1 (assets/table1.png at c2041a8, read as an image): HumanEval / MBPP
1.7B 61.6 / 61.1, 4B 72.0 / 65.4, 8B 78.7 / 72.0, "greedy decoding with block_length = 4,
denoising_steps = 4"; the 1.7B's also in text in SDAR-4B-Chat's card before huggingface.co commit
cd91dd7 (61.59 / 61.09, HumanEval and Sanitized_MBPP 0-shot). The larger-block releases have none.
Releases (the Hub's file listings): SDAR-1.7B-Chat and its -b8 (61c436a), -b16 (8ffce276),
-b32 (2c83c05) and -b64 (e98192d), each one model.safetensors of 4.06 GB (2.03B parameters:
Qwen3-1.7B with an untied head); SDAR-4B-Chat and -b64 (6d87c0c) 8.83 GB; SDAR-8B-Chat 16.4 GB.
JetLM/SDAR-8B-Chat-b32 is named by many public projects (lmdeploy and SGLang runs) though its Hub
page is not stored; no other -bN release was found. SDAR-4B-Chat's config.json: SDARForCausalLM,
tie_word_embeddings false, neither block_size nor mask_token_id (the mask is the tokenizer's
<|MASK|>, as FACTS finds it).
The 1.7B's own config.json (932 bytes, "Update config.json", where the 4B's and 8B's are 1.09 kB)
was not found in any stored copy, so its keys are unverified here (the writer below is the 4B's
format); an older snapshot that still says model_type "qwen3" is not recognized as SDAR. Its
remote code is not older by size: configuration_sdar.py 11.2 kB ("Replace Qwen3 configs/modeling
with SDAR version", ce85381) and modeling_sdar.py 37.5 kB ("Add kernel to accelerate"), the same
sizes as SDAR-4B-Chat-b64's and SDAR-8B-Chat's (dcode runs none of it).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from dcode.models.facts import ONE_TOKEN_PER_PASS, QWEN_TURN, THRESHOLD_LOW, FamilyFacts
from dcode.models.family import Entry, Family

if TYPE_CHECKING:
    import torch

    from dcode.models.decoder import DecoderDenoiser
    from dcode.testing.kit import Size

# generate.py: low-confidence dynamic unmasking (threshold) inside 4-token blocks; the CLI's own
# threshold default applies. Each position's own logits; block_size in config.json.
# SDAR-4B-Chat's config.json has no block_size (nor do the larger-block releases' of the same
# length, 1.09 kB): the block is config.json's where a checkpoint says it (derived checkpoints do),
# else the release's name (-b8 / -b16 / -b32 / -b64: trained with that block, README 2025-09-09),
# else 4 (the default model's, README's block_length=4).
FACTS = FamilyFacts(
    shifted=False,
    block_keys=("block_size",),
    named_blocks=(("-b8", 8), ("-b16", 16), ("-b32", 32), ("-b64", 64)),
    block=4,
    mask_token="<|MASK|>",
    end_tokens=QWEN_TURN,
    default_length=32768,
    efforts={"high": ONE_TOKEN_PER_PASS, "low": THRESHOLD_LOW},
)
SCORED = "greedy, blocks of 4, 4 passes per block (SDAR README, Table 1)"
CATALOGUE = (
    Entry("sdar-1.7b", "JetLM/SDAR-1.7B-Chat", "sdar", 2.03, 4.06, "Apache-2.0", 61.6, 61.1,
          "block diffusion, blocks of 4", SCORED),
    Entry("sdar-1.7b-b8", "JetLM/SDAR-1.7B-Chat-b8", "sdar", 2.03, 4.06, "Apache-2.0", None, None, "blocks of 8"),
    Entry("sdar-1.7b-b16", "JetLM/SDAR-1.7B-Chat-b16", "sdar", 2.03, 4.06, "Apache-2.0", None, None, "blocks of 16"),
    Entry("sdar-1.7b-b32", "JetLM/SDAR-1.7B-Chat-b32", "sdar", 2.03, 4.06, "Apache-2.0", None, None, "blocks of 32"),
    Entry("sdar-1.7b-b64", "JetLM/SDAR-1.7B-Chat-b64", "sdar", 2.03, 4.06, "Apache-2.0", None, None, "blocks of 64"),
    Entry("sdar-4b", "JetLM/SDAR-4B-Chat", "sdar", 4.41, 8.83, "Apache-2.0", 72.0, 65.4,
          "block diffusion, blocks of 4", SCORED),
    Entry("sdar-4b-b64", "JetLM/SDAR-4B-Chat-b64", "sdar", 4.41, 8.83, "Apache-2.0", None, None, "blocks of 64"),
    Entry("sdar-8b", "JetLM/SDAR-8B-Chat", "sdar", 8.19, 16.4, "Apache-2.0", 78.7, 72.0,
          "block diffusion, blocks of 4", SCORED),
    Entry("sdar-8b-b32", "JetLM/SDAR-8B-Chat-b32", "sdar", 8.19, 16.4, "Apache-2.0", None, None, "blocks of 32"),
)  # fmt: skip


def load(folder: Path, device: torch.device, dtype: torch.dtype, name: str, config: dict[str, Any]) -> DecoderDenoiser:
    """Load a local SDAR checkpoint folder (safetensors, possibly sharded) as a denoiser."""
    from dcode.models.decoder import build, qwen_model

    model_class, model_config = qwen_model(config, folder, qwen3=True)
    return build(folder, config, model_class, model_config, device, dtype, name=name, family="sdar")


# ---------------------------------------------------------------------------------------------
# The released format, for tests: random weights, a small tokenizer


def write_checkpoint(folder: Path, size: Size, device: torch.device, seed: int) -> int:
    """SDAR-4B-Chat's format: model_type "sdar", SDARForCausalLM with its auto_map, Qwen3 names
    (q_norm / k_norm, no biases, an untied head: tie_word_embeddings false, as the 4.06 GB 1.7B
    and the 4B are), neither block_size nor mask_token_id in config.json (the block from the name
    or 4; <|MASK|> in the tokenizer), eos <|endoftext|> in config.json and [<|im_end|>,
    <|endoftext|>] in generation_config.json."""
    from dcode.testing.kit import qwen_chat_tokenizer, qwen_config, save_qwen_weights, write_json, write_qwen_generation

    ids = qwen_chat_tokenizer(folder, size, ["<|MASK|>"], "Qwen2Tokenizer")
    count = save_qwen_weights(folder, size, device, seed, head=True, qwen3=True)
    config = qwen_config(size, ids, tied=False) | {
        "architectures": ["SDARForCausalLM"],
        "auto_map": {
            "AutoConfig": "configuration_sdar.SDARConfig",
            "AutoModel": "modeling_sdar.SDARModel",
            "AutoModelForCausalLM": "modeling_sdar.SDARForCausalLM",
        },
        "attention_bias": False,
        "attn_implementation": "flex_attention",
        "eos_token_id": ids["<|endoftext|>"],
        "head_dim": size.hidden // size.heads,
        "model_type": "sdar",
        "transformers_version": "4.52.4",
    }
    write_json(folder / "config.json", config)
    write_qwen_generation(folder, ids)
    return count


FAMILY = Family(
    name="sdar",
    model_types=frozenset({"sdar"}),
    architectures=frozenset({"SDARForCausalLM"}),
    facts=FACTS,
    catalogue=CATALOGUE,
    load=load,
    checkpoints={"sdar": write_checkpoint},
)
