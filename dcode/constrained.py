"""Constrained commits, for dcode.passes: a grammar (dcode.grammar_tokens.GrammarConstraint, or any
object with the Constraint protocol) decides which of a pass's proposals the sampler may commit.

Grammar engines mask the *next* token of a left-to-right prefix; a diffusion pass proposes tokens
anywhere in the block. They meet at the frontier (the first answer position still open): the
committed answer is a prefix the grammar has read left to right. A commit-rule pass (1) commits
the tokens the grammar forces next (a schema's fixed keys), (2) chooses the frontier's token from
the grammar's mask, so every pass commits at least one token, and (3) commits the proposals right
of it that the commit rule picked while they continue an unbroken run from the frontier and the
grammar accepts each in order; the rest stay open, proposals for later passes, like the verify
rule's drafts. Under the verify rule every row's choice is masked by the grammar after the drafts
before it, so a verify pass commits what a constrained left-to-right loop, one token a pass,
would; and the drafts themselves are made under the grammar (grammar_drafts: the tokens it forces,
else a choice from its mask after the drafts before), so no draft is one the grammar refuses.
Token editing is off under a constraint: it rewrites tokens the grammar has already read.

Pure tensor code over logits and the protocol; knows nothing about tokenizers or llguidance.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch


class Constraint(Protocol):
    """A grammar fed the committed answer left to right (dcode.grammar_tokens.GrammarConstraint)."""

    def allowed(self, room: int | None = None) -> torch.Tensor:
        """(V,) bool: the tokens allowed next (end ids only where the grammar may stop); with
        `room` answer positions left, it may prefer the tokens that close what is open."""
        ...

    def begin(self, room: int) -> None:
        """The answer's room (positions to fill) before the first pass."""
        ...

    def closing(self, room: int) -> bool:
        """Whether `room` positions left are so few that only the frontier is committed, closing."""
        ...

    def accept(self, tokens: list[int]) -> int:
        """Consume the longest prefix of `tokens` the grammar allows in order; its length."""
        ...

    def forced(self) -> list[int]:
        """The tokens the grammar forces next (possibly none)."""
        ...

    def fork(self) -> Constraint:
        """A copy at the same point, to try drafts on."""
        ...

    @property
    def finished(self) -> bool: ...

    @property
    def complete(self) -> bool: ...


