"""What each family believes about its checkpoints, stated as ModelFacts from the files alone.

Torch- and transformers-free. Owns every family's special tokens (mask, end of answer, pad),
whether its logits are shifted, where its attention block is written, its sampler defaults, and
TokenTable: the special tokens a folder's tokenizer files name, read with json alone, so that
`dcode models --verbose` states the same facts a load would without importing torch. Each family
module calls state() with the tokenizer it loaded; the listing calls it with a TokenTable; both
run the same code. Knows nothing about weights, sampling or the terminal.

Sources of the facts (the released files and reference code, read to understand):
- Dream / Dream-Coder / DiffuCoder / Open-dCoder: config.json mask_token_id (<|mask|> 151666),
  chat turns end at <|im_end|>; DiffuCoder's inference_demo.py cuts the answer at <|dlm_pad|>.
- LLaDA: <|mdm_mask|> 126336; answers end with <|eot_id|> 126348, padded with <|endoftext|> 126081.
- SDAR (JetAstra/SDAR): model_type "sdar", block_size 4, config mask_token_id (<|MASK|> 151669),
  generation_config.json eos [151645, 151643]; generate.py samples each position's own logits.
- Fast-dLLM v2: model_type "Fast_dLLM_Qwen", bd_size 32, mask |<MASK>| 151665 in the tokenizer
  only, stops on 151645 (<|im_end|>); its modeling shifts logits by one position.
- DiffusionGemma: transformers' generation_diffusion_gemma (no mask token: uniform noise).
- Tiny-A2D (ZHZisZZ/dllm: dllm/pipelines/a2d/models/qwen{2,3}, dllm/core/samplers/bd3lm.py,
  dllm/utils/models.py get_tokenizer): model_type "a2d-qwen2" / "a2d-qwen3" on Qwen2 / Qwen3
  layers; mask_token "<|mask|>" added to the tokenizer (not in config.json), eot <|im_end|>;
  bd3lm vs mdlm by the checkpoint's name only (block 32, blocks from the answer; full attention).
- CoDA (SalesforceAIResearch/CoDA, CoDALanguageModel/ config.json, generation_config.json,
  modeling_coda.py, attention.py, generation_utils.py; README's serving defaults): see SPECS["coda"].
- WeDLM (Tencent/WeDLM: hf_compat/configuration_wedlm.py, modeling_wedlm.py, wedlm/engine,
  example.py): see SPECS["wedlm"].
- Stable-DiffCoder (the authors' README, github ByteDance-Seed/Stable-DiffCoder; from
  third-party code, not the authors' release: Diffulex's stable_diffcoder config, a copy of
  modeling_stable_diffcoder.py, a harness's SeedDiffCoder wrapper): see SPECS["stable_diffcoder"].
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Literal

from dcode.models.base import ModelError, ModelFacts
from dcode.models.checkpoint import read_optional_json

# Files that hold a tokenizer's vocabulary; a folder with none of them has no tokenizer.
TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "tokenizer.model", "tiktoken.model")
ROLES = ("mask_token", "eos_token", "pad_token", "unk_token")


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


def require_tokenizer(folder: Path) -> None:
    """A one-line ModelError when the folder holds no tokenizer files: an empty tokenizer would
    load, and every prompt would encode to nothing."""
    if not any((folder / name).is_file() for name in TOKENIZER_FILES) and not any(folder.glob("*.tiktoken")):
        raise ModelError(f"{folder}: no tokenizer files (tokenizer.json, or vocab.json and merges.txt)")


def token_text(value: object) -> str | None:
    """A special token as tokenizer_config.json writes it: a string or an AddedToken dict."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


