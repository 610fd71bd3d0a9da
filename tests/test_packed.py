"""Packed passes (dcode.forward.PackedRows over dcode.models.native): the verify rule's rows fed as
one sequence, logits made only where the sampler reads. An exact reformulation of the batched
pass (ExactCache): the same logits, bit for bit in float32, and so the same answers, for fewer
tokens fed."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from dcode.bench.answers import answered
from dcode.config import SamplerConfig
from dcode.forward import ExactCache, PackedRows, Pass, choose_forward
from dcode.models import load, native
from dcode.serve.batching import BatchingDenoiser, Call, run_heads


@pytest.fixture(scope="module")
def tiny() -> native.NativeDenoiser:
    return load(None, torch.device("cpu"), torch.float32)  # type: ignore[return-value]


class Batched:
    """dcode-tiny without packed(): the sampler feeds its rows as a batch (ExactCache)."""

    def __init__(self, model: native.NativeDenoiser) -> None:
        self.model, self.facts, self.tokenizer = model, model.facts, model.tokenizer

    def __call__(self, ids: torch.Tensor, cache: object = None) -> torch.Tensor:
        return self.model(ids, cache)  # type: ignore[arg-type]

    def new_cache(self) -> native.NativeCache | None:
        return self.model.new_cache()

    @property
    def device(self) -> torch.device:
        return self.model.device


def test_packed_mask_docstring_example() -> None:
    positions, segments = torch.tensor([0, 1, 2, 3, 2, 3]), torch.tensor([0, 0, 1, 1, 2, 2])
    mask = native.packed_mask(positions, segments, 0, 2)[0, 0]
    assert mask[2].tolist() == mask[3].tolist() == [True, True, True, True, False, False]
    assert mask[4].tolist() == mask[5].tolist() == [True, True, False, False, True, True]
    assert mask[0].tolist() == [True, True, False, False, False, False]


def every_read(rows: int, width: int, reach_width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(row, offset) of every position a pass can be read at: each row's block, the last row to
    reach. (Row r >= 1 holds drafts from offset 0 on and is read after them: a shifted model's
    offset 0 is then row 0's position s-1 batched, its own packed.)"""
    pairs = [(r, o) for r in range(rows) for o in range(reach_width if r == rows - 1 else width) if r == 0 or o > 0]
    return torch.tensor([r for r, _ in pairs]), torch.tensor([o for _, o in pairs])


@pytest.mark.parametrize("reach", [48, 64])
@pytest.mark.parametrize("start", [20, 32])  # the prompt ends inside the block's attention block, or at its start
def test_a_packed_pass_reads_the_batched_pass_logits_bit_for_bit(tiny, reach: int, start: int) -> None:
    gen = torch.Generator().manual_seed(0)
    canvas = torch.randint(3, 8000, (96,), generator=gen)
    canvas[start:] = tiny.facts.mask_id
    block = (start, 48)
    rows = canvas.repeat(4, 1)
    for r in range(1, 4):
        rows[r, start : start + r] = torch.randint(3, 8000, (r,), generator=gen)  # row r holds r drafts
    now = Pass(rows, block, reach, 0, torch.arange(48 - start), 0.0, rows[3, start : start + 3])
    reads = every_read(4, 48 - start, reach - start)
    seen = {}
    for strategy in (ExactCache, PackedRows):
        forward = strategy(tiny, tiny.new_cache())
        readout, fed = forward(now)
        seen[strategy] = readout(*reads), fed, forward.cache.length
    (batched, batched_fed, batched_cache), (packed, packed_fed, packed_cache) = seen.values()
    assert torch.equal(batched, packed)
    assert packed_cache == batched_cache == start // 16 * 16  # the finished attention blocks only
    assert packed_fed < batched_fed


def answer(model: object, config: SamplerConfig, prompt: str) -> tuple[str, int]:
    """The code `dcode new --no-repair` writes, and the tokens its passes fed."""
    done, steps, _ = answered(model, prompt, "python", 128, config)  # type: ignore[arg-type]
    return done.code, sum(step.input_tokens for step in steps)


@pytest.mark.parametrize(
    "settings",
    [{"rule": "verify"}, {"rule": "verify", "draft": 0}, {"rule": "threshold", "threshold": 0.7}],
    ids=["verify", "one-per-pass", "threshold"],
)
def test_packed_passes_write_the_batched_answers_for_fewer_tokens(tiny, settings: dict[str, object]) -> None:
    config = replace(SamplerConfig(), **settings)  # type: ignore[arg-type]
    for prompt in ("a function that merges two sorted lists", "an LRU cache class with get and put"):
        packed_code, packed_fed = answer(tiny, config, prompt)
        batched_code, batched_fed = answer(Batched(tiny), config, prompt)
        assert packed_code == batched_code
        # one row a pass feeds what a batch of one feeds; the verify rule's rows share their prefix
        assert packed_fed < batched_fed if settings == {"rule": "verify"} else packed_fed == batched_fed


