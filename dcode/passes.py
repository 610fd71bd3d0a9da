"""One pass's choices, for dcode.sampler.denoise: the candidate tokens a pass reads, then a commit
rule (dcode.rules: fixed schedule, threshold, entropy bound; DiffusionGemma's stable-and-confident
stop), the verify rule (drafts checked against the model in the same pass) and token editing
(LLaDA2.1: rewriting tokens of earlier passes). Pure tensor code over a denoiser's logits; knows
nothing about tokenizers, files or the terminal.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch

from dcode.config import SamplerConfig
from dcode.constrained import (
    Constraint,
    constrained_pick,
    consume_commit,
    frontier_rows,
    grammar_drafts,
    masked_rows,
    row_masks,
    valid_drafts,
)
from dcode.forward import Pass, Readout
from dcode.rules import (
    SCORES,
    checked_drafts,
    choose_tokens,
    chosen_probability,
    commit_edits,
    commit_entropy_bound,
    commit_threshold,
    commit_top,
    draft_rows,
    entropy,
    gumbel_noise,
    hold_back,
    penalize_repeats,
    suppress_tokens,
    verified_run,
)


def stable_and_confident(
    logits: torch.Tensor, temperature: float, placeholder: int, before: torch.Tensor | None, bound: float
) -> tuple[bool, torch.Tensor]:
    """DiffusionGemma's early stop: the block's argmax equals the previous pass's (`before`) and
    the mean entropy of its temperature-scaled distributions is below `bound`. logits (n, V).
    Returns (stop, argmax (n,))."""
    scaled = logits.float() / temperature if temperature > 0 else logits.float().clone()  # (n, V)
    scaled[:, placeholder] = float("-inf")
    greedy = scaled.argmax(dim=-1)
    if before is None or not torch.equal(greedy, before):
        return False, greedy
    return float(entropy(scaled.softmax(dim=-1)).mean()) < bound, greedy


@dataclass(frozen=True)
class Choosing:
    """What every pass chooses with, fixed for one denoise() call."""

    config: SamplerConfig
    gen: torch.Generator
    start: int  # first answer position: the repetition penalty looks no further back
    mask_id: int
    suppressed: torch.Tensor  # (k,) ids never written: the mask id and the banned ids
    ends: torch.Tensor  # (m,) ids that end the answer: EOS and padding
    ends_from: int  # no end id is written before this position (vLLM's min_tokens, ignore_eos)
    dtype: torch.dtype  # the canvas's (drafts are written into it)
    device: torch.device
    constraint: Constraint | None = None  # a grammar the committed answer follows (dcode.constrained)


@dataclass(frozen=True)
class Commit:
    """What a pass writes: tokens[picked] at the block's open offsets [picked]."""

    picked: torch.Tensor  # (k,) indices into the pass's open offsets, tokens and scores
    tokens: torch.Tensor  # (n,) a token per open offset considered
    scores: torch.Tensor  # (n,) their ordering scores (higher = more certain)


def candidate_logits(
    logits: torch.Tensor,
    row: torch.Tensor,
    is_open: torch.Tensor,
    block: tuple[int, int],
    choosing: Choosing,
    at: torch.Tensor,
) -> torch.Tensor:
    """The logits (n, V) of the positions `at` (n,) to fill in `block`, as choices: never a mask
    or a banned id, no end id before choosing.ends_from, and repeats of what the canvas `row` (L,)
    shows penalized (CTRL), at the positions before and in the block that is_open (L,) does not
    mark as still open."""
    logits = suppress_tokens(logits, choosing.suppressed)
    early = (at < choosing.ends_from).nonzero()[:, 0]  # (k,) rows whose answer may not end yet
    if len(early):
        logits[early[:, None], choosing.ends[None, :].long()] = float("-inf")
    penalty = choosing.config.repetition_penalty
    if penalty == 1.0:
        return logits
    s, e = block
    lo = max(choosing.start, s - choosing.config.repetition_window)
    seen = row[lo:e][~is_open[lo:e]]  # (k,)
    return penalize_repeats(logits, seen[~torch.isin(seen, choosing.ends)], penalty)


