"""Qwen2 layers in plain torch, for block-causal checkpoints: dcode-tiny starts without transformers.

Importing transformers' Qwen2 module costs 2-3 s on a 2-core CPU (it pulls in torch.distributed
and torch._dynamo), more than the rest of a short `dcode new` together; this module is the same
decoder in plain torch, read from the same safetensors names, and tests hold its logits
equal to transformers' Qwen2ForCausalLM. It covers what dcode-tiny and block-diffusion
checkpoints of its kind use: RMSNorm, rotary positions (default RoPE), grouped-query attention
with q/k/v biases, SwiGLU, tied or untied output head, a block-causal mask and an exact cache of
finished blocks. A checkpoint asking for anything else (other RoPE types, sliding windows, full
attention and its approximate window cache) is loaded by transformers instead (qwen2.native_fits).

Owns: the modules, the attention mask, the cache, loading the weights strictly (the layers'
pieces and load_checked serve llada2's network too). Knows nothing
about tokenizers, sampling, files other than the checkpoint's, or the terminal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import torch
import torch.nn.functional as F
from torch import nn

from dcode.models.base import ModelError, ModelFacts
from dcode.models.checkpoint import read_headers, refuse_misfit
from dcode.models.native_batch import keep_new, packed_masks, padded_past, rows_mask

# Buffers some checkpoints carry that are recomputed here; their presence is harmless.
IGNORED_KEYS = ("rotary_emb.inv_freq",)
M = TypeVar("M", bound=nn.Module)  # a model whose parameter names are its checkpoint's


def block_causal_mask(
    query_start: int, query_len: int, key_len: int, block: int | None, device: torch.device, origin: int = 0
) -> torch.Tensor:
    """(1, 1, Lq, Lk) bool: query at absolute position q may see key k iff
    (k - origin) // block <= (q - origin) // block: blocks start at origin + n * block.

    block=None means full bidirectional attention (every query sees every key).
    Example: block=2, 4 tokens -> row 0 sees keys 0-1, row 2 sees keys 0-3; with origin=1,
    row 0 sees key 0 only and rows 1-2 see keys 0-2.
    """
    if block is None:
        return torch.ones(1, 1, query_len, key_len, dtype=torch.bool, device=device)
    q = torch.div(
        torch.arange(query_start, query_start + query_len, device=device) - origin, block, rounding_mode="floor"
    )
    k = torch.div(torch.arange(key_len, device=device) - origin, block, rounding_mode="floor")  # (Lk,)
    return (k[None, :] <= q[:, None])[None, None]


@dataclass(frozen=True)
class Shape:
    """The numbers of a Qwen2 config.json that the forward needs."""

    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    eps: float  # rms_norm_eps
    theta: float  # RoPE base
    tied: bool  # lm_head shares the embedding matrix

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> Shape:
        heads = int(config["num_attention_heads"])
        rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
        return cls(
            vocab=int(config["vocab_size"]),
            hidden=int(config["hidden_size"]),
            layers=int(config["num_hidden_layers"]),
            heads=heads,
            kv_heads=int(config.get("num_key_value_heads") or heads),
            head_dim=int(config.get("head_dim") or int(config["hidden_size"]) // heads),
            intermediate=int(config["intermediate_size"]),
            eps=float(config.get("rms_norm_eps", 1e-6)),
            theta=float(rope.get("rope_theta", config.get("rope_theta", 10000.0))),
            tied=bool(config.get("tie_word_embeddings", False)),
        )


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm (Zhang & Sennrich 2019), in float32 as Qwen2 computes it: x (..., D) -> (..., D)."""
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(x.dtype)


def rotary(
    positions: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """RoPE tables (Su et al. 2021, RoFormer): positions (L,) -> cos, sin (L, head_dim), each
    frequency theta^(-2i/d) written twice (the halves layout that rotate_half pairs)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float, device=positions.device) / head_dim))
    freqs = positions[:, None].float() * inv_freq[None, :]  # (L, D/2)
    angles = torch.cat([freqs, freqs], dim=-1)  # (L, D)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (B, H, L, D) rotated by position: x * cos + rotate_half(x) * sin."""
    half = x.shape[-1] // 2
    turned = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + turned * sin


def attend(
    q: torch.Tensor,  # (B, H, L, D), rotated
    k: torch.Tensor,  # (B, Hkv, L, D), rotated
    v: torch.Tensor,  # (B, Hkv, L, D)
    mask: torch.Tensor,  # (1, 1, L, K) bool, K = cached + L
    past: tuple[torch.Tensor, torch.Tensor] | None,  # keys, values (B, Hkv, cached, D)
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """Scaled dot-product attention over the cached keys/values and the new ones, each key/value
    head shared by H / Hkv query heads (grouped-query attention, Ainslie et al. 2023) ->
    out (B, H, L, D) and the keys/values (B, Hkv, K, D) to cache."""
    if past is not None:
        k, v = torch.cat([past[0], k], dim=-2), torch.cat([past[1], v], dim=-2)  # (B, Hkv, K, D)
    groups = q.shape[1] // k.shape[1]
    keys, values = (k, v) if groups == 1 else (k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1))
    return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask), (k, v)


