"""Byte-level BPE tokenizer for dcode-tiny, trained on the corpus.

Owns: the special tokens of the embedded model and the files a tokenizer folder holds
(tokenizer.json, tokenizer_config.json with the chat template). Knows nothing about models.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

PAD, EOS, MASK, PROMPT, CODE = "<|pad|>", "<|eos|>", "<|mask|>", "<|prompt|>", "<|code|>"
SPECIAL_TOKENS = [PAD, EOS, MASK, PROMPT, CODE]  # ids 0..4 in this order
# The request goes between PROMPT and CODE; the model writes the code after CODE.
CHAT_TEMPLATE = "{{ '<|prompt|>' + messages[-1]['content'] | trim + '<|code|>' }}"
# Code-aware whitespace: a word, number or symbol run takes one leading space (GPT-2 style),
# newlines stand alone and indentation is kept as runs of 4 spaces, so line structure costs few
# tokens and BPE learns whole indentation levels.
CODE_SPLIT = r" ?[A-Za-z_][A-Za-z_0-9]*| ?\d{1,3}| ?[^\sA-Za-z_0-9]+|\n|(?: {4})+| +|\s"


def build_tokenizer() -> Tokenizer:
    """An untrained byte-level BPE with dcode's code-aware pre-tokenizer."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(CODE_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def train_tokenizer(texts: Iterable[str], vocab_size: int) -> Tokenizer:
    """Train BPE on `texts`; the special tokens take ids 0..4."""
    tokenizer = build_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        min_frequency=2,
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


def special_id(tokenizer: Tokenizer, token: str) -> int:
    """The id of a special token the tokenizer must have."""
    found = tokenizer.token_to_id(token)
    if found is None:
        raise ValueError(f"the tokenizer has no {token} token")
    return int(found)


def save_tokenizer(tokenizer: Tokenizer, folder: Path) -> None:
    """Write tokenizer.json and a tokenizer_config.json that transformers' AutoTokenizer reads."""
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "pad_token": PAD,
        "eos_token": EOS,
        "mask_token": MASK,
        "additional_special_tokens": [PROMPT, CODE],
        "chat_template": CHAT_TEMPLATE,
        "model_max_length": 2048,
        "clean_up_tokenization_spaces": False,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
