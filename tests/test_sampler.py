"""Sampler invariants over a grid of settings, equivalence with a short reference loop, and the
pure helpers. Every run drives the real denoise() generator with the FakeDenoiser from conftest,
whose logits the tests recompute to check each pass's choices."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import torch
from conftest import FakeDenoiser

from dcode import models
from dcode.config import ORDERINGS, SamplerConfig
from dcode.events import drain
from dcode.forward import ApproxWindow, FullCanvas, PackedRows, UniformNoise, choose_forward
from dcode.rules import (
    checked_drafts,
    commit_entropy_bound,
    draft_rows,
    hold_back,
    penalize_repeats,
    schedule_counts,
    suppress_tokens,
    top_p_filter,
    verified_run,
)
from dcode.sampler import Step, block_spans, denoise, trim_answer

V, MASK, EOS, PAD = 50, 49, 1, 0
START, ANSWER = 5, 16  # a prompt of 5 tokens: not a multiple of any block below
LENGTH = START + ANSWER
CERTAIN = {p: 7 + p % 5 for p in range(START, LENGTH) if p % 3 == 0}  # positions the fake is sure of

# name -> (fake's attention block, SamplerConfig.block, shifted, the blocks the sampler must walk)
LAYOUTS = {
    "one-block": (None, None, False, [(5, 21)]),
    "semi-ar-4": (None, 4, False, [(5, 9), (9, 13), (13, 17), (17, 21)]),
    "block-causal-4": (4, None, False, [(5, 8), (8, 12), (12, 16), (16, 20), (20, 21)]),
    "block-causal-4-shifted": (4, 8, True, [(5, 8), (8, 12), (12, 16), (16, 20), (20, 21)]),
}
RULE_SETTINGS = {
    "schedule": {"steps": 6},
    "threshold": {"threshold": 0.6},
    "entropy-bound": {"entropy_bound": 0.1},
}


def make_fake(layout: str, **kwargs) -> FakeDenoiser:
    block, _, shifted, _ = LAYOUTS[layout]
    return FakeDenoiser(
        vocab_size=V, mask_id=MASK, eos_ids=frozenset({EOS}), pad_id=PAD, block=block, shifted=shifted, **kwargs
    )


def answer_canvas(start: int = START, length: int = LENGTH) -> torch.Tensor:
    return torch.tensor([3 + i % 40 for i in range(start)] + [MASK] * (length - start))


@dataclass(frozen=True)
class Pass:
    before: torch.Tensor  # (L,) canvas the forward pass saw
    step: Step
    after: torch.Tensor  # (L,) canvas after the pass


def run(model: FakeDenoiser, canvas: torch.Tensor, start: int, config: SamplerConfig) -> list[Pass]:
    """Drain denoise(), snapshotting the canvas as each step arrives."""
    passes, before = [], canvas.clone()
    for step in denoise(model, canvas, start, config):
        after = step.canvas.clone()
        passes.append(Pass(before, step, after))
        before = after
    return passes


def distributions(model: FakeDenoiser, before: torch.Tensor, positions: torch.Tensor, temperature: float):
    """The distributions the sampler drew the tokens at `positions` from, (n, V) float64."""
    logits = model.logits(before[None])[0].double()  # (L, V)
    rows = logits[positions - 1 if model.facts.shifted else positions]
    return (rows / temperature if temperature else rows).softmax(-1)


def entropies(probs: torch.Tensor) -> torch.Tensor:
    return -(probs * probs.clamp_min(1e-30).log()).sum(-1)


def order_scores(probs: torch.Tensor, ordering: str) -> torch.Tensor:
    """Scores the sampler ranks by; confidence here assumes the argmax token (temperature 0)."""
    if ordering == "margin":
        top2 = probs.topk(2, dim=-1).values
        return top2[:, 0] - top2[:, 1]
    if ordering == "entropy":
        return -entropies(probs)
    return probs.max(-1).values


# ---------------------------------------------------------------------------------------------
# Invariants every setting keeps


def check_common(model: FakeDenoiser, canvas: torch.Tensor, start: int, passes: list[Pass], spans) -> None:
    assert passes, "a canvas with masks takes at least one pass"
    assert model.forwards == len(passes)
    seen_blocks = []
    for i, p in enumerate(passes):
        s, e = p.step.block
        assert p.step.block in spans
        if not seen_blocks or seen_blocks[-1] != p.step.block:
            seen_blocks.append(p.step.block)
        assert p.step.forward == i + 1
        assert p.step.input_tokens == len(canvas) * p.step.rows  # the fake makes no cache
        placed = p.step.committed
        assert len(placed) >= 1 and len(set(placed.tolist())) == len(placed)
        # Only the current block is written, and only where a mask was.
        assert ((placed >= s) & (placed < e)).all(), (placed, p.step.block)
        assert (p.before[placed] == MASK).all()
        assert (p.after[placed] != MASK).all()
        assert len(p.step.scores) == len(placed)
        # Blocks to the left are finished before a block is touched.
        assert not (p.before[start:s] == MASK).any()
        # Nothing else changes: no mask reappears, no committed token moves; padding after the
        # answer's first end (EOS or pad) token is the one exception.
        changed = set((p.before != p.after).nonzero()[:, 0].tolist())
        padded = changed - set(placed.tolist())
        if padded:
            ends = ((p.after[start:] == EOS) | (p.after[start:] == PAD)).nonzero()[:, 0] + start
            assert len(ends) and min(padded) > int(ends[0])
            assert all(p.before[j] == MASK and p.after[j] == PAD for j in padded)
        left_before = int((p.before[start:] == MASK).sum())
        left_after = int((p.after[start:] == MASK).sum())
        assert left_after < left_before
        assert p.step.masked == left_after
        assert p.step.done == (left_after == 0)
    assert seen_blocks == sorted(seen_blocks), "blocks go left to right, each once"
    last = passes[-1]
    assert last.step.done and not (last.after == MASK).any()
    assert torch.equal(last.after[:start], canvas[:start])


def check_schedule(model, passes: list[Pass], config: SamplerConfig) -> None:
    # Within each block the masks are split evenly over its passes, remainder first (LLaDA).
    by_block: dict[tuple[int, int], list[Pass]] = {}
    for p in passes:
        by_block.setdefault(p.step.block, []).append(p)
    for (s, e), group in by_block.items():
        in_block = int((group[0].before[s:e] == MASK).sum())
        counts = [len(p.step.committed) for p in group]
        assert counts == schedule_counts(in_block, len(counts))
    check_ranked(model, passes, config)


def check_ranked(model, passes: list[Pass], config: SamplerConfig) -> None:
    """The committed positions are the best-scored masked positions of the block."""
    if config.ordering == "random" or (config.ordering == "confidence" and config.temperature > 0):
        return  # scores of the positions left masked are not recomputable here
    for p in passes:
        s, e = p.step.block
        candidates = (p.before[s:e] == MASK).nonzero()[:, 0] + s
        scores = order_scores(distributions(model, p.before, candidates, config.temperature), config.ordering)
        where = {int(c): i for i, c in enumerate(candidates)}
        reported = scores[[where[int(c)] for c in p.step.committed]]
        assert torch.allclose(p.step.scores.double(), reported, atol=1e-5)  # Step.scores are these
        chosen = torch.isin(candidates, p.step.committed)
        if (~chosen).any():
            assert scores[chosen].min() >= scores[~chosen].max() - 1e-9


def check_threshold(model, passes: list[Pass], config: SamplerConfig) -> None:
    tau = config.threshold
    for p in passes:
        placed = p.step.committed
        probs = distributions(model, p.before, placed, config.temperature)
        chosen = probs.gather(-1, p.after[placed][:, None])[:, 0]  # probability of the placed token
        if len(placed) > 1:
            assert (chosen >= tau).all(), (chosen, tau)
        if config.temperature == 0:
            # Greedy: exactly the positions whose argmax probability reaches tau, else the best one.
            s, e = p.step.block
            candidates = (p.before[s:e] == MASK).nonzero()[:, 0] + s
            top = distributions(model, p.before, candidates, 0).max(-1).values
            sure = set(candidates[top >= tau].tolist())
            assert (set(placed.tolist()) == sure) if sure else (len(placed) == 1)
    assert any(len(p.step.committed) > 1 for p in passes), "the certain positions go in together"
    check_ranked(model, [p for p in passes if len(p.step.committed) == 1 and not _any_sure(model, p, config)], config)


def _any_sure(model, p: Pass, config: SamplerConfig) -> bool:
    placed = p.step.committed
    probs = distributions(model, p.before, placed, config.temperature)
    return bool((probs.gather(-1, p.after[placed][:, None]) >= config.threshold).any())


def check_entropy_bound(model, passes: list[Pass], config: SamplerConfig) -> None:
    gamma = config.entropy_bound
    for p in passes:
        s, e = p.step.block
        candidates = (p.before[s:e] == MASK).nonzero()[:, 0] + s
        h = entropies(distributions(model, p.before, candidates, config.temperature))
        chosen = torch.isin(candidates, p.step.committed)
        taken, rest = h[chosen], h[~chosen]
        # EB-sampler: the lowest-entropy positions, as many as keep sum - max <= gamma.
        assert taken.sum() - taken.max() <= gamma + 1e-9 or len(taken) == 1
        if len(rest):
            assert taken.max() <= rest.min() + 1e-9
            grown = torch.cat([taken, rest.min()[None]])
            assert grown.sum() - grown.max() > gamma - 1e-9
    assert any(len(p.step.committed) > 1 for p in passes), "the certain positions go in together"


CHECKS = {"schedule": check_schedule, "threshold": check_threshold, "entropy-bound": check_entropy_bound}


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("temperature", [0.0, 0.7])
@pytest.mark.parametrize("ordering", ORDERINGS)
@pytest.mark.parametrize("rule", list(RULE_SETTINGS))
def test_invariants(rule: str, ordering: str, temperature: float, layout: str) -> None:
    # The fake never ends the answer here (no EOS, no pad), so every rule runs the whole canvas;
    # ending early is tested on its own below.
    model = make_fake(layout, force=CERTAIN, suppress=frozenset({MASK, EOS, PAD}))
    config = SamplerConfig(
        rule=rule,
        ordering=ordering,
        temperature=temperature,
        block=LAYOUTS[layout][1],
        hold_conflicts=False,  # the rules alone; holding back is tested below
        **RULE_SETTINGS[rule],
    )
    canvas = answer_canvas()
    passes = run(model, canvas, START, config)
    check_common(model, canvas, START, passes, LAYOUTS[layout][3])
    CHECKS[rule](model, passes, config)
    assert torch.equal(canvas, answer_canvas()), "the caller's canvas is not modified"


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("ordering", ORDERINGS)
def test_schedule_without_steps_commits_one_token_per_pass(ordering: str, layout: str) -> None:
    model = make_fake(layout)
    config = SamplerConfig(rule="schedule", steps=None, ordering=ordering, block=LAYOUTS[layout][1], stop_at_eos=False)
    passes = run(model, answer_canvas(), START, config)
    assert [len(p.step.committed) for p in passes] == [1] * ANSWER
    assert model.forwards == ANSWER


@pytest.mark.parametrize(
    ("block", "steps", "counts"),
    [
        (None, 5, schedule_counts(16, 5)),  # [4, 3, 3, 3, 3]
        (4, 4, [4] * 4),
        (4, 8, [2] * 8),
        (4, 12, schedule_counts(4, 3) * 4),  # [2, 1, 1] per block
        (8, 6, schedule_counts(8, 3) * 2),
    ],
)
def test_schedule_spends_exactly_its_steps(block: int | None, steps: int, counts: list[int]) -> None:
    model = make_fake("one-block")
    config = SamplerConfig(rule="schedule", steps=steps, block=block, stop_at_eos=False)
    passes = run(model, answer_canvas(), START, config)
    assert [len(p.step.committed) for p in passes] == counts
    assert model.forwards == steps


# ---------------------------------------------------------------------------------------------
# Seeds


def answers(config: SamplerConfig, layout: str = "one-block") -> list[tuple[list[int], list[int]]]:
    passes = run(make_fake(layout), answer_canvas(), START, config)
    return [(p.step.committed.tolist(), p.after.tolist()) for p in passes]


@pytest.mark.parametrize("ordering", ["confidence", "random"])
def test_same_seed_same_output(ordering: str) -> None:
    config = SamplerConfig(rule="threshold", threshold=0.3, ordering=ordering, temperature=0.7, block=4, seed=11)
    assert answers(config) == answers(config)


def test_different_seeds_sample_different_answers() -> None:
    config = SamplerConfig(rule="schedule", steps=8, temperature=0.7, stop_at_eos=False)
    finals = {tuple(answers(replace(config, seed=seed))[-1][1]) for seed in range(6)}
    assert len(finals) == 6


def test_different_seeds_give_different_random_orders_at_temperature_zero() -> None:
    config = SamplerConfig(rule="schedule", steps=None, ordering="random", stop_at_eos=False)
    orders = {tuple(c for committed, _ in answers(replace(config, seed=seed)) for c in committed) for seed in range(4)}
    assert len(orders) == 4


# ---------------------------------------------------------------------------------------------
# Equivalence with an obviously-correct LLaDA-style loop


def reference_fixed_schedule(model: FakeDenoiser, canvas: torch.Tensor, start: int, block: int, steps: int):
    """LLaDA's generate(): per block, split its masks evenly over steps / blocks passes and
    commit the top-k masked positions of the block by probability of their argmax token."""
    x = canvas.clone()
    blocks = (len(x) - start) // block
    per_block = steps // blocks
    for b in range(blocks):
        lo, hi = start + b * block, start + (b + 1) * block
        n = int((x[lo:hi] == MASK).sum())
        for k in [n // per_block + (1 if i < n % per_block else 0) for i in range(per_block)]:
            logits = model(x[None])[0]  # (L, V)
            if model.facts.shifted:
                logits = torch.cat([logits[:1], logits[:-1]])  # Dream: row i-1 predicts position i
            probs = logits.double().softmax(-1)
            x0 = probs.argmax(-1)  # (L,)
            confidence = probs.gather(-1, x0[:, None])[:, 0]
            confidence[:lo] = float("-inf")
            confidence[hi:] = float("-inf")
            confidence[x != MASK] = float("-inf")
            pick = confidence.topk(k).indices
            x[pick] = x0[pick]
    return x


@pytest.mark.parametrize("shifted", [False, True], ids=["unshifted", "shifted"])
@pytest.mark.parametrize(
    ("fake_block", "start", "block", "steps"),
    [(None, 5, 4, 8), (None, 5, 4, 12), (None, 5, 8, 10), (None, 5, 16, 5), (4, 8, 4, 8)],
    ids=["semi-ar-4x2", "semi-ar-4x3", "semi-ar-8x5", "one-block", "block-causal"],
)
def test_fixed_schedule_matches_reference_loop(shifted, fake_block, start, block, steps) -> None:
    canvas = answer_canvas(start, start + 16)
    fake = FakeDenoiser(vocab_size=V, mask_id=MASK, shifted=shifted, block=fake_block, seed=4)
    config = SamplerConfig(rule="schedule", steps=steps, block=block, ordering="confidence", stop_at_eos=False)
    got = drain(denoise(fake, canvas, start, config))
    reference = FakeDenoiser(vocab_size=V, mask_id=MASK, shifted=shifted, block=fake_block, seed=4)
    want = reference_fixed_schedule(reference, canvas, start, block, steps)
    assert torch.equal(got.canvas, want)
    assert got.forward == fake.forwards == reference.forwards == steps


# ---------------------------------------------------------------------------------------------
# Holding back the commits that conflict within one pass

CONFLICTS = {8: 7, 9: 7, 14: EOS}  # a repeated token the fake is sure of, and an early end it is sure of


def conflicts(passes: list[Pass]) -> int:
    """Tokens a pass wrote beside the same token written in that pass, and end tokens a pass
    wrote while a position before them stayed masked."""
    found = 0
    for p in passes:
        placed = set(p.step.committed.tolist())
        found += sum(j + 1 in placed and bool(p.after[j] == p.after[j + 1]) for j in placed)
        found += sum(int(p.after[j]) in (EOS, PAD) and bool((p.after[START:j] == MASK).any()) for j in placed)
    return found


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("rule", ["threshold", "entropy-bound"])
def test_conflicting_commits_wait_for_the_next_pass(rule: str, layout: str) -> None:
    def passes(hold: bool) -> tuple[FakeDenoiser, list[Pass]]:
        model = make_fake(layout, force=CONFLICTS, suppress=frozenset({MASK, EOS, PAD}))
        config = SamplerConfig(rule=rule, block=LAYOUTS[layout][1], hold_conflicts=hold, **RULE_SETTINGS[rule])
        return model, run(model, answer_canvas(), START, config)

    model, held = passes(True)
    check_common(model, answer_canvas(), START, held, LAYOUTS[layout][3])
    assert conflicts(held) == 0
    assert held[-1].after[9] == 7 and held[-1].after[14] == EOS  # held back, then written
    assert conflicts(passes(False)[1]) > 0  # the same fake without holding writes them together


def test_hold_back() -> None:
    rows, ends = torch.tensor([0, 1, 2, 4, 5]), torch.tensor([EOS, PAD])
    a, b = 7, 8

    def kept(tokens: list[int], pick: list[int]) -> list[int]:
        return hold_back(rows, torch.tensor(tokens), torch.tensor(pick), ends).tolist()

    assert kept([a, b, a, b, a], [0, 1, 2, 3, 4]) == [0, 1, 2, 3, 4]  # nothing conflicts
    assert kept([a, a, b, b, a], [0, 1, 2, 3, 4]) == [0, 2, 3, 4]  # rows 2 and 4 are not neighbours
    assert kept([a, a, b, b, a], [1, 2]) == [1, 2]  # row 0 is not written in this pass
    assert kept([a, b, EOS, b, a], [0, 2]) == [0]  # row 1 stays masked before the end
    assert kept([a, b, PAD, b, a], [0, 1, 2]) == [0, 1, 2]
    assert kept([a, b, PAD, PAD, PAD], [0, 1, 2, 3, 4]) == [0, 1, 2, 3, 4]  # padding runs are no repeats
    assert kept([a, a, EOS, b, a], [0, 1, 2]) == [0]  # the docstring's example
    assert kept([a, EOS, b, b, a], [1]) == [0]  # everything held back: the leftmost row
    assert kept([EOS, b, a, EOS, a], [3]) == [0]  # ...even if it ends the answer: no gap before it
    assert kept([PAD, EOS, PAD, EOS, PAD], [3]) == [0]
    assert kept([a, a, b, EOS, a], [3, 1, 0, 1]) == [0]  # an entropy-bound pick: unsorted, repeats


# ---------------------------------------------------------------------------------------------
# Ending the answer, masks mid-answer, and edge cases


# ---------------------------------------------------------------------------------------------
# The verify rule: one token per pass left to right, in fewer passes


def reference_left_to_right(model: FakeDenoiser, canvas: torch.Tensor, start: int) -> torch.Tensor:
    """Greedy decoding one position per pass, leftmost first: each masked position in turn gets
    the argmax of its logits with everything after it still masked."""
    x = canvas.clone()
    for position in range(start, len(x)):
        logits = model.logits(x[None])[0]  # (L, V)
        row = logits[position - 1 if model.facts.shifted else position].clone()
        row[MASK] = float("-inf")
        x[position] = row.argmax()
    return x


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("draft", [0, 2, 15])
def test_verify_writes_what_one_pass_per_token_left_to_right_writes(layout: str, draft: int) -> None:
    def fake() -> FakeDenoiser:
        return make_fake(layout, force=CERTAIN, suppress=frozenset({MASK, EOS, PAD}))

    model = fake()
    config = SamplerConfig(rule="verify", draft=draft, draft_floor=0.0, block=LAYOUTS[layout][1])
    passes = run(model, answer_canvas(), START, config)
    check_common(model, answer_canvas(), START, passes, LAYOUTS[layout][3])
    assert torch.equal(passes[-1].after, reference_left_to_right(fake(), answer_canvas(), START))
    for p in passes:  # each pass fills the leftmost open positions of its block, in a run
        s, e = p.step.block
        open_before = (p.before[s:e] == MASK).nonzero()[:, 0] + s
        assert torch.equal(p.step.committed, open_before[: len(p.step.committed)])
        assert 1 <= p.step.rows <= draft + 1
    if draft == 0:
        assert len(passes) == ANSWER and all(p.step.rows == 1 for p in passes)
    else:
        assert len(passes) < ANSWER  # the drafts the fake is sure of stand


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("floor", [0.0, 0.5])
def test_verify_samples_what_one_pass_per_token_samples(layout: str, floor: float) -> None:
    """Gumbel noise is drawn once per position, so drafting changes only the number of passes."""

    def sample(draft: int, seed: int) -> torch.Tensor:
        model = make_fake(layout, force=CERTAIN)
        config = SamplerConfig(
            rule="verify", draft=draft, draft_floor=floor, temperature=0.9, seed=seed, block=LAYOUTS[layout][1]
        )
        return drain(denoise(model, answer_canvas(), START, config)).canvas

    assert torch.equal(sample(15, 1), sample(0, 1))
    assert not torch.equal(sample(15, 1), sample(15, 2))


def verify_answer(layout: str, seed: int, canvas: torch.Tensor, fill: torch.Tensor, **settings) -> torch.Tensor:
    model = make_fake(layout, seed=seed, scale=3.0)  # sure enough of its choices that drafts stand
    config = SamplerConfig(rule="verify", draft_floor=0.0, seed=seed, block=LAYOUTS[layout][1], **settings)
    return drain(denoise(model, canvas, START, config, masks=fill)).canvas


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("temperature", [0.0, 0.9])
@pytest.mark.parametrize("holes", [False, True], ids=["answer", "holes"])
def test_verify_with_a_penalty_and_cooling_writes_what_one_per_pass_writes(
    layout: str, temperature: float, holes: bool
) -> None:
    """Each row penalizes repeats of what it shows, its own drafts included; holes in a finished
    answer (the repair pass) are filled in place; a cooling schedule does not apply (its passes
    would differ)."""
    settings = {"temperature": temperature, "cooling": 0.2, "repetition_penalty": 1.5}
    for seed in range(8):
        gen = torch.Generator().manual_seed(seed)
        canvas, fill = answer_canvas(), torch.zeros(LENGTH, dtype=torch.bool)
        fill[START:] = torch.rand(ANSWER, generator=gen) < 0.6 if holes else True
        if holes:
            canvas[START:] = torch.randint(2, 40, (ANSWER,), generator=gen)
        one_by_one = verify_answer(layout, seed, canvas, fill, draft=0, **settings)
        assert torch.equal(one_by_one[~fill], canvas[~fill])
        for draft in (1, 3, 15):
            assert torch.equal(verify_answer(layout, seed, canvas, fill, draft=draft, **settings), one_by_one)


def test_verify_stops_at_a_confirmed_end() -> None:
    model = make_fake("block-causal-4", force={**CERTAIN, 10: EOS}, suppress=frozenset({MASK, EOS, PAD}))
    passes = run(model, answer_canvas(), START, SamplerConfig(rule="verify", draft_floor=0.0))
    check_common(model, answer_canvas(), START, passes, LAYOUTS["block-causal-4"][3])
    last = passes[-1].after
    assert last[10] == EOS and (last[11:] == PAD).all() and passes[-1].step.done


def test_draft_rows_and_verified_run() -> None:
    canvas = torch.tensor([5, MASK, MASK, 6, MASK])
    rows = draft_rows(canvas, torch.tensor([1, 2, 4]), torch.tensor([7, 8, 9]))
    assert rows.tolist() == [
        [5, MASK, MASK, 6, MASK],
        [5, 7, MASK, 6, MASK],
        [5, 7, 8, 6, MASK],
        [5, 7, 8, 6, 9],
    ]
    assert verified_run(torch.tensor([7, 8, 3, 4]), torch.tensor([7, 8, 9])) == 2
    assert verified_run(torch.tensor([1, 8, 9, 4]), torch.tensor([7, 8, 9])) == 0
    assert verified_run(torch.tensor([7, 8, 9, 4]), torch.tensor([7, 8, 9])) == 3
    assert verified_run(torch.tensor([3]), torch.tensor([], dtype=torch.long)) == 0


def test_checked_drafts() -> None:
    ends = torch.tensor([EOS, PAD])
    assert checked_drafts(torch.tensor([7, EOS, 8]), 8, MASK, ends).tolist() == [7, EOS]  # nothing after an end
    assert checked_drafts(torch.tensor([7, MASK, 8]), 8, MASK, ends).tolist() == [7]  # nor after a gap
    assert checked_drafts(torch.tensor([7, 8, 9]), 2, MASK, ends).tolist() == [7, 8]
    assert checked_drafts(torch.tensor([MASK, 8]), 2, MASK, ends).tolist() == []


@pytest.mark.parametrize(("fake_block", "block"), [(4, None), (None, 4)], ids=["block-causal", "semi-ar"])
def test_stop_at_eos_pads_the_rest(fake_block: int | None, block: int | None) -> None:
    start, length = 4, 20
    canvas = answer_canvas(start, length)

    def fake() -> FakeDenoiser:
        never = frozenset({MASK, EOS, PAD})  # only the forced position ends the answer
        return FakeDenoiser(vocab_size=V, mask_id=MASK, block=fake_block, suppress=never, force={9: EOS})

    config = SamplerConfig(rule="threshold", block=block)
    stopping = fake()
    passes = run(stopping, canvas, start, config)
    check_common(stopping, canvas, start, passes, [(4, 8), (8, 12), (12, 16), (16, 20)])
    last = passes[-1]
    assert last.step.block == (8, 12) and last.step.done and last.step.masked == 0
    assert last.after[9] == EOS and (last.after[12:] == PAD).all()
    assert trim_answer(last.after[start:], frozenset({EOS}), frozenset({PAD, MASK})) == last.after[4:9].tolist()

    going_on = fake()
    passes = run(going_on, canvas, start, replace(config, stop_at_eos=False))
    assert passes[-1].step.block == (16, 20)
    assert not (passes[-1].after[12:] == PAD).any()
    assert going_on.forwards > stopping.forwards


def test_masks_in_the_middle_of_an_answer_are_filled_in_place() -> None:
    """The repair pass re-masks a span inside a finished answer; only that span changes."""
    model = make_fake("block-causal-4")
    canvas = torch.tensor([3 + i % 40 for i in range(LENGTH)])
    canvas[10:14] = MASK
    passes = run(model, canvas, START, SamplerConfig(rule="threshold", threshold=0.5))
    check_common(model, canvas, START, passes, [(8, 12), (12, 16)])
    assert torch.equal(passes[-1].after[:10], canvas[:10]) and torch.equal(passes[-1].after[14:], canvas[14:])


def test_nothing_masked_means_no_pass() -> None:
    model = make_fake("one-block")
    assert drain(denoise(model, torch.arange(10), 3, SamplerConfig())) is None
    assert model.forwards == 0


def test_shifted_logits_need_a_prompt_token() -> None:
    with pytest.raises(ValueError, match="at least one prompt token"):
        drain(denoise(make_fake("block-causal-4-shifted"), answer_canvas(), 0, SamplerConfig()))


def test_steps_are_snapshots_when_collected() -> None:
    """Step is documented as an immutable record; list(denoise()) should keep each pass's canvas."""
    steps = list(denoise(make_fake("one-block"), answer_canvas(), START, SamplerConfig(rule="schedule")))
    assert steps[0].masked == ANSWER - 1
    assert int((steps[0].canvas == MASK).sum()) == steps[0].masked


