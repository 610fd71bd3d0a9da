"""Fast-dLLM v2 (Efficient-Large-Model/Fast_dLLM_v2_7B) on transformers' Qwen2 classes.

A released checkpoint says model_type "Fast_dLLM_Qwen" and ships remote modeling code (its
configuration.py / modeling.py): Qwen2.5 layers (q/k/v biases) under Qwen2's weight names,
block-causal attention in blocks of `bd_size` (32) at inference, logits shifted by one position
(the prediction for position i comes from hidden state i-1), and the mask token `|<MASK>|`
(151665) found in the tokenizer, not in config.json; generation stops on <|im_end|> (151645).
Here the config is mapped onto Qwen2Config and the weights load into Qwen2ForCausalLM, run
block-causal with an exact cache of finished blocks (decoder.DecoderDenoiser).
Knows nothing about sampling, files or the terminal.

Sources (read to understand, nothing copied): Fast-dLLM v2's configuration.py / modeling.py (Qwen2
names with q/k/v biases, bd_size 32, |<MASK>| 151665 in the tokenizer, stop 151645). The 1.5B
release (Efficient-Large-Model/Fast_dLLM_v2_1.5B): its model card (license apache-2.0, base_model
Qwen/Qwen2.5-1.5B-Instruct, "adapts a pretrained AR model (Qwen2.5-1.5B-Instruct)"); its
config.json and file sizes were not read here, so its size is Qwen2.5-1.5B-Instruct's (1.54B
parameters, head tied to the embedding as there: ~3.1 GB in bfloat16, "~" an estimate) and its
scores (arXiv 2509.26328) are left out, not having been read.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dcode.models.facts import QWEN_TURN, THRESHOLD_LOW, FamilyFacts
from dcode.models.family import Entry, Family

if TYPE_CHECKING:
    import torch

    from dcode.models.decoder import DecoderDenoiser
    from dcode.testing.kit import Size

# Threshold 0.9 decoding in 32-token blocks (the CLI's default rule); bd_size in config.json.
# high: that decoding (its generate()'s threshold 0.9); low: THRESHOLD_LOW (not measured on this model).
FACTS = FamilyFacts(
    shifted=True,
    block_keys=("bd_size",),
    mask_token="|<MASK>|",
    end_tokens=QWEN_TURN,
    default_length=32768,
    efforts={"high": {"rule": "threshold", "threshold": 0.9}, "low": THRESHOLD_LOW},
)
CATALOGUE = (
    Entry("fast-dllm-v2-1.5b", "Efficient-Large-Model/Fast_dLLM_v2_1.5B", "fast_dllm_v2", 1.54, 3.1, "Apache-2.0",
          None, None, "block diffusion, blocks of 32; ~size of its base, Qwen2.5-1.5B-Instruct"),
)  # fmt: skip


def load(folder: Path, device: torch.device, dtype: torch.dtype, name: str, config: dict[str, Any]) -> DecoderDenoiser:
    """Load a local Fast-dLLM v2 checkpoint folder (safetensors, possibly sharded) as a denoiser."""
    from dcode.models.decoder import build, qwen_model

    model_class, model_config = qwen_model(config, folder, qwen3=False)
    return build(folder, config, model_class, model_config, device, dtype, name=name, family="fast_dllm_v2")


# ---------------------------------------------------------------------------------------------
# The released format, for tests: random weights, a small tokenizer


def write_checkpoint(folder: Path, size: Size, device: torch.device, seed: int, *, tied: bool = False) -> int:
    """Fast_dLLM_v2_7B's format: model_type "Fast_dLLM_Qwen" with its auto_map, Qwen2 names with
    q/k/v biases, untied head, bd_size 32; the mask |<MASK>| is in the tokenizer only (config.json
    names no mask), and answers stop on <|im_end|>. tied: the 1.5B as inferred from its base
    (Qwen2.5-1.5B-Instruct ties its head; the release's own config.json was not read)."""
    from dcode.testing.kit import qwen_chat_tokenizer, qwen_config, save_qwen_weights, write_json

    ids = qwen_chat_tokenizer(folder, size, ["|<MASK>|"], "Qwen2Tokenizer")
    count = save_qwen_weights(folder, size, device, seed, head=not tied)
    config = qwen_config(size, ids, tied=tied) | {
        "architectures": ["Fast_dLLM_QwenForCausalLM"],
        "auto_map": {
            "AutoConfig": "configuration.Fast_dLLM_QwenConfig",
            "AutoModelForCausalLM": "modeling.Fast_dLLM_QwenForCausalLM",
        },
        "bd_size": 32,
        "model_type": "Fast_dLLM_Qwen",
        "transformers_version": "4.53.1",
    }
    write_json(folder / "config.json", config)
    return count


FAMILY = Family(
    name="fast_dllm_v2",
    model_types=frozenset({"fast_dllm_qwen"}),
    architectures=frozenset({"Fast_dLLM_QwenForCausalLM"}),
    facts=FACTS,
    catalogue=CATALOGUE,
    load=load,
    checkpoints={"fast_dllm_v2": write_checkpoint, "fast_dllm_v2_1_5b": partial(write_checkpoint, tied=True)},
)