class TokenTable:
    """The vocabulary and special tokens of a folder's tokenizer files, read with json alone:
    what transformers' tokenizer would say about them (get_vocab, mask/eos/pad/unk_token_id),
    without encoding anything."""

    def __init__(self, folder: Path) -> None:
        require_tokenizer(folder)
        vocab: dict[str, int] = {}
        whole = read_optional_json(folder / "tokenizer.json")
        model = whole.get("model")
        if isinstance(model, dict) and isinstance(model.get("vocab"), dict):
            vocab.update(model["vocab"])
        elif (folder / "vocab.json").is_file():
            vocab.update(read_optional_json(folder / "vocab.json"))
        added = [(t.get("id"), t.get("content")) for t in whole.get("added_tokens") or [] if isinstance(t, dict)]
        added += [(i, t) for t, i in read_optional_json(folder / "added_tokens.json").items()]  # Qwen's releases
        settings = read_optional_json(folder / "tokenizer_config.json")
        decoder = settings.get("added_tokens_decoder") or {}
        added += [(int(i), token_text(t)) for i, t in decoder.items() if str(i).isdigit()]
        vocab.update({text: i for i, text in added if isinstance(text, str) and isinstance(i, int)})
        self.vocab = vocab
        named = {**read_optional_json(folder / "special_tokens_map.json"), **settings}
        self.roles = {role: token_text(named.get(role)) for role in ROLES}

    def get_vocab(self) -> dict[str, int]:
        return self.vocab

    def role_id(self, role: str) -> int | None:
        text = self.roles.get(role)
        return self.vocab.get(text) if text is not None else None

    @property
    def mask_token_id(self) -> int | None:
        return self.role_id("mask_token")

    @property
    def eos_token_id(self) -> int | None:
        return self.role_id("eos_token")

    @property
    def pad_token_id(self) -> int | None:
        return self.role_id("pad_token")

    @property
    def unk_token_id(self) -> int | None:
        return self.role_id("unk_token")


# ---------------------------------------------------------------------------------------------
# The mask-diffusion families


@dataclass(frozen=True)
class Spec:
    """What a mask-diffusion family's checkpoints mean; state() turns it and the files into facts."""

    shifted: bool | None  # logits of position i from hidden state i-1; None: config's shifted_logits (True)
    block_keys: tuple[str, ...]  # config.json keys holding the attention block, tried in order; () = full
    mask_token: str | None  # looked up in the tokenizer when config.json has no mask_token_id
    end_tokens: tuple[str, ...]  # tokens that end an answer besides config / generation_config eos
    defaults: Mapping[str, object] = field(default_factory=dict)  # SamplerConfig field -> value
    vocab_keys: tuple[str, ...] = ("vocab_size",)  # the logits' width (the embedding rows)
    length_keys: tuple[str, ...] = ("max_position_embeddings",)
    default_length: int = 2048
    # (word in the checkpoint's name, its attention block) where only the name tells them apart
    # (Tiny-A2D: "bd3lm" block-causal, "mdlm" full attention); () = the block is in config.json.
    named_blocks: tuple[tuple[str, int | None], ...] = ()
    block_origin: Literal["zero", "answer"] = "zero"  # ModelFacts.block_origin of a block-causal checkpoint
    # generation_config.json's Dream-style `alg` -> the ordering it means (CoDA); an alg missing
    # from ALG_ORDERINGS leaves `defaults` as they are (facts.alg_note says so).
    reads_alg: bool = False
    mask_id: int | None = None  # the id the released code falls back to when no file names a mask (WeDLM)
    attention: Literal["full", "filled-first"] = "full"  # ModelFacts.attention
    block: int | None = None  # the attention block when config.json names none (LLaDA2: its sampler's)