def commit_rule_pass(
    readout: Readout,
    now: Pass,
    is_open: torch.Tensor,
    counts: list[int],
    stable: torch.Tensor | None,
    choosing: Choosing,
) -> tuple[Commit, torch.Tensor | None]:
    """A token and a score for each open offset (n,) from the block's logits (row 0 of readout),
    then the commit rule's pick: the schedule's count of the best (`counts`, one a pass: LLaDA's
    schedule), those at least as probable as the threshold (Fast-dLLM), those within the entropy
    bound (EB-sampler); or all of them, greedily, on the block's last allowed pass or once its
    argmax is stable and confident (DiffusionGemma; `stable`, the last pass's argmax (e-s,), comes back updated).
    Under a grammar (choosing.constraint), only the run from the frontier it accepts (dcode.constrained)."""
    config, gen, offsets = choosing.config, choosing.gen, now.open_offsets
    (s, e), whole = now.block, config.stop_entropy > 0  # the early stop reads the whole block
    read = torch.arange(e - s, device=offsets.device) if whole else offsets
    block_logits = readout(torch.zeros_like(read), read)  # (e-s, V) or (n, V)
    chosen_logits = block_logits[offsets] if whole else block_logits
    candidates = candidate_logits(chosen_logits, now.rows[0], is_open, now.block, choosing, offsets + s)  # (n, V)
    constraint = choosing.constraint
    room = int(is_open.sum())  # the answer's open positions: a grammar short of room closes
    forced = None if constraint is None else frontier_rows(constraint, candidates, room)  # (f,), frontier masked
    tokens, probs = choose_tokens(candidates, now.temperature, config.top_p, gen)
    scores = SCORES[config.ordering](probs, tokens, gen)
    commit, stable = rule_pick(block_logits, candidates, tokens, probs, scores, now, counts, stable, choosing)
    if constraint is not None and forced is not None:
        closing = constraint.closing(room - len(forced))
        picked, tokens = constrained_pick(constraint, forced, commit.tokens, commit.picked, closing)
        commit = Commit(picked, tokens, scores)
    return commit, stable


def rule_pick(
    block_logits: torch.Tensor,
    candidates: torch.Tensor,
    tokens: torch.Tensor,
    probs: torch.Tensor,
    scores: torch.Tensor,
    now: Pass,
    counts: list[int],
    stable: torch.Tensor | None,
    choosing: Choosing,
) -> tuple[Commit, torch.Tensor | None]:
    """The commit rule's pick of a pass's choices tokens (n,) (their distributions probs (n, V),
    scores (n,)): see commit_rule_pass."""
    config, offsets, whole = choosing.config, now.open_offsets, choosing.config.stop_entropy > 0
    settled = False
    if whole:
        settled, stable = stable_and_confident(
            block_logits, now.temperature, choosing.mask_id, stable, config.stop_entropy
        )
    if settled or (config.max_block_steps is not None and now.index + 1 >= config.max_block_steps):
        every = torch.arange(len(offsets), device=offsets.device)
        return Commit(every, candidates.argmax(dim=-1), scores), stable
    if config.rule == "schedule":
        count = counts[now.index] if now.index < len(counts) else len(offsets)
        return Commit(commit_top(scores, count), tokens, scores), stable
    if config.rule == "threshold":
        picked = commit_threshold(chosen_probability(probs, tokens), scores, config.threshold)
    else:
        picked = commit_entropy_bound(entropy(probs), config.entropy_bound)
    if config.hold_conflicts:
        picked = hold_back(offsets, tokens, picked, choosing.ends)
    return Commit(picked, tokens, scores), stable


