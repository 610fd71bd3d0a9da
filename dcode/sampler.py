"""The one sampling loop: denoise() yields a Step per forward pass.

Pure tensor code: takes a denoiser (see dcode.models.base) and a canvas of token ids in which some
positions are still to fill (by default those holding the mask token), and fills them block by
block. A masked-diffusion model sees those positions as masks; a uniform-noise model
(DiffusionGemma) sees them as random tokens, re-noised before every pass, and may be fed the
previous pass's logits. Knows nothing about tokenizers, tree-sitter, files or the terminal. The
CLI, the live view, the repair pass, the benchmarks and the tests all consume this generator;
"just the result" is final(denoise(...)).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import cast

import torch

from dcode.config import SamplerConfig
from dcode.models.base import Denoiser, UniformDenoiser, WindowDenoiser


@dataclass(frozen=True)
class Step:
    canvas: torch.Tensor  # (L,) token ids after this pass (on the CPU)
    committed: torch.Tensor  # (n,) canvas positions filled by this pass
    scores: torch.Tensor  # (n,) their ordering scores (higher = more certain)
    block: tuple[int, int]  # the block being decoded, [start, end)
    forward: int  # forward passes so far, this one included
    input_tokens: int  # tokens fed to this forward pass (less than L with the cache)
    masked: int  # positions left to fill after this pass (they hold the mask id in `canvas`)
    done: bool  # nothing is left to fill
    renoised: int = 0  # positions fed as fresh random tokens to this pass (uniform-noise models)


# ---------------------------------------------------------------------------------------------
# Token choice and certainty: pure functions over (N, V) logits of the masked positions.


def top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Nucleus filtering (Holtzman et al. 2020): keep the smallest set of tokens whose probability
    reaches top_p, set the rest to -inf. logits (N, V) -> (N, V)."""
    if top_p >= 1.0:
        return logits
    ordered, index = logits.sort(dim=-1, descending=True)
    cumulative = ordered.softmax(dim=-1).cumsum(dim=-1)
    drop = cumulative - ordered.softmax(dim=-1) >= top_p  # the top token is always kept
    ordered = ordered.masked_fill(drop, float("-inf"))
    return torch.full_like(logits, float("-inf")).scatter(-1, index, ordered)