def run_layers(
    layers: nn.ModuleList, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor, cache: Any
) -> torch.Tensor:
    """x (B, L, hidden) through every layer, each reading its cached keys/values (cache: a
    NativeCache or None) and storing its new ones there."""
    cached = list(cache.layers) if cache is not None and cache.layers else None
    for i, layer in enumerate(layers):
        x, present = layer(x, cos, sin, mask, cached[i] if cached is not None else None)
        if cache is not None:
            cache.store(i, present)
    return x


class Linear(nn.Linear):
    """nn.Linear without its random init: every weight comes from the checkpoint (and initializing
    on the meta device would import torch._dynamo, 1.5 s)."""

    def reset_parameters(self) -> None:
        pass


class Embedding(nn.Embedding):
    def reset_parameters(self) -> None:
        pass


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)


class Attention(nn.Module):
    def __init__(self, shape: Shape) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = shape.heads, shape.kv_heads, shape.head_dim
        self.q_proj = Linear(shape.hidden, shape.heads * shape.head_dim, bias=True)
        self.k_proj = Linear(shape.hidden, shape.kv_heads * shape.head_dim, bias=True)
        self.v_proj = Linear(shape.hidden, shape.kv_heads * shape.head_dim, bias=True)
        self.o_proj = Linear(shape.heads * shape.head_dim, shape.hidden, bias=False)

    def forward(
        self,
        x: torch.Tensor,  # (B, L, hidden)
        cos: torch.Tensor,  # (L, D)
        sin: torch.Tensor,
        mask: torch.Tensor,  # (1, 1, L, K) bool, K = cached + L
        past: tuple[torch.Tensor, torch.Tensor] | None,  # keys, values (B, Hkv, cached, D)
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        b, n, _ = x.shape
        q = self.q_proj(x).view(b, n, self.heads, self.head_dim).transpose(1, 2)  # (B, H, L, D)
        k = self.k_proj(x).view(b, n, self.kv_heads, self.head_dim).transpose(1, 2)  # (B, Hkv, L, D)
        v = self.v_proj(x).view(b, n, self.kv_heads, self.head_dim).transpose(1, 2)
        out, present = attend(rotate(q, cos, sin), rotate(k, cos, sin), v, mask, past)  # (B, H, L, D)
        return self.o_proj(out.transpose(1, 2).reshape(b, n, self.heads * self.head_dim)), present


class MLP(nn.Module):
    """SwiGLU (Shazeer 2020): down(silu(gate(x)) * up(x))."""

    def __init__(self, hidden: int, inner: int) -> None:
        super().__init__()
        self.gate_proj = Linear(hidden, inner, bias=False)
        self.up_proj = Linear(hidden, inner, bias=False)
        self.down_proj = Linear(inner, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, shape: Shape) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(shape.hidden, shape.eps)
        self.self_attn = Attention(shape)
        self.post_attention_layernorm = RMSNorm(shape.hidden, shape.eps)
        self.mlp = MLP(shape.hidden, shape.intermediate)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor, past: Any
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """Pre-norm residual block: x (B, L, hidden) -> (B, L, hidden), and this layer's keys/values."""
        attended, present = self.self_attn(self.input_layernorm(x), cos, sin, mask, past)
        x = x + attended
        return x + self.mlp(self.post_attention_layernorm(x)), present


class Body(nn.Module):
    def __init__(self, shape: Shape) -> None:
        super().__init__()
        self.embed_tokens = Embedding(shape.vocab, shape.hidden)
        self.layers = nn.ModuleList(Layer(shape) for _ in range(shape.layers))
        self.norm = RMSNorm(shape.hidden, shape.eps)


class Qwen2(nn.Module):
    """Qwen2ForCausalLM's weights and forward; parameter names are the checkpoint's. `config` keeps
    config.json's values (what a transformers twin of this network would be built from)."""

    def __init__(self, shape: Shape, config: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        self.shape, self.config = shape, dict(config or {})
        self.model = Body(shape)
        self.lm_head = Linear(shape.hidden, shape.vocab, bias=False)
        if shape.tied:
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(
        self, ids: torch.Tensor, start: int, mask: torch.Tensor, cache: NativeCache | None = None
    ) -> torch.Tensor:
        """ids (B, L) at positions [start, start+L), mask (1, 1, L, K) -> logits (B, L, V).
        With a cache, each layer's new keys/values are appended to it."""
        positions = torch.arange(start, start + ids.shape[1], device=ids.device)
        return self.lm_head(self.hidden(ids, positions, mask, cache))

    def hidden(
        self, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, cache: NativeCache | None
    ) -> torch.Tensor:
        """ids (B, L) at `positions` (L,), or each row at its own (B, L) (the server's batches), under
        mask (1 or B, 1, L, K) -> the final norm's output (B, L, hidden), what the output head reads."""
        x = self.model.embed_tokens(ids)  # (B, L, hidden)
        cos, sin = rotary(positions.reshape(-1), self.shape.head_dim, self.shape.theta, x.dtype)  # (B*L, D)
        if positions.dim() == 2:
            cos, sin = (t.view(*positions.shape, -1)[:, None] for t in (cos, sin))  # (B, 1, L, D)
        return self.model.norm(run_layers(self.model.layers, x, cos, sin, mask, cache))


class NativeCache:
    """Keys/values (B, Hkv, length, D) of every layer for the first `length` canvas positions;
    crop() forgets everything after. It holds one canvas: rows fed side by side (the verify
    rule's drafts) share its positions through widen(), and crop() goes back to one copy."""

    def __init__(self) -> None:
        self.layers: list[tuple[torch.Tensor, torch.Tensor]] = []

    @property
    def length(self) -> int:
        return self.layers[0][0].shape[-2] if self.layers else 0

    def store(self, layer: int, present: tuple[torch.Tensor, torch.Tensor]) -> None:
        if layer < len(self.layers):
            self.layers[layer] = present
        else:
            self.layers.append(present)

    def crop(self, length: int) -> None:
        self.layers = [(k[:1, :, :length], v[:1, :, :length]) for k, v in self.layers]

    def widen(self, rows: int) -> None:
        """Hold the cached positions once per row (a view of the one copy: every row's are alike)."""
        self.layers = [(k[:1].expand(rows, -1, -1, -1), v[:1].expand(rows, -1, -1, -1)) for k, v in self.layers]


def load_weights(folder: Path, config: Mapping[str, Any], device: torch.device, dtype: torch.dtype) -> Qwen2:
    """The folder's safetensors (one file or shards) in a Qwen2 of config.json's shape. A missing weight, a
    shape that does not fit, or a weight that belongs to nothing is a one-line ModelError."""
    try:
        shape = Shape.of(config)
    except (KeyError, TypeError, ValueError) as error:
        raise ModelError(f"{folder / 'config.json'}: bad value: {error}") from None
    with torch.device("meta"):
        model = Qwen2(shape, config)
    embedding = model.model.embed_tokens if shape.tied else None
    return load_checked(model, folder, device, dtype, tied=embedding, ignored=IGNORED_KEYS)


def load_checked(
    model: M,
    folder: Path,
    device: torch.device,
    dtype: torch.dtype,
    *,
    tied: nn.Embedding | None,
    ignored: tuple[str, ...],
) -> M:
    """The folder's safetensors (one file or shards) into `model`, built on the meta device, whose
    parameter names are the checkpoint's; on `device`, in eval mode. A missing weight, a shape that
    does not fit, or a weight that belongs to nothing (but names ending in one of `ignored`:
    buffers recomputed here) is a one-line ModelError.

    tied: the input embedding that `model.lm_head` shares (a head saved anyway is left unread), or None.
    """
    from dcode.models import quantize, saved

    weights = {k: torch.Size(t.shape) for k, t in read_headers(folder).items()}  # shapes alone, no data yet
    expected = dict(model.state_dict())
    if tied is not None:
        expected.pop("lm_head.weight")
        weights.pop("lm_head.weight", None)
    problems = [
        *(f"missing {k}" for k in sorted(expected.keys() - weights.keys())),
        *(
            f"{k} has shape {tuple(weights[k])}, the config needs {tuple(v.shape)}"
            for k, v in sorted(expected.items())
            if k in weights and weights[k] != v.shape
        ),
        *(f"unused {k}" for k in sorted(weights.keys() - expected.keys()) if not k.endswith(ignored)),
    ]
    refuse_misfit(folder, problems)
    tied_name = next(name for name, module in model.named_modules() if module is tied) if tied is not None else None
    # a saved quantised copy (dcode.models.saved), else one weight at a time, each linear layer
    # quantised as it arrives (--quantize; none: cast alone)
    if not saved.read_into(model, folder, set(expected), device, dtype, quantize.current()):
        quantize.stream_weights(model, folder, set(expected), device, dtype, quantize.current())
    if tied_name is not None:
        quantize.tie_head(model, tied_name)
    quantize.mark(model, quantize.current())
    return model.to(device).eval()


def forward_cached(
    model: nn.Module, ids: torch.Tensor, cache: NativeCache | None, block: int | None, origin: int = 0
) -> torch.Tensor:
    """A denoiser's call on a network of this module's kind (forward(ids, start, mask, cache)):
    ids (B, L) at canvas positions [P, P+L), P = cache.length -> logits (B, L, V) in float32,
    block-causal in blocks of `block` counted from `origin` (None: full attention)."""
    start = 0
    if cache is not None:
        cache.widen(ids.shape[0])
        start = cache.length
    mask = block_causal_mask(start, ids.shape[1], start + ids.shape[1], block, ids.device, origin)
    return model(ids, start, mask, cache).float()


def packed_mask(
    positions: torch.Tensor, segments: torch.Tensor, cached: int, block: int, origin: int = 0
) -> torch.Tensor:
    """(1, 1, N, cached + N) bool for N tokens packed after `cached` cached ones: the token at
    positions[i] of segment segments[i] sees a cached or packed key of an earlier or the same
    attention block (counted from origin) that is shared (segment 0: the cache, the finished blocks
    fed again) or of its own segment. Rows packed side by side thus see what they would see fed
    as a batch (tree attention: SpecInfer, Miao et al. 2024, verifies a tree of drafts so).
    Example: cached 0, block 2, positions [0, 1, 2, 3, 2, 3], segments [0, 0, 1, 1, 2, 2] -> the
    tokens at 2-3 of segment 1 see keys 0-3, those of segment 2 keys 0, 1, 4, 5."""
    device = positions.device
    key_positions = torch.cat([torch.arange(cached, device=device), positions])  # (K,)
    key_segments = torch.cat([torch.zeros(cached, dtype=segments.dtype, device=device), segments])
    query_blocks = torch.div(positions - origin, block, rounding_mode="floor")  # (N,)
    key_blocks = torch.div(key_positions - origin, block, rounding_mode="floor")  # (K,)
    shared_or_own = (key_segments[None, :] == 0) | (key_segments[None, :] == segments[:, None])
    return ((key_blocks[None, :] <= query_blocks[:, None]) & shared_or_own)[None, None]


def head_logits(head: nn.Linear, hidden: torch.Tensor, exact: bool = True) -> torch.Tensor:
    """The output head on some final hidden states (n, hidden) -> logits (n, V) in float32. The
    rows go in padded to a multiple of 16 (copies of the last): a matrix product of few rows
    takes another kernel and rounds otherwise, and a row's logits must not depend on how many
    rows were read with it (the verify rule's answer is one-token-per-pass's exactly).
    exact=False: unpadded, for what no answer depends on (the verify rule's drafts)."""
    n = len(hidden)
    if n == 0:
        return hidden.new_zeros((0, head.out_features), dtype=torch.float32)
    padding = -n % 16 if exact else 0
    rows = torch.cat([hidden, hidden[-1:].expand(padding, -1)]) if padding else hidden
    return head(rows)[:n].float()


class PackedCall(NamedTuple):
    """One caller's packed forward, as NativeDenoiser.packed takes it (see packed_mask)."""

    ids: torch.Tensor  # (N,)
    positions: torch.Tensor  # (N,)
    segments: torch.Tensor  # (N,)
    cache: NativeCache
    origin: int = 0


@dataclass
class NativeDenoiser:
    """Token ids -> logits for a block-causal Qwen2 checkpoint run by this module's forward (dcode's
    own format, Tiny-A2D's bd3lm releases on Qwen2.5)."""

    model: Qwen2
    tokenizer: Any
    facts: ModelFacts

    @torch.inference_mode()
    def __call__(self, ids: torch.Tensor, cache: NativeCache | None = None, *, origin: int = 0) -> torch.Tensor:
        """ids (B, L) at canvas positions [P, P+L) where P = cache.length -> logits (B, L, V) in float32.
        origin: where the attention blocks start (facts.block_origin "answer": the answer's first position).

        With a cache, the new positions' keys/values are appended to it; the caller crops.
        """
        return forward_cached(self.model, ids, cache, self.facts.block, origin)

    @torch.inference_mode()
    def packed(
        self, ids: torch.Tensor, positions: torch.Tensor, segments: torch.Tensor, cache: NativeCache, origin: int = 0
    ) -> torch.Tensor:
        """Rows packed into one sequence after the cache: ids, positions and segments (N,) (see
        packed_mask) -> their final hidden states (N, hidden), which logits() turns into logits
        where they are read. The new keys/values are appended to the cache; the caller crops."""
        assert self.facts.block is not None, "packing needs block-causal attention"
        cache.widen(1)
        mask = packed_mask(positions, segments, cache.length, self.facts.block, origin)
        return self.model.hidden(ids[None], positions, mask, cache)[0]

    def batched(self, calls: Sequence[tuple[torch.Tensor, NativeCache | None]]) -> list[torch.Tensor]:
        """Several callers' forwards as one (a server's requests running together): each call's ids
        (R_b, n_b) after its cache, at any cache and input length -> each call's logits (R_b, n_b, V)
        in float32, its cache as __call__ leaves it. Rows stacked, caches right-padded to the longest,
        inputs right-padded, each row at its own positions (RoPE) under its own mask (native_batch)."""
        facts, device = self.facts, self.device
        rows = [len(ids) for ids, _ in calls]
        starts = [cache.length if cache is not None else 0 for ids, cache in calls for _ in range(len(ids))]
        lengths = [ids.shape[1] for ids, _ in calls for _ in range(len(ids))]
        width, cached = max(lengths), max(starts)
        stacked = torch.cat([F.pad(ids, (0, width - ids.shape[1]), value=facts.pad_id) for ids, _ in calls])
        mask = rows_mask(starts, lengths, width, cached, facts.block).to(device)
        positions = (torch.tensor(starts)[:, None] + torch.arange(width)[None, :]).to(device)  # (B, n)
        caches = [cache for _, cache in calls]
        past = self._padded(caches, rows, cached)
        with torch.inference_mode():
            logits = self.model.lm_head(self.model.hidden(stacked, positions, mask, past)).float()  # (B, n, V)
        keep_new(caches, rows, [ids.shape[1] for ids, _ in calls], cached, past.layers)
        ends = [sum(rows[:b]) for b in range(len(rows) + 1)]
        return [logits[ends[b] : ends[b + 1], : ids.shape[1]] for b, (ids, _) in enumerate(calls)]

    def batched_packed(self, calls: Sequence[PackedCall]) -> list[torch.Tensor]:
        """Several callers' packed forwards as one, at any cache length and packed length -> each
        call's final hidden states (N_b, hidden), its cache as packed() leaves it. Sequences stacked
        and right-padded to the longest N, caches to the longest, each call at its own positions
        under its own packed_mask (native_batch.packed_masks)."""
        block = self.facts.block
        assert block is not None, "packing needs block-causal attention"
        lengths = [len(call.ids) for call in calls]
        width, cached = max(lengths), max(call.cache.length for call in calls)
        stacked = torch.stack([F.pad(call.ids, (0, width - len(call.ids)), value=self.facts.pad_id) for call in calls])
        positions = torch.stack([F.pad(call.positions, (0, width - len(call.positions))) for call in calls])
        owns = [packed_mask(c.positions, c.segments, c.cache.length, block, c.origin)[0, 0] for c in calls]
        mask = packed_masks(owns, width, cached, self.device)  # (B, 1, N, C + N)
        caches = [call.cache for call in calls]
        past = self._padded(caches, [1] * len(calls), cached)
        with torch.inference_mode():
            hidden = self.model.hidden(stacked, positions, mask, past)  # (B, N, hidden)
        keep_new(caches, [1] * len(calls), lengths, cached, past.layers)
        return [hidden[b, : lengths[b]] for b in range(len(calls))]

    def _padded(self, caches: Sequence[NativeCache | None], rows: list[int], cached: int) -> NativeCache:
        """A scratch cache: the callers' caches right-padded to `cached` positions, once per row."""
        past = NativeCache()
        dtype = self.model.lm_head.weight.dtype
        past.layers = padded_past(caches, rows, cached, len(self.model.model.layers), dtype, self.device)
        return past

    @torch.inference_mode()
    def logits(self, hidden: torch.Tensor, exact: bool = True) -> torch.Tensor:
        """The output head on final hidden states (n, hidden) -> logits (n, V) in float32 (head_logits)."""
        return head_logits(self.model.lm_head, hidden, exact)

    def new_cache(self) -> NativeCache | None:
        """A cache when reusing keys/values is exact (block-causal attention), else None."""
        return NativeCache() if self.facts.block is not None else None

    @property
    def device(self) -> torch.device:
        return self.model.lm_head.weight.device
