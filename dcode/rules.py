"""Logit filters, token choice and commit rules: pure functions over one pass's logits, which the
sampling loop (dcode.sampler.denoise) applies. Knows nothing of models, blocks or caches: each
takes the rows (positions still to fill) of one pass and returns filtered logits, tokens, scores
or the rows to commit. The filters, like transformers' logits processors, each take logits
(N, V) and return new ones: suppress_tokens, penalize_repeats, top_p_filter.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

# ---------------------------------------------------------------------------------------------
# Logit filters: (N, V) logits in, new (N, V) logits out; the input is never written.


def suppress_tokens(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """The token ids (k,) made impossible (-inf) in every row of logits (N, V): the mask id (a
    mask is never an answer) and the ids a caller bans. Example: ids [1]: [[2, 5, 3]] -> [[2, -inf, 3]]."""
    return logits.index_fill(-1, ids, float("-inf"))


def penalize_repeats(logits: torch.Tensor, seen: torch.Tensor, penalty: float) -> torch.Tensor:
    """CTRL's repetition penalty (Keskar et al. 2019, eq. 2 as llama.cpp applies it): the logits
    (n, V) of the token ids in `seen` (k,) divided by `penalty` where positive, multiplied where
    negative, so the repeat always gets less likely. Example: penalty 2: [4, -1] -> [2, -2]."""
    if penalty == 1.0 or len(seen) == 0:
        return logits
    ids = seen.unique()
    picked = logits[:, ids]
    penalized = logits.clone()
    penalized[:, ids] = torch.where(picked > 0, picked / penalty, picked * penalty)
    return penalized


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


# ---------------------------------------------------------------------------------------------
# Token choice and certainty: pure functions over (N, V) logits of the masked positions.


def gumbel_noise(shape: tuple[int, ...], gen: torch.Generator, device: torch.device) -> torch.Tensor:
    """Standard Gumbel noise in float64 (LLaDA: low-precision noise hurts quality): -log(-log u)."""
    u = torch.rand(shape, generator=gen, dtype=torch.float64).to(device)
    return -torch.log(-torch.log(u.clamp_min(1e-300)))


def choose_tokens(
    logits: torch.Tensor, temperature: float, top_p: float, gen: torch.Generator, noise: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick a token per row. Returns tokens (N,) and the distribution they came from (N, V).

    temperature 0 is argmax; otherwise Gumbel-max: argmax(l / T + g), which samples softmax(l / T),
    with g (N, V) from `noise` if given (the verify rule keeps one draw per position), else drawn.
    """
    logits = logits.double()  # (N, V)
    if temperature == 0:
        return logits.argmax(dim=-1), logits.softmax(dim=-1)
    scaled = top_p_filter(logits / temperature, top_p)  # temperature first, then nucleus (as HF/Dream)
    g = gumbel_noise(tuple(scaled.shape), gen, scaled.device) if noise is None else noise
    return (scaled + g).argmax(dim=-1), scaled.softmax(dim=-1)


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
    keep = torch.zeros(len(rows), dtype=torch.bool, device=rows.device)
    keep[pick] = True
    is_end = torch.isin(tokens, ends)
    twin = keep[1:] & keep[:-1] & (rows[1:] == rows[:-1] + 1) & (tokens[1:] == tokens[:-1])
    keep[1:] &= ~(twin & ~is_end[1:])  # a run of padding is how an answer ends
    gap = (~keep).cumsum(0) > 0  # at a kept row: some row to its left stays unfilled
    keep &= ~(is_end & gap)
    if not keep.any():
        keep[0] = True  # nothing before it is unfilled and nothing beside it is written now
    return keep.nonzero()[:, 0]


def commit_edits(probability: torch.Tensor, tokens: torch.Tensor, current: torch.Tensor, tau: float) -> torch.Tensor:
    """LLaDA2.1's token-to-token editing (arXiv 2602.08676; the rule of its generate(), as
    ZHZisZZ/dllm dllm/pipelines/llada21/sampler.py at ca176752 and SGLang's
    dllm/algorithm/joint_threshold.py write it): of the positions an earlier pass wrote, replace
    those whose chosen token differs from the one there and is more probable than tau (strictly).
    probability (N,) and tokens (N,) are this pass's choices, current (N,) what the canvas holds.
    Returns the row indices to rewrite (possibly none).
    Example: probability [0.95, 0.99, 0.4], tokens [a, b, c], current [x, b, y], tau 0.9 -> [0]."""
    return ((probability > tau) & (tokens != current)).nonzero()[:, 0]


def draft_rows(canvas: torch.Tensor, positions: torch.Tensor, drafted: torch.Tensor) -> torch.Tensor:
    """The verify rule's batch: canvas (L,) repeated k + 1 times, row r holding drafted[:r] (k,) at
    positions[:r] (k,) and the rest as it was (masked). -> (k + 1, L)
    Example: positions [4, 6], drafted [a, b] -> rows with nothing, a at 4, a at 4 and b at 6."""
    k = len(positions)
    feed = canvas.repeat(k + 1, 1)
    filled = torch.arange(k + 1, device=canvas.device)[:, None] > torch.arange(k, device=canvas.device)[None]
    feed[:, positions] = torch.where(filled, drafted[None], feed[:, positions])
    return feed


def checked_drafts(drafts: torch.Tensor, limit: int, undrafted: int, ends: torch.Tensor) -> torch.Tensor:
    """The leading drafts (k,) a verify pass checks, of a block's drafts in order (n,): at most
    `limit`, none from the first position left undrafted (the `undrafted` id) on, and none after
    an end token (everything after it is padding).
    Example: drafts [a, END, b], limit 8 -> [a, END]; drafts [a, -, b] -> [a]."""
    drafts = drafts[:limit]
    stop = (drafts == undrafted) | torch.isin(drafts, ends)
    if not bool(stop.any()):
        return drafts
    first = int(stop.nonzero()[0])
    return drafts[: first + (0 if bool(drafts[first] == undrafted) else 1)]


def verified_run(choices: torch.Tensor, drafted: torch.Tensor) -> int:
    """How many drafted tokens a verify pass confirms: row r was fed drafted[:r] and chose
    choices[r] for the next position, so drafted[r] stands if it is what row r chose, and the run
    stops at the first that is not. choices (k + 1,), drafted (k,).
    Example: drafted [a, b, c], choices [a, b, x, y] -> 2: commit a, b, and x (row 2's choice)."""
    return int((choices[:-1] == drafted).long().cumprod(0).sum())
