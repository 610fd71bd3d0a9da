"""Random-weight checkpoints of every family dcode loads, each in that family's released format.

    python benchmarks/make_checkpoints.py FOLDER                       # ~100M parameters per family, bf16
    python benchmarks/make_checkpoints.py FOLDER --size tiny           # a few hundred K, float32 (CPU tests)
    python benchmarks/make_checkpoints.py FOLDER --families sdar,dream --device cuda

Writes FOLDER/<family>/ for each family with the writers of dcode.testing.checkpoints
(which the tests share): config.json with the keys the released checkpoints carry, safetensors under the family's
own weight names, generation_config.json where the family keeps its eos there, and tokenizer
files with the family's special tokens and chat template. Families: qwen2 (dcode's own format),
dream, llada, sdar, fast_dllm_v2, diffusion_gemma, a2d_qwen{2,3}_{bd3lm,mdlm}, coda, wedlm, llada2.
Prints one line per family with its parameter
count and the seconds it took; exits 1 if any family failed (the others are still written).
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from pathlib import Path

import torch

from dcode.testing.checkpoints import FAMILIES, SIZES, WRITERS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="where FOLDER/<family>/ are written")
    parser.add_argument("--size", choices=sorted(SIZES), default="100m")
    parser.add_argument("--families", default=",".join(FAMILIES), help="comma-separated, from " + ", ".join(FAMILIES))
    parser.add_argument("--device", default="cpu", help="where random weights are drawn (cpu, cuda)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    families = [f.strip() for f in args.families.split(",") if f.strip()]
    unknown = [f for f in families if f not in WRITERS]
    if unknown or not families:
        parser.error(f"unknown family {unknown[0] if unknown else '(none)'!r} (choose from {', '.join(FAMILIES)})")
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("make_checkpoints: no CUDA device, drawing the weights on the CPU", file=sys.stderr)
        device = torch.device("cpu")
    size = SIZES[args.size]
    import transformers

    gpu = f", {torch.cuda.get_device_name(device)}" if device.type == "cuda" else ""
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, weights drawn on {device}{gpu}")
    failed = []
    for number, family in enumerate(families):
        folder = args.folder / family
        folder.mkdir(parents=True, exist_ok=True)
        began = time.perf_counter()
        try:
            count = WRITERS[family](folder, size, device, args.seed + number)
        except Exception:  # one family's failure must not cost the others
            failed.append(family)
            print(f"make_checkpoints: {family} FAILED:\n{traceback.format_exc()}", file=sys.stderr)
            continue
        seconds = time.perf_counter() - began
        print(f"{family}: {count / 1e6:.2f}M parameters, {size.dtype}, {seconds:.1f} s, {folder}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