def choose_tokens(
    logits: torch.Tensor, temperature: float, top_p: float, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick a token per row. Returns tokens (N,) and the distribution they came from (N, V).

    temperature 0 is argmax; otherwise Gumbel-max in float64 (LLaDA: low-precision Gumbel noise
    hurts quality): argmax(l / T + g), g = -log(-log u), which samples softmax(l / T).
    """
    logits = logits.double()  # (N, V)
    if temperature == 0:
        return logits.argmax(dim=-1), logits.softmax(dim=-1)
    scaled = top_p_filter(logits / temperature, top_p)  # temperature first, then nucleus (as HF/Dream)
    u = torch.rand(scaled.shape, generator=gen, dtype=torch.float64).to(scaled.device)
    gumbel = -torch.log(-torch.log(u.clamp_min(1e-300)))
    return (scaled + gumbel).argmax(dim=-1), scaled.softmax(dim=-1)


def entropy(probs: torch.Tensor) -> torch.Tensor:
    """Shannon entropy in nats per row. probs (N, V) -> (N,)."""
    return -(probs * probs.clamp_min(1e-30).log()).sum(dim=-1)


def chosen_probability(probs: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    return probs.gather(-1, tokens[:, None])[:, 0]  # (N,)


def score_confidence(probs: torch.Tensor, tokens: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    return chosen_probability(probs, tokens)


def score_margin(probs: torch.Tensor, tokens: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    top2 = probs.topk(2, dim=-1).values  # (N, 2)
    return top2[:, 0] - top2[:, 1]


def score_entropy(probs: torch.Tensor, tokens: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    return -entropy(probs)


def score_random(probs: torch.Tensor, tokens: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    return torch.rand(len(tokens), generator=gen, dtype=torch.float64).to(probs.device)


SCORES: dict[str, Callable[[torch.Tensor, torch.Tensor, torch.Generator], torch.Tensor]] = {
    "confidence": score_confidence,
    "margin": score_margin,
    "entropy": score_entropy,
    "random": score_random,
}


# ---------------------------------------------------------------------------------------------
# Commit rules: which of the N candidate rows to fill this pass. Each returns row indices.


def penalize_repeats(logits: torch.Tensor, seen: torch.Tensor, penalty: float) -> torch.Tensor:
    """CTRL's repetition penalty (Keskar et al. 2019, eq. 2 as llama.cpp applies it): the logits
    (n, V) of the token ids in `seen` (k,) divided by `penalty` where positive, multiplied where
    negative, so the repeat always gets less likely. Example: penalty 2: [4, -1] -> [2, -2]."""
    if penalty == 1.0 or len(seen) == 0:
        return logits
    ids = seen.unique()
    picked = logits[:, ids]
    logits[:, ids] = torch.where(picked > 0, picked / penalty, picked * penalty)
    return logits


def schedule_counts(masked: int, steps: int) -> list[int]:
    """LLaDA's fixed schedule: split `masked` tokens evenly over `steps` passes, remainder first.
    Example: schedule_counts(10, 4) -> [3, 3, 2, 2]."""
    steps = max(1, min(steps, masked))
    base, extra = divmod(masked, steps)
    return [base + (1 if i < extra else 0) for i in range(steps)]


def commit_top(scores: torch.Tensor, count: int) -> torch.Tensor:
    """The `count` rows with the highest score."""
    return scores.topk(min(count, len(scores))).indices


def commit_threshold(probability: torch.Tensor, scores: torch.Tensor, tau: float) -> torch.Tensor:
    """Fast-dLLM: every row whose chosen-token probability is >= tau; if none, the best-scored
    row alone, so the loop never stalls."""
    above = (probability >= tau).nonzero()[:, 0]
    return above if len(above) else scores.argmax()[None]


def commit_entropy_bound(entropies: torch.Tensor, gamma: float) -> torch.Tensor:
    """EB-sampler: sort by entropy ascending, accept the largest k with
    sum(H_1..H_k) - max(H_1..H_k) <= gamma (always at least one)."""
    ordered, index = entropies.sort()
    slack = ordered.cumsum(0) - ordered.cummax(0).values
    k = int((slack <= gamma).sum().clamp_min(1))
    return index[:k]


def hold_back(rows: torch.Tensor, tokens: torch.Tensor, pick: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
    """Drop from one pass's commits the two conflicts parallel decoding is known for, so they are
    decided again next pass with their neighbours in view: a token equal to the one this pass
    writes just left of it ("the the", "namename"; padding excepted), and an end token with a
    position before it that this pass leaves unfilled (code cut off mid-line, since everything
    after an end is padding).

    rows (N,) ascending block offsets still to fill (N >= 1), tokens (N,) their chosen ids, pick
    (k,) the row indices a commit rule chose, ends (m,) the end and padding ids. Returns the kept
    row indices, ascending and never empty: if everything was held back, the leftmost row, which
    can conflict with nothing (an end there ends the answer where the model puts it).
    Example: rows [0, 1, 2], tokens [a, a, EOS], pick [0, 1, 2] -> [0] (row 1 repeats row 0;
    row 2 ends the answer after row 1, which now stays masked)."""
    chosen = torch.zeros(len(rows), dtype=torch.bool, device=rows.device)
    chosen[pick] = True
    is_end = torch.isin(tokens, ends)
    twin = chosen[1:] & chosen[:-1] & (rows[1:] == rows[:-1] + 1) & (tokens[1:] == tokens[:-1])
    chosen[1:] &= ~(twin & ~is_end[1:])  # a run of padding is how an answer ends
    gap = (~chosen).cumsum(0) > 0  # at a chosen row: some row to its left stays unfilled
    chosen &= ~(is_end & gap)
    if not chosen.any():
        chosen[0] = True  # nothing before it is unfilled and nothing beside it is written now
    return chosen.nonzero()[:, 0]


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
    if fill is not None and fill.shape != canvas.shape:
        raise ValueError(f"fill must have the canvas's shape {tuple(canvas.shape)}, got {tuple(fill.shape)}")
    gen = torch.Generator().manual_seed(config.seed)
    score = SCORES[config.ordering]
    aligned = facts.block is not None and renoiser is None
    size = facts.block or config.block or max(1, length - start)
    cache = model.new_cache() if config.cache else None
    # Fast-dLLM's approximate cache where no exact one exists (full attention; an optional method).
    windowed = cast(WindowDenoiser, model)
    approx = config.cache and cache is None and renoiser is None and config.approx_cache != "off"
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
        step_in_block = 0
        while bool(is_masked[s:e].any()):
            temperature = linear_temperature(config.temperature, config.cooling, step_in_block, horizon)
            rows = is_masked[s:e].nonzero()[:, 0]  # block offsets of the positions to fill
            # 1) forward: with a cache only the uncached stretch up to this block's end
            if renoiser is not None:
                # The context goes into the cache once, clean (without a cache: every pass, afresh);
                # the block goes in alone, its unfilled positions re-noised.
                context = cache if cache is not None else renoiser.new_cache()
                c = context.length
                if c < s:
                    renoiser.extend(canvas[None, c:s], context)
                noisy = canvas[s:e].clone()
                noisy[rows] = uniform_noise(len(rows), facts.vocab_size, facts.mask_id, gen).to(device)
                logits = renoiser(noisy[None], context, previous=previous)[0]  # (e-s, V)
                previous = (logits / temperature if temperature > 0 else logits)[None]
                fed = e - c
            elif cache is not None:
                c = cache.length
                out = model(canvas[None, c:e], cache)[0]  # (e-c, V)
                cache.crop(a)  # keep finished blocks only
                fed = e - c
                if facts.shifted:
                    if c <= s - 1:
                        carry = out[s - 1 - c]
                    assert carry is not None
                    logits = torch.cat([carry[None], out[s - c : e - c - 1]])  # rows for s..e-1
                else:
                    logits = out[s - c : e - c]
            elif window_cache is not None and step_in_block > 0:
                # Fast-dLLM: the window alone, every other position read from the block's first pass.
                # Its rows from lo on predict s..e-1 (a shifted model's row s-1 predicts s).
                window = window_cache.window
                logits = windowed.window(canvas[None, window[0] : window[1]], window_cache)[0][: e - s]  # (e-s, V)
                fed = window[1] - window[0]
            else:
                if window_cache is not None:  # the block's first pass: the whole canvas, cached but the window
                    lo = s - 1 if facts.shifted else s
                    hi = e if config.approx_cache == "dual" else length
                    out = windowed.refresh(canvas[None], (lo, hi), window_cache)[0]  # (L, V)
                else:
                    out = model(canvas[None], None)[0]  # (L, V)
                fed = length
                logits = out[s - 1 : e - 1] if facts.shifted else out[s:e]
            forward += 1

            # 2) a token and a score for every position of the block still to fill
            candidates = logits[rows]
            candidates[:, facts.mask_id] = float("-inf")  # a mask is never an answer
            candidates[:, banned] = float("-inf")
            if config.repetition_penalty != 1.0:
                recent = canvas[max(start, s - config.repetition_window) : e]
                seen = recent[~is_masked[max(start, s - config.repetition_window) : e]]
                seen = seen[~torch.isin(seen, ends)]  # an end or padding is not a repeat
                candidates = penalize_repeats(candidates, seen, config.repetition_penalty)
            tokens, probs = choose_tokens(candidates, temperature, config.top_p, gen)
            scores = score(probs, tokens, gen)

            # 3) commit some of them; all of them, greedily, on the block's last allowed pass or
            # once it is stable and confident
            settled = False
            if config.stop_entropy > 0:
                settled, before = stable_and_confident(logits, temperature, facts.mask_id, before, config.stop_entropy)
            capped = config.max_block_steps is not None and step_in_block + 1 >= config.max_block_steps
            if settled or capped:
                pick = torch.arange(len(rows), device=rows.device)
                tokens = candidates.argmax(dim=-1)
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
            )


def final(steps: Iterator[Step]) -> Step | None:
    """Drain the generator; the last step holds the finished canvas (None if nothing was masked)."""
    last = None
    for step in steps:
        last = step
    return last
