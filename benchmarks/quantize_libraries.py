"""The quantisation libraries dcode could use, on one layer's linears and the output head at the
Qwen2.5-Coder-0.5B shape (random N(0, 0.02) weights, 32 rows of bfloat16 activations, the rows a
32-token block pass feeds): CPU ms per call and relative error against the float32 product.

  PYTHONPATH=/tmp/extra python benchmarks/quantize_libraries.py --threads 1 --out docs/benchmarks/quantize

bitsandbytes (Linear8bitLt, Linear4bit nf4) and optimum-quanto (qint8 / qint4 weights) are imported
when installed (pip install --no-deps --target DIR bitsandbytes optimum-quanto: both take the
installed torch); dcode's int8 (int8_linear.Int8Linear, both CPU kernels) beside them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from dcode.models.int8_linear import Int8Embedding, Int8Linear

# (in, out) of Qwen2.5-Coder-0.5B's linears: q, k, v, o, gate, up, down, the output head
LAYERS = ((896, 896), (896, 128), (896, 128), (896, 896), (896, 4864), (896, 4864), (4864, 896), (896, 151936))
ROWS = 32


def dcode_int8(dynamic: bool) -> Callable[[nn.Linear], nn.Module]:
    def make(linear: nn.Linear) -> nn.Module:
        rows = Int8Embedding.of(linear.weight.data)
        return Int8Linear(rows.qdata, rows.scale, None, torch.bfloat16, dynamic)

    return make


def bnb(kind: str) -> Callable[[nn.Linear], nn.Module]:
    import bitsandbytes as bnb_lib

    def make(linear: nn.Linear) -> nn.Module:
        sizes, weight = (linear.in_features, linear.out_features), linear.weight.data.clone()
        if kind == "int8":
            layer = bnb_lib.nn.Linear8bitLt(*sizes, bias=False, has_fp16_weights=False)
            layer.weight = bnb_lib.nn.Int8Params(weight, requires_grad=False, has_fp16_weights=False)
        else:
            layer = bnb_lib.nn.Linear4bit(*sizes, bias=False, quant_type="nf4", compute_dtype=torch.bfloat16)
            layer.weight = bnb_lib.nn.Params4bit(weight, requires_grad=False, quant_type="nf4")
        return layer.to("cpu")  # quantises on the move to the device

    return make


def quanto(kind: str) -> Callable[[nn.Linear], nn.Module]:
    from optimum.quanto import freeze, qint4, qint8, quantize

    def make(linear: nn.Linear) -> nn.Module:
        holder = nn.Sequential(nn.Linear(linear.in_features, linear.out_features, bias=False, dtype=torch.bfloat16))
        holder[0].weight.data.copy_(linear.weight.data)
        quantize(holder, weights=qint8 if kind == "int8" else qint4)
        freeze(holder)
        return holder

    return make


def cpu_ms(run: Callable[[], object], repeats: int) -> float:
    run()
    times = []
    for _ in range(repeats):
        start = time.process_time()
        run()
        times.append((time.process_time() - start) * 1000)
    return statistics.median(times)


@torch.inference_mode()
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("bench-results/quantize"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    linears = [nn.Linear(i, o, bias=False, dtype=torch.bfloat16) for i, o in LAYERS]
    for linear in linears:
        nn.init.normal_(linear.weight, std=0.02)
    xs = [torch.randn(ROWS, i, dtype=torch.bfloat16) for i, _ in LAYERS]
    wants = [x.float() @ linear.weight.float().T for x, linear in zip(xs, linears, strict=True)]
    makers: dict[str, Callable[[nn.Linear], nn.Module]] = {
        "bfloat16": lambda linear: linear,
        "dcode int8 (dynamic, torch._int_mm)": dcode_int8(True),
        "dcode int8 (weight-only, _weight_int8pack_mm)": dcode_int8(False),
    }
    optional = {"bitsandbytes int8": (bnb, "int8"), "bitsandbytes nf4": (bnb, "nf4"),
                "quanto int8 weights": (quanto, "int8"), "quanto int4 weights": (quanto, "int4")}  # fmt: skip
    for name, (library, kind) in optional.items():
        try:
            makers[name] = library(kind)
        except ImportError as error:
            print(f"{name}: not installed ({error})")
    rows = []
    for name, maker in makers.items():
        try:
            layers = [maker(linear) for linear in linears]
            outs = [layer(x).float() for layer, x in zip(layers, xs, strict=True)]
        except Exception as error:  # a library whose CPU path fails: say so, measure the rest
            rows.append({"kind": name, "error": " ".join(str(error).split())[:200]})
            print(json.dumps(rows[-1]), flush=True)
            continue
        timings = [cpu_ms(lambda m=layer, x=x: m(x), args.repeats) for layer, x in zip(layers, xs, strict=True)]
        body, head = sum(timings[:-1]), timings[-1]
        error = statistics.mean(((o - w).norm() / w.norm()).item() for o, w in zip(outs, wants, strict=True))
        rows.append({"kind": name, "layer_cpu_ms": round(body, 2), "head_cpu_ms": round(head, 1),
                     "relative_error": round(error, 4)})  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
    report = {
        "command": f"python benchmarks/quantize_libraries.py --threads {args.threads} --repeats {args.repeats}",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "torch": torch.__version__,
        "rows": rows,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "libraries.json").write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