def test_who_packs(tiny) -> None:
    config = SamplerConfig(rule="verify")
    assert isinstance(choose_forward(tiny, config, torch.Generator()), PackedRows)
    assert isinstance(choose_forward(Batched(tiny), config, torch.Generator()), ExactCache)  # type: ignore[arg-type]
    # the server's batching proxy packs where its model does, gathering its workers' packed calls
    assert isinstance(choose_forward(BatchingDenoiser(tiny), config, torch.Generator()), PackedRows)  # type: ignore[arg-type]
    assert isinstance(choose_forward(BatchingDenoiser(Batched(tiny)), config, torch.Generator()), ExactCache)  # type: ignore[arg-type]


def test_no_pack_feeds_the_rows_as_a_batch(tiny) -> None:
    config = SamplerConfig(rule="verify", pack=False)
    assert isinstance(choose_forward(tiny, config, torch.Generator()), ExactCache)
    code, fed = answer(tiny, config, "a function that merges two sorted lists")
    assert (code, fed) == answer(Batched(tiny), SamplerConfig(rule="verify"), "a function that merges two sorted lists")


def packed_call(
    tiny, cached: int, rows: int, gen: torch.Generator, last: int = 32
) -> tuple[native.PackedCall, torch.Tensor, native.NativeCache]:
    """A packed call laid out as PackedRows lays out a verify pass, and the hidden states and cache
    NativeDenoiser.packed gives it alone: `cached` positions cached (in 16s: cropped at attention
    blocks), a finished block fed again (segment 0), then `rows` rows from the next block's
    start, 16 positions each but the last, which runs `last`."""
    cache, twin = tiny.new_cache(), tiny.new_cache()
    if cached:
        prefix = torch.randint(3, 8000, (1, cached), generator=gen)
        tiny(prefix, cache)
        tiny(prefix, twin)
    b = cached + 16
    ends = [b + 16] * (rows - 1) + [b + last]
    positions = torch.cat([torch.arange(cached, b), *(torch.arange(b, end) for end in ends)])  # (N,)
    segments = torch.cat([torch.zeros(16), *(torch.full((end - b,), r + 1) for r, end in enumerate(ends))]).long()
    ids = torch.randint(3, 8000, (len(positions),), generator=gen)
    return native.PackedCall(ids, positions, segments, cache), tiny.packed(ids, positions, segments, twin), twin


def same_caches(a: native.NativeCache, b: native.NativeCache) -> bool:
    return a.length == b.length and all(
        torch.equal(x, y) for pa, pb in zip(a.layers, b.layers, strict=True) for x, y in zip(pa, pb, strict=True)
    )


def test_a_batched_packed_forward_gives_each_call_its_hidden_states_bit_for_bit(tiny) -> None:
    """Calls of one packed length (how the server groups them) at caches of 0, 16 and 48 positions
    (112 keys at most: see the next test for more than 192)."""
    gen = torch.Generator().manual_seed(0)
    made = [packed_call(tiny, cached, 2, gen) for cached in (16, 0, 48)]
    results = tiny.batched_packed([call for call, _, _ in made])
    for (call, hidden, twin), result in zip(made, results, strict=True):
        assert torch.equal(result, hidden)
        assert same_caches(call.cache, twin)


def test_packed_calls_of_other_lengths_or_long_caches_never_see_the_padding(tiny) -> None:
    """Sequences of 48, 64 and 20 tokens (the last ends at the canvas's end) padded to 64, one
    after a cache of 160 positions (224 keys: past the 192 where torch 2.13's CPU attention takes
    the keys in blocks, so that the others' keys, spread by the padding, fall in two): each call's
    hidden states are its own to float32 rounding, not bit for bit (9e-6 seen on values up to 13,
    some ulps after six layers; the bound leaves room for another CPU's); padding or another call
    seen would be off by far more."""
    gen = torch.Generator().manual_seed(1)
    made = [packed_call(tiny, 0, 1, gen), packed_call(tiny, 160, 2, gen), packed_call(tiny, 16, 1, gen, last=4)]
    results = tiny.batched_packed([call for call, _, _ in made])
    for (call, hidden, twin), result in zip(made, results, strict=True):
        assert result.shape == hidden.shape
        assert torch.allclose(result, hidden, rtol=0, atol=2e-5)
        assert call.cache.length == twin.length


def test_the_output_head_on_several_calls_rows_gives_each_its_logits_bit_for_bit(tiny) -> None:
    gen = torch.Generator().manual_seed(2)
    calls = [Call(torch.randn(n, 256, generator=gen), None, "head") for n in (1, 15, 17, 40, 3)]
    run_heads(tiny, calls)
    for call in calls:
        assert call.result is not None and torch.equal(call.result, tiny.logits(call.ids))
