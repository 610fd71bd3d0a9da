"""A model proxy that batches the forward passes of requests running together.

Each request's denoise() generator (the one sampling loop) runs in its own worker thread with a
BatchingDenoiser as its model, which satisfies the Denoiser protocol, and the PackedDenoiser one
where the wrapped model does (the sampler then packs each pass's rows into one sequence,
dcode.forward.PackedRows, as it does alone): a call from a worker (a forward, a packed forward, or
the output head on the hidden states the sampler reads) waits until every running worker has
called (or a short wait ran out), then the calls that fit together run as one and each worker gets
its own rows back (a round with head calls runs those first, alone, so that the workers keep in
step: BatchingDenoiser._arrive). Calls that do not fit run alone. The results are the unbatched
results: rows of a batch never see one another.

What fits together:
- the native Qwen2 (dcode.models.native, dcode-tiny), packed: every call of the same packed length
  N, whatever its cache length. The sequences are stacked, caches right-padded to the longest,
  each at its own positions (RoPE) under its own packed_mask; no real position sees padding or
  another call. Their hidden states are bit for bit the call's alone in float32 on a CPU while the
  batch's longest cache plus N is at most 192 keys (torch 2.13: past that its CPU attention takes
  the keys in blocks, and a call whose cached and new keys the padding spreads over two rounds
  otherwise, within some ulps), and always for the call with the longest cache;
- the native Qwen2's output head: every call, the hidden states concatenated (native.head_logits
  pads them to a multiple of 16 rows, and a row's logits do not depend on the rows read with it);
- the native Qwen2, rows (no packing: the cache off): every call of the same input length, whatever
  its cache length, run the same way under rows_mask;
- any other model without a cache, the same canvas length: the canvases stacked.
Anything else (keyword arguments, a uniform-noise model's extend(), the window cache, another
model's packed forward) passes through unbatched or runs alone. Knows nothing about HTTP, requests
or prompts.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, cast

import torch
import torch.nn.functional as F

from dcode.models.base import Denoiser, ModelFacts, PackedDenoiser
from dcode.models.native import NativeCache, NativeDenoiser, packed_mask


class RequestCancelled(Exception):
    """The worker's request was cancelled (client gone, server stopping): raised at its next call."""


Kind = Literal["rows", "packed", "head"]  # a forward of rows, a packed forward, the output head


class Layout(NamedTuple):
    """Where a packed call's tokens sit (see native.packed_mask)."""

    positions: torch.Tensor  # (N,) canvas positions
    segments: torch.Tensor  # (N,) 0: shared; r + 1: row r's own
    origin: int  # where the attention blocks start


@dataclass(eq=False)
class Call:
    ids: torch.Tensor  # rows: (R, n) token ids; packed: (N,) token ids; head: (n, hidden) final hidden states
    cache: Any
    kind: Kind = "rows"
    layout: Layout | None = None  # packed: positions, segments, origin
    result: torch.Tensor | None = None  # rows: (R, n, V) logits; packed: (N, hidden); head: (n, V)
    error: BaseException | None = None
    done: bool = False
    arrived: float = field(default_factory=time.perf_counter)


def group_key(call: Call, native: bool) -> tuple[Any, ...]:
    """Calls with the same key run as one forward. Example: no cache, 40 positions -> ("full", 40)."""
    if native and call.kind == "head":  # any number of rows: the head pads them to a multiple of 16 anyway
        return ("head",)
    if native and call.kind == "packed":
        # one packed length N, not close ones merged: on a CPU a padded position costs what a real one
        # costs, N comes in steps of 16 (a row's part is an attention block; under load, with few
        # drafts, most calls are 16 to 64), and only calls of one N can be bit for bit what they are alone
        return ("packed", len(call.ids))
    if native and call.kind == "rows" and (call.cache is None or isinstance(call.cache, NativeCache)):
        # any cache length (per-row positions and masks), one input length: a row padded to a longer
        # input pays for its padding in every layer (a third of the positions at --busy-draft 0)
        return ("native", call.ids.shape[1])
    if call.kind == "rows" and call.cache is None:
        return ("full", call.ids.shape[1])
    return ("alone", id(call))


