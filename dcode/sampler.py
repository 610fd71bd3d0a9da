"""The one sampling loop: denoise() yields a Step per forward pass.

Pure tensor code: takes a denoiser (see dcode.models.base) and a canvas of token ids in which some
positions are still to fill (by default those holding the mask token), and fills them block by
block. A masked-diffusion model sees those positions as masks; a uniform-noise model
(DiffusionGemma) sees them as random tokens, re-noised before every pass, and may be fed the
previous pass's logits. Which positions a pass writes, and with what, the pure functions of
dcode.rules decide (fixed schedule, threshold, entropy bound, verified drafts). Knows nothing
about tokenizers, tree-sitter, files or the terminal. The CLI, the live view, the repair pass,
the benchmarks and the tests all consume this generator; "just the result" is final(denoise(...)).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import cast

import torch

from dcode.config import SamplerConfig
from dcode.events import Step
from dcode.models.base import Denoiser, UniformDenoiser, WindowDenoiser
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
    verified_run,
)

# ---------------------------------------------------------------------------------------------
# Uniform noise and the per-block schedule (DiffusionGemma, transformers generation_diffusion_gemma)


def uniform_noise(count: int, vocab_size: int, placeholder: int, gen: torch.Generator) -> torch.Tensor:
    """`count` ids drawn uniformly from the vocabulary less the placeholder id, so that the mask
    placeholder is never fed to a uniform-noise model. -> (count,)"""
    ids = torch.randint(vocab_size - 1, (count,), generator=gen)
    return ids + (ids >= placeholder).long()


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
# The loop


def denoise(
    model: Denoiser,
    canvas: torch.Tensor,
    start: int,
    config: SamplerConfig,
    fill: torch.Tensor | None = None,
    ban: Sequence[int] = (),
) -> Iterator[Step]:
    """Fill the positions `fill` marks in canvas[start:] and yield a Step after each forward pass.

    canvas (L,) holds the prompt in [0, start) and the answer region in [start, L). fill (L,) bool
    marks the positions to fill (default: those holding facts.mask_id); they may sit anywhere in
    the answer region (the repair pass re-masks spans in the middle). Every Step's canvas shows
    them as facts.mask_id until they are committed; `ban` lists token ids never written there (the
    repair pass's retries ban what the checker blamed). Positions are filled block by block, left to
    right; a block's positions are never committed before the blocks to its left are finished.

    facts.noise == "uniform" (DiffusionGemma): the context before a block is encoded into the
    cache once (model.extend), then each pass feeds the block alone with every position still to
    fill holding a random token from the seeded generator (re-noised every pass) and hands the
    model the previous pass's temperature-scaled logits (`previous=`, self-conditioning).
    Committed positions stay committed. A uniform model's blocks count from `start` (its canvases
    begin where the answer does).
    """
    facts = model.facts
    device = model.device
    canvas = canvas.clone().to(device)
    length = len(canvas)
    if facts.shifted and start < 1:
        raise ValueError("a model with shifted logits needs at least one prompt token")
    renoiser = cast(UniformDenoiser, model) if facts.noise == "uniform" else None
    if renoiser is not None and start < 1:
        raise ValueError("a uniform-noise model needs at least one prompt token as context")
    verify = config.rule == "verify"
    if verify and renoiser is not None:
        raise ValueError("the verify rule needs a masked-diffusion model (a uniform-noise model redraws its drafts)")
    if fill is not None and fill.shape != canvas.shape:
        raise ValueError(f"fill must have the canvas's shape {tuple(canvas.shape)}, got {tuple(fill.shape)}")
    gen = torch.Generator().manual_seed(config.seed)
    score = SCORES[config.ordering]
    aligned = facts.block is not None and renoiser is None
    size = facts.block or config.block or max(1, length - start)
    cache = model.new_cache() if config.cache else None
    # Fast-dLLM's approximate cache where no exact one exists (full attention; an optional method).
    windowed = cast(WindowDenoiser, model)
    # (The verify rule's rows differ inside the window, which that cache holds one copy of.)
    approx = config.cache and cache is None and renoiser is None and config.approx_cache != "off" and not verify
    window_cache = windowed.new_window_cache() if approx and hasattr(model, "new_window_cache") else None
    is_masked = canvas == facts.mask_id if fill is None else fill.to(device=device, dtype=torch.bool, copy=True)
    is_masked[:start] = False  # the prompt is never filled
    canvas[is_masked] = facts.mask_id  # the placeholder every Step shows for a position still to fill
    masks_total = int(is_masked[start:].sum())
    forward = 0
    carry: torch.Tensor | None = None  # logits row of position s-1, for shifted models with a cache
    # Tokens that end the answer: EOS, and padding, which in training only ever follows the end.
    ends = torch.tensor(sorted(facts.eos_ids | {facts.pad_id}), dtype=canvas.dtype, device=device)
    banned = torch.tensor(sorted(set(ban)), dtype=torch.long, device=device)

    def candidates(
        row_logits: torch.Tensor, row: torch.Tensor, drafts: int, rows: torch.Tensor, span: tuple[int, int]
    ) -> torch.Tensor:
        """The logits (n, V) of positions to fill in the block `span`, as choices: never a mask or
        a banned id, and repeats of what the canvas `row` (L,) shows penalized, counting the first
        `drafts` of the block's open offsets `rows` as written (a verify row's drafts)."""
        row_logits[:, facts.mask_id] = float("-inf")  # a mask is never an answer
        row_logits[:, banned] = float("-inf")
        if config.repetition_penalty == 1.0:
            return row_logits
        s, e = span
        lo = max(start, s - config.repetition_window)
        open_now = is_masked.clone()
        open_now[rows[:drafts] + s] = False
        seen = row[lo:e][~open_now[lo:e]]
        return penalize_repeats(row_logits, seen[~torch.isin(seen, ends)], config.repetition_penalty)

    def drafts_from(
        choices: torch.Tensor, offsets: torch.Tensor, width: int, temperature: float, noise: torch.Tensor | None
    ) -> torch.Tensor:
        """The verify rule's drafts (width,) for a block's open `offsets` (n,), chosen from a row's
        candidates (n, V) with the block's noise; the mask id elsewhere."""
        drafts = torch.full((width,), facts.mask_id, dtype=canvas.dtype, device=device)
        if len(offsets):
            chosen, probs = choose_tokens(
                choices, temperature, config.top_p, gen, None if noise is None else noise[offsets]
            )
            # a run of drafts stands only if each does: stop where its joint probability gets small
            unsure = chosen_probability(probs, chosen).cumprod(0) < config.draft_floor
            drafts[offsets] = chosen.masked_fill(unsure, facts.mask_id)
        return drafts

    ahead_of: dict[int, tuple[torch.Tensor | None, torch.Tensor | None]] = {}  # block start -> drafts, noise
    for s, e in block_spans(start, length, size, aligned):
        in_block = int(is_masked[s:e].sum())
        if in_block == 0:
            continue
        # Passes this block gets under the fixed schedule: its share of the total budget.
        steps = config.steps or masks_total
        plan = schedule_counts(in_block, max(1, round(steps * in_block / max(1, masks_total))))
        a = (s // facts.block) * facts.block if facts.block else s  # first position of s's attention block
        horizon = config.max_block_steps or in_block  # the passes the temperature schedule spans
        previous: torch.Tensor | None = None  # (1, e-s, V) last pass's scaled logits (uniform models)
        before: torch.Tensor | None = None  # (e-s,) last pass's argmax, for the early stop
        # The verify rule's drafts (e-s,) for positions still to fill and its Gumbel noise (e-s, V),
        # one draw per position; the pass that finished the block before may have drafted this one.
        proposal, noise = ahead_of.pop(s, (None, None))
        step_in_block = 0
        while bool(is_masked[s:e].any()):
            # (verify: one temperature, so that its fewer passes sample what one per pass samples)
            temperature = (
                config.temperature
                if verify
                else linear_temperature(config.temperature, config.cooling, step_in_block, horizon)
            )
            rows = is_masked[s:e].nonzero()[:, 0]  # block offsets of the positions to fill
            # the verify rule's drafts to check: for the open positions but the last (row r decides
            # position r with the drafts before it in place; the last row's choice needs no draft)
            drafted = (
                rows[:0] if proposal is None else checked_drafts(proposal[rows[:-1]], config.draft, facts.mask_id, ends)
            )
            feed = draft_rows(canvas, rows[: len(drafted)] + s, drafted) if verify else canvas[None]  # (R, L)
            # A verify pass that may finish the block reads the next block too (still masked), to draft it.
            reach = min(e + size, length) if verify and len(drafted) == len(rows) - 1 else e
            # 1) forward: with a cache only the uncached stretch up to `reach`; logits (R, reach-s, V)
            if renoiser is not None:
                # The context goes into the cache once, clean (without a cache: every pass, afresh);
                # the block goes in alone, its unfilled positions re-noised.
                context = cache if cache is not None else renoiser.new_cache()
                c = context.length
                if c < s:
                    renoiser.extend(canvas[None, c:s], context)
                noisy = canvas[s:e].clone()
                noisy[rows] = uniform_noise(len(rows), facts.vocab_size, facts.mask_id, gen).to(device)
                logits = renoiser(noisy[None], context, previous=previous)  # (1, e-s, V)
                previous = logits / temperature if temperature > 0 else logits
                fed = e - c
            elif cache is not None:
                c = cache.length
                out = model(feed[:, c:reach], cache)  # (R, reach-c, V)
                cache.crop(a)  # keep finished blocks only
                fed = (reach - c) * len(feed)
                if facts.shifted:
                    if c <= s - 1:
                        carry = out[0, s - 1 - c]  # the same in every row: it lies before the block
                    assert carry is not None
                    logits = torch.cat([carry.expand(len(feed), 1, -1), out[:, s - c : reach - c - 1]], dim=1)
                else:
                    logits = out[:, s - c : reach - c]
            elif window_cache is not None and step_in_block > 0:
                # Fast-dLLM: the window alone, every other position read from the block's first pass.
                # Its rows from lo on predict s..e-1 (a shifted model's row s-1 predicts s).
                window = window_cache.window
                logits = windowed.window(canvas[None, window[0] : window[1]], window_cache)[:, : e - s]
                fed = window[1] - window[0]
            else:
                if window_cache is not None:  # the block's first pass: the whole canvas, cached but the window
                    lo = s - 1 if facts.shifted else s
                    hi = e if config.approx_cache == "dual" else length
                    out = windowed.refresh(canvas[None], (lo, hi), window_cache)  # (1, L, V)
                else:
                    out = model(feed, None)  # (R, L, V)
                fed = length * len(feed)
                logits = out[:, s - 1 : reach - 1] if facts.shifted else out[:, s:reach]
            forward += 1

            if verify:
                # 2-3) row r chose the token after its r drafts; the drafts that are what their row
                # chose stand, and so does the choice of the first row that disagrees
                if noise is None and temperature > 0:
                    noise = gumbel_noise((e - s, logits.shape[-1]), gen, device)
                count = len(feed)
                firsts = torch.cat(
                    [candidates(logits[r, rows[r : r + 1]], feed[r], r, rows, (s, e)) for r in range(count)]
                )
                chosen, probs = choose_tokens(
                    firsts, temperature, config.top_p, gen, None if noise is None else noise[rows[:count]]
                )
                m = verified_run(chosen, drafted)
                ended = m > 0 and bool(torch.isin(drafted[m - 1], ends))  # an end confirmed: nothing after it
                take = m if ended else m + 1
                tokens, pick = torch.cat([drafted[:m], chosen[m : m + 1]]), torch.arange(take, device=device)
                scores = chosen_probability(probs, chosen)
                if config.draft:  # (--draft 0: no drafts to make)
                    # Next pass's drafts: what row m, which saw every token committed now, chose for the
                    # rest of the block; if this pass finished the block, for the next block too.
                    later = rows[m + 1 :]
                    proposal = drafts_from(
                        candidates(logits[m, later], feed[m], m, rows, (s, e)), later, e - s, temperature, noise
                    )
                    following = is_masked[e:reach].nonzero()[:, 0]  # the next block's open offsets
                    if take == len(rows) and not bool(torch.isin(chosen[m], ends)) and len(following):
                        fresh = gumbel_noise((reach - e, logits.shape[-1]), gen, device) if temperature > 0 else None
                        choices = candidates(logits[m, e - s + following], feed[m], m, rows, (s, e))
                        ahead_of[e] = (drafts_from(choices, following, reach - e, temperature, fresh), fresh)
            else:
                # 2) a token and a score for every position of the block still to fill
                block_logits = logits[0]
                row_candidates = candidates(block_logits[rows], canvas, 0, rows, (s, e))
                tokens, probs = choose_tokens(row_candidates, temperature, config.top_p, gen)
                scores = score(probs, tokens, gen)

                # 3) commit some of them; all of them, greedily, on the block's last allowed pass or
                # once it is stable and confident
                settled = False
                if config.stop_entropy > 0:
                    settled, before = stable_and_confident(
                        block_logits, temperature, facts.mask_id, before, config.stop_entropy
                    )
                capped = config.max_block_steps is not None and step_in_block + 1 >= config.max_block_steps
                if settled or capped:
                    pick = torch.arange(len(rows), device=rows.device)
                    tokens = row_candidates.argmax(dim=-1)
                elif config.rule == "schedule":
                    count = plan[step_in_block] if step_in_block < len(plan) else len(rows)
                    pick = commit_top(scores, count)
                elif config.rule == "threshold":
                    pick = commit_threshold(chosen_probability(probs, tokens), scores, config.threshold)
                else:
                    pick = commit_entropy_bound(entropy(probs), config.entropy_bound)
                if config.hold_conflicts and not (settled or capped) and config.rule != "schedule":
                    pick = hold_back(rows, tokens, pick, ends)
            positions = rows[pick] + s
            canvas[positions] = tokens[pick]
            is_masked[positions] = False
            step_in_block += 1

            # 4) the answer ends at its first end (or pad) token: what follows is padding, as in training,
            # so those positions need no passes and the loop stops once the rest is filled
            if config.stop_at_eos:
                hits = (torch.isin(canvas[start:], ends) & ~is_masked[start:]).nonzero()
                if len(hits):
                    rest = is_masked.clone()
                    rest[: start + int(hits[0]) + 1] = False
                    canvas[rest] = facts.pad_id
                    is_masked[rest] = False
            left = int(is_masked[start:].sum())
            yield Step(
                canvas=canvas.to("cpu", copy=True),  # a snapshot: the loop keeps writing
                committed=positions.cpu(),
                scores=scores[pick].float().cpu(),
                block=(s, e),
                forward=forward,
                input_tokens=fed,
                masked=left,
                done=left == 0,
                renoised=len(rows) if renoiser is not None else 0,
                rows=len(feed),
            )


def final(steps: Iterator[Step]) -> Step | None:
    """Drain the generator; the last step holds the finished canvas (None if nothing was masked)."""
    last = None
    for step in steps:
        last = step
    return last