def test_mask_token_is_never_committed() -> None:
    """A model that favours the mask token somewhere (a random-weight one does) must not leave a
    mask in a canvas the sampler calls done."""
    model = FakeDenoiser(vocab_size=V, mask_id=MASK, suppress=frozenset(), force={7: MASK})
    last = drain(denoise(model, answer_canvas(), START, SamplerConfig()))
    assert last.done
    assert not (last.canvas == MASK).any()


@pytest.mark.parametrize("layout", ["one-block", "block-causal-4-shifted"])
def test_a_huge_repetition_penalty_writes_no_token_twice(layout: str) -> None:
    """Greedy, one token per pass: without the penalty the fake repeats tokens; with a penalty
    that sends every written token's logit to about zero or far below it, none repeats before
    the end of the answer (the fake has positive logits to spare)."""

    def answer(penalty: float) -> list[int]:
        config = SamplerConfig(rule="schedule", repetition_penalty=penalty, stop_at_eos=False)
        last = drain(denoise(make_fake(layout), answer_canvas(), START, config))
        return [t for t in last.canvas[START:].tolist() if t not in (EOS, PAD)]

    plain = answer(1.0)
    assert len(set(plain)) < len(plain)
    penalized = answer(1e6)
    assert len(set(penalized)) == len(penalized) and penalized != plain