def mask_logits(logits: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """logits (V,) with the tokens `allowed` (V,) does not allow at -inf. Where the other filters
    (an end held back by min_tokens, a banned id) left nothing allowed, the grammar wins: its
    tokens, equally likely. Example: [1, 2, 3], allowed [T, F, T] -> [1, -inf, 3]."""
    allowed = allowed.to(logits.device)[: len(logits)]  # ids past the tokenizer's: never allowed
    if len(allowed) < len(logits):
        allowed = torch.cat([allowed, allowed.new_zeros(len(logits) - len(allowed))])
    masked = logits.masked_fill(~allowed, float("-inf"))
    if bool(torch.isinf(masked).all()):
        masked = torch.zeros_like(logits).masked_fill(~allowed, float("-inf"))
    return masked


def frontier_rows(constraint: Constraint, candidates: torch.Tensor, room: int) -> torch.Tensor:
    """Before a commit-rule pass chooses: the forced tokens (f,) it will commit at the block's first
    open offsets (consumed by the grammar now), and row f of candidates (n, V), the new frontier's,
    masked in place by the grammar (`room`: the answer's open positions, the frontier's included)."""
    forced = constraint.forced()[: len(candidates)]
    taken = constraint.accept(forced)
    assert taken == len(forced), "the grammar refused the tokens it forces"
    if len(forced) < len(candidates):
        candidates[len(forced)] = mask_logits(candidates[len(forced)], constraint.allowed(room - len(forced)))
    return torch.tensor(forced, dtype=torch.long, device=candidates.device)


def constrained_pick(
    constraint: Constraint, forced: torch.Tensor, tokens: torch.Tensor, picked: torch.Tensor, closing: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """What a commit-rule pass commits under a grammar: the forced tokens (f,), the frontier's
    (row f, chosen from the mask), and the rows right of it that the rule `picked` (k,) while they
    run on unbroken and the grammar accepts each in order. tokens (n,) the pass's choices.
    Returns the rows to commit (0..m-1) and the tokens (n,) with the forced ones in place. Short
    of room (`closing`), the frontier alone: the tokens right of it were not chosen to close.
    Example: forced [], picked [0, 1, 3], grammar accepting rows 0 and 1 -> rows [0, 1]."""
    f, n = len(forced), len(tokens)
    tokens = tokens.clone()
    tokens[:f] = forced.to(tokens.dtype)
    if f == n:
        return torch.arange(n, device=tokens.device), tokens
    chosen = torch.zeros(n, dtype=torch.bool, device=tokens.device)
    chosen[picked] = True
    chosen[f] = True  # the frontier: every pass commits it
    run = 1 if closing else int(chosen[f:].long().cumprod(0).sum())  # rows f.. picked without a gap
    taken = constraint.accept(tokens[f : f + run].tolist())
    return torch.arange(f + max(taken, 0), device=tokens.device), tokens


def row_masks(constraint: Constraint, drafted: torch.Tensor, rows: int, room: int) -> list[torch.Tensor | None]:
    """The verify rule's masks (V,) per row: row r was fed drafted[:r] (k,), so its choice is masked
    by the grammar after them (with room - r answer positions left). Rows after a draft the
    grammar refuses get None: none of them can be confirmed (the refused draft's row chooses
    something else)."""
    fork = constraint.fork()  # (allowed(room) decides closing at each row's position, on its fork)
    masks: list[torch.Tensor | None] = [fork.allowed(room)]
    for r, token in enumerate(drafted.tolist()[: rows - 1], start=1):
        if fork.accept([int(token)]) != 1:
            break
        masks.append(fork.allowed(room - r))
    return masks + [None] * (rows - len(masks))


def valid_drafts(constraint: Constraint, drafted: torch.Tensor) -> torch.Tensor:
    """The leading drafts (k,) the grammar accepts in order: a row fed a draft it refuses could
    confirm nothing, so it is not fed (the verify rule's answer never depends on its drafts)."""
    return drafted[: constraint.fork().accept(drafted.tolist())]


def masked_rows(firsts: list[torch.Tensor], masks: list[torch.Tensor | None]) -> list[torch.Tensor]:
    """The verify rows' candidate logits (1, V) each, masked where row_masks gave a mask."""
    pairs = zip(firsts, masks, strict=True)
    return [first if mask is None else mask_logits(first[0], mask)[None] for first, mask in pairs]


def consume_commit(constraint: Constraint, tokens: torch.Tensor, room: int) -> None:
    """Feed the grammar a verify commit (k,): each token was chosen under its row's mask, short of
    room (closing) decided at its position (`room`: the answer's open positions at the first), as
    its row decided it."""
    for r, token in enumerate(tokens.tolist()):
        constraint.closing(room - r)
        assert constraint.accept([token]) == 1, "a verify commit the grammar refuses"


def grammar_drafts(
    fork: Constraint, logits: torch.Tensor, room: int, choose: Callable[[torch.Tensor, int], tuple[int, float]]
) -> tuple[torch.Tensor, torch.Tensor]:
    """The verify rule's drafts for consecutive open offsets under a grammar, and the probability
    of each (k,): at each, the token the grammar forces (probability 1), else choose(logits (V,)
    masked by the grammar after the drafts before, row) -> (token, probability). logits (k, V) the
    drafting row's; `fork` (a copy of the grammar) is fed each draft; `room`: the answer positions
    open at the first, as the verify row that checks it will count them. Past a draft the grammar
    cannot take (it has ended), probability 0: undrafted.
    Example: forced `{"` then free: drafts [`{"`, the masked choice, ...]."""
    tokens = torch.zeros(len(logits), dtype=torch.long)
    chances = torch.zeros(len(logits), dtype=torch.float64)
    for r in range(len(logits)):
        forced = fork.forced()[:1]
        token, chance = (forced[0], 1.0) if forced else choose(mask_logits(logits[r], fork.allowed(room - r)), r)
        if fork.accept([token]) != 1:
            break
        tokens[r], chances[r] = token, chance
    return tokens.to(logits.device), chances.to(logits.device)
