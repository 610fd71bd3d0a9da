"""LLaDA2.x mini (inclusionAI/LLaDA2.0-mini, LLaDA2.1-mini): a mixture-of-experts block-diffusion
model, in plain torch (transformers has no llada2_moe class, and dcode never runs shipped code).

Pinned from ZHZisZZ/dllm dllm/pipelines/llada2/models/ (configuration_llada2_moe.py,
modeling_llada2_moe.py, read, not run) and its sampler.py: model_type "llada2_moe"; a fused
query_key_value projection split into heads (queries, then keys, then values), RMSNorm over each
query and key head (use_qk_norm), rotary on the first head_dim * partial_rotary_factor dims only
(rotate_half over that slice), an output projection `dense` (bias if use_bias); the first
`first_k_dense_replace` layers a SwiGLU MLP, the others a mixture of experts: sigmoid scores of a
float32 gate, routed by score + expert_bias within the `topk_group` best of `n_group` groups (a
group's score: its two best), top `num_experts_per_tok` experts weighted by their scores
normalized and times routed_scaling_factor, plus `num_shared_experts` shared experts as one
wider MLP. Block-causal attention in blocks of 32 counted from position 0 (sampler.py), logits
not shifted; the facts, the loader and the writer are in llada2.py. Finished blocks are cached
exactly. Owns the modules (native's where they are the same); native.load_checked loads the weights
strictly.
Knows nothing about sampling or files.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from dcode.models.base import ModelError, ModelFacts
from dcode.models.checkpoint import need, read_headers
from dcode.models.native import (
    MLP,
    Embedding,
    Linear,
    NativeCache,
    RMSNorm,
    attend,
    forward_cached,
    load_checked,
    rotary,
    rotate,
    run_layers,
)


@dataclass(frozen=True)
class Shape:
    """The numbers of a llada2_moe config.json that the forward needs (defaults: LLaDA2MoeConfig's)."""

    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    rope_dim: int  # rotary dims at the front of each head: head_dim * partial_rotary_factor
    intermediate: int  # the dense layers' MLP
    moe_inner: int  # each expert's MLP
    experts: int
    top_k: int
    groups: int  # n_group
    top_groups: int  # topk_group
    shared: int  # num_shared_experts (0: none)
    dense_layers: int  # first_k_dense_replace
    scaling: float  # routed_scaling_factor
    eps: float
    theta: float
    qkv_bias: bool
    dense_bias: bool  # use_bias: the attention output projection's bias
    qk_norm: bool
    tied: bool

    @classmethod
    def of(cls, config: Mapping[str, Any], folder: Path) -> Shape:
        hidden, heads = need(dict(config), folder, "hidden_size"), need(dict(config), folder, "num_attention_heads")
        head_dim = int(config.get("head_dim") or hidden // heads)
        return cls(
            vocab=need(dict(config), folder, "vocab_size"),
            hidden=hidden,
            layers=need(dict(config), folder, "num_hidden_layers"),
            heads=heads,
            kv_heads=int(config.get("num_key_value_heads") or heads),
            head_dim=head_dim,
            rope_dim=int(head_dim * float(config.get("partial_rotary_factor", 0.5))),
            intermediate=int(config.get("intermediate_size") or 0),
            moe_inner=int(config.get("moe_intermediate_size") or 0),
            experts=int(config.get("num_experts") or 0),
            top_k=int(config.get("num_experts_per_tok", 2)),
            groups=int(config.get("n_group", 8)),
            top_groups=int(config.get("topk_group", 4)),
            shared=int(config.get("num_shared_experts") or 0),
            dense_layers=int(config.get("first_k_dense_replace", 0)),
            scaling=float(config.get("routed_scaling_factor", 2.5)),
            eps=float(config.get("rms_norm_eps", 1e-5)),
            theta=float(config.get("rope_theta", 10000.0)),
            qkv_bias=bool(config.get("use_qkv_bias", False)),
            dense_bias=bool(config.get("use_bias", True)),
            qk_norm=bool(config.get("use_qk_norm", True)),
            tied=bool(config.get("tie_word_embeddings", False)),
        )


def route(scores: torch.Tensor, bias: torch.Tensor, shape: Shape) -> tuple[torch.Tensor, torch.Tensor]:
    """Group-limited top-k routing (DeepSeek-V3's, as LLaDA2MoeGate does it): scores (N, E) sigmoid
    gate outputs -> experts (N, k) and their weights (N, k). Experts are chosen on score + bias
    within the topk_group groups whose two best biased scores sum highest; weights are the
    chosen unbiased scores, normalized to sum 1 (when k > 1), times routed_scaling_factor."""
    n = scores.shape[0]
    biased = scores + bias  # (N, E)
    group_scores = biased.view(n, shape.groups, -1).topk(2, dim=-1).values.sum(-1)  # (N, G)
    chosen_groups = group_scores.topk(shape.top_groups, dim=-1, sorted=False).indices  # (N, g)
    allowed = torch.zeros_like(group_scores).scatter_(1, chosen_groups, 1.0).bool()  # (N, G)
    allowed = allowed[:, :, None].expand(n, shape.groups, shape.experts // shape.groups).reshape(n, -1)
    experts = biased.masked_fill(~allowed, float("-inf")).topk(shape.top_k, dim=-1).indices  # (N, k)
    weights = scores.gather(1, experts)  # (N, k)
    if shape.top_k > 1:
        weights = weights / (weights.sum(-1, keepdim=True) + 1e-20)
    return experts, weights * shape.scaling


class Gate(nn.Module):
    def __init__(self, shape: Shape) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(shape.experts, shape.hidden))
        self.expert_bias = nn.Parameter(torch.zeros(shape.experts), requires_grad=False)  # a saved buffer


class MoE(nn.Module):
    def __init__(self, shape: Shape) -> None:
        super().__init__()
        self.shape = shape
        self.gate = Gate(shape)
        self.experts = nn.ModuleList(MLP(shape.hidden, shape.moe_inner) for _ in range(shape.experts))
        if shape.shared:
            self.shared_experts = MLP(shape.hidden, shape.moe_inner * shape.shared)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, L, hidden) -> the routed experts' weighted sum plus the shared experts'."""
        flat = x.reshape(-1, x.shape[-1])  # (N, hidden)
        scores = torch.sigmoid(flat.float() @ self.gate.weight.float().T)  # (N, E), float32 as the gate
        experts, weights = route(scores, self.gate.expert_bias.float(), self.shape)  # (N, k)
        out = torch.zeros(flat.shape, dtype=torch.float32, device=x.device)
        for e in experts.unique().tolist():  # each chosen expert runs on its tokens only
            rows, slot = (experts == e).nonzero(as_tuple=True)
            out.index_add_(0, rows, self.experts[e](flat[rows]).float() * weights[rows, slot, None])
        y = out.to(x.dtype).view_as(x)
        return y + self.shared_experts(x) if self.shape.shared else y


class Attention(nn.Module):
    def __init__(self, shape: Shape) -> None:
        super().__init__()
        self.shape = shape
        self.query_key_value = Linear(shape.hidden, (shape.heads + 2 * shape.kv_heads) * shape.head_dim, shape.qkv_bias)
        if shape.qk_norm:
            self.query_layernorm = RMSNorm(shape.head_dim, shape.eps)
            self.key_layernorm = RMSNorm(shape.head_dim, shape.eps)
        self.dense = Linear(shape.heads * shape.head_dim, shape.hidden, bias=shape.dense_bias)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor, past: Any
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        s, (b, n, _) = self.shape, x.shape
        qkv = self.query_key_value(x).view(b, n, s.heads + 2 * s.kv_heads, s.head_dim).transpose(1, 2)
        q, k, v = qkv.split([s.heads, s.kv_heads, s.kv_heads], dim=1)  # (B, H, L, D), (B, Hkv, L, D) x2
        if s.qk_norm:
            q, k = self.query_layernorm(q), self.key_layernorm(k)
        r = s.rope_dim  # rotary on the first r dims of each head, the rest passes through
        q = torch.cat([rotate(q[..., :r], cos, sin), q[..., r:]], dim=-1)
        k = torch.cat([rotate(k[..., :r], cos, sin), k[..., r:]], dim=-1)
        out, present = attend(q, k, v, mask, past)  # (B, H, L, D)
        return self.dense(out.transpose(1, 2).reshape(b, n, s.heads * s.head_dim)), present


class Layer(nn.Module):
    def __init__(self, shape: Shape, index: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(shape.hidden, shape.eps)
        self.attention = Attention(shape)
        self.post_attention_layernorm = RMSNorm(shape.hidden, shape.eps)
        moe = shape.experts > 0 and index >= shape.dense_layers
        self.mlp: nn.Module = MoE(shape) if moe else MLP(shape.hidden, shape.intermediate)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor, past: Any) -> Any:
        attended, present = self.attention(self.input_layernorm(x), cos, sin, mask, past)
        x = x + attended
        return x + self.mlp(self.post_attention_layernorm(x)), present


class Body(nn.Module):
    def __init__(self, shape: Shape) -> None:
        super().__init__()
        self.word_embeddings = Embedding(shape.vocab, shape.hidden)
        self.layers = nn.ModuleList(Layer(shape, i) for i in range(shape.layers))
        self.norm = RMSNorm(shape.hidden, shape.eps)


class LLaDA2(nn.Module):
    """LLaDA2MoeModelLM's weights and forward; parameter names are the checkpoint's."""

    def __init__(self, shape: Shape) -> None:
        super().__init__()
        self.shape = shape
        self.model = Body(shape)
        self.lm_head = Linear(shape.hidden, shape.vocab, bias=False)

    def forward(self, ids: torch.Tensor, start: int, mask: torch.Tensor, cache: NativeCache | None = None) -> Any:
        """ids (B, L) at positions [start, start+L), mask (1, 1, L, K) -> logits (B, L, V)."""
        x = self.model.word_embeddings(ids)
        positions = torch.arange(start, start + ids.shape[1], device=ids.device)
        cos, sin = rotary(positions, self.shape.rope_dim, self.shape.theta, x.dtype)  # (L, r)
        return self.lm_head(self.model.norm(run_layers(self.model.layers, x, cos, sin, mask, cache)))


def load_weights(folder: Path, config: Mapping[str, Any], device: torch.device, dtype: torch.dtype) -> LLaDA2:
    """The folder's safetensors in an LLaDA2 of config.json's shape; a missing weight, a shape that
    does not fit, or a weight that belongs to nothing is a one-line ModelError."""
    read_headers(folder)
    shape = Shape.of(config, folder)
    if shape.experts and (shape.experts % shape.groups or shape.top_groups > shape.groups):
        raise ModelError(f"{folder / 'config.json'}: {shape.experts} experts do not split into {shape.groups} groups")
    with torch.device("meta"):
        model = LLaDA2(shape)
    embedding = model.model.word_embeddings if shape.tied else None
    return load_checked(model, folder, device, dtype, tied=embedding, ignored=("inv_freq",))


@dataclass
class LLaDA2Denoiser:
    """Token ids -> logits for an LLaDA2 checkpoint, block-causal, with an exact block cache."""

    model: LLaDA2
    tokenizer: Any
    facts: ModelFacts

    @torch.inference_mode()
    def __call__(self, ids: torch.Tensor, cache: NativeCache | None = None) -> torch.Tensor:
        """ids (B, L) at canvas positions [P, P+L), P = cache.length -> logits (B, L, V) in float32;
        with a cache, the new positions' keys/values are appended to it (the caller crops)."""
        return forward_cached(self.model, ids, cache, self.facts.block)

    def new_cache(self) -> NativeCache | None:
        return NativeCache() if self.facts.block is not None else None

    @property
    def device(self) -> torch.device:
        return self.model.lm_head.weight.device