def test_repetition_penalty_is_checked() -> None:
    with pytest.raises(ValueError, match="repetition penalty must be a finite number >= 1"):
        SamplerConfig(repetition_penalty=0.9)
    with pytest.raises(ValueError, match="repetition window must be at least 1"):
        SamplerConfig(repetition_window=0)


# ---------------------------------------------------------------------------------------------
# Pure helpers


def test_penalize_repeats() -> None:
    logits = torch.tensor([[4.0, -1.0, 3.0], [1.0, 1.0, 1.0]])
    out = penalize_repeats(logits, torch.tensor([0, 1, 0]), 2.0)
    assert torch.equal(out, torch.tensor([[2.0, -2.0, 3.0], [0.5, 0.5, 1.0]]))
    assert torch.equal(logits, torch.tensor([[4.0, -1.0, 3.0], [1.0, 1.0, 1.0]]))  # a filter never writes its input
    assert torch.equal(penalize_repeats(logits.clone(), torch.tensor([], dtype=torch.long), 2.0), logits)
    assert torch.equal(penalize_repeats(logits.clone(), torch.tensor([0]), 1.0), logits)


def test_suppress_tokens() -> None:
    logits = torch.tensor([[2.0, 5.0, 3.0], [1.0, -1.0, 0.0]])
    out = suppress_tokens(logits, torch.tensor([1, 2, 1]))
    inf = float("-inf")
    assert torch.equal(out, torch.tensor([[2.0, inf, inf], [1.0, inf, inf]]))
    assert torch.isfinite(logits).all()  # the input is left as it was
    assert torch.equal(suppress_tokens(logits, torch.tensor([], dtype=torch.long)), logits)


