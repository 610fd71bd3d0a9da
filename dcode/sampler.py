"""The one sampling loop: denoise() yields a Step per forward pass.

Pure tensor code: takes a denoiser (see dcode.models.base) and a canvas of token ids in which some
positions are still to fill (by default those holding the mask token), and fills them block by
block. A masked-diffusion model sees those positions as masks; a uniform-noise model
(DiffusionGemma) sees them as random tokens, re-noised before every pass, and may be fed the
previous pass's logits. How a pass runs the model is a forward strategy chosen once, before the
loop (exact block cache, Fast-dLLM's window cache, the full canvas, uniform noise); which
positions it writes, and with what, commit_rule_pass or verify_pass decides with the pure
functions of dcode.rules (logit filters, token choice; fixed schedule, threshold, entropy bound,
verified drafts). Knows nothing about tokenizers, tree-sitter, files or the terminal. The CLI,
the live view, the repair pass, the benchmarks and the tests all consume this generator; "just
the result" is dcode.events.drain(denoise(...)).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch

from dcode.config import SamplerConfig
from dcode.events import Step
from dcode.forward import Pass, Readout, choose_forward
from dcode.models.base import Denoiser, ModelFacts
from dcode.rules import (
    SCORES,
    checked_drafts,
    choose_tokens,
    chosen_probability,
    commit_entropy_bound,
    commit_threshold,
    commit_top,
    draft_rows,
    entropy,
    gumbel_noise,
    hold_back,
    penalize_repeats,
    schedule_counts,
    suppress_tokens,
    verified_run,
)

# ---------------------------------------------------------------------------------------------
# Uniform noise and the per-block schedule (DiffusionGemma, transformers generation_diffusion_gemma)


def linear_temperature(temperature: float, cooling: float, step: int, horizon: int) -> float:
    """DiffusionGemma's linear schedule: at pass n of a block with N allowed passes,
    T_n = T_min + (T_max - T_min) * (N - n) / N with T_max = temperature, T_min = temperature * cooling.
    Example: linear_temperature(0.8, 0.5, 0, 48) -> 0.8; linear_temperature(0.8, 0.5, 47, 48) ~ 0.408."""
    if cooling == 1.0:
        return temperature
    left = max(0, horizon - step) / horizon
    return temperature * (cooling + (1.0 - cooling) * left)


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


# ---------------------------------------------------------------------------------------------
# Blocks


def block_spans(start: int, length: int, block: int, aligned: bool) -> list[tuple[int, int]]:
    """Split [start, length) into blocks of `block` tokens. Aligned spans cut at multiples of
    `block` (a block-causal model's own attention blocks); otherwise they count from start.
    Example: block_spans(5, 20, 8, aligned=True) -> [(5, 8), (8, 16), (16, 20)]."""
    cuts = range((start // block + 1) * block, length, block) if aligned else range(start + block, length, block)
    edges = [start, *cuts, length]
    return [(a, b) for a, b in zip(edges, edges[1:], strict=False) if a < b]


def trim_answer(tokens: torch.Tensor, eos_ids: frozenset[int], drop: frozenset[int]) -> list[int]:
    """The answer's ids up to (not including) the first end token, without pad/mask ids."""
    out: list[int] = []
    for token in tokens.tolist():
        if token in eos_ids:
            break
        if token not in drop:
            out.append(token)
    return out


# ---------------------------------------------------------------------------------------------
# One pass's choices: the candidates, then a commit rule or the verify rule


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
    argmax is stable and confident (DiffusionGemma; `stable`, the last pass's argmax (e-s,), comes back updated)."""
    config, gen, offsets = choosing.config, choosing.gen, now.open_offsets
    (s, e), whole = now.block, config.stop_entropy > 0  # the early stop reads the whole block
    read = torch.arange(e - s, device=offsets.device) if whole else offsets
    block_logits = readout(torch.zeros_like(read), read)  # (e-s, V) or (n, V)
    chosen_logits = block_logits[offsets] if whole else block_logits
    candidates = candidate_logits(chosen_logits, now.rows[0], is_open, now.block, choosing, offsets + s)  # (n, V)
    tokens, probs = choose_tokens(candidates, now.temperature, config.top_p, gen)
    scores = SCORES[config.ordering](probs, tokens, gen)
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
) -> torch.Tensor:
    """The verify rule's drafts (width,) for a block's open `offsets` (n,), chosen with the block's
    noise (width, V) from a row's candidates, which read(offsets) gives (k, V), DRAFT_CHUNK at a
    time; the mask id elsewhere: from the first draft on whose run's joint probability falls below
    the floor (a run stands only if each does), and past the draft limit (no pass checks more)."""
    drafts = torch.full((width,), choosing.mask_id, dtype=choosing.dtype, device=choosing.device)
    config = choosing.config
    wanted = offsets[: config.draft]
    joint = 1.0
    for lo in range(0, len(wanted), DRAFT_CHUNK):
        part = wanted[lo : lo + DRAFT_CHUNK]
        choices, probs = choose_tokens(
            read(part), temperature, config.top_p, choosing.gen, None if noise is None else noise[part]
        )
        run = joint * chosen_probability(probs, choices).cumprod(0)  # (k,)
        unsure = run < config.draft_floor
        drafts[part] = choices.masked_fill(unsure, choosing.mask_id)
        if bool(unsure.any()):
            break
        joint = float(run[-1])
    return drafts


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
    choices, probs = choose_tokens(
        torch.cat(firsts), temperature, config.top_p, gen, None if noise is None else noise[offsets[: len(rows)]]
    )
    confirmed = verified_run(choices, drafted)
    ended = confirmed > 0 and bool(torch.isin(drafted[confirmed - 1], ends))  # an end confirmed: nothing after it
    take = torch.arange(confirmed if ended else confirmed + 1, device=rows.device)
    tokens = torch.cat([drafted[:confirmed], choices[confirmed : confirmed + 1]])
    commit = Commit(take, tokens, chosen_probability(probs, choices))
    if not config.draft:  # (--draft 0: no drafts to make)
        return commit, Drafts(drafts.tokens, noise), None
    seen_by = written(is_open, offsets[:confirmed] + s)  # what row `confirmed` saw
    later = offsets[confirmed + 1 :]
    read = row_candidates(readout, confirmed, now, seen_by, 0, choosing)
    following = Drafts(draft_tokens(read, later, e - s, temperature, noise, choosing), noise)
    next_open = is_open[e : now.reach].nonzero()[:, 0]  # the next block's open offsets
    if len(take) < len(offsets) or bool(torch.isin(choices[confirmed], ends)) or not len(next_open):
        return commit, following, None
    fresh = gumbel_noise((now.reach - e, readout.vocab), gen, rows.device) if temperature > 0 else None
    read = row_candidates(readout, confirmed, now, seen_by, e - s, choosing)
    next_block = Drafts(draft_tokens(read, next_open, now.reach - e, temperature, fresh, choosing), fresh)
    return commit, following, next_block


# ---------------------------------------------------------------------------------------------
# The loop


def pad_after_end(canvas: torch.Tensor, is_open: torch.Tensor, start: int, ends: torch.Tensor, pad_id: int) -> None:
    """The answer ends at its first committed end (or pad) token: what follows is padding, as in
    training, so the positions still open after it are written with the pad id (no passes)."""
    hits = (torch.isin(canvas[start:], ends) & ~is_open[start:]).nonzero()
    if len(hits):
        rest = is_open.clone()
        rest[: start + int(hits[0]) + 1] = False
        canvas[rest] = pad_id
        is_open[rest] = False


def check_arguments(
    facts: ModelFacts, config: SamplerConfig, canvas: torch.Tensor, start: int, masks: torch.Tensor | None
) -> None:
    if facts.shifted and start < 1:
        raise ValueError("a model with shifted logits needs at least one prompt token")
    if facts.noise == "uniform" and start < 1:
        raise ValueError("a uniform-noise model needs at least one prompt token as context")
    if config.rule == "verify" and facts.noise == "uniform":
        raise ValueError("the verify rule needs a masked-diffusion model (a uniform-noise model redraws its drafts)")
    if masks is not None and masks.shape != canvas.shape:
        raise ValueError(f"masks must have the canvas's shape {tuple(canvas.shape)}, got {tuple(masks.shape)}")


def choosing_for(
    model: Denoiser,
    config: SamplerConfig,
    gen: torch.Generator,
    start: int,
    ban: Sequence[int],
    dtype: torch.dtype,
    least: int = 0,
) -> Choosing:
    """What one denoise() call chooses with: the mask id and `ban` never written, and the tokens
    that end the answer (EOS, and padding, which in training only ever follows the end), which
    the answer's first `least` positions never hold."""
    facts, device = model.facts, model.device
    ends = torch.tensor(sorted(facts.eos_ids | {facts.pad_id}), dtype=dtype, device=device)  # (m,)
    suppressed = torch.tensor([facts.mask_id, *sorted(set(ban))], dtype=torch.long, device=device)  # (k,)
    return Choosing(config, gen, start, facts.mask_id, suppressed, ends, start + least, dtype, device)


def snapshot(
    canvas: torch.Tensor,
    positions: torch.Tensor,
    commit: Commit,
    now: Pass,
    forwards: int,
    fed: int,
    left: int,
    renoises: bool,
) -> Step:
    """The Step a pass yields: a copy of the canvas on the CPU (the loop keeps writing it)."""
    return Step(
        canvas=canvas.to("cpu", copy=True),
        committed=positions.cpu(),
        scores=commit.scores[commit.picked].float().cpu(),
        block=now.block,
        forward=forwards,
        input_tokens=fed,
        masked=left,
        done=left == 0,
        renoised=len(now.open_offsets) if renoises else 0,
        rows=len(now.rows),
    )


def next_pass(
    canvas: torch.Tensor,
    is_open: torch.Tensor,
    block: tuple[int, int],
    index: int,
    drafts: Drafts,
    size: int,
    horizon: int,
    config: SamplerConfig,
    choosing: Choosing,
) -> Pass:
    """The block's next pass: the canvas alone (1, L) at the block's falling temperature, or the
    verify rule's checked drafts in place (R, L) at one temperature, so that its fewer passes
    sample what one pass per token samples."""
    s, e = block
    open_offsets = is_open[s:e].nonzero()[:, 0]  # (n,) block offsets of the positions to fill
    if config.rule == "verify":
        drafted, rows, reach = verify_rows(canvas, open_offsets, block, drafts, size, choosing)  # (R, L)
        return Pass(rows, block, reach, index, open_offsets, config.temperature, drafted)
    temperature = linear_temperature(config.temperature, config.cooling, index, horizon)
    return Pass(canvas[None], block, e, index, open_offsets, temperature, open_offsets[:0])


def denoise(
    model: Denoiser,
    canvas: torch.Tensor,
    start: int,
    config: SamplerConfig,
    masks: torch.Tensor | None = None,
    ban: Sequence[int] = (),
    least: int = 0,
) -> Iterator[Step]:
    """Fill the positions `masks` marks in canvas[start:] and yield a Step after each forward pass.

    canvas (L,) holds the prompt in [0, start) and the answer region in [start, L). masks (L,) bool
    marks the positions to fill (default: those holding facts.mask_id), anywhere in the answer
    region (repair re-masks spans in the middle); every Step's canvas shows them as facts.mask_id
    until committed. `ban`: token ids never written there (repair's retries ban what the checker
    blamed); `least`: canvas[start : start + least] holds no end or pad token (a server's
    min_tokens, ignore_eos). Blocks fill left to right, each finished before the next commits.

    facts.noise == "uniform" (DiffusionGemma): the context before a block is encoded into the
    cache once (model.extend); each pass feeds the block alone, every position still to fill holding
    a random token from the seeded generator (re-noised every pass), with the previous pass's
    temperature-scaled logits (`previous=`, self-conditioning). Committed positions stay committed;
    a uniform model's blocks count from `start` (its canvases begin where the answer does).
    """
    facts, device = model.facts, model.device
    canvas = canvas.clone().to(device)  # (L,)
    length = len(canvas)
    check_arguments(facts, config, canvas, start, masks)
    gen = torch.Generator().manual_seed(config.seed)  # every random draw, in a fixed order
    verify = config.rule == "verify"
    origin = start if facts.block_origin == "answer" else 0  # where the model's attention blocks start
    forward = choose_forward(model, config, gen, origin)  # exact cache, window cache, full canvas or uniform noise
    is_open = canvas == facts.mask_id if masks is None else masks.to(device=device, dtype=torch.bool, copy=True)  # (L,)
    is_open[:start] = False  # the prompt is never filled
    canvas[is_open] = facts.mask_id  # the placeholder every Step shows for a position still to fill
    open_total = int(is_open[start:].sum())
    choosing = choosing_for(model, config, gen, start, ban, canvas.dtype, least)
    ends = choosing.ends
    size = facts.block or config.block or max(1, length - start)
    aligned = facts.block is not None and facts.noise != "uniform" and not origin  # a block-causal model's own blocks
    forwards = 0
    ahead: dict[int, Drafts] = {}  # block start -> verify drafts made by the pass that finished the block before
    for block in block_spans(start, length, size, aligned):
        s, e = block
        in_block = int(is_open[s:e].sum())
        if in_block == 0:
            continue
        # 1) the block's budget (blocks left to right: LLaDA's semi-autoregressive sampling): its share
        # of the fixed schedule's passes, and the passes DiffusionGemma's falling temperature spans
        counts = schedule_counts(in_block, max(1, round((config.steps or open_total) * in_block / max(1, open_total))))
        horizon = config.max_block_steps or in_block
        stable: torch.Tensor | None = None  # (e-s,) last pass's argmax, for the early stop
        drafts = ahead.pop(s, Drafts())
        index = 0  # passes in this block
        while bool(is_open[s:e].any()):
            # 2) the rows to feed: the canvas, or the verify rule's checked drafts in place
            now = next_pass(canvas, is_open, block, index, drafts, size, horizon, config, choosing)
            open_offsets = now.open_offsets  # (n,) block offsets of the positions to fill
            # 3) forward, as the strategy chosen above runs it: the logits of positions [s, reach) of
            # each row, in float32 (a model run in bfloat16 chooses in float32), made where they are read
            readout, fed = forward(now)
            forwards += 1
            # 4) choose tokens and commit some: the run the verify rule confirms, or a commit rule's pick
            if verify:
                commit, drafts, next_drafts = verify_pass(readout, now, is_open, drafts, choosing)
                if next_drafts is not None:
                    ahead[e] = next_drafts
            else:
                commit, stable = commit_rule_pass(readout, now, is_open, counts, stable, choosing)
            positions = open_offsets[commit.picked] + s  # (k,)
            canvas[positions] = commit.tokens[commit.picked]
            is_open[positions] = False
            index += 1
            # 5) the answer ends at its first end (or pad) token: what follows is padding, as in
            # training, so those positions need no passes and the loop stops once the rest is filled
            if config.stop_at_eos:
                pad_after_end(canvas, is_open, start, ends, facts.pad_id)
            left = int(is_open[start:].sum())
            # 6) a snapshot of the pass (the loop keeps writing the canvas)
            yield snapshot(canvas, positions, commit, now, forwards, fed, left, forward.renoises)
