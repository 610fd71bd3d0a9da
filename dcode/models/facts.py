"""How a mask-diffusion family's beliefs about its checkpoints become ModelFacts, from the files alone.

Torch- and transformers-free. Owns FamilyFacts (what a family believes: where its mask, ends and
attention block are written, whether its logits are shifted, its sampler defaults; each family
module in dcode.models.families states its own, sources beside it) and state(), which reads
config.json, generation_config.json and a tokenizer against them. Each loader calls state() with
the tokenizer it loaded; the listing calls it with a plain_tokenizer.TokenTable; both run the same
code. Knows nothing about weights, sampling or the terminal.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from dcode.config import EFFORTS
from dcode.models.base import ModelError, ModelFacts
from dcode.models.checkpoint import read_optional_json

QWEN_TURN = ("<|im_end|>", "<|endoftext|>")  # a Qwen chat answer ends its turn, then pads
# Effort levels many families share (FamilyFacts.efforts). One token per pass, most certain first:
# the decoding most authors' published scores used (LLaDA's EVAL.md: steps = gen_length).
ONE_TOKEN_PER_PASS: Mapping[str, object] = {"rule": "schedule", "steps": None}
# Threshold 0.7: dcode measured it acceptable on dcode-tiny only (docs/dcode-tiny.md: 2.56 tokens per
# pass against one, 64% real code against 76%); no larger model has been measured here.
THRESHOLD_LOW: Mapping[str, object] = {"rule": "threshold", "threshold": 0.7}


def first_id(*candidates: object) -> int | None:
    """The first candidate that is an id (0 counts; None and missing keys do not)."""
    for candidate in candidates:
        if isinstance(candidate, int) and not isinstance(candidate, bool):
            return candidate
    return None


def ids_of(value: object) -> set[int]:
    """An id or a list of ids from a config value (eos_token_id); anything else -> none."""
    values = value if isinstance(value, list) else [value]
    return {i for i in (first_id(v) for v in values) if i is not None}


def token_id(tokenizer: Any, token: str) -> int | None:
    """The id of a token the tokenizer knows as a whole (an added or special token), else None."""
    found = tokenizer.get_vocab().get(token)
    return found if isinstance(found, int) else None


@dataclass(frozen=True, kw_only=True)
class FamilyFacts:
    """What a mask-diffusion family's checkpoints mean, by name; state() turns it and the files into
    ModelFacts. Each family module states its own, its sources beside it."""

    shifted: bool | None  # logits of position i from hidden state i-1; None: config's shifted_logits (True)
    block_keys: tuple[str, ...] = ()  # config.json keys holding the attention block, tried in order; () = full
    mask_token: str | None = None  # looked up in the tokenizer when config.json has no mask_token_id
    end_tokens: tuple[str, ...] = ()  # tokens that end an answer besides config / generation_config eos
    defaults: Mapping[str, object] = field(default_factory=dict)  # SamplerConfig field -> value
    vocab_keys: tuple[str, ...] = ("vocab_size",)  # the logits' width (the embedding rows)
    length_keys: tuple[str, ...] = ("max_position_embeddings",)
    default_length: int = 2048
    # (word in the checkpoint's name, its attention block) where only the name tells them apart
    # (Tiny-A2D: "bd3lm" block-causal, "mdlm" full attention; SDAR's "-b64"), read when config.json
    # has none of block_keys; () = the block is in config.json (or is `block`).
    named_blocks: tuple[tuple[str, int | None], ...] = ()
    block_origin: Literal["zero", "answer"] = "zero"  # ModelFacts.block_origin of a block-causal checkpoint
    # generation_config.json's Dream-style `alg` -> the ordering it means (CoDA); an alg missing
    # from ALG_ORDERINGS leaves `defaults` as they are.
    reads_alg: bool = False
    mask_id: int | None = None  # the id the released code falls back to when no file names a mask (WeDLM)
    attention: Literal["full", "filled-first"] = "full"  # ModelFacts.attention
    block: int | None = None  # the attention block when config.json names none (LLaDA2: its sampler's)
    # keyword arguments the authors render the chat template with (Tiny-A2D: enable_thinking=False)
    chat_options: Mapping[str, object] = field(default_factory=dict)
    # The decodings by effort level (dcode.config.Effort), each over `defaults`: "high" the decoding
    # the authors' published scores used, "low" the fastest dcode measured acceptable; "medium" is
    # `defaults` unless given. Each family module states its own, sources beside them.
    efforts: Mapping[str, Mapping[str, object]] = field(default_factory=dict)
    # (word in the checkpoint's name, decodings by level over the above) for a release whose files
    # do not tell it from its family's others (LLaDA2.1's token editing beside LLaDA2.0).
    named_efforts: tuple[tuple[str, Mapping[str, Mapping[str, object]]], ...] = ()


# Dream-style generation_config `alg` (Dream's and CoDA's generation_utils.py) -> dcode's ordering.
# CoDA's release says "original", which its own sampler rejects ("Unknown alg"): not mapped.
ALG_ORDERINGS = {"origin": "random", "maskgit_plus": "confidence", "topk_margin": "margin", "entropy": "entropy"}


def alg_defaults(spec: FamilyFacts, generation: Mapping[str, Any]) -> dict[str, object]:
    """The family's defaults, with the ordering generation_config.json's `alg` names where dcode has it."""
    ordering = ALG_ORDERINGS.get(str(generation.get("alg"))) if spec.reads_alg else None
    return {**spec.defaults, **({"ordering": ordering} if ordering else {})}


def decodings(spec: FamilyFacts, defaults: Mapping[str, object], label: str) -> dict[str, dict[str, object]]:
    """The settings at each effort level: the family's `defaults` (the checkpoint's own folded in)
    with the level's changes, then those of the first `named_efforts` word in `label` (a name).
    Example: LLaDA2.1-mini -> {"low": {... "threshold": 0.5}, "medium": {...}, "high": {...}}."""
    levels = {level: {**defaults, **spec.efforts.get(level, {})} for level in EFFORTS}
    for word, changes in spec.named_efforts:
        if word in label.lower():
            return {level: {**settings, **changes.get(level, {})} for level, settings in levels.items()}
    return levels


def positive(config: Mapping[str, Any], keys: Iterable[str]) -> int | None:
    """The first of `keys` that config sets to a positive integer; None if none does."""
    for key in keys:
        value = first_id(config.get(key))
        if value is not None and value > 0:
            return value
    return None


def special_ids(
    config: Mapping[str, Any], generation: Mapping[str, Any], tokenizer: Any, spec: FamilyFacts
) -> tuple[int, frozenset[int], int]:
    """(mask id, end-of-answer ids, pad id): config.json and generation_config.json first, then
    the tokenizer. generation_config's eos list is what the released generate() stops on."""
    mask_id = first_id(config.get("mask_token_id"), tokenizer.mask_token_id)
    if mask_id is None and spec.mask_token is not None:
        mask_id = token_id(tokenizer, spec.mask_token)
    mask_id = first_id(mask_id, spec.mask_id)
    if mask_id is None:
        raise ModelError("neither config.json nor the tokenizer names a mask token")
    eos_ids = ids_of(config.get("eos_token_id")) | ids_of(generation.get("eos_token_id"))
    if not eos_ids and tokenizer.eos_token_id is not None:
        eos_ids = {int(tokenizer.eos_token_id)}
    eos_ids |= {i for i in (token_id(tokenizer, t) for t in spec.end_tokens) if i is not None}
    pad_id = first_id(config.get("pad_token_id"), tokenizer.pad_token_id, *sorted(eos_ids))
    return mask_id, frozenset(eos_ids), pad_id if pad_id is not None else mask_id


