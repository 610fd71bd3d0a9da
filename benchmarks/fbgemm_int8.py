"""The issue's measured int8 path, for comparison only (benchmarks/cpu.py, quantize.py speed): each of dcode's
int8 layers (int8_linear.Int8Linear) run by fbgemm's dynamic int8 linear through torch.ao
(`torch.ops.quantized.linear_dynamic`): the same per-channel int8 weights, packed by fbgemm, the
activations quantised per call over the whole matrix (uint8, full range: reduce_range=False), the
output head too. dcode does not run it: it builds on torch's quantised tensors (torch 2.13 warns
they will be removed), and a row's output depends on the other rows fed with it (the scale is the
matrix's).
"""

from __future__ import annotations

import copy
import warnings

import torch
from torch import nn

from dcode.models.int8_linear import Int8Linear


class FbgemmLinear(nn.Module):
    def __init__(self, layer: Int8Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = layer.in_features, layer.out_features
        zeros = torch.zeros(layer.out_features, dtype=torch.long)
        with warnings.catch_warnings():  # torch 2.13: quantised tensors are deprecated
            warnings.simplefilter("ignore")
            weight = torch._make_per_channel_quantized_tensor(layer.qdata, layer.scale.double(), zeros, 0)
            engine, torch.backends.quantized.engine = torch.backends.quantized.engine, "fbgemm"
            bias = layer.bias.float() if layer.bias is not None else None
            self.packed = torch.ops.quantized.linear_prepack(weight, bias)
            torch.backends.quantized.engine = engine
        self.dtype = layer.dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features).float().contiguous()
        y = torch.ops.quantized.linear_dynamic(flat, self.packed, False)  # reduce_range=False
        return y.to(x.dtype).reshape(*x.shape[:-1], self.out_features)

    @property
    def weight(self) -> torch.Tensor:
        return torch.empty(0, dtype=self.dtype)


def fbgemm_copy(network: nn.Module) -> nn.Module:
    """A copy of an int8 network (dcode's --quantize int8 on a CPU) with every Int8Linear on fbgemm."""
    network = copy.deepcopy(network)
    for name, module in list(network.named_modules()):
        if isinstance(module, Int8Linear):
            network.set_submodule(name, FbgemmLinear(module))
    return network
