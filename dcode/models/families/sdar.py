"""SDAR (JetLM/SDAR-1.7B-Chat, -4B-Chat, -8B-Chat) on transformers' Qwen3 classes.

A released SDAR checkpoint says model_type "sdar", architectures ["SDARForCausalLM"], and ships
remote modeling code (JetAstra/SDAR, training/model/*): Qwen3 layers (q/k RMSNorm, no biases)
under Qwen3's weight names, block-causal attention in blocks of `block_size` (4), the mask token
`<|MASK|>` (151669) in config.json, end of answer from generation_config.json ([151645, 151643]).
Its generate.py samples each position from the logits at that same position: not shifted.
Here the config is mapped onto Qwen3Config and the weights load into Qwen3ForCausalLM, run
block-causal with an exact cache of finished blocks (decoder.DecoderDenoiser).
Knows nothing about sampling, files or the terminal.

Sources (read to understand, nothing copied): JetAstra/SDAR training/model/ (configuration_sdar.py,
modeling_sdar.py: Qwen3 names with q_norm / k_norm) and generate.py (eos [151645, 151643], <|MASK|>
151669; low-confidence dynamic unmasking inside 4-token blocks).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from dcode.models.facts import ONE_TOKEN_PER_PASS, QWEN_TURN, THRESHOLD_LOW, FamilyFacts
from dcode.models.family import Family

if TYPE_CHECKING:
    import torch

    from dcode.models.decoder import DecoderDenoiser
    from dcode.testing.kit import Size

# generate.py: low-confidence dynamic unmasking (threshold) inside 4-token blocks; the CLI's own
# threshold default applies. Each position's own logits; block_size in config.json.
# high: one token per pass in its blocks (generate.py's static low-confidence remasking with steps =
# block length); low: THRESHOLD_LOW (not measured on this model).
FACTS = FamilyFacts(
    shifted=False,
    block_keys=("block_size",),
    mask_token="<|MASK|>",
    end_tokens=QWEN_TURN,
    default_length=32768,
    efforts={"high": ONE_TOKEN_PER_PASS, "low": THRESHOLD_LOW},
)


def load(folder: Path, device: torch.device, dtype: torch.dtype, name: str, config: dict[str, Any]) -> DecoderDenoiser:
    """Load a local SDAR checkpoint folder (safetensors, possibly sharded) as a denoiser."""
    from dcode.models.decoder import build, qwen_model

    model_class, model_config = qwen_model(config, folder, qwen3=True)
    return build(folder, config, model_class, model_config, device, dtype, name=name, family="sdar")


# ---------------------------------------------------------------------------------------------
# The released format, for tests: random weights, a small tokenizer


def write_checkpoint(folder: Path, size: Size, device: torch.device, seed: int) -> int:
    """SDAR-4B-Chat's format: model_type "sdar", SDARForCausalLM with its auto_map, Qwen3 names
    (q_norm / k_norm, no biases, tied head as the 1.7B and 4B are), block_size 4, mask_token_id
    (<|MASK|>) in config.json, eos [<|im_end|>, <|endoftext|>] in generation_config.json."""
    from dcode.testing.kit import qwen_chat_tokenizer, qwen_config, save_qwen_weights, write_json, write_qwen_generation

    ids = qwen_chat_tokenizer(folder, size, ["<|MASK|>"], "Qwen2Tokenizer")
    count = save_qwen_weights(folder, size, device, seed, head=False, qwen3=True)
    config = qwen_config(size, ids, tied=True) | {
        "architectures": ["SDARForCausalLM"],
        "auto_map": {
            "AutoConfig": "configuration_sdar.SDARConfig",
            "AutoModel": "modeling_sdar.SDARModel",
            "AutoModelForCausalLM": "modeling_sdar.SDARForCausalLM",
        },
        "attention_bias": False,
        "block_size": 4,
        "head_dim": size.hidden // size.heads,
        "mask_token_id": ids["<|MASK|>"],
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
    load=load,
    checkpoints={"sdar": write_checkpoint},
)
