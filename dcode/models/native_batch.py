"""The pieces of the native Qwen2's batched forwards (NativeDenoiser.batched, .batched_packed): a
server's requests running together as one forward, each at its own cache length and input length.

The callers' inputs are stacked and right-padded to the longest, their caches right-padded to the
longest, each row at its own positions (RoPE) under its own mask, so that no real position sees
padding or another caller's; each caller gets its rows of the result and its cache as its own
call would leave it. Hidden states are bit for bit each call's alone in float32 on a CPU while the
batch's longest cache plus its input is at most 192 keys (torch 2.13: past that its CPU attention
takes the keys in blocks, and a call whose keys the padding spreads over two rounds otherwise,
within some ulps), and always for the call with the longest cache.

Owns: the batch's masks and its padded keys/values. Imports nothing of dcode.models.native (which
runs the forwards); knows nothing about threads, requests or which calls run together
(dcode.serve.batching schedules them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch
import torch.nn.functional as F

KeyValues = list[tuple[torch.Tensor, torch.Tensor]]  # every layer's keys, values (B, Hkv, length, D)


class Cache(Protocol):
    """A cache of keys/values as NativeCache holds them."""

    layers: KeyValues

    @property
    def length(self) -> int: ...


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


def packed_masks(owns: Sequence[torch.Tensor], width: int, cached: int, device: torch.device) -> torch.Tensor:
    """(B, 1, N, C + N) bool for packed calls stacked, from each call's own packed_mask (N_b, c_b + N_b):
    its cached keys [0, c_b) in the cache right-padded to C = `cached`, its N_b packed keys at
    [C, C + N_b), the rest padding, seen by no real query. A padding query (t >= N_b) sees its own key
    only: a query that sees no key comes out NaN in some SDPA kernels and torch versions (torch 2.13's
    CPU ones give 0), its keys and values would carry the NaN into the next layer, and there a real
    query's weight of 0 on them still makes NaN (0 * NaN). Example: one call, no cache -> its packed_mask."""
    mask = torch.zeros(len(owns), 1, width, cached + width, dtype=torch.bool, device=device)
    for b, own in enumerate(owns):
        n = own.shape[0]
        c = own.shape[1] - n
        mask[b, 0, :n, :c] = own[:, :c]
        mask[b, 0, :n, cached : cached + n] = own[:, c:]
        padding = torch.arange(n, width, device=device)
        mask[b, 0, padding, cached + padding] = True
    return mask


def padded_past(
    caches: Sequence[Cache | None], rows: list[int], cached: int, layers: int, dtype: torch.dtype, device: torch.device
) -> KeyValues:
    """Every layer's keys/values (B, Hkv, C, D) for the rows of calls with these caches, `rows[i]`
    rows for caches[i]: each cache right-padded with zeros to C = `cached` positions (None or empty:
    all padding), once per row; `dtype`: the network's (its weights'). A scratch cache's layers,
    which the forward appends to."""
    if not cached:
        return []
    kv_shape = next(cache.layers[0][0].shape for cache in caches if cache is not None and cache.layers)

    def padded(cache: Cache | None, count: int, i: int, j: int) -> torch.Tensor:  # (count, Hkv, C, D)
        if cache is None or not cache.layers:
            empty = torch.zeros(1, kv_shape[1], cached, kv_shape[3], dtype=dtype, device=device)
            return empty.expand(count, -1, -1, -1)
        keys = cache.layers[i][j][:1]
        return F.pad(keys, (0, 0, 0, cached - keys.shape[2])).expand(count, -1, -1, -1)

    return [
        (
            torch.cat([padded(cache, count, i, 0) for cache, count in zip(caches, rows, strict=True)]),
            torch.cat([padded(cache, count, i, 1) for cache, count in zip(caches, rows, strict=True)]),
        )
        for i in range(layers)
    ]


def keep_new(
    caches: Sequence[Cache | None], rows: list[int], lengths: list[int], cached: int, presents: KeyValues
) -> None:
    """Each cache becomes what its call alone leaves: its own c positions, then its n = lengths[i]
    new ones, from its rows of the batch's keys/values (cache right-padded to `cached`)."""
    row = 0
    for cache, count, n in zip(caches, rows, lengths, strict=True):
        if cache is not None:
            c, mine = cache.length, slice(row, row + count)
            cache.layers = [
                (own(keys, mine, c, cached, n), own(values, mine, c, cached, n)) for keys, values in presents
            ]
        row += count


def own(t: torch.Tensor, rows: slice, c: int, cached: int, n: int) -> torch.Tensor:
    """A call's rows of the batch's keys or values (B, Hkv, C + N, D): its c cached positions, then
    its n new ones (the cache right-padded to C = `cached`)."""
    return torch.cat([t[rows, :, :c], t[rows, :, cached : cached + n]], dim=2)
