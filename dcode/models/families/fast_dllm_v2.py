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
Qwen/Qwen2.5-1.5B-Instruct; "Params: 1.54B (non-embedding: 1.31B)", 28 layers, 12 query / 2 key-value
heads, "tied embeddings"; generate(..., small_block_size=8, threshold=0.9)) and its config.json as
copied whole into HoangMaizzz/failfasttesting at 7cc16bb (Fast_dLLM_v2_1_5B/config.json, fetched
from the Hub with snapshot_download): Fast_dLLM_QwenForCausalLM, model_type Fast_dLLM_Qwen, bd_size
32, hidden 1536, intermediate 8960, vocab 151936, tie_word_embeddings true, eos_token_id and
pad_token_id 151645 (<|im_end|>), rope_theta 1e6, max_position_embeddings 32768, layer_types all
"full_attention", transformers 4.53.1; no mask_token_id. Its tokenizer files were not read (the
mask is assumed to be the 7B's |<MASK>| 151665). Scores: NVlabs/Fast-dLLM v2/README.md's table
(the same rows as arXiv 2509.26328 Table 1): Fast-dLLM v2 (1.5B) HumanEval-Base 43.9, HumanEval-Plus
40.2, MBPP-Base 50.0, MBPP-Plus 41.3; the decoding is not stated beside it (the card's generate()
and the README's evaluation example use threshold 0.9, blocks of 32).
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
    Entry("fast-dllm-v2-1.5b", "Efficient-Large-Model/Fast_dLLM_v2_1.5B", "fast_dllm_v2", 1.54, 3.09, "Apache-2.0",
          43.9, 50.0, "block diffusion, blocks of 32 (sub-blocks of 8); head tied to the embedding",
          "HumanEval / MBPP base tests (EvalPlus); decoding not stated (its generate: threshold 0.9)"),
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
    names no mask), and answers stop on <|im_end|>. tied: the 1.5B's config.json as released (see
    the module's sources): the head tied to the embedding, eos and pad <|im_end|>, an AutoModel
    entry in auto_map and every layer in layer_types "full_attention"."""
    from dcode.testing.kit import qwen_chat_tokenizer, qwen_config, save_qwen_weights, write_json

    ids = qwen_chat_tokenizer(folder, size, ["|<MASK>|"], "Qwen2Tokenizer")
    count = save_qwen_weights(folder, size, device, seed, head=not tied)
    auto_map = {"AutoConfig": "configuration.Fast_dLLM_QwenConfig"}
    auto_map |= {"AutoModel": "modeling.Fast_dLLM_QwenModel"} if tied else {}
    config = qwen_config(size, ids, tied=tied) | {
        "architectures": ["Fast_dLLM_QwenForCausalLM"],
        "auto_map": auto_map | {"AutoModelForCausalLM": "modeling.Fast_dLLM_QwenForCausalLM"},
        "bd_size": 32,
        "model_type": "Fast_dLLM_Qwen",
        "transformers_version": "4.53.1",
    }
    if tied:
        config |= {"pad_token_id": ids["<|im_end|>"], "layer_types": ["full_attention"] * size.layers}
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