def test_schedule_counts() -> None:
    assert schedule_counts(10, 4) == [3, 3, 2, 2]
    assert schedule_counts(7, 1) == [7]
    assert schedule_counts(3, 5) == [1, 1, 1]  # never more passes than tokens


def test_block_spans() -> None:
    assert block_spans(5, 20, 8, aligned=True) == [(5, 8), (8, 16), (16, 20)]
    assert block_spans(5, 20, 8, aligned=False) == [(5, 13), (13, 20)]
    assert block_spans(8, 16, 4, aligned=True) == [(8, 12), (12, 16)]
    assert block_spans(5, 6, 4, aligned=False) == [(5, 6)]


def test_commit_entropy_bound() -> None:
    h = torch.tensor([0.5, 0.01, 0.02, 2.0, 0.05])
    # ascending: 0.01 0.02 0.05 0.5 2.0 -> sum - max: 0, 0.01, 0.03, 0.08, 0.58
    assert commit_entropy_bound(h, 0.1).tolist() == [1, 2, 4, 0]
    assert commit_entropy_bound(h, 0.05).tolist() == [1, 2, 4]
    assert commit_entropy_bound(h, 0.0).tolist() == [1]  # always at least one
    assert sorted(commit_entropy_bound(h, 10.0).tolist()) == [0, 1, 2, 3, 4]