def named_block(spec: FamilyFacts, folder: Path, name: str) -> int | None:
    """The attention block a checkpoint's name says (Tiny-A2D's bd3lm and mdlm releases are alike
    on disk): the last part of `name` (a Hugging Face id or a folder), else the folder's own name."""
    label = (Path(name).name or folder.resolve().name).lower()
    for word, block in spec.named_blocks:
        if word in label:
            return block
    if spec.block is not None:  # a name without the word: the family's usual block (SDAR's 4)
        return spec.block
    words = " or ".join(f"'{w}'" for w, _ in spec.named_blocks)
    raise ModelError(f"{folder}: only the checkpoint's name says its attention here; name the folder with {words}")


def state(
    family: str, spec: FamilyFacts, folder: Path, config: Mapping[str, Any], tokenizer: Any, name: str
) -> ModelFacts:
    """The facts of a checkpoint of the mask-diffusion family `family`, which believes `spec`; a
    mask id outside the vocabulary, or none at all, is a one-line ModelError."""
    generation = read_optional_json(folder / "generation_config.json")
    try:
        mask_id, eos_ids, pad_id = special_ids(config, generation, tokenizer, spec)
    except ModelError as error:
        raise ModelError(f"{folder}: {error}") from None
    vocab_size = positive(config, spec.vocab_keys)
    if vocab_size is None:
        raise ModelError(f"{folder / 'config.json'} lacks {spec.vocab_keys[0]!r}")
    if not 0 <= mask_id < vocab_size:
        raise ModelError(f"{folder}: mask token id {mask_id} is outside the vocabulary of {vocab_size}")
    shifted = spec.shifted if spec.shifted is not None else bool(config.get("shifted_logits", True))
    block = positive(config, spec.block_keys) or (named_block(spec, folder, name) if spec.named_blocks else spec.block)
    defaults = {**alg_defaults(spec, generation), **(config.get("dcode_defaults") or {})}
    efforts = decodings(spec, defaults, f"{name} {folder.resolve().name}")
    return ModelFacts(
        name=name,
        family=family,
        mask_id=mask_id,
        eos_ids=eos_ids,
        pad_id=pad_id,
        shifted=shifted,
        block=block,
        block_origin=spec.block_origin if block is not None else "zero",
        attention=spec.attention,
        max_length=positive(config, spec.length_keys) or spec.default_length,
        vocab_size=vocab_size,
        prompt=str(config.get("dcode_prompt") or "new"),
        defaults=efforts["medium"],
        efforts=efforts,
        chat_options=dict(spec.chat_options),
    )


def token_names(facts: ModelFacts, tokenizer: Any) -> dict[int, str]:
    """id -> token text for the facts' special ids, where the tokenizer knows them."""
    wanted = facts.eos_ids | {facts.pad_id, facts.mask_id}
    return {i: t for t, i in tokenizer.get_vocab().items() if i in wanted}
