"""The special token ids a checkpoint's config.json and tokenizer name, stated as ModelFacts.

Torch- and transformers-free: every family module (and the native Qwen2 path, which must not import
transformers) states its facts here. Knows nothing about weights, sampling or files.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from dcode.models.base import ModelError, ModelFacts


def first_id(*candidates: object) -> int | None:
    """The first candidate that is an id (0 counts; None and missing keys do not)."""
    for candidate in candidates:
        if isinstance(candidate, int) and not isinstance(candidate, bool):
            return candidate
    return None


def token_id(tokenizer: Any, token: str) -> int | None:
    """The id of a token the tokenizer knows as a whole (an added or special token), else None."""
    found = tokenizer.get_vocab().get(token)
    return found if isinstance(found, int) else None


def special_ids(
    config: Mapping[str, Any], tokenizer: Any, *, mask_token: str | None = None, end_tokens: Iterable[str] = ()
) -> tuple[int, frozenset[int], int]:
    """(mask id, end-of-answer ids, pad id): config.json first, then the tokenizer.

    end_tokens: tokens that end an answer besides config's eos (an instruct model's end of turn).
    """
    mask_id = first_id(config.get("mask_token_id"), tokenizer.mask_token_id)
    if mask_id is None and mask_token is not None:
        mask_id = token_id(tokenizer, mask_token)
    if mask_id is None:
        raise ModelError("neither config.json nor the tokenizer names a mask token")
    eos = config.get("eos_token_id")
    eos_ids = {i for i in (first_id(e) for e in (eos if isinstance(eos, list) else [eos])) if i is not None}
    if not eos_ids and tokenizer.eos_token_id is not None:
        eos_ids = {int(tokenizer.eos_token_id)}
    eos_ids |= {i for i in (token_id(tokenizer, t) for t in end_tokens) if i is not None}
    pad_id = first_id(config.get("pad_token_id"), tokenizer.pad_token_id, *sorted(eos_ids))
    return mask_id, frozenset(eos_ids), pad_id if pad_id is not None else mask_id


def state_facts(
    folder: Path,
    config: Mapping[str, Any],
    tokenizer: Any,
    vocab_size: int,
    *,
    mask_token: str | None = None,
    end_tokens: Iterable[str] = (),
    **fields: Any,
) -> ModelFacts:
    """ModelFacts from the special ids and `fields` (name, family, shifted, block, ...); a mask id
    outside the vocabulary is a one-line ModelError."""
    try:
        mask_id, eos_ids, pad_id = special_ids(config, tokenizer, mask_token=mask_token, end_tokens=end_tokens)
    except ModelError as error:
        raise ModelError(f"{folder}: {error}") from None
    if not 0 <= mask_id < vocab_size:
        raise ModelError(f"{folder}: mask token id {mask_id} is outside the vocabulary of {vocab_size}")
    return ModelFacts(mask_id=mask_id, eos_ids=eos_ids, pad_id=pad_id, vocab_size=vocab_size, **fields)
