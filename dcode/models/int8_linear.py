"""A linear layer of int8 weights run by PyTorch's int8 weight-only CPU kernel.

dcode.models.quantize swaps it in for torchao's int8 layers on a CPU (int8_cpu_kernel): the same
int8 values and per-row scales, multiplied by `torch._weight_int8pack_mm` (activations in their
own dtype, the weight read as int8) rather than converted back to bfloat16 on every call.
"""

from __future__ import annotations

import torch
from torch import nn


class Int8Linear(nn.Module):
    """y = x @ (qdata * scale[:, None]).T + bias, for int8 qdata (out, in) and scales (out,)."""

    qdata: torch.Tensor
    scale: torch.Tensor

    def __init__(self, qdata: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None, dtype: torch.dtype) -> None:
        super().__init__()
        self.out_features, self.in_features = qdata.shape
        self.dtype = dtype  # what the layer computes in (the weight's dtype before quantisation)
        self.register_buffer("qdata", qdata.contiguous())  # (out, in) int8
        self.register_buffer("scale", scale.reshape(-1).float())  # (out,)
        self.bias = nn.Parameter(bias, requires_grad=False) if bias is not None else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (..., in) -> (..., out) in x's dtype."""
        flat = x.reshape(-1, self.in_features)
        y = torch._weight_int8pack_mm(flat, self.qdata, self.scale.to(x.dtype))
        y = y.reshape(*x.shape[:-1], self.out_features)
        return y + self.bias if self.bias is not None else y

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
            rows = weight[start : start + 4096].float()
            scale[start : start + 4096] = rows.abs().amax(dim=1).clamp(min=1e-12) / 127
            qdata[start : start + 4096] = (rows / scale[start : start + 4096, None]).round().clamp(-127, 127)
        return cls(qdata, scale, weight.dtype)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids (...) -> rows (..., hidden) in the embedding's dtype."""
        return (self.qdata[ids].to(self.dtype) * self.scale[ids, None].to(self.dtype)).to(self.dtype)

    def head(self) -> Int8Linear:
        """The output head tied to this embedding: logits = hidden @ rows.T, on the same int8 matrix."""
        return Int8Linear(self.qdata, self.scale, None, self.dtype)