def test_top_p_filter() -> None:
    probs = torch.tensor([[0.15, 0.5, 0.05, 0.3], [0.3, 0.05, 0.5, 0.15]])
    logits = probs.log()

    def kept(top_p: float) -> list[list[int]]:
        out = top_p_filter(logits, top_p)
        finite = torch.isfinite(out)
        assert torch.equal(out[finite], logits[finite])  # survivors keep their logits
        return [row.nonzero()[:, 0].tolist() for row in finite]

    assert kept(0.45) == [[1], [2]]  # the top token is always kept
    assert kept(0.6) == [[1, 3], [0, 2]]
    assert kept(0.9) == [[0, 1, 3], [0, 2, 3]]
    assert kept(0.99) == [[0, 1, 2, 3], [0, 1, 2, 3]]
    assert top_p_filter(logits, 1.0) is logits


def test_trim_answer() -> None:
    ids = torch.tensor([5, 6, PAD, 7, MASK, EOS, 8, 9])
    assert trim_answer(ids, frozenset({EOS}), frozenset({PAD, MASK})) == [5, 6, 7]
    assert trim_answer(ids[:5], frozenset({EOS}), frozenset({PAD})) == [5, 6, 7, MASK]
    assert trim_answer(torch.tensor([EOS, 5]), frozenset({EOS}), frozenset()) == []


