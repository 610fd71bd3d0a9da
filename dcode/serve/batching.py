"""A model proxy that batches the forward passes of requests running together.

Each request's denoise() generator (the one sampling loop) runs in its own worker thread with a
BatchingDenoiser as its model, which satisfies the Denoiser protocol: a forward call from a worker
waits until every running worker has called (or a short wait ran out), then the calls that fit
together run as one batched forward and each worker gets its own rows back. Calls that do not fit
run alone. The results are the unbatched results: rows of a batch never see one another.

What fits together:
- the native Qwen2 (dcode.models.native, dcode-tiny): every call of the same input length,
  whatever its cache length (run_native also takes mixed input lengths, but on a CPU a row padded
  from 16 to 32 inputs costs what 32 cost). Caches are right-padded to the longest, each row runs
  at its own positions (RoPE) under its own mask, and no real position sees padding or another row;
- any other model without a cache, the same canvas length: the canvases stacked.
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
from dcode.models.native import NativeCache, NativeDenoiser, rotary


class RequestCancelled(Exception):
    """The worker's request was cancelled (client gone, server stopping): raised at its next forward."""


@dataclass(eq=False)
class Call:
    ids: torch.Tensor  # (R, n)
    cache: Any
    result: torch.Tensor | None = None  # (R, n, V)
    error: BaseException | None = None
    done: bool = False
    arrived: float = field(default_factory=time.perf_counter)


def group_key(call: Call, native: bool) -> tuple[Any, ...]:
    """Calls with the same key run as one forward. Example: no cache, 40 positions -> ("full", 40)."""
    if native and (call.cache is None or isinstance(call.cache, NativeCache)):
        # any cache length (per-row positions and masks), one input length: a row padded to a longer
        # input pays for its padding in every layer (a third of the positions at --busy-draft 0)
        return ("native", call.ids.shape[1])
    if call.cache is None:
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


def ids_dtype(qwen: Any) -> torch.dtype:
    """The dtype of the network's keys and values (its weights')."""
    return qwen.lm_head.weight.dtype  # type: ignore[no-any-return]


def run_native(model: NativeDenoiser, calls: list[Call]) -> None:
    """One forward of the native Qwen2 for calls at any cache length and input length: rows stacked,
    caches right-padded to the longest, inputs right-padded, each row at its own positions (RoPE)
    and under its own mask, so that no row sees another's or any padding."""
    qwen, facts = model.model, model.facts
    device = model.device
    rows = [len(call.ids) for call in calls]
    starts = [call.cache.length if call.cache is not None else 0 for call in calls for _ in range(len(call.ids))]
    lengths = [call.ids.shape[1] for call in calls for _ in range(len(call.ids))]
    width, cached = max(lengths), max(starts)
    ids = torch.cat([F.pad(call.ids, (0, width - call.ids.shape[1]), value=facts.pad_id) for call in calls])
    past: list[tuple[torch.Tensor, torch.Tensor] | None] = [None] * len(qwen.model.layers)
    if cached:
        kv_shape = next(c.cache.layers[0][0].shape for c in calls if c.cache is not None and c.cache.layers)

        def padded(call: Call, i: int, j: int) -> torch.Tensor:  # (R, Hkv, C, D)
            if call.cache is None or not call.cache.layers:  # nothing cached yet: all padding
                empty = torch.zeros(1, kv_shape[1], cached, kv_shape[3], dtype=ids_dtype(qwen), device=device)
                return empty.expand(len(call.ids), -1, -1, -1)
            keys = call.cache.layers[i][j][:1]
            keys = F.pad(keys, (0, 0, 0, cached - keys.shape[2]))
            return keys.expand(len(call.ids), -1, -1, -1)

        past = [
            (torch.cat([padded(call, i, 0) for call in calls]), torch.cat([padded(call, i, 1) for call in calls]))
            for i in range(len(qwen.model.layers))
        ]
    mask = rows_mask(starts, lengths, width, cached, facts.block).to(device)
    positions = (torch.tensor(starts)[:, None] + torch.arange(width)[None, :]).to(device)  # (B, n)
    with torch.inference_mode():
        x = qwen.model.embed_tokens(ids)  # (B, n, hidden)
        cos, sin = rotary(positions.reshape(-1), qwen.shape.head_dim, qwen.shape.theta, x.dtype)
        cos, sin = (t.view(len(ids), 1, width, -1) for t in (cos, sin))  # (B, 1, n, D)
        presents = []
        for i, layer in enumerate(qwen.model.layers):
            x, present = layer(x, cos, sin, mask, past[i])
            presents.append(present)
        logits = qwen.lm_head(qwen.model.norm(x)).float()  # (B, n, V)
    row = 0
    for call, count in zip(calls, rows, strict=True):
        c, n = starts[row], lengths[row]
        call.result = logits[row : row + count, :n]
        if call.cache is not None:
            call.cache.layers = [
                tuple(
                    torch.cat([t[row : row + count, :, :c], t[row : row + count, :, cached : cached + n]], dim=2)
                    for t in kv
                )
                for kv in presents
            ]
        row += count


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
        # the optional methods (extend, refresh, window, new_window_cache) of the wrapped model;
        # not packed(), which would run each worker's rows past the batch
        if name in ("packed", "logits"):
            raise AttributeError(name)
        return getattr(self.model, name)

    def __call__(self, ids: torch.Tensor, cache: Any = None, **kwargs: Any) -> torch.Tensor:
        cancelled = getattr(self._local, "cancelled", None)
        if cancelled is not None and cancelled.is_set():
            raise RequestCancelled
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
