"""Several callers' forwards of the native Qwen2 as one (NativeDenoiser.batched, .batched_packed):
a server's requests running together, each at its own cache length and input length.

The callers' inputs are stacked and right-padded to the longest, their caches right-padded to the
longest, each row at its own positions (RoPE) under its own mask, so that no real position sees
padding or another caller's; each caller gets its rows of the result and its cache as its own
call would leave it. Hidden states are bit for bit each call's alone in float32 on a CPU while the
batch's longest cache plus its input is at most 192 keys (torch 2.13: past that its CPU attention
takes the keys in blocks, and a call whose keys the padding spreads over two rounds otherwise,
within some ulps), and always for the call with the longest cache.

Owns: the batch's masks, padded caches and positions. Knows nothing about threads, requests or
which calls run together (dcode.serve.batching schedules them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from dcode.models.native import NativeCache, PackedCall, packed_mask

if TYPE_CHECKING:
    from dcode.models.native import NativeDenoiser


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


def packed_masks(
    calls: Sequence[PackedCall], width: int, cached: int, block: int, device: torch.device
) -> torch.Tensor:
    """(B, 1, N, C + N) bool for packed calls stacked: call b's own packed_mask, its cached keys [0, c_b)
    in the cache right-padded to C = `cached`, its N_b packed keys at [C, C + N_b), the rest padding,
    seen by no real query. A padding query (t >= N_b) sees its own key only: a query that sees no key
    comes out NaN in some SDPA kernels and torch versions (torch 2.13's CPU ones give 0), its keys and
    values would carry the NaN into the next layer, and there a real query's weight of 0 on them
    still makes NaN (0 * NaN). Example: one call, no cache -> its packed_mask."""
    mask = torch.zeros(len(calls), 1, width, cached + width, dtype=torch.bool, device=device)
    for b, call in enumerate(calls):
        c, n = call.cache.length, len(call.ids)
        own = packed_mask(call.positions, call.segments, c, block, call.origin)[0, 0]  # (N_b, c + N_b)
        mask[b, 0, :n, :c] = own[:, :c]
        mask[b, 0, :n, cached : cached + n] = own[:, c:]
        padding = torch.arange(n, width, device=device)
        mask[b, 0, padding, cached + padding] = True
    return mask


def padded_past(
    model: NativeDenoiser, caches: Sequence[NativeCache | None], rows: list[int], cached: int
) -> NativeCache:
    """Every layer's keys/values (B, Hkv, C, D) for the rows of calls with these caches, `rows[i]`
    rows for caches[i]: each cache right-padded with zeros to C = `cached` positions (None or empty:
    all padding), once per row. A scratch cache that the forward appends to."""
    qwen, past = model.model, NativeCache()
    if not cached:
        return past
    kv_shape = next(cache.layers[0][0].shape for cache in caches if cache is not None and cache.layers)
    dtype = qwen.lm_head.weight.dtype  # the keys' and values' (the weights')

    def padded(cache: NativeCache | None, count: int, i: int, j: int) -> torch.Tensor:  # (count, Hkv, C, D)
        if cache is None or not cache.layers:
            empty = torch.zeros(1, kv_shape[1], cached, kv_shape[3], dtype=dtype, device=model.device)
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


def keep_new(
    caches: Sequence[NativeCache | None], rows: list[int], lengths: list[int], cached: int, presents: NativeCache
) -> None:
    """Each cache becomes what its call alone leaves: its own c positions, then its n = lengths[i]
    new ones, from its rows of the batch's keys/values (cache right-padded to `cached`)."""
    row = 0
    for cache, count, n in zip(caches, rows, lengths, strict=True):
        if cache is not None:
            c, mine = cache.length, slice(row, row + count)
            cache.layers = [
                (own(keys, mine, c, cached, n), own(values, mine, c, cached, n)) for keys, values in presents.layers
            ]
        row += count


def own(t: torch.Tensor, rows: slice, c: int, cached: int, n: int) -> torch.Tensor:
    """A call's rows of the batch's keys or values (B, Hkv, C + N, D): its c cached positions, then
    its n new ones (the cache right-padded to C = `cached`)."""
    return torch.cat([t[rows, :, :c], t[rows, :, cached : cached + n]], dim=2)


def rows_forward(model: NativeDenoiser, calls: Sequence[tuple[torch.Tensor, NativeCache | None]]) -> list[torch.Tensor]:
    """One forward for calls (ids (R_b, n_b), cache) at any cache length and input length: rows
    stacked, caches right-padded to the longest, inputs right-padded, each row at its own positions
    (RoPE) and under its own mask (rows_mask) -> each call's logits (R_b, n_b, V) in float32."""
    facts, device = model.facts, model.device
    rows = [len(ids) for ids, _ in calls]
    starts = [cache.length if cache is not None else 0 for ids, cache in calls for _ in range(len(ids))]
    lengths = [ids.shape[1] for ids, _ in calls for _ in range(len(ids))]
    width, cached = max(lengths), max(starts)
    stacked = torch.cat([F.pad(ids, (0, width - ids.shape[1]), value=facts.pad_id) for ids, _ in calls])
    mask = rows_mask(starts, lengths, width, cached, facts.block).to(device)
    positions = (torch.tensor(starts)[:, None] + torch.arange(width)[None, :]).to(device)  # (B, n)
    caches = [cache for _, cache in calls]
    past = padded_past(model, caches, rows, cached)
    with torch.inference_mode():
        hidden = model.model.hidden(stacked, positions, mask, past)  # (B, n, hidden)
        logits = model.model.lm_head(hidden).float()  # (B, n, V)
    keep_new(caches, rows, [ids.shape[1] for ids, _ in calls], cached, past)
    out, row = [], 0
    for (ids, _), count in zip(calls, rows, strict=True):
        out.append(logits[row : row + count, : ids.shape[1]])
        row += count
    return out


def packed_forward(model: NativeDenoiser, calls: Sequence[PackedCall]) -> list[torch.Tensor]:
    """One forward of packed calls (NativeDenoiser.packed's) at any cache length and packed length:
    sequences stacked and right-padded to the longest N, caches right-padded to the longest, each
    call at its own positions (RoPE) under its own packed_mask (packed_masks) -> each call's final
    hidden states (N_b, hidden), its cache as packed() leaves it (its N_b new positions appended)."""
    assert model.facts.block is not None, "packing needs block-causal attention"
    lengths = [len(call.ids) for call in calls]
    width, cached = max(lengths), max(call.cache.length for call in calls)
    stacked = torch.stack([F.pad(call.ids, (0, width - len(call.ids)), value=model.facts.pad_id) for call in calls])
    positions = torch.stack([F.pad(call.positions, (0, width - len(call.positions))) for call in calls])
    mask = packed_masks(calls, width, cached, model.facts.block, model.device)  # (B, 1, N, C + N)
    caches = [call.cache for call in calls]
    past = padded_past(model, caches, [1] * len(calls), cached)
    with torch.inference_mode():
        hidden = model.model.hidden(stacked, positions, mask, past)  # (B, N, hidden)
    keep_new(caches, [1] * len(calls), lengths, cached, past)
    return [hidden[b, : lengths[b]] for b in range(len(calls))]