@pytest.mark.parametrize("layout", ["one-block", "block-causal-4-shifted"])
def test_a_banned_token_is_never_written(layout: str) -> None:
    config = SamplerConfig(stop_at_eos=False)
    plain = drain(denoise(make_fake(layout), answer_canvas(), START, config))
    common = max(set(plain.canvas[START:].tolist()), key=plain.canvas[START:].tolist().count)
    banned = drain(denoise(make_fake(layout), answer_canvas(), START, config, ban=[common]))
    assert banned.done and common not in banned.canvas[START:].tolist()


# ---------------------------------------------------------------------------------------------
# The forward strategy, chosen once per run


def strategy(model, **settings: object) -> type:
    return type(choose_forward(model, SamplerConfig(**settings), torch.Generator()))  # type: ignore[arg-type]


def test_the_forward_strategy_follows_the_model_and_the_settings(
    tiny_checkpoint: Path, tiny_full_checkpoint: Path
) -> None:
    """An exact cache where attention makes one (block-causal), with the rows packed into one
    sequence where the model can (the native Qwen2; test_packed); Fast-dLLM's window cache on full
    attention unless it is off, the cache is off or the verify rule feeds several rows; a model
    with no cache at all (the fake) runs the whole canvas; a uniform-noise model is re-noised."""
    block_causal, full = models.load(str(tiny_checkpoint)), models.load(str(tiny_full_checkpoint))
    assert strategy(block_causal) is PackedRows and strategy(block_causal, rule="verify") is PackedRows
    assert strategy(block_causal, cache=False) is FullCanvas
    assert strategy(full) is ApproxWindow and strategy(full, approx_cache="prefix") is ApproxWindow
    prefix = choose_forward(full, SamplerConfig(approx_cache="prefix"), torch.Generator())
    assert isinstance(prefix, ApproxWindow) and not prefix.dual
    for settings in ({"approx_cache": "off"}, {"cache": False}, {"rule": "verify"}):
        assert strategy(full, **settings) is FullCanvas, settings
    fake = make_fake("one-block")
    assert strategy(fake) is FullCanvas
    fake.facts = replace(fake.facts, noise="uniform")
    assert strategy(fake) is UniformNoise and strategy(fake, cache=False) is UniformNoise


