"""Frozen settings records and the repair pass's constants. A SamplerConfig is built from the
options of dcode.options (the CLI's flags and DCODE_* variables, or a server request's settings,
by the same names); library code never reads argv or the environment. Also the policy that
merges a user's settings with a model family's defaults (merge_family_defaults). Imports nothing
of dcode."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from typing import Literal, get_args

Ordering = Literal["confidence", "margin", "entropy", "random"]
# One knob for speed against quality (--effort, a server request's reasoning_effort): each family
# names three decodings (dcode.models.facts.FamilyFacts.efforts): "high" the one its authors'
# published scores used, "medium" dcode's measured default, "low" the fastest dcode measured acceptable.
Effort = Literal["low", "medium", "high"]
Rule = Literal["schedule", "threshold", "entropy-bound", "verify"]
ApproxCache = Literal["dual", "prefix", "off"]

# Fillings per repair round until one leaves fewer syntax issues: the first with the sampler as
# configured (greedy by default; sampled for a block-causal model's own text, which a greedy refill
# would only repeat), the rest sampled with their own seeds. Measured with dcode-tiny after
# `dcode new` (benchmarks/repair.py, 25 prompts, seeds 0/1/2, drafts 84% parse-valid): 1 try
# 96/92/96% valid after repair at +20-26% time, 2 tries 96/100/96% at +27-40%, 3 tries
# 100/100/96% at +28-45%, 4 tries 100/100/100% at +29-39% (more tries succeed in narrower rounds).
REPAIR_TRIES = 4
# `dcode repair FILE`: the user's file, where a fix may change only the lines the issues blame.
# Corrupted held-out functions (benchmarks/repair.py): 2 tries restore 23%, 4 tries 29%, every
# byte outside the damaged line identical either way; the user asked for the repair, so it tries 4.
REPAIR_FILE_TRIES = 4

# A repair round's later tries sample at this temperature (its first try uses the configured
# sampler, greedy by default): the same masks refilled greedily would only give the same text
# again. Measured (benchmarks/repair.py): certainty-forced dcode-tiny weights are so sure of their
# own text that 0.8 refills much of it unchanged (76% -> 92% valid, +88% time) where 1.2 gives
# 76% -> 100% at +51%.
RETRY_TEMPERATURE = 1.2
# ...except where a fill is written left to right, every position sampled in turn: there 1.2
# derails it. Measured with the verify rule (benchmarks/repair.py --seeds 8, distilled dcode-tiny
# weights): 76% -> 96.5% valid at +236% time at 1.2, 76% -> 100% at +70% at 0.8. A served model
# behind --endpoint writes its fill left to right too (an autoregressive server, or a diffusion
# server's text as it streams back), so its later tries use this one.
LEFT_TO_RIGHT_RETRY_TEMPERATURE = 0.8


def retried(temperature: float, seed: int, attempt: int, left_to_right: bool) -> tuple[float, int]:
    """(temperature, seed) of a repair round's try number `attempt` (2 on): sampled at least as hot
    as the retry temperature for how the fill is written, with its own seed; for every filler.
    Example: retried(0.0, 7, 2, False) -> (1.2, 8); retried(1.5, 0, 3, True) -> (1.5, 2)."""
    least = LEFT_TO_RIGHT_RETRY_TEMPERATURE if left_to_right else RETRY_TEMPERATURE
    return max(temperature, least), seed + attempt - 1


ORDERINGS: tuple[str, ...] = get_args(Ordering)
RULES: tuple[str, ...] = get_args(Rule)
APPROX_CACHES: tuple[str, ...] = get_args(ApproxCache)
EFFORTS: tuple[str, ...] = get_args(Effort)


@dataclass(frozen=True)
class SamplerConfig:
    # Which masked positions count as most certain: probability of the chosen token (LLaDA
    # low_confidence / Dream maskgit_plus), top-1 minus top-2 (Dream topk_margin), negative
    # entropy (Dream entropy), or random order (LLaDA random / Dream origin).
    ordering: Ordering = "confidence"
    # How many positions to commit per pass: a fixed schedule, every position whose chosen-token
    # probability is >= threshold (Fast-dLLM), the entropy bound (EB-sampler), or "verify": drafted
    # tokens checked left to right in one batched pass, committing the run the model confirms
    # (exactly the output of filling one position per pass, leftmost first; sampler.verified_run).
    rule: Rule = "threshold"
    # Forward passes for the whole answer under the fixed schedule, shared among blocks in
    # proportion to their masks (so the total can differ by a pass or two); None = one token per pass.
    steps: int | None = None
    # Fast-dLLM's confidence threshold; 0.9 is the published default.
    threshold: float = 0.9
    # EB-sampler's gamma: accept while the summed entropy minus its largest term stays below it.
    entropy_bound: float = 0.1
    # Semi-autoregressive block length for full-attention models (None = one block spanning the
    # answer). Block-causal models always decode in their own attention blocks.
    block: int | None = None
    # 0 = greedy argmax; otherwise sample from softmax(logits / temperature) with Gumbel-max.
    temperature: float = 0.0
    # Nucleus filter applied before sampling (1.0 = off).
    top_p: float = 1.0
    # Linear temperature schedule within a block (DiffusionGemma: 0.8 -> 0.4): `temperature` at a
    # block's first pass, falling towards temperature * cooling at its last allowed pass
    # (max_block_steps, else one pass per position to fill). 1.0 = constant temperature.
    cooling: float = 1.0
    # At most this many passes per block; the last one commits whatever is left greedily
    # (DiffusionGemma: 48). None = no cap (every pass commits at least one position).
    max_block_steps: int | None = None
    # Early stop (DiffusionGemma's stable-and-confident rule): once a block's argmax is the same
    # as the previous pass's and the mean entropy of its distributions is below this, commit the
    # rest greedily (DiffusionGemma: 0.005). 0 = off.
    stop_entropy: float = 0.0
    # The verify rule: at most this many drafted tokens checked per pass (the pass feeds this many
    # more rows). 0 = no drafts: one token per pass, leftmost first. Ignored by the other rules.
    # (Verify samples at `temperature` throughout and ignores cooling, max_block_steps and
    # stop_entropy, which count passes: its answer must not depend on how many it takes.)
    draft: int = 15
    # The verify rule checks a block's drafts only while their joint probability (the product of
    # each one's, under the row that drafted them) stays at least this: a run that unlikely would
    # rarely stand, and every draft checked costs a row. Measured on dcode-tiny: 0.05 gives the
    # tokens per pass of checking every draft with 4.9 rows a pass instead of 5.8 (per-token 0.2).
    draft_floor: float = 0.05
    # Reuse keys/values of finished blocks where the model's attention makes that exact.
    cache: bool = True
    # With that cache, where the model can (dcode.models.native): a pass's rows go in packed into one
    # sequence, the finished blocks once and each row's block beside them, and logits are made
    # only where the sampler reads them (dcode.forward.PackedRows). The same logits as feeding the
    # rows as a batch (False), bit for bit in float32, for fewer tokens: measured on dcode-tiny
    # (benchmarks/cpu.py), the verify rule's pass feeds 65 tokens instead of 85.
    pack: bool = True
    # With the cache on, how a full-attention model (Dream, LLaDA) reuses keys/values inside a block
    # (Fast-dLLM, approximate): the block's first pass runs the whole canvas; later passes feed the
    # block alone and read every other position from that pass ("dual"), or feed the block and all
    # after it and read the positions before it ("prefix"). "off": every pass runs the whole canvas.
    # Block-causal models ignore it: their cache is exact.
    approx_cache: ApproxCache = "dual"
    # Once an end-of-answer token is committed, everything after it is padding (as in training):
    # those positions take no passes, and decoding stops when the rest before it is filled.
    stop_at_eos: bool = True
    # With the threshold or entropy-bound rule, hold back to the next pass the commits that
    # conflict within one pass: a token repeating the one the same pass writes just left of it,
    # and an end token with positions before it left unfilled (sampler.hold_back). Measured on
    # dcode-tiny: more real code at the same tokens per pass (docs/dcode-tiny.md).
    hold_conflicts: bool = True
    # Seed of every random draw (Gumbel noise, random ordering): same seed, same output.
    seed: int = 0
    # CTRL's repetition penalty (Keskar et al. 2019; llama.cpp / ollama repeat_penalty): the logit
    # of every token already written in the last `repetition_window` answer positions before and
    # in the block is divided by it (multiplied if negative). 1.0 = off.
    repetition_penalty: float = 1.0
    # How many answer positions back the penalty looks (llama.cpp's repeat_last_n is 64).
    repetition_window: int = 64
    # Token editing (LLaDA2.1's T2T; dcode.rules.commit_edits): a token an earlier pass of the block
    # wrote is replaced when the model's probability for another token is above this. The block
    # then also takes passes after its last mask is filled, until one edits nothing (at most
    # edit_passes). None = off (the authors' 0 is not off: it edits whenever the choice changes).
    # Ignored by the verify rule, whose answer is one pass per token's.
    edit_threshold: float | None = None
    # At most this many passes per block after its last mask is filled (LLaDA2.1's max_post_steps: 16).
    edit_passes: int = 16

    def __post_init__(self) -> None:
        if self.ordering not in ORDERINGS:
            raise ValueError(f"unknown ordering {self.ordering!r} (choose from {', '.join(ORDERINGS)})")
        if self.rule not in RULES:
            raise ValueError(f"unknown strategy {self.rule!r} (choose from {', '.join(RULES)})")
        if self.approx_cache not in APPROX_CACHES:
            raise ValueError(
                f"unknown approximate cache {self.approx_cache!r} (choose from {', '.join(APPROX_CACHES)})"
            )
        if self.steps is not None and self.steps < 1:
            raise ValueError("steps must be at least 1")
        if not 0.0 < self.threshold <= 1.0:  # NaN fails too
            raise ValueError("threshold must be in (0, 1]")
        if self.draft < 0:
            raise ValueError("draft must be at least 0")
        if not 0.0 <= self.draft_floor <= 1.0:
            raise ValueError("draft floor must be in [0, 1]")
        if self.block is not None and self.block < 1:
            raise ValueError("block must be at least 1")
        if not 0 <= self.temperature < math.inf:  # also rejects NaN
            raise ValueError("temperature must be a finite number >= 0")
        if not 0 <= self.entropy_bound < math.inf:
            raise ValueError("entropy bound must be a finite number >= 0")
        if not 0 <= self.seed < 2**63:
            raise ValueError("seed must be an integer in [0, 2**63)")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError("top_p must be in (0, 1]")
        if not 0.0 <= self.cooling <= 1.0:
            raise ValueError("cooling must be in [0, 1]")
        if self.max_block_steps is not None and self.max_block_steps < 1:
            raise ValueError("max block steps must be at least 1")
        if not 0 <= self.stop_entropy < math.inf:
            raise ValueError("stop entropy must be a finite number >= 0")
        if not 1.0 <= self.repetition_penalty < math.inf:
            raise ValueError("repetition penalty must be a finite number >= 1")
        if self.repetition_window < 1:
            raise ValueError("repetition window must be at least 1")
        if self.edit_threshold is not None and not 0.0 <= self.edit_threshold < 1.0:
            raise ValueError("edit threshold must be in [0, 1)")
        if self.edit_passes < 0:
            raise ValueError("edit passes must be at least 0")


# Setting a rule's own option picks that rule: `--threshold 0.5` alone means threshold decoding,
# whatever rule the CLI or the model's family would otherwise pick. SamplerConfig field -> rule.
RULE_IMPLIED_BY_SETTING: dict[str, Rule] = {
    "threshold": "threshold",
    "entropy_bound": "entropy-bound",
    "steps": "schedule",
    "draft": "verify",
}


RULE_SETTING: dict[str, str] = {rule: field for field, rule in RULE_IMPLIED_BY_SETTING.items()}  # rule -> its own field


def described(settings: Mapping[str, object]) -> str:
    """A family's decoding (SamplerConfig fields over the defaults) as one line: its rule with the
    rule's own setting first, then the rest as given.
    Example: {"rule": "entropy-bound", "entropy_bound": 0.6} -> "entropy-bound 0.6";
    {"temperature": 0.1} -> "threshold 0.9, temperature=0.1"; {"rule": "schedule"} -> "schedule, one token per pass"."""
    config = SamplerConfig(**settings)  # type: ignore[arg-type]
    own = RULE_SETTING[config.rule]
    value = getattr(config, own)
    head = f"{config.rule}, one token per pass" if value is None else f"{config.rule} {value}"
    if config.rule == "verify":
        head = f"verify, {value} drafts"
    rest = [f"{key}={value}" for key, value in settings.items() if key not in ("rule", own)]
    return ", ".join([head, *rest])


def merge_family_defaults(
    config: SamplerConfig, user_set: Collection[str], family_defaults: Mapping[str, object]
) -> SamplerConfig:
    """The settings a run decodes with when the user set the SamplerConfig fields `user_set` (to
    their values in `config`): without the rule, a rule's own setting set alone picks that rule
    (RULE_IMPLIED_BY_SETTING); the model family's defaults fill in every field left unset.
    ValueError for a bad default.
    Example: {"threshold": 0.5} set on dcode-tiny (entropy bound by default) -> threshold 0.5."""
    implied = {rule for field, rule in RULE_IMPLIED_BY_SETTING.items() if field in user_set}
    if "rule" not in user_set and len(implied) == 1:
        config, user_set = replace(config, rule=implied.pop()), {*user_set, "rule"}
    changes = {key: value for key, value in family_defaults.items() if key not in user_set}
    return replace(config, **changes)  # type: ignore[arg-type]
