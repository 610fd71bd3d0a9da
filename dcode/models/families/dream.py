"""The Dream family on transformers' Qwen2 classes: Dream, Dream-Coder, DiffuCoder, Open-dCoder.

A Dream checkpoint is Qwen2 weights under its own config (model_type "Dream", architectures
["DreamModel"], Qwen2's keys plus mask_token_id) and remote modeling code; here the config is
mapped onto Qwen2Config and the weights load into Qwen2ForCausalLM run with full bidirectional
attention. Logits are shifted (position i is predicted from hidden state i-1); the mask token is
`<|mask|>` (151666 in the released checkpoints), read from config.json. Owns that mapping, the
family's facts, its catalogue entry and its released-format test checkpoint. Knows nothing about
sampling.

Sources (read to understand, nothing copied): Dream-org/Dream-v0-Instruct-7B and
Dream-Coder-v0-Instruct-7B config.json / tokenizer_config.json (mask_token_id 151666, chat turns
end at <|im_end|>); DiffuCoder's inference_demo.py (cuts the answer at <|dlm_pad|>);
Dream-Coder-v0-Instruct-7B's model card (HumanEval 82.9, MBPP 79.6, Apache-2.0, 7.6B).
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

FACTS = FamilyFacts(
    shifted=True,  # Dream's generation_utils.py reads position i's logits at i-1
    mask_token="<|mask|>",  # config.json's mask_token_id names it in the releases
    end_tokens=(*QWEN_TURN, "<|dlm_pad|>"),  # <|dlm_pad|>: DiffuCoder's pad, where its reference inference cuts
    # Dream-Coder's published settings (HumanEval 82.9): entropy ordering, temperature 0.1, top_p 0.95.
    defaults={"ordering": "entropy", "temperature": 0.1, "top_p": 0.95},
    # high: as above with one token per pass (Dream's README generates with steps = max_new_tokens);
    # low: THRESHOLD_LOW (not measured on this model).
    efforts={"high": ONE_TOKEN_PER_PASS, "low": THRESHOLD_LOW},
)
CATALOGUE = (
    Entry("dream-coder-7b", "Dream-org/Dream-Coder-v0-Instruct-7B",
          "dream", 7.6, 15.2, "Apache-2.0", 82.9, 79.6, "the model for a GPU",
          "entropy order, temperature 0.1, top_p 0.95 (the model card's settings)"),
)  # fmt: skip


def load(folder: Path, device: torch.device, dtype: torch.dtype, name: str, config: dict[str, Any]) -> DecoderDenoiser:
    """Load a local Dream-family checkpoint folder (safetensors, possibly sharded) as a denoiser:
    full bidirectional attention, shifted logits (FACTS)."""
    from transformers import Qwen2Tokenizer

    from dcode.models.decoder import build, qwen_model

    model_class, model_config = qwen_model(config, folder, qwen3=False)
    # The released tokenizer_config names a remote DreamTokenizer; Qwen2Tokenizer reads its files.
    return build(
        folder, config, model_class, model_config, device, dtype, name=name, family="dream",
        tokenizer_class=Qwen2Tokenizer,
    )  # fmt: skip


# ---------------------------------------------------------------------------------------------
# The released format, for tests: random weights, a small tokenizer

DREAM_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|beginoftext|>"]  # <|mask|> is dcode's
MASK = "<|mask|>"


def write_checkpoint(
    folder: Path,
    size: Size,
    device: torch.device,
    seed: int,
    *,
    shards: int = 1,
    files: str = "vocab",
    specials: tuple[str, ...] = (),
) -> int:
    """Dream-Coder's format: model_type "Dream", Qwen2 names with q/k/v biases, untied head,
    vocab.json + merges.txt with a tokenizer_config naming the remote DreamTokenizer (files="json":
    a tokenizer.json and Qwen2Tokenizer instead, as Open-dCoder ships). shards: weight files;
    specials: more special tokens (DiffuCoder's <|dlm_pad|>)."""
    from dcode.testing.kit import QWEN_TEMPLATE, save_qwen_weights, train_bpe, write_json, write_tokenizer

    tokenizer = train_bpe(size, [*DREAM_SPECIALS, *specials])
    settings = {
        "auto_map": {"AutoTokenizer": ["tokenization_dream.DreamTokenizer", None]},
        "tokenizer_class": "DreamTokenizer",
        "bos_token": "<|beginoftext|>",
        "eos_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
        "mask_token": MASK,  # dcode's "<|mask|>", Dream's spelling too
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "chat_template": QWEN_TEMPLATE,
        "model_max_length": 131072,
        "errors": "replace",
    }
    if files == "json":
        settings = {k: v for k, v in settings.items() if k != "auto_map"} | {"tokenizer_class": "Qwen2Tokenizer"}
    ids = write_tokenizer(folder, tokenizer, settings, files)
    count = save_qwen_weights(folder, size, device, seed, head=True, shards=shards)
    write_json(folder / "config.json", dream_config(size, ids))
    return count


def dream_config(size: Size, ids: dict[str, int]) -> dict[str, Any]:
    """Dream-Coder's config.json keys at `size`, with the tokenizer's ids."""
    from dcode.testing.kit import STD

    return {
        "architectures": ["DreamModel"],
        "auto_map": {"AutoConfig": "configuration_dream.DreamConfig", "AutoModel": "modeling_dream.DreamModel"},
        "attention_dropout": 0.0,
        "bos_token_id": ids["<|beginoftext|>"],
        "eos_token_id": ids["<|endoftext|>"],
        "hidden_act": "silu",
        "hidden_size": size.hidden,
        "initializer_range": STD,
        "intermediate_size": size.inner,
        "mask_token_id": ids[MASK],
        "max_position_embeddings": size.max_positions,
        "max_window_layers": size.layers,
        "model_type": "Dream",
        "num_attention_heads": size.heads,
        "num_hidden_layers": size.layers,
        "num_key_value_heads": size.kv_heads,
        "pad_token_id": ids["<|endoftext|>"],
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000.0,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "torch_dtype": size.dtype,
        "transformers_version": "4.46.2",
        "use_cache": False,
        "use_sliding_window": False,
        "vocab_size": size.rows,
    }


FAMILY = Family(
    name="dream",
    model_types=frozenset({"dream"}),
    architectures=frozenset({"DreamModel"}),
    facts=FACTS,
    catalogue=CATALOGUE,
    load=load,
    checkpoints={"dream": write_checkpoint},
)