def edit_pass(
    readout: Readout, now: Pass, is_open: torch.Tensor, made: torch.Tensor, choosing: Choosing
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token editing (LLaDA2.1, dcode.rules.commit_edits) from the same pass's logits: the block's
    positions this run filled in earlier passes (made (L,) and not is_open (L,)) that the model now
    wants to hold another token. Returns their canvas positions (k,) and the new tokens (k,). The
    repetition penalty does not count the tokens being reconsidered (each would penalize itself)."""
    s, e = now.block
    offsets = (made[s:e] & ~is_open[s:e]).nonzero()[:, 0]  # (m,) block offsets written before this pass
    if not len(offsets):
        return offsets, offsets
    logits = readout(torch.zeros_like(offsets), offsets)  # (m, V)
    reconsidered = is_open.clone()
    reconsidered[offsets + s] = True
    candidates = candidate_logits(logits, now.rows[0], reconsidered, now.block, choosing, offsets + s)  # (m, V)
    config = choosing.config
    assert config.edit_threshold is not None
    tokens, probs = choose_tokens(candidates, now.temperature, config.top_p, choosing.gen)
    current = now.rows[0][offsets + s]  # (m,)
    picked = commit_edits(chosen_probability(probs, tokens), tokens, current, config.edit_threshold)
    return offsets[picked] + s, tokens[picked].to(choosing.dtype)


# ---------------------------------------------------------------------------------------------
# The verify rule: draft, then check the drafts in one batched pass

DRAFT_CHUNK = 4  # drafts made at a time: most runs fall below the floor within the first few


@dataclass(frozen=True)
class Drafts:
    """The verify rule's guesses for a block: tokens (e-s,) for its positions still to fill (the
    mask id where none) and its Gumbel noise (e-s, V), one draw per position for the whole block."""

    tokens: torch.Tensor | None = None
    noise: torch.Tensor | None = None


def verify_rows(
    canvas: torch.Tensor,
    open_offsets: torch.Tensor,
    block: tuple[int, int],
    drafts: Drafts,
    size: int,
    choosing: Choosing,
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """The drafts (k,) a verify pass checks: for the open offsets but the last (row r decides open
    offset r with the drafts before it in place; the last row's choice needs none); the rows to
    feed (k+1, L); and where they are read up to: a pass that may finish the block reads the next
    one too (still masked), to draft it."""
    s, e = block
    drafted = open_offsets[:0]
    if drafts.tokens is not None:
        config = choosing.config
        drafted = checked_drafts(drafts.tokens[open_offsets[:-1]], config.draft, choosing.mask_id, choosing.ends)
        if choosing.constraint is not None:
            drafted = valid_drafts(choosing.constraint, drafted)
    rows = draft_rows(canvas, open_offsets[: len(drafted)] + s, drafted)  # (k+1, L)
    reach = min(e + size, len(canvas)) if len(drafted) == len(open_offsets) - 1 else e
    return drafted, rows, reach


def written(is_open: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """is_open (L,) with `positions` (k,) written: what a verify row holding drafts there shows."""
    row_open = is_open.clone()
    row_open[positions] = False
    return row_open


def draft_tokens(
    read: Callable[[torch.Tensor], torch.Tensor],
    offsets: torch.Tensor,
    width: int,
    temperature: float,
    noise: torch.Tensor | None,
    choosing: Choosing,
    grammar: tuple[Constraint, int] | None = None,
) -> torch.Tensor:
    """The verify rule's drafts (width,) for a block's open `offsets` (n,), chosen with the block's
    noise (width, V) from a row's candidates, which read(offsets) gives (k, V), DRAFT_CHUNK at a
    time; the mask id elsewhere: from the first draft on whose run's joint probability falls below
    the floor (a run stands only if each does), and past the draft limit (no pass checks more).
    Under a grammar (a copy of it after the committed answer, and the answer positions then open),
    each draft is what the grammar forces or a choice from its mask after the drafts before
    (dcode.constrained.grammar_drafts): a draft it would refuse could confirm nothing."""
    drafts = torch.full((width,), choosing.mask_id, dtype=choosing.dtype, device=choosing.device)
    config = choosing.config
    wanted = offsets[: config.draft]
    joint = 1.0
    for lo in range(0, len(wanted), DRAFT_CHUNK):
        part = wanted[lo : lo + DRAFT_CHUNK]
        part_noise = None if noise is None else noise[part]
        if grammar is None:
            choices, probs = choose_tokens(read(part), temperature, config.top_p, choosing.gen, part_noise)
            chances = chosen_probability(probs, choices)
        else:
            choose = partial(choose_one, temperature, config.top_p, choosing.gen, part_noise)
            choices, chances = grammar_drafts(grammar[0], read(part), grammar[1] - lo, choose)
        run = joint * chances.cumprod(0)  # (k,)
        unsure = run < config.draft_floor
        drafts[part] = choices.masked_fill(unsure, choosing.mask_id).to(choosing.dtype)
        if bool(unsure.any()):
            break
        joint = float(run[-1])
    return drafts


def choose_one(
    temperature: float, top_p: float, gen: torch.Generator, noise: torch.Tensor | None, logits: torch.Tensor, r: int
) -> tuple[int, float]:
    """choose_tokens for one row's logits (V,), row r of `noise` (k, V): the token and its probability."""
    token, probs = choose_tokens(logits[None], temperature, top_p, gen, None if noise is None else noise[r : r + 1])
    return int(token[0]), float(probs[0, token[0]])


def drafting_grammar(choosing: Choosing, room: int) -> tuple[Constraint, int] | None:
    """What the drafts after a verify commit are made under: a copy of the grammar after the
    committed answer, and the `room` (answer positions open) the next pass will have, so the drafts
    close (short of room) where its rows will."""
    return None if choosing.constraint is None else (choosing.constraint.fork(), room)


def row_candidates(
    readout: Readout, row: int, now: Pass, seen: torch.Tensor, base: int, choosing: Choosing
) -> Callable[[torch.Tensor], torch.Tensor]:
    """Row `row`'s candidate logits (k, V) at block offsets base + offsets (k,), for drafting: made
    without the output head's padding, since the verify rule's answer never depends on its drafts
    (only how many rows a pass feeds does)."""

    def read(offsets: torch.Tensor) -> torch.Tensor:
        at = base + offsets
        logits = readout(torch.full_like(at, row), at, exact=False)
        return candidate_logits(logits, now.rows[row], seen, now.block, choosing, at + now.block[0])

    return read


def verify_pass(
    readout: Readout, now: Pass, is_open: torch.Tensor, drafts: Drafts, choosing: Choosing
) -> tuple[Commit, Drafts, Drafts | None]:
    """Row r of the pass (k+1 rows, logits for [s, reach) in readout) was fed the first r drafts
    (k,) and chose the token at open offset r; the drafts that are what their row chose stand, and
    so does the choice of the first row that disagrees (verified_run): what one pass per token,
    leftmost first, would write. Returns the commit, the block's drafts for the next pass (what the
    row that saw every token committed now chose for the rest), and the next block's if this pass
    finishes the block."""
    config, gen, ends = choosing.config, choosing.gen, choosing.ends
    (s, e), offsets, temperature, rows, drafted = now.block, now.open_offsets, now.temperature, now.rows, now.drafted
    noise = drafts.noise
    if noise is None and temperature > 0:
        noise = gumbel_noise((e - s, readout.vocab), gen, rows.device)
    heads = readout(torch.arange(len(rows), device=rows.device), offsets[: len(rows)])  # (k+1, V): row r at offset r
    firsts = [
        candidate_logits(heads[r : r + 1], rows[r], written(is_open, offsets[:r] + s), now.block, choosing, at)
        for r, at in enumerate((offsets[: len(rows)] + s)[:, None])
    ]  # (1, V) each
    if choosing.constraint is not None:  # row r chooses what the grammar allows after the drafts before it
        firsts = masked_rows(firsts, row_masks(choosing.constraint, drafted, len(rows), int(is_open.sum())))
    choices, probs = choose_tokens(
        torch.cat(firsts), temperature, config.top_p, gen, None if noise is None else noise[offsets[: len(rows)]]
    )
    confirmed = verified_run(choices, drafted)
    ended = confirmed > 0 and bool(torch.isin(drafted[confirmed - 1], ends))  # an end confirmed: nothing after it
    take = torch.arange(confirmed if ended else confirmed + 1, device=rows.device)
    tokens = torch.cat([drafted[:confirmed], choices[confirmed : confirmed + 1]])
    commit = Commit(take, tokens, chosen_probability(probs, choices))
    if choosing.constraint is not None:
        consume_commit(choosing.constraint, tokens[take], int(is_open.sum()))
    if not config.draft:  # (--draft 0: no drafts to make)
        return commit, Drafts(drafts.tokens, noise), None
    seen_by = written(is_open, offsets[:confirmed] + s)  # what row `confirmed` saw
    later = offsets[confirmed + 1 :]
    read = row_candidates(readout, confirmed, now, seen_by, 0, choosing)
    grammar = drafting_grammar(choosing, int(is_open.sum()) - len(take))  # the next block's too (none drafted here)
    following = Drafts(draft_tokens(read, later, e - s, temperature, noise, choosing, grammar), noise)
    next_open = is_open[e : now.reach].nonzero()[:, 0]  # the next block's open offsets
    if len(take) < len(offsets) or bool(torch.isin(choices[confirmed], ends)) or not len(next_open):
        return commit, following, None
    fresh = gumbel_noise((now.reach - e, readout.vocab), gen, rows.device) if temperature > 0 else None
    read = row_candidates(readout, confirmed, now, seen_by, e - s, choosing)
    next_block = Drafts(draft_tokens(read, next_open, now.reach - e, temperature, fresh, choosing, grammar), fresh)
    return commit, following, next_block


# ---------------------------------------------------------------------------------------------
# One pass's choices, whichever rule


@dataclass(frozen=True)
class Carried:
    """What a block's passes hand on: the last pass's argmax (e-s,) for the early stop, the verify drafts."""

    stable: torch.Tensor | None
    drafts: Drafts


@dataclass(frozen=True)
class Choice:
    """What one pass writes, and what it hands on."""

    commit: Commit
    edits: tuple[torch.Tensor, torch.Tensor]  # token editing: canvas positions (k,) and their new tokens (k,)
    stable: torch.Tensor | None
    drafts: Drafts
    next_drafts: Drafts | None  # the next block's verify drafts, made by the pass that finishes this one


def choose_pass(
    readout: Readout,
    now: Pass,
    is_open: torch.Tensor,
    made: torch.Tensor,
    counts: list[int],
    carried: Carried,
    choosing: Choosing,
    filling: bool,
) -> Choice:
    """The commit (the run the verify rule confirms, or a commit rule's pick; none in a pass over a
    filled block) and, with token editing (not under the verify rule), the edits of what earlier
    passes wrote: both from the same logits, before either is written."""
    config, nothing = choosing.config, now.open_offsets[:0]
    stable, drafts, next_drafts = carried.stable, carried.drafts, None
    if not filling:
        commit = Commit(nothing, nothing, nothing.double())
    elif config.rule == "verify":
        commit, drafts, next_drafts = verify_pass(readout, now, is_open, drafts, choosing)
    else:
        commit, stable = commit_rule_pass(readout, now, is_open, counts, stable, choosing)
    editing = config.edit_threshold is not None and config.rule != "verify" and choosing.constraint is None
    edits = edit_pass(readout, now, is_open, made, choosing) if editing else (nothing, nothing)
    return Choice(commit, edits, stable, drafts, next_drafts)


def apply_choice(
    canvas: torch.Tensor, is_open: torch.Tensor, now: Pass, choice: Choice
) -> tuple[torch.Tensor, torch.Tensor]:
    """Write a pass's commit and edits into the canvas (L,); returns the canvas positions committed
    (k,) and edited (m,)."""
    commit, (edited, rewritten) = choice.commit, choice.edits
    positions = now.open_offsets[commit.picked] + now.block[0]  # (k,)
    canvas[positions] = commit.tokens[commit.picked]
    canvas[edited] = rewritten
    is_open[positions] = False
    return positions, edited
