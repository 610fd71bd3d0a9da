"""Token editing (LLaDA2.1's T2T, SamplerConfig.edit_threshold): dcode's one sampling loop against a
short reference loop written from the authors' rule, on the FakeDenoiser from conftest; the pure
rule; what a Step reports; and that it stays off unless asked for."""

from __future__ import annotations

import pytest
import torch
from conftest import FakeDenoiser

from dcode.config import SamplerConfig
from dcode.events import drain
from dcode.rules import commit_edits
from dcode.sampler import denoise

V, MASK = 50, 49


def reference_llada21(
    model: FakeDenoiser, canvas: torch.Tensor, start: int, block: int, threshold: float, editing: float, post: int
) -> tuple[torch.Tensor, int, int]:
    """LLaDA2.1's generate() as ZHZisZZ/dllm dllm/pipelines/llada21/sampler.py (ca176752) writes it,
    greedy: blocks of `block` from position 0; in each, a pass commits the masks whose argmax is more
    probable than `threshold` (else the most probable one) and rewrites the block's earlier answer
    tokens whose argmax differs and is more probable than `editing`; once no mask is left, passes go
    on (at most `post`) until one edits nothing. Returns (canvas, passes, edits)."""
    x, passes, edits = canvas.clone(), 0, 0
    for lo in range(start // block * block, len(x), block):
        hi = min(lo + block, len(x))
        post_steps = 0
        while True:
            masked = x[lo:hi] == MASK
            if not masked.any():
                post_steps += 1
            if post_steps > post:
                break
            probs = model.logits(x[None])[0, lo:hi].double().softmax(-1)  # (block, V)
            passes += 1
            tokens = probs.argmax(-1)
            p = probs.gather(-1, tokens[:, None])[:, 0]
            fill = torch.zeros_like(masked)
            if masked.any():
                confidence = torch.where(masked, p, torch.tensor(-1.0, dtype=torch.float64))
                fill = (confidence > threshold) & masked
                if not fill.any():
                    fill[confidence.argmax()] = True
            answer = torch.arange(lo, hi) >= start
            edit = ~masked & answer & (p > editing) & (tokens != x[lo:hi])
            x[lo:hi] = torch.where(fill | edit, tokens, x[lo:hi])
            edits += int(edit.sum())
            if not masked.any() and not edit.any():
                break
    return x, passes, edits


CASES = {  # name -> (fake's attention block, SamplerConfig.block, prompt tokens)
    "block-causal-aligned": (4, None, 8),
    "block-causal-mid-block": (4, None, 6),
    "semi-ar": (None, 4, 8),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize(("threshold", "editing"), [(0.3, 0.5), (0.2, 0.0), (0.5, 0.3)])
@pytest.mark.parametrize("post", [16, 1])
def test_editing_matches_the_authors_rule(case: str, threshold: float, editing: float, post: int) -> None:
    fake_block, block, start = CASES[case]
    canvas = torch.tensor([3 + i % 40 for i in range(start)] + [MASK] * (24 - start))
    config = SamplerConfig(
        rule="threshold", threshold=threshold, edit_threshold=editing, edit_passes=post, block=block,
        stop_at_eos=False, hold_conflicts=False, cache=False,
    )  # fmt: skip
    fake = FakeDenoiser(vocab_size=V, mask_id=MASK, block=fake_block, seed=3, scale=2.5)
    steps = list(denoise(fake, canvas, start, config))
    reference = FakeDenoiser(vocab_size=V, mask_id=MASK, block=fake_block, seed=3, scale=2.5)
    size = block or fake_block or 4
    want, passes, edits = reference_llada21(reference, canvas, start, size, threshold, editing, post)
    assert torch.equal(steps[-1].canvas, want)
    assert steps[-1].forward == fake.forwards == passes
    assert steps[-1].edits == edits == sum(len(s.edited) for s in steps if s.edited is not None)
    assert edits > 0  # the case exercises the rule


def test_edits_only_what_this_run_wrote() -> None:
    """The prompt and, in a repair's fill, the code around the masks are never rewritten."""
    start = 6
    canvas = torch.tensor([3 + i % 40 for i in range(24)])
    fill = torch.zeros(24, dtype=torch.bool)
    fill[10:14] = True
    config = SamplerConfig(threshold=0.2, edit_threshold=0.0, block=8, stop_at_eos=False, cache=False)
    fake = FakeDenoiser(vocab_size=V, mask_id=MASK, seed=3, scale=2.5)
    steps = list(denoise(fake, canvas, start, config, masks=fill))
    edited = {int(p) for s in steps if s.edited is not None for p in s.edited}
    assert edited and edited <= set(range(10, 14))
    kept = torch.ones(24, dtype=torch.bool)
    kept[10:14] = False
    assert torch.equal(steps[-1].canvas[kept], canvas[kept])


@pytest.mark.parametrize("rule", ["threshold", "schedule", "entropy-bound", "verify"])
def test_off_by_default_and_under_the_verify_rule(rule: str) -> None:
    canvas = torch.tensor([3, 4, 5, 6, 7] + [MASK] * 16)
    fake = FakeDenoiser(vocab_size=V, mask_id=MASK, seed=3, scale=2.5)
    off = drain(denoise(fake, canvas, 5, SamplerConfig(rule=rule, block=4)))
    assert off is not None and off.edits == 0
    if rule == "verify":  # ignored: the verify rule writes what one pass per token writes
        on = drain(denoise(fake, canvas, 5, SamplerConfig(rule=rule, block=4, edit_threshold=0.0)))
        assert on is not None and torch.equal(on.canvas, off.canvas) and on.edits == 0


def test_commit_edits() -> None:
    probability = torch.tensor([0.95, 0.99, 0.4, 0.9])
    tokens, current = torch.tensor([5, 6, 7, 8]), torch.tensor([1, 6, 2, 3])
    assert commit_edits(probability, tokens, current, 0.9).tolist() == [0]  # strictly above, and a change
    assert commit_edits(probability, tokens, current, 0.0).tolist() == [0, 2, 3]


@pytest.mark.parametrize("bad", [1.0, -0.1, float("nan")])
def test_edit_threshold_bounds(bad: float) -> None:
    with pytest.raises(ValueError, match="edit threshold"):
        SamplerConfig(edit_threshold=bad)


def test_llada21_runs_with_token_editing_by_default_and_llada20_without(tmp_path) -> None:
    """LLaDA2.1's files are LLaDA2.0's: its name says which (FamilyFacts.named_efforts), and it
    decodes as its authors run it (Q Mode: threshold 0.7, editing 0.5; low: S Mode)."""
    from test_families import SIZE

    from dcode import models
    from dcode.config import merge_family_defaults
    from dcode.testing import checkpoints as tiny

    found = {}
    for name in ("LLaDA2.1-mini", "LLaDA2.0-mini"):
        tiny.write("llada2", tmp_path / name, SIZE, seed=51)
        model = models.load(str(tmp_path / name))
        found[name] = merge_family_defaults(SamplerConfig(), set(), model.facts.defaults)
        low = merge_family_defaults(SamplerConfig(), set(), model.facts.decoding("low"))
        if name == "LLaDA2.1-mini":
            assert (low.threshold, low.edit_threshold) == (0.5, 0.0)
            canvas = torch.tensor([5, 6, 7] + [model.facts.mask_id] * 40)
            last = drain(denoise(model, canvas, 3, found[name]))
            assert last is not None and last.masked == 0  # the real loader, decoding with editing on
    assert (found["LLaDA2.1-mini"].threshold, found["LLaDA2.1-mini"].edit_threshold) == (0.7, 0.5)
    assert (found["LLaDA2.0-mini"].threshold, found["LLaDA2.0-mini"].edit_threshold) == (0.95, None)
