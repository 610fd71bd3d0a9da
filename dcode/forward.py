"""Forward strategies: how one pass of dcode.sampler.denoise runs the model, chosen once per run
(choose_forward) from the model and the settings: the exact block cache of a block-causal model,
Fast-dLLM's approximate window cache of a full-attention model, the whole canvas, or uniform noise
(DiffusionGemma), and the exact block cache with the verify rule's rows packed into one sequence
(PackedRows, where the model can). Each takes a Pass and returns a Readout, the logits predicting
positions [s, reach) of each row fed, made where the sampler reads them, and how many tokens it fed
the model. Pure tensor code; knows nothing of commit rules, tokenizers or the terminal."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, cast

import torch

from dcode.config import SamplerConfig
from dcode.models.base import Cache, Denoiser, PackedDenoiser, UniformDenoiser, WindowDenoiser


def uniform_noise(count: int, vocab_size: int, placeholder: int, gen: torch.Generator) -> torch.Tensor:
    """`count` ids drawn uniformly from the vocabulary less the placeholder id, so that the mask
    placeholder is never fed to a uniform-noise model. -> (count,)"""
    ids = torch.randint(vocab_size - 1, (count,), generator=gen)
    return ids + (ids >= placeholder).long()


@dataclass(frozen=True)
class Pass:
    """One forward pass: the rows it feeds and where in the block it stands."""

    rows: torch.Tensor  # (R, L) canvases side by side: the canvas, or the verify rule's drafts in place
    block: tuple[int, int]  # [s, e), the block being decoded
    reach: int  # logits are wanted for positions [s, reach): e, or the next block's end too (verify)
    index: int  # passes this block had before this one
    open_offsets: torch.Tensor  # (n,) block offsets of the positions still to fill, ascending
    temperature: float
    drafted: torch.Tensor  # (R-1,) the verify rule's drafts row r holds the first r of (else empty)


class Readout(Protocol):
    """A pass's logits, made where they are read: rows (n,) and block offsets (n,) -> the logits
    (n, V) in float32 that row rows[i] holds for position s + offsets[i]. exact=False: for drafts,
    which no answer depends on, the same logits to rounding (no padding of the output head's rows)."""

    vocab: int

    def __call__(self, rows: torch.Tensor, offsets: torch.Tensor, exact: bool = True) -> torch.Tensor: ...


class Dense:
    """A Readout over logits already made for every row and position: (R, reach-s, V)."""

    def __init__(self, logits: torch.Tensor) -> None:
        self.logits, self.vocab = logits, logits.shape[-1]

    def __call__(self, rows: torch.Tensor, offsets: torch.Tensor, exact: bool = True) -> torch.Tensor:
        return self.logits[rows, offsets].float()  # a model run in bfloat16 may hand back bfloat16


def call(model: Denoiser, ids: torch.Tensor, cache: Any, origin: int) -> torch.Tensor:
    """model(ids, cache), told where its attention blocks start when they follow the answer
    (facts.block_origin "answer": origin is the answer's first position)."""
    if model.facts.block_origin == "answer":
        return cast(Any, model)(ids, cache, origin=origin)
    return model(ids, cache)


class Forward(Protocol):
    renoises: bool  # positions still to fill go in as fresh random tokens (uniform-noise models)

    def __call__(self, now: Pass) -> tuple[Readout, int]: ...


class FullCanvas:
    """No cache: every pass runs the whole canvas (each of the verify rule's rows is one)."""

    renoises = False

    def __init__(self, model: Denoiser, origin: int = 0) -> None:
        self.model, self.origin = model, origin

    def __call__(self, now: Pass) -> tuple[Readout, int]:
        shift = int(self.model.facts.shifted)  # a shifted model's row i-1 predicts position i
        out = call(self.model, now.rows, None, self.origin)  # (R, L, V)
        return Dense(out[:, now.block[0] - shift : now.reach - shift]), now.rows.numel()


class ExactCache:
    """Block-causal attention makes a finished block's keys/values final: each pass feeds only the
    uncached stretch up to `reach`, then the cache is cropped back to the finished blocks."""

    renoises = False

    def __init__(self, model: Denoiser, cache: Cache, origin: int = 0) -> None:
        self.model, self.cache, self.origin = model, cache, origin
        self.carry: torch.Tensor | None = None  # (V,) logits row of position s-1 (shifted models)

    def __call__(self, now: Pass) -> tuple[Readout, int]:
        s, reach, facts, o = now.block[0], now.reach, self.model.facts, self.origin
        cached = self.cache.length
        out = call(self.model, now.rows[:, cached:reach], self.cache, o)  # (R, reach-cached, V)
        self.cache.crop(o + (s - o) // facts.block * facts.block if facts.block else s)  # keep finished blocks only
        fed = (reach - cached) * len(now.rows)
        if not facts.shifted:
            return Dense(out[:, s - cached : reach - cached]), fed
        if cached <= s - 1:  # position s-1 was fed now (and is cached from now on): keep its row
            self.carry = out[0, s - 1 - cached]  # the same in every row: it lies before the block
        assert self.carry is not None
        carried = self.carry.expand(len(now.rows), 1, -1)  # (R, 1, V)
        return Dense(torch.cat([carried, out[:, s - cached : reach - cached - 1]], dim=1)), fed


class Packed:
    """A Readout over a packed pass's final hidden states (N + 1, hidden): the shared positions
    [cached, b) first, row r's from b on starting at starts[r], and last the carried hidden state
    of position s-1 (a shifted model's). The output head runs on the rows read."""

    def __init__(
        self, model: PackedDenoiser, hidden: torch.Tensor, starts: torch.Tensor, span: tuple[int, int, int], shift: int
    ) -> None:
        self.model, self.hidden, self.starts, self.shift = model, hidden, starts, shift
        self.cached, self.shared_end, self.s = span
        self.vocab = model.logits(hidden[:0]).shape[-1]

    def __call__(self, rows: torch.Tensor, offsets: torch.Tensor, exact: bool = True) -> torch.Tensor:
        at = self.s + offsets - self.shift  # the position whose hidden state predicts s + offset
        index = torch.where(at >= self.shared_end, self.starts[rows] + at - self.shared_end, at - self.cached)
        index = torch.where(at < self.cached, len(self.hidden) - 1, index)  # fed before: the carried one
        return self.model.logits(self.hidden[index], exact)  # (n, V)


class PackedRows:
    """The exact block cache with a pass's rows packed into one sequence (packed_mask in
    dcode.models.native): the finished attention blocks fed since the cache was last cropped go in
    once, not once per row; each row's part from the block's attention-block start goes in beside
    them, and only the last row runs on into the next block, the one row the verify rule reads
    there; the output head runs only on the positions the sampler reads. ExactCache's logits for a
    fraction of the work: on dcode-tiny a verify pass of R rows feeds about 16 (R + 1) tokens
    instead of up to 32 R, and reads R positions and the few it drafts from instead of all of them."""

    renoises = False

    def __init__(self, model: PackedDenoiser, cache: Cache, origin: int = 0) -> None:
        self.model, self.cache, self.origin = model, cache, origin
        self.carry: torch.Tensor | None = None  # (1, hidden) final hidden state of position s-1 (shifted models)

    def __call__(self, now: Pass) -> tuple[Readout, int]:
        (s, e), reach, block, o = now.block, now.reach, self.model.facts.block, self.origin
        assert block is not None
        cached, rows, device = self.cache.length, now.rows, now.rows.device
        b = o + (s - o) // block * block  # the attention block s lies in starts here: rows differ from here on
        ends = [e] * (len(rows) - 1) + [reach]  # where each row's part ends
        pieces = [rows[0, cached:b], *(rows[r, b:end] for r, end in enumerate(ends))]
        spans = [(cached, b), *((b, end) for end in ends)]
        positions = torch.cat([torch.arange(lo, hi, device=device) for lo, hi in spans])
        segments = torch.cat([torch.full((len(piece),), i, device=device) for i, piece in enumerate(pieces)])
        hidden = self.model.packed(torch.cat(pieces), positions, segments, self.cache, o)  # (N, hidden)
        self.cache.crop(b)  # keep finished blocks only
        starts = torch.tensor([0, *(end - b for end in ends[:-1])], device=device).cumsum(0) + (b - cached)  # (R,)
        shift = int(self.model.facts.shifted)
        if shift and cached <= s - 1:  # position s-1 was fed now (and is cached from now on): keep row 0's
            self.carry = hidden[s - 1 - cached : s - cached]  # row 0's part follows the shared one seamlessly
        carried = self.carry if shift and self.carry is not None else hidden[:0]
        readout = Packed(self.model, torch.cat([hidden, carried]), starts, (cached, b, s), shift)
        return readout, len(positions)


class ApproxWindow:
    """Fast-dLLM's approximate cache (full attention): a block's first pass runs the whole canvas
    and caches every position outside the window (the block; "prefix": the block and all after
    it); later passes feed the window alone, reading every other position from that first pass."""

    renoises = False

    def __init__(self, model: WindowDenoiser, cache: Any, dual: bool) -> None:
        self.model, self.cache, self.dual = model, cache, dual

    def __call__(self, now: Pass) -> tuple[Readout, int]:
        (s, e), length = now.block, now.rows.shape[1]
        if now.index > 0:  # the window's rows from s on predict s..e-1 (a shifted model's s-1 predicts s)
            lo, hi = self.cache.window
            return Dense(self.model.window(now.rows[:, lo:hi], self.cache)[:, : e - s]), hi - lo  # (1, e-s, V)
        shift = int(self.model.facts.shifted)
        out = self.model.refresh(now.rows, (s - shift, e if self.dual else length), self.cache)  # (1, L, V)
        return Dense(out[:, s - shift : now.reach - shift]), now.rows.numel()


class UniformNoise:
    """DiffusionGemma: the context before a block goes into the cache once, clean (without a cache:
    every pass, afresh); the block goes in alone, every position still to fill holding a fresh
    random token, with the previous pass's temperature-scaled logits (self-conditioning)."""

    renoises = True

    def __init__(self, model: UniformDenoiser, cache: Cache | None, gen: torch.Generator) -> None:
        self.model, self.cache, self.gen = model, cache, gen
        self.previous: torch.Tensor | None = None  # (1, e-s, V) the block's last pass, scaled

    def __call__(self, now: Pass) -> tuple[Readout, int]:
        (s, e), facts = now.block, self.model.facts
        context = self.cache if self.cache is not None else self.model.new_cache()
        cached = context.length
        if cached < s:
            self.model.extend(now.rows[:, cached:s], context)
        noisy = now.rows[0, s:e].clone()  # (e-s,)
        noise = uniform_noise(len(now.open_offsets), facts.vocab_size, facts.mask_id, self.gen)
        noisy[now.open_offsets] = noise.to(noisy.device)
        previous = self.previous if now.index > 0 else None
        logits = self.model(noisy[None], context, previous=previous)  # (1, e-s, V)
        self.previous = logits / now.temperature if now.temperature > 0 else logits
        return Dense(logits), e - cached


def choose_forward(model: Denoiser, config: SamplerConfig, gen: torch.Generator, origin: int = 0) -> Forward:
    """The forward strategy for this model and these settings; origin: where its attention blocks
    start (0, or the answer's first position for facts.block_origin "answer")."""
    cache = model.new_cache() if config.cache else None
    if model.facts.noise == "uniform":
        return UniformNoise(cast(UniformDenoiser, model), cache, gen)
    packs = config.pack and model.facts.block is not None and callable(getattr(model, "packed", None))
    if cache is not None and packs:
        return PackedRows(cast(PackedDenoiser, model), cache, origin)
    if cache is not None:
        return ExactCache(model, cache, origin)
    # Fast-dLLM's approximate cache where no exact one exists (full attention; an optional method).
    # (The verify rule's rows differ inside the window, which that cache holds one copy of.)
    if config.cache and config.approx_cache != "off" and config.rule != "verify" and hasattr(model, "new_window_cache"):
        windowed = cast(WindowDenoiser, model)
        window_cache = windowed.new_window_cache()
        if window_cache is not None:
            return ApproxWindow(windowed, window_cache, dual=config.approx_cache == "dual")
    return FullCanvas(model, origin)
