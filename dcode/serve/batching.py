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
  N, whatever its cache length, run as one by NativeDenoiser.batched_packed (bit for bit each
  call's alone in float32 on a CPU while the batch's longest cache plus N is at most 192 keys:
  dcode.models.native_batch);
- the native Qwen2's output head: every call, the hidden states concatenated (native.head_logits
  pads them to a multiple of 16 rows, and a row's logits do not depend on the rows read with it);
- the native Qwen2, rows (no packing: the cache off): every call of the same input length, whatever
  its cache length, run as one by NativeDenoiser.batched;
- any other model without a cache, the same canvas length: the canvases stacked.
Anything else (keyword arguments, a uniform-noise model's extend(), the window cache, another
model's packed forward) passes through unbatched or runs alone. A scheduler: the batched forwards
are the model's. Knows nothing about HTTP, requests or prompts.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import torch

from dcode.models.base import Denoiser, ModelFacts, PackedDenoiser
from dcode.models.native import NativeDenoiser, PackedCall


class RequestCancelled(Exception):
    """The worker's request was cancelled (client gone, server stopping): raised at its next call."""


Kind = Literal["rows", "packed", "head"]  # a forward of rows, a packed forward, the output head


@dataclass(eq=False)
class Call:
    ids: torch.Tensor  # rows: (R, n) token ids; packed: (N,) token ids; head: (n, hidden) final hidden states
    cache: Any
    kind: Kind = "rows"
    packed: PackedCall | None = None  # packed: the whole call (ids, positions, segments, cache, origin)
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
    if native and call.kind == "rows":
        # any cache length (per-row positions and masks), one input length: a row padded to a longer
        # input pays for its padding in every layer (a third of the positions at --busy-draft 0)
        return ("native", call.ids.shape[1])
    if call.kind == "rows" and call.cache is None:
        return ("full", call.ids.shape[1])
    return ("alone", id(call))


def run_heads(model: PackedDenoiser, calls: list[Call]) -> None:
    """The output head once on the calls' hidden states concatenated; each gets its rows' logits,
    bit for bit its own call's (head_logits pads to a multiple of 16 rows for that)."""
    logits = model.logits(torch.cat([call.ids for call in calls]))  # (sum n, V)
    for call, part in zip(calls, logits.split([len(call.ids) for call in calls]), strict=True):
        call.result = part


def run_alone(model: Any, call: Call) -> torch.Tensor:
    """The call as the wrapped model runs it by itself."""
    if call.kind == "packed":
        assert call.packed is not None
        return model.packed(*call.packed)
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
        self._native = callable(getattr(model, "batched", None))  # the native Qwen2 (NativeDenoiser.batched)
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
        return self._submit(Call(ids, cache, "packed", PackedCall(ids, positions, segments, cache, origin)))

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
        passes.DRAFT_CHUNK at a time, up to the floor), so forward calls wait as many rounds."""
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
        if key[0] == "head":
            run_heads(cast(PackedDenoiser, self.model), group)
            return
        if key[0] in ("native", "packed"):
            model = cast(NativeDenoiser, self.model)
            if key[0] == "native":
                results = model.batched([(call.ids, call.cache) for call in group])
            else:
                results = model.batched_packed([call.packed for call in group if call.packed is not None])
            for call, result in zip(group, results, strict=True):
                call.result = result
            return
        logits = self.model(torch.cat([call.ids for call in group]), None)  # no cache, same shape: canvases stacked
        row = 0
        for call in group:
            call.result = logits[row : row + len(call.ids)]
            row += len(call.ids)