QWEN_TURN = ("<|im_end|>", "<|endoftext|>")  # a Qwen chat answer ends its turn, then pads
SPECS = {
    # dcode's own format (dcode-tiny): Qwen2 plus block_size, mask_token_id, shifted_logits in config.
    "qwen2": Spec(None, ("block_size", "bd_size", "block_length"), None, ()),
    # Dream-Coder's published settings (HumanEval 82.9): entropy ordering, temperature 0.1, top_p 0.95.
    # <|dlm_pad|>: DiffuCoder's pad, where its reference inference cuts the answer.
    "dream": Spec(
        True, (), "<|mask|>", (*QWEN_TURN, "<|dlm_pad|>"), {"ordering": "entropy", "temperature": 0.1, "top_p": 0.95}
    ),
    # LLaDA's generate.py: low-confidence remasking, greedy, semi-autoregressive blocks of 32.
    "llada": Spec(
        False,
        (),
        "<|mdm_mask|>",
        ("<|eot_id|>", "<|endoftext|>"),
        {"ordering": "confidence", "temperature": 0.0, "block": 32},
        vocab_keys=("embedding_size", "vocab_size"),
        length_keys=("max_sequence_length",),
        default_length=4096,
    ),
    # SDAR's generate.py: low-confidence dynamic unmasking (threshold) inside 4-token blocks; the
    # CLI's own threshold default applies.
    "sdar": Spec(False, ("block_size",), "<|MASK|>", QWEN_TURN, default_length=32768),
    # Fast-dLLM v2: threshold 0.9 decoding in 32-token blocks (the CLI's default rule).
    "fast_dllm_v2": Spec(True, ("bd_size",), "|<MASK>|", QWEN_TURN, default_length=32768),
    # Tiny-A2D (ZHZisZZ/dllm, dllm/pipelines/a2d; examples/a2d/{bd3lm,mdlm}/sample.py): logits at
    # the same position (right_shift_logits False), <|mask|> added to the tokenizer, <|im_end|> as
    # eot; greedy low-confidence remasking. bd3lm (BD3LMSampler): blocks of 32, the prompt
    # left-padded to a block boundary, so blocks start where the answer does; mdlm: full attention.
    "a2d": Spec(
        False,
        (),
        "<|mask|>",
        QWEN_TURN,
        {"ordering": "confidence", "temperature": 0.0},
        default_length=32768,
        named_blocks=(("bd3lm", 32), ("mdlm", None)),
        block_origin="answer",
    ),
    # CoDA (SalesforceAIResearch/CoDA, CoDALanguageModel/): Qwen3 layers, bidirectional (sdpa with
    # is_causal False, no mask), logits shifted (generation_utils.py: cat([l[:, :1], l[:, :-1]])),
    # mask_token_id 151669 (<|mask|>) in config.json, eos <|im_end|>; its serving defaults (README:
    # ALG entropy, TEMPERATURE 0, BLOCK_LENGTH 32) unless generation_config's alg says otherwise.
    "coda": Spec(
        True,
        (),
        "<|mask|>",
        QWEN_TURN,
        {"ordering": "entropy", "temperature": 0.0, "block": 32},
        default_length=40960,
        reads_alg=True,
    ),
    # WeDLM (Tencent/WeDLM, hf_compat/modeling_wedlm.py, wedlm/engine/model_runner.py): causal
    # attention over the canvas reordered, filled tokens first and masks after, each at its own
    # rotary position (models/wedlm.py); each mask's logits at its own slot (not shifted); the
    # mask is config.json's mask_token_id, else 151665 (the engine's and finetune's constant);
    # the engine decodes a window of 16 (wedlm_window_size) greedily (example.py: temperature 0).
    "wedlm": Spec(
        False,
        (),
        None,
        QWEN_TURN,
        {"ordering": "confidence", "temperature": 0.0, "block": 16},
        default_length=32768,
        mask_id=151665,
        attention="filled-first",
    ),
    # LLaDA2.x (dllm/pipelines/llada2: modeling_llada2_moe.py, sampler.py; dllm/utils/models.py
    # get_tokenizer): block-causal in blocks of 32 from position 0, logits not shifted, <|mask|>
    # (156895) added as the mask and <|role_end|> as end of turn; greedy, threshold 0.95.
    "llada2": Spec(
        False,
        (),
        "<|mask|>",
        ("<|role_end|>", "<|endoftext|>"),
        {"ordering": "confidence", "temperature": 0.0, "rule": "threshold", "threshold": 0.95},
        default_length=32768,
        mask_id=156895,
        block=32,
    ),
    # Stable-DiffCoder. The authors' README (ByteDance-Seed/Stable-DiffCoder): generate(...,
    # block_length=4, temperature=0., remasking='low_confidence', shift=False, threshold=None,
    # eos_id=tokenizer.eos_token_id) with steps = gen_length: greedy, most confident first, one
    # token per pass (the fixed schedule), each position's own logits, blocks of 4 from position 0
    # (blocks from 0 and mask 5 also in a copy of modeling_stable_diffcoder.py's generate_block:
    # third-party code, not the authors' release). The mask: <[MASK_TOKEN]> in the tokenizer,
    # else 5 (a code-model harness's _STABLE_DIFFCODER_MASK_ID; third-party). Ends: config.json /
    # generation_config.json eos (2, <[end▁of▁sentence]>, in Diffulex's config defaults); 8K context.
    "stable_diffcoder": Spec(
        False,
        (),
        "<[MASK_TOKEN]>",
        (),
        {"ordering": "confidence", "temperature": 0.0, "rule": "schedule"},
        default_length=8192,
        mask_id=5,
        block=4,
    ),
}
# Dream-style generation_config `alg` (Dream's and CoDA's generation_utils.py) -> dcode's ordering.
# CoDA's release says "original", which its own sampler rejects ("Unknown alg"): not mapped.
ALG_ORDERINGS = {"origin": "random", "maskgit_plus": "confidence", "topk_margin": "margin", "entropy": "entropy"}