class HalfLogits(FakeDenoiser):
    """The fake with its logits rounded to bfloat16, returned as bfloat16 (`as_bf16`) or as the
    same values in float32: what a model run in bfloat16 that does not upcast its logits hands over."""

    def __init__(self, as_bf16: bool, **options) -> None:
        super().__init__(**options)
        self.as_bf16 = as_bf16

    def logits(self, ids: torch.Tensor) -> torch.Tensor:
        rounded = super().logits(ids).bfloat16()
        return rounded if self.as_bf16 else rounded.float()


@pytest.mark.parametrize("rule", ["threshold", "entropy-bound", "verify", "schedule"])
@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_choices_do_not_depend_on_the_logits_dtype(rule: str, temperature: float) -> None:
    """The sampler computes probabilities, scores and choices in float64 from whatever dtype the
    model returns: bfloat16 logits choose exactly what the same values in float32 choose (a
    probability 0.7005 must not round to 0.699 below a threshold of 0.7)."""
    config = SamplerConfig(rule=rule, threshold=0.6, entropy_bound=0.8, temperature=temperature, repetition_penalty=1.3)
    runs = []
    for as_bf16 in (True, False):
        model = HalfLogits(as_bf16, scale=0.6, block=8, shifted=True)
        canvas = torch.tensor([5, 6, 7] + [model.facts.mask_id] * 29)
        runs.append([(s.canvas, s.committed, s.scores) for s in denoise(model, canvas, 3, config)])
    low, high = runs
    assert len(low) == len(high)
    for (a, b, c), (x, y, z) in zip(low, high, strict=True):
        assert torch.equal(a, x) and torch.equal(b, y) and torch.equal(c, z)