def rows_mask(starts: list[int], lengths: list[int], width: int, cached: int, block: int | None) -> torch.Tensor:
    """(B, 1, n, C + n) bool for rows whose queries sit at positions [c_b, c_b + n_b) and whose keys are
    their cache [0, c_b) right-padded to C = `cached`, then their n inputs right-padded to `width` = n.
    A query sees a real key iff the key's attention block is not after its own (every block with
    block=None); padding is seen by no real query. Example: one row, c=0, n=2 -> block_causal_mask(0, 2, 2)."""
    c = torch.tensor(starts)[:, None]  # (B, 1)
    n = torch.tensor(lengths)[:, None]
    t = torch.arange(width)[None, :]  # (1, n)
    query = c + t  # (B, n) absolute positions
    j = torch.arange(cached + width)[None, :]  # (1, K)
    key = torch.where(j < cached, j, c + j - cached)  # (B, K) absolute positions
    real = torch.where(j < cached, j < c, j - cached < n)  # (B, K)
    if block is None:
        seen = real[:, None, :].expand(-1, width, -1)
    else:
        seen = real[:, None, :] & (key[:, None, :] // block <= query[:, :, None] // block)  # (B, n, K)
    return seen[:, None]


def packed_masks(calls: list[Call], width: int, cached: int, block: int, device: torch.device) -> torch.Tensor:
    """(B, 1, N, C + N) bool for packed calls stacked: call b's own packed_mask, its cached keys [0, c_b)
    in the cache right-padded to C = `cached`, its N_b packed keys at [C, C + N_b), the rest padding,
    seen by no real query. A padding query (t >= N_b) sees its own key only: a query that sees no key
    comes out NaN in some SDPA kernels and torch versions (torch 2.13's CPU ones give 0), its keys and
    values would carry the NaN into the next layer, and there a real query's weight of 0 on them
    still makes NaN (0 * NaN). Example: one call, no cache -> its packed_mask."""
    mask = torch.zeros(len(calls), 1, width, cached + width, dtype=torch.bool, device=device)
    for b, call in enumerate(calls):
        layout, c, n = call.layout, call.cache.length, len(call.ids)
        assert layout is not None
        own = packed_mask(layout.positions, layout.segments, c, block, layout.origin)[0, 0]  # (N_b, c + N_b)
        mask[b, 0, :n, :c] = own[:, :c]
        mask[b, 0, :n, cached : cached + n] = own[:, c:]
        padding = torch.arange(n, width, device=device)
        mask[b, 0, padding, cached + padding] = True
    return mask


def ids_dtype(qwen: Any) -> torch.dtype:
    """The dtype of the network's keys and values (its weights')."""
    return qwen.lm_head.weight.dtype  # type: ignore[no-any-return]


def padded_past(model: NativeDenoiser, caches: list[Any], rows: list[int], cached: int) -> NativeCache:
    """Every layer's keys/values (B, Hkv, C, D) for the rows of calls with these caches (NativeCache or
    None), `rows[i]` rows for caches[i]: each cache right-padded with zeros to C = `cached` positions
    (None or empty: all padding), once per row. A scratch cache that run_layers appends to."""
    qwen, past = model.model, NativeCache()
    if not cached:
        return past
    kv_shape = next(cache.layers[0][0].shape for cache in caches if cache is not None and cache.layers)

    def padded(cache: Any, count: int, i: int, j: int) -> torch.Tensor:  # (count, Hkv, C, D)
        if cache is None or not cache.layers:
            empty = torch.zeros(1, kv_shape[1], cached, kv_shape[3], dtype=ids_dtype(qwen), device=model.device)
            return empty.expand(count, -1, -1, -1)
        keys = cache.layers[i][j][:1]
        return F.pad(keys, (0, 0, 0, cached - keys.shape[2])).expand(count, -1, -1, -1)

    past.layers = [
        (
            torch.cat([padded(cache, count, i, 0) for cache, count in zip(caches, rows, strict=True)]),
            torch.cat([padded(cache, count, i, 1) for cache, count in zip(caches, rows, strict=True)]),
        )
        for i in range(len(qwen.model.layers))
    ]
    return past


def keep_new(calls: list[Call], rows: list[int], lengths: list[int], cached: int, presents: NativeCache) -> None:
    """Each call's cache becomes what the call alone leaves: its own c positions, then its n = lengths[i]
    new ones, from its rows of the batch's keys/values (cache right-padded to `cached`)."""
    row = 0
    for call, count, n in zip(calls, rows, lengths, strict=True):
        if call.cache is not None:
            c = call.cache.length
            call.cache.layers = [
                tuple(
                    torch.cat([t[row : row + count, :, :c], t[row : row + count, :, cached : cached + n]], dim=2)
                    for t in kv
                )
                for kv in presents.layers
            ]
        row += count


def run_native(model: NativeDenoiser, calls: list[Call]) -> None:
    """One forward of the native Qwen2 for calls at any cache length and input length: rows stacked,
    caches right-padded to the longest, inputs right-padded, each row at its own positions (RoPE)
    and under its own mask, so that no row sees another's or any padding."""
    facts, device = model.facts, model.device
    rows = [len(call.ids) for call in calls]
    starts = [call.cache.length if call.cache is not None else 0 for call in calls for _ in range(len(call.ids))]
    lengths = [call.ids.shape[1] for call in calls for _ in range(len(call.ids))]
    width, cached = max(lengths), max(starts)
    ids = torch.cat([F.pad(call.ids, (0, width - call.ids.shape[1]), value=facts.pad_id) for call in calls])
    mask = rows_mask(starts, lengths, width, cached, facts.block).to(device)
    positions = (torch.tensor(starts)[:, None] + torch.arange(width)[None, :]).to(device)  # (B, n)
    past = padded_past(model, [call.cache for call in calls], rows, cached)
    with torch.inference_mode():
        hidden = model.model.hidden(ids, positions, mask, past)  # (B, n, hidden)
        logits = model.model.lm_head(hidden).float()  # (B, n, V)
    keep_new(calls, rows, [call.ids.shape[1] for call in calls], cached, past)
    row = 0
    for call, count in zip(calls, rows, strict=True):
        call.result = logits[row : row + count, : call.ids.shape[1]]
        row += count


def run_packed(model: NativeDenoiser, calls: list[Call]) -> None:
    """One forward of packed calls (NativeDenoiser.packed's) at any cache length and packed length:
    sequences stacked and right-padded to the longest N, caches right-padded to the longest, each
    call at its own positions (RoPE) under its own packed_mask (packed_masks). Each call gets its
    final hidden states (N_b, hidden) and its cache as packed() leaves it (its N_b new positions
    appended)."""
    assert model.facts.block is not None, "packing needs block-causal attention"
    lengths = [len(call.ids) for call in calls]
    width, cached = max(lengths), max(call.cache.length for call in calls)
    ids = torch.stack([F.pad(call.ids, (0, width - len(call.ids)), value=model.facts.pad_id) for call in calls])
    layouts = [call.layout for call in calls if call.layout is not None]
    positions = torch.stack([F.pad(layout.positions, (0, width - len(layout.positions))) for layout in layouts])
    mask = packed_masks(calls, width, cached, model.facts.block, model.device)  # (B, 1, N, C + N)
    past = padded_past(model, [call.cache for call in calls], [1] * len(calls), cached)
    with torch.inference_mode():
        hidden = model.model.hidden(ids, positions, mask, past)  # (B, N, hidden)
    keep_new(calls, [1] * len(calls), lengths, cached, past)
    for b, call in enumerate(calls):
        call.result = hidden[b, : lengths[b]]


def run_heads(model: NativeDenoiser, calls: list[Call]) -> None:
    """The output head once on the calls' hidden states concatenated; each gets its rows' logits,
    bit for bit its own call's (head_logits pads to a multiple of 16 rows for that)."""
    logits = model.logits(torch.cat([call.ids for call in calls]))  # (sum n, V)
    for call, part in zip(calls, logits.split([len(call.ids) for call in calls]), strict=True):
        call.result = part


def run_alone(model: Any, call: Call) -> torch.Tensor:
    """The call as the wrapped model runs it by itself."""
    if call.kind == "packed":
        assert call.layout is not None
        return model.packed(call.ids, call.layout.positions, call.layout.segments, call.cache, call.layout.origin)
    if call.kind == "head":
        return model.logits(call.ids)
    return model(call.ids, call.cache)


class BatchingDenoiser:
    """The Denoiser every worker samples with; see the module docstring. `batch=False` passes
    every call straight through (threads alone). A call waits until every running worker has
    called, or for `wait` seconds: on a busy CPU the workers' own sampling steps take turns under
    the GIL, and 0.02 s split 16 workers into groups of two where 0.25 s gathers them all.
    (Measured with benchmarks/serve.py and 16 workers: 232 forward calls in 118 forwards at
    0.02 s, in 23 at 0.5 s.)"""

    def __init__(self, model: Denoiser, *, batch: bool = True, wait: float = 0.25) -> None:
        self.model, self.batch, self.wait = model, batch, wait
        self.facts: ModelFacts = model.facts
        self.tokenizer = model.tokenizer
        self._native = isinstance(model, NativeDenoiser)
        self._packs = callable(getattr(model, "packed", None)) and callable(getattr(model, "logits", None))
        self._lock = threading.Condition()
        self._pending: list[Call] = []
        self._active = 0  # registered workers
        self._local = threading.local()
        self.forwards = 0  # batched or single forwards run, packed or not (for the benchmark)
        self.calls = 0  # forward calls the workers made
        self.heads = 0  # output heads run (on the hidden states of one call or of several)
        self.head_calls = 0  # output head calls the workers made

    # -- the Denoiser protocol, and the PackedDenoiser one where the wrapped model packs ------
    @property
    def device(self) -> torch.device:
        return self.model.device

    def new_cache(self) -> Any:
        return self.model.new_cache()

    def __getattr__(self, name: str) -> Any:
        # the optional methods (extend, refresh, window, new_window_cache) of the wrapped model
        return getattr(self.model, name)

    def __call__(self, ids: torch.Tensor, cache: Any = None, **kwargs: Any) -> torch.Tensor:
        if kwargs:  # (a uniform-noise model's previous=) not batched
            self._cancelled()
            self._tally("rows", calls=1, runs=1)
            return self.model(ids, cache, **kwargs)
        return self._submit(Call(ids, cache))

    @property
    def packed(self) -> Callable[..., torch.Tensor] | None:
        """PackedDenoiser.packed, the workers' calls batched, where the wrapped model packs; None
        where it does not (choose_forward then feeds rows side by side)."""
        return self._packed if self._packs else None

    @property
    def logits(self) -> Callable[..., torch.Tensor] | None:
        """PackedDenoiser.logits, the workers' calls batched, where the wrapped model packs; else None."""
        return self._logits if self._packs else None

    def _packed(
        self, ids: torch.Tensor, positions: torch.Tensor, segments: torch.Tensor, cache: Any, origin: int = 0
    ) -> torch.Tensor:
        """ids, positions, segments (N,) after the cache -> final hidden states (N, hidden); the cache
        gets the N new keys/values (the caller crops)."""
        return self._submit(Call(ids, cache, "packed", Layout(positions, segments, origin)))

    def _logits(self, hidden: torch.Tensor, exact: bool = True) -> torch.Tensor:
        """Final hidden states (n, hidden) -> logits (n, V) in float32; always exact here (the batch's
        rows are padded together, so a caller's few rows cost no padding of their own)."""
        if not len(hidden):  # no rows (how the sampler learns the vocabulary's size): nothing to wait for
            return cast(PackedDenoiser, self.model).logits(hidden)
        return self._submit(Call(hidden, None, "head"))

    # -- workers -------------------------------------------------------------------------------
    @contextlib.contextmanager
    def worker(self, cancelled: threading.Event) -> Iterator[None]:
        """Run a request's sampling in this thread as one of the workers calls wait for."""
        self._local.cancelled = cancelled
        with self._lock:
            self._active += 1
        try:
            yield
        finally:
            self._local.cancelled = None
            with self._lock:
                self._active -= 1
                self._lock.notify_all()  # the ones left may be all there now

    def _cancelled(self) -> threading.Event | None:
        """This thread's worker's cancel event (None outside a worker); RequestCancelled once it is set."""
        cancelled: threading.Event | None = getattr(self._local, "cancelled", None)
        if cancelled is not None and cancelled.is_set():
            raise RequestCancelled
        return cancelled

    def _tally(self, kind: Kind, calls: int, runs: int) -> None:
        with self._lock:
            if kind == "head":
                self.head_calls, self.heads = self.head_calls + calls, self.heads + runs
            else:
                self.calls, self.forwards = self.calls + calls, self.forwards + runs

    def _submit(self, call: Call) -> torch.Tensor:
        """The call's result, run with the other workers' calls that fit (alone outside a worker)."""
        if self._cancelled() is None or not self.batch:
            self._tally(call.kind, calls=1, runs=1)
            return run_alone(self.model, call)
        self._tally(call.kind, calls=1, runs=0)
        with self._lock:
            self._pending.append(call)
        while taken := self._arrive(call):  # this thread runs a round, perhaps without its own call
            self._run(taken)
        with self._lock:
            while not call.done:
                self._lock.wait()
        if call.error is not None:
            raise call.error
        assert call.result is not None
        return call.result

    def _arrive(self, call: Call) -> list[Call]:
        """Wait for a round; return the calls this thread must run (empty: another thread took the
        call). Head calls go first: a round with some runs them alone, and the forward calls wait
        for the next round, which the head callers' next forward calls then join, so that the
        workers keep in step. (A round of both kinds runs two half-size forwards, and the workers
        it splits stay split: 6 workers, one a call behind, ran every round as 5 of one kind and 1
        of the other.) A worker makes a few head calls a pass (its rows' first reads, then its drafts,
        sampler.DRAFT_CHUNK at a time, up to the floor), so forward calls wait as many rounds."""
        with self._lock:
            while True:
                if call not in self._pending:
                    return []
                waited = time.perf_counter() - self._pending[0].arrived
                if len(self._pending) >= self._active or waited >= self.wait:
                    heads = [c for c in self._pending if c.kind == "head"]
                    taken = heads or self._pending
                    self._pending = [c for c in self._pending if c.kind != "head"] if heads else []
                    return taken
                self._lock.wait(self.wait - waited)

    def _run(self, calls: list[Call]) -> None:
        """Each group's forward in turn; a group's workers get their rows as soon as it is done, so
        that their sampling steps run while the next group's forward does (torch frees the GIL)."""
        groups: dict[tuple[Any, ...], list[Call]] = {}
        for call in calls:
            groups.setdefault(group_key(call, self._native), []).append(call)
        try:
            for key, group in groups.items():
                try:
                    self._forward(key, group)
                except BaseException as error:  # each waiting worker raises it in its own thread
                    for call in group:
                        call.error = error
                self._release(group)
        finally:
            self._release(calls)

    def _release(self, calls: list[Call]) -> None:
        with self._lock:
            for call in calls:
                call.done = True
            self._lock.notify_all()

    def _forward(self, key: tuple[Any, ...], group: list[Call]) -> None:
        self._tally(group[0].kind, calls=0, runs=1)
        if len(group) == 1:
            group[0].result = run_alone(self.model, group[0])
            return
        if key[0] in ("native", "packed", "head"):
            assert isinstance(self.model, NativeDenoiser)
            {"native": run_native, "packed": run_packed, "head": run_heads}[key[0]](self.model, group)
            return
        logits = self.model(torch.cat([call.ids for call in group]), None)  # no cache, same shape: canvases stacked
        row = 0
        for call in group:
            call.result = logits[row : row + len(call.ids)]
            row += len(call.ids)