def alg_defaults(spec: Spec, generation: Mapping[str, Any]) -> dict[str, object]:
    """The family's defaults, with the ordering generation_config.json's `alg` names where dcode has it."""
    ordering = ALG_ORDERINGS.get(str(generation.get("alg"))) if spec.reads_alg else None
    return {**spec.defaults, **({"ordering": ordering} if ordering else {})}


def positive(config: Mapping[str, Any], keys: Iterable[str]) -> int | None:
    """The first of `keys` that config sets to a positive integer; None if none does."""
    for key in keys:
        value = first_id(config.get(key))
        if value is not None and value > 0:
            return value
    return None


def special_ids(
    config: Mapping[str, Any], generation: Mapping[str, Any], tokenizer: Any, spec: Spec
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


def named_block(spec: Spec, folder: Path, name: str) -> int | None:
    """The attention block a checkpoint's name says (Tiny-A2D's bd3lm and mdlm releases are alike
    on disk): the last part of `name` (a Hugging Face id or a folder), else the folder's own name."""
    label = (Path(name).name or folder.resolve().name).lower()
    for word, block in spec.named_blocks:
        if word in label:
            return block
    words = " or ".join(f"'{w}'" for w, _ in spec.named_blocks)
    raise ModelError(f"{folder}: only the checkpoint's name says its attention here; name the folder with {words}")


def state(family: str, folder: Path, config: Mapping[str, Any], tokenizer: Any, name: str) -> ModelFacts:
    """The facts of a checkpoint of a mask-diffusion family; a mask id outside the vocabulary,
    or none at all, is a one-line ModelError."""
    spec = SPECS[family]
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
    block = named_block(spec, folder, name) if spec.named_blocks else positive(config, spec.block_keys) or spec.block
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
        defaults={**alg_defaults(spec, generation), **(config.get("dcode_defaults") or {})},
    )


# ---------------------------------------------------------------------------------------------
# DiffusionGemma: uniform noise, no mask token

# transformers' DiffusionGemmaGenerationConfig defaults, as SamplerConfig fields: sample with a
# linear temperature schedule 0.8 -> 0.4 over at most 48 passes per canvas, accept under the
# entropy bound 0.1 (lowest entropy first), stop once the argmax is stable and the mean entropy
# is below 0.005. A checkpoint's generation_config.json overrides them (gemma_defaults).
GEMMA_DEFAULTS: dict[str, object] = {
    "rule": "entropy-bound",
    "ordering": "entropy",
    "entropy_bound": 0.1,
    "temperature": 0.8,
    "cooling": 0.5,
    "max_block_steps": 48,
    "stop_entropy": 0.005,
    "hold_conflicts": False,  # as transformers' loop, which commits what the entropy bound picks
}
GEMMA_END_TOKENS = ("<end_of_turn>", "<turn|>")  # Gemma 3 spelling, Gemma 4 spelling
# The placeholder for positions still to fill: a token a code answer never holds.
PLACEHOLDER_TOKENS = ("<mask>", "<unk>")
CANVAS_LENGTH = 256  # transformers' default when config.json omits canvas_length


def gemma_special_ids(
    config: Mapping[str, Any], text: Mapping[str, Any], generation: Mapping[str, Any], tokenizer: Any, folder: Path
) -> tuple[int, frozenset[int], int]:
    """(placeholder id, end-of-answer ids, pad id) from config.json, generation_config.json and
    the tokenizer."""
    eos_ids = set().union(*(ids_of(c.get("eos_token_id")) for c in (config, text, generation)))
    if not eos_ids and tokenizer.eos_token_id is not None:
        eos_ids = {int(tokenizer.eos_token_id)}
    eos_ids |= {i for i in (token_id(tokenizer, t) for t in GEMMA_END_TOKENS) if i is not None}
    pad_id = first_id(text.get("pad_token_id"), config.get("pad_token_id"), tokenizer.pad_token_id, *sorted(eos_ids))
    named = (token_id(tokenizer, t) for t in PLACEHOLDER_TOKENS)
    placeholder = first_id(tokenizer.mask_token_id, *named, tokenizer.unk_token_id)
    if placeholder is None or placeholder in eos_ids or placeholder == pad_id:
        raise ModelError(f"{folder}: the tokenizer has no mask or unk token to stand for positions still to fill")
    return placeholder, frozenset(eos_ids), pad_id if pad_id is not None else placeholder


