"""A model proxy that batches the forward passes of requests running together.

Each request's denoise() generator (the one sampling loop) runs in its own worker thread with a
Batcher as its model. The Batcher satisfies the Denoiser protocol; a forward call from a worker
waits until every running worker has called (or a short wait ran out), then the calls that fit
together run as one batched forward and each worker gets its own rows back. Calls that do not fit
run alone. The results are the unbatched results: rows of a batch never see one another.

What fits together:
- no cache, the same canvas length: the canvases stacked (any model);
- the native block-causal model (dcode.models.native) with caches of the same length: the caches
  stacked, and shorter inputs padded on the right when they end on an attention-block boundary
  (padding then lies in later blocks, which no real position can see).
Anything else (keyword arguments, a uniform-noise model's extend(), the window cache) passes
through unbatched. Knows nothing about HTTP, requests or prompts.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from dcode.models.base import Denoiser, ModelFacts
from dcode.models.native import NativeCache, NativeDenoiser, block_causal_mask


class Cancelled(Exception):
    """The worker's request was cancelled (client gone, server stopping): raised at its next forward."""


@dataclass(eq=False)
class Call:
    ids: torch.Tensor  # (R, n)
    cache: Any
    result: torch.Tensor | None = None  # (R, n, V)
    error: BaseException | None = None
    done: bool = False
    arrived: float = field(default_factory=time.perf_counter)


def group_key(call: Call, facts: ModelFacts, native: bool) -> tuple[Any, ...]:
    """Calls with the same key run as one forward. Example: no cache, 40 positions -> ("full", 40)."""
    rows, n = call.ids.shape
    if call.cache is None:
        return ("full", n)
    if native and isinstance(call.cache, NativeCache) and facts.block is not None:
        c = call.cache.length
        # ends on a block boundary: may be padded on the right up to the group's longest input
        return ("native", c, "aligned" if (c + n) % facts.block == 0 else n)
    return ("alone", id(call))


def run_native(model: NativeDenoiser, calls: list[Call]) -> None:
    """One forward of the native Qwen2 for calls whose caches hold the same positions [0, c):
    their rows stacked, their caches stacked row by row, inputs right-padded to the longest."""
    c = calls[0].cache.length
    n = max(call.ids.shape[1] for call in calls)
    ids = torch.cat([F.pad(call.ids, (0, n - call.ids.shape[1]), value=model.facts.pad_id) for call in calls])
    merged = NativeCache()
    if c:
        layers = len(calls[0].cache.layers)
        merged.layers = [
            tuple(  # type: ignore[misc]
                torch.cat([call.cache.layers[i][j][:1].expand(len(call.ids), -1, -1, -1) for call in calls])
                for j in (0, 1)
            )
            for i in range(layers)
        ]
    mask = block_causal_mask(c, n, c + n, model.facts.block, ids.device)
    with torch.inference_mode():
        logits = model.model(ids, c, mask, merged).float()  # (sum R, n, V)
    row = 0
    for call in calls:
        rows, width = call.ids.shape
        call.result = logits[row : row + rows, :width]
        call.cache.layers = [
            (k[row : row + rows, :, : c + width], v[row : row + rows, :, : c + width]) for k, v in merged.layers
        ]
        row += rows


class Batcher:
    """The Denoiser every worker samples with; see the module docstring. `batch=False` passes
    every call straight through (threads alone); `wait` is how long a call waits for the others."""

    def __init__(self, model: Denoiser, *, batch: bool = True, wait: float = 0.02) -> None:
        self.model, self.batch, self.wait = model, batch, wait
        self.facts: ModelFacts = model.facts
        self.tokenizer = model.tokenizer
        self._native = isinstance(model, NativeDenoiser)
        self._lock = threading.Condition()
        self._pending: list[Call] = []
        self._active = 0  # registered workers
        self._local = threading.local()
        self.forwards = 0  # batched or single forwards run (for the benchmark)
        self.calls = 0  # forward calls the workers made

    # -- the Denoiser protocol -----------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return self.model.device

    def new_cache(self) -> Any:
        return self.model.new_cache()

    def __getattr__(self, name: str) -> Any:
        # the optional methods (extend, refresh, window, new_window_cache) of the wrapped model
        return getattr(self.model, name)

    def __call__(self, ids: torch.Tensor, cache: Any = None, **kwargs: Any) -> torch.Tensor:
        cancelled = getattr(self._local, "cancelled", None)
        if cancelled is not None and cancelled.is_set():
            raise Cancelled
        if not self.batch or kwargs or cancelled is None:
            with self._lock:
                self.calls += 1
                self.forwards += 1
            return self.model(ids, cache, **kwargs)
        call = Call(ids, cache)
        taken = self._arrive(call)
        if taken:
            self._run(taken)
        with self._lock:
            while not call.done:
                self._lock.wait()
        if call.error is not None:
            raise call.error
        assert call.result is not None
        return call.result

    # -- workers -------------------------------------------------------------------------------
    @contextlib.contextmanager
    def worker(self, cancelled: threading.Event) -> Iterator[None]:
        """Run a request's sampling in this thread as one of the workers forward calls wait for."""
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

    def _arrive(self, call: Call) -> list[Call]:
        """Queue the call; return the calls this thread must run (empty: another thread runs it)."""
        with self._lock:
            self.calls += 1
            self._pending.append(call)
            while True:
                if call.done or call not in self._pending:
                    return []
                waited = time.perf_counter() - self._pending[0].arrived
                if len(self._pending) >= self._active or waited >= self.wait:
                    taken, self._pending = self._pending, []
                    return taken
                self._lock.wait(self.wait - waited)

    def _run(self, calls: list[Call]) -> None:
        groups: dict[tuple[Any, ...], list[Call]] = {}
        for call in calls:
            groups.setdefault(group_key(call, self.facts, self._native), []).append(call)
        try:
            for key, group in groups.items():
                try:
                    self._forward(key, group)
                except BaseException as error:  # each waiting worker raises it in its own thread
                    for call in group:
                        call.error = error
        finally:
            with self._lock:
                for call in calls:
                    call.done = True
                self._lock.notify_all()

    def _forward(self, key: tuple[Any, ...], group: list[Call]) -> None:
        with self._lock:
            self.forwards += 1
        if len(group) == 1:
            call = group[0]
            call.result = self.model(call.ids, call.cache)
        elif key[0] == "native":
            assert isinstance(self.model, NativeDenoiser)
            run_native(self.model, group)
        else:  # no cache, same shape: stack the canvases
            logits = self.model(torch.cat([call.ids for call in group]), None)
            row = 0
            for call in group:
                call.result = logits[row : row + len(call.ids)]
                row += len(call.ids)
