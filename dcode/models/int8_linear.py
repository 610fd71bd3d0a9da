"""Linear layers of int8 weights on a CPU, one scale per output row, run by PyTorch's int8 kernels.

dcode.models.quantize swaps them in for torchao's int8 layers on a CPU (int8_cpu_kernel): the same
int8 values and per-row scales torchao chose. Two ways to multiply, chosen from what the CPU
reports (`dynamic_int8`):

- dynamic (a CPU with int8 dot-product instructions: AVX512-VNNI, AVX-VNNI, AMX-INT8): each row
  of the activations quantised to int8 as it comes (symmetric, its absolute maximum / 127), the
  product taken in integers by `torch._int_mm` (int32 sums: exact) and scaled back. A row's output
  depends on that row alone, however many rows are fed with it (the verify rule's answers stay one
  token per pass's). Measured 1.6x faster than bfloat16 at the 0.5B shape's 32-token pass on an
  AVX512-VNNI CPU (docs/benchmarks/quantize).
- weight-only (elsewhere): `torch._weight_int8pack_mm`, the activations kept in their dtype.
"""

from __future__ import annotations

import functools

import torch
from torch import nn

# CPU flags (/proc/cpuinfo) of int8 dot-product instructions, which torch._int_mm's kernels use
INT8_DOT_FLAGS = frozenset({"avx512_vnni", "avx_vnni", "amx_int8"})


@functools.cache
def dynamic_int8() -> bool:
    """Whether this CPU multiplies int8 by int8 in hardware (INT8_DOT_FLAGS): int8 layers then
    quantise their activations too (Int8Linear's dynamic path)."""
    from dcode.dtypes import cpu_flags

    return bool(INT8_DOT_FLAGS & cpu_flags())


def int8_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x (n, k) float -> int8 (n, k) and float32 scales (n, 1), each row its absolute maximum / 127:
    x ~= q * scale. Example: [[0.5, -1.0]] -> [[64, -127]] (0.5 / (1/127) = 63.5 rounds to even 64), [[1/127]]."""
    x32 = x.float()
    scale = x32.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / 127
    return (x32 / scale).round_().to(torch.int8), scale


class Int8Linear(nn.Module):
    """y = x @ (qdata * scale[:, None]).T + bias, for int8 qdata (out, in) and scales (out,).
    dynamic: the activations quantised per row too (module docstring); None: as the CPU allows."""

    qdata: torch.Tensor
    scale: torch.Tensor

    def __init__(
        self,
        qdata: torch.Tensor,
        scale: torch.Tensor,
        bias: torch.Tensor | None,
        dtype: torch.dtype,
        dynamic: bool | None = None,
    ) -> None:
        super().__init__()
        self.out_features, self.in_features = qdata.shape
        self.dtype = dtype  # what the layer computes in (the weight's dtype before quantisation)
        self.dynamic = dynamic_int8() if dynamic is None else dynamic
        self.register_buffer("qdata", qdata.contiguous())  # (out, in) int8
        self.register_buffer("scale", scale.reshape(-1).float())  # (out,)
        self.bias = nn.Parameter(bias, requires_grad=False) if bias is not None else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (..., in) -> (..., out) in x's dtype."""
        flat = x.reshape(-1, self.in_features)
        if self.dynamic and len(flat):
            rows, row_scale = int8_rows(flat)
            y = torch._int_mm(rows, self.qdata.T).float().mul_(row_scale).mul_(self.scale)  # (n, out) float32
        else:
            y = torch._weight_int8pack_mm(flat, self.qdata, self.scale.to(x.dtype))
        if self.bias is not None:
            y = y + self.bias
        return y.to(x.dtype).reshape(*x.shape[:-1], self.out_features)

    @property
    def weight(self) -> torch.Tensor:
        """An empty tensor with the dtype and device a caller reads off a linear layer's weight
        (NativeDenoiser.device, the server's batches); the weight itself is qdata and scale."""
        return torch.empty(0, dtype=self.dtype, device=self.qdata.device)


class Int8Embedding(nn.Module):
    """An embedding of int8 rows (vocab, hidden), one scale per row: a looked-up row is
    qdata[id] * scale[id]. A tied output head reads the same int8 matrix as an Int8Linear."""

    qdata: torch.Tensor
    scale: torch.Tensor

    def __init__(self, qdata: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> None:
        super().__init__()
        self.dtype = dtype  # the rows' dtype once looked up
        self.register_buffer("qdata", qdata.contiguous())  # (vocab, hidden) int8
        self.register_buffer("scale", scale.reshape(-1).float())  # (vocab,)

    @classmethod
    def of(cls, weight: torch.Tensor) -> Int8Embedding:
        """Symmetric int8 per row (absmax / 127) of a float weight (vocab, hidden)."""
        scale = torch.empty(len(weight), dtype=torch.float32, device=weight.device)  # (vocab,)
        qdata = torch.empty(weight.shape, dtype=torch.int8, device=weight.device)
        for start in range(0, len(weight), 4096):  # in slices: no float32 copy of the whole matrix
            rows, row_scale = int8_rows(weight[start : start + 4096])
            qdata[start : start + 4096], scale[start : start + 4096] = rows, row_scale[:, 0]
        return cls(qdata, scale, weight.dtype)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids (...) -> rows (..., hidden) in the embedding's dtype."""
        return (self.qdata[ids].to(self.dtype) * self.scale[ids, None].to(self.dtype)).to(self.dtype)

    def head(self, dynamic: bool | None = None) -> Int8Linear:
        """The output head tied to this embedding: logits = hidden @ rows.T, on the same int8 matrix."""
        return Int8Linear(self.qdata, self.scale, None, self.dtype, dynamic)