def gemma_defaults(generation: Mapping[str, Any]) -> dict[str, object]:
    """GEMMA_DEFAULTS with the checkpoint's own generation_config.json settings where it gives them."""

    def number(key: str) -> float | None:
        value = generation.get(key)
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    defaults = dict(GEMMA_DEFAULTS)
    t_max, t_min = number("t_max"), number("t_min")
    if t_max is not None and t_min is not None and 0 <= t_min <= t_max and t_max > 0:
        defaults.update(temperature=t_max, cooling=t_min / t_max)
    steps = generation.get("max_denoising_steps")
    if isinstance(steps, int) and not isinstance(steps, bool) and steps > 0:
        defaults["max_block_steps"] = steps
    sampler = generation.get("sampler_config")
    bound = sampler.get("entropy_bound") if isinstance(sampler, dict) else None
    if isinstance(bound, (int, float)) and not isinstance(bound, bool) and bound >= 0:
        defaults["entropy_bound"] = float(bound)
    confidence = number("confidence_threshold")
    if confidence is not None and confidence >= 0:
        defaults["stop_entropy"] = confidence
    return defaults


def gemma_text(config: Mapping[str, Any], folder: Path) -> dict[str, Any]:
    """config.json's text_config, checked for the sizes transformers would otherwise default
    (to a 26B model's)."""
    text = config.get("text_config")
    if not isinstance(text, dict):
        kind = "a DiffusionGemma checkpoint (uniform-noise diffusion)"
        raise ModelError(f"{folder / 'config.json'}: {kind} needs a text_config object")
    for key in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads"):
        value = text.get(key)
        if not (isinstance(value, int) and not isinstance(value, bool) and value > 0):
            raise ModelError(f"{folder / 'config.json'}: text_config.{key} must be a positive integer, got {value!r}")
    return text


def gemma_state(folder: Path, config: Mapping[str, Any], tokenizer: Any, name: str) -> ModelFacts:
    """The facts of a DiffusionGemma checkpoint: canvases of canvas_length tokens, uniform noise."""
    text = gemma_text(config, folder)
    generation = read_optional_json(folder / "generation_config.json")
    placeholder, eos_ids, pad_id = gemma_special_ids(config, text, generation, tokenizer, folder)
    vocab_size = int(text["vocab_size"])
    if not 0 <= placeholder < vocab_size:
        raise ModelError(f"{folder}: placeholder token id {placeholder} is outside the vocabulary of {vocab_size}")
    return ModelFacts(
        name=name,
        family="diffusion_gemma",
        mask_id=placeholder,
        eos_ids=eos_ids,
        pad_id=pad_id,
        shifted=False,
        block=positive(config, ("canvas_length",)) or CANVAS_LENGTH,
        max_length=positive(text, ("max_position_embeddings",)) or 131_072,
        vocab_size=vocab_size,
        noise="uniform",
        defaults=gemma_defaults(generation),
    )


# family -> how its facts are stated (folder, config, tokenizer, name) -> ModelFacts
STATE: dict[str, Callable[[Path, Mapping[str, Any], Any, str], ModelFacts]] = {
    **{family: partial(state, family) for family in SPECS},
    "diffusion_gemma": gemma_state,
}


def read_facts(family: str, folder: Path, config: Mapping[str, Any], name: str) -> ModelFacts:
    """The facts a load of `folder` would state, from its files alone (no torch, no weights)."""
    return STATE[family](folder, config, TokenTable(folder), name)


def token_names(facts: ModelFacts, tokenizer: Any) -> dict[int, str]:
    """id -> token text for the facts' special ids, where the tokenizer knows them."""
    wanted = facts.eos_ids | {facts.pad_id, facts.mask_id}
    return {i: t for t, i in tokenizer.get_vocab().items() if i in wanted}
