"""--quantize measured: peak memory of a 3B load, ms per pass, and dcode-tiny's answers per quantisation.

Prints numbers (a benchmark, not a timed test) and writes them as JSON under --out:

  memory   peak resident memory (ru_maxrss) of `dcode new --json` in its own process, loading a
           random-weight checkpoint at Qwen2.5-3B's shape (hidden 2048, 36 layers, 16/2 heads,
           intermediate 11008, vocabulary 151936, tied head) in a released format (--family:
           qwen2 is dcode's own torch loader, a2d_qwen2_bd3lm transformers'), with none/int8/int4.
  speed    ms per forward pass, 1 row, random weights: the 0.5B shape (Qwen2.5-0.5B, a 32-token
           block over a 256-token cache) and SDAR-1.7B's (Qwen3-1.7B layers, a 4-token block over
           256), none/int8 (both CPU kernels; the 0.5B shape also fbgemm's, the issue's path)/int4,
           median of --repeats interleaved rounds, and the logits' agreement with none's.
  saved    `dcode new --json` with --quantize int8 loading from a saved int8 copy (`dcode models pull
           --quantize int8`: dcode.models.saved) against quantising on load: wall seconds and peak
           RSS of the whole process, and seconds of the load alone (dcode.models.load in a child
           process after its imports), at --saved-shape (Qwen2.5-3B's, or 0.5B's), --rounds each,
           interleaved; and the seconds the copy took to save.
  agree    dcode-tiny's answers to the public prompts (benchmarks/prompts.jsonl) with int8 and int4
           against bfloat16's: identical answers, and answers that parse (dcode.syntax.find_issues).

  python benchmarks/quantize.py memory speed agree --out docs/benchmarks/quantize
  python benchmarks/quantize.py saved --saved-shape qwen2.5-0.5b --out docs/benchmarks/quantize
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

KINDS = ("none", "int8", "int4")
ROOT = Path(__file__).resolve().parents[1]
# name -> (hidden, layers, heads, kv_heads, inner, vocab, block, cache): the shapes the issue names
SHAPES = {
    "qwen2.5-3b": (2048, 36, 16, 2, 11008, 151936, 4, 0),
    "qwen2.5-0.5b": (896, 24, 14, 2, 4864, 151936, 32, 256),
    "sdar-1.7b": (2048, 28, 16, 8, 6144, 151936, 4, 256),
}


def write(family: str, shape: str, folder: Path) -> str:
    """A random checkpoint of `family` at `shape` in bfloat16; the sha256 of its first weight file."""
    from dcode.testing import checkpoints

    hidden, layers, heads, kv, inner, vocab, block, _ = SHAPES[shape]
    size = replace(
        checkpoints.SIZES["100m"], hidden=hidden, layers=layers, heads=heads, kv_heads=kv, inner=inner,
        rows=vocab, tied_rows=vocab, block=block, dtype="bfloat16",
    )  # fmt: skip
    if not (folder / "config.json").exists():
        checkpoints.write(family, folder, size)
    first = sorted(folder.glob("*.safetensors"))[0]
    digest = hashlib.sha256()
    with first.open("rb") as f:
        digest.update(f.read(1 << 24))  # the header and the first 16 MB: enough to name the weights
    return digest.hexdigest()[:16]


def peak_rss(folder: Path, kind: str) -> dict[str, object]:
    """`dcode new --json` with --quantize `kind` in a child process; its peak RSS (MB) and seconds."""
    child = (
        "import resource, subprocess, sys, time; t = time.time();"
        "r = subprocess.run(sys.argv[1:], capture_output=True, text=True);"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, time.time() - t, r.returncode);"
        "sys.stderr.write(r.stderr[-400:])"
    )
    command = [
        sys.executable, "-m", "dcode.cli", "new", "a function that adds two numbers", "--model", str(folder),
        "--length", "8", "--no-repair", "--json", "--no-log", "--dtype", "bfloat16", "--quantize", kind,
    ]  # fmt: skip
    done = subprocess.run([sys.executable, "-c", child, *command], capture_output=True, text=True, check=True)
    kb, seconds, code = done.stdout.split()
    return {"kind": kind, "peak_rss_mb": round(int(kb) / 1024), "seconds": round(float(seconds), 1), "exit": int(code)}


def memory(out: Path, family: str, scratch: Path) -> dict[str, object]:
    folder = scratch / f"{family}-3b"
    weights = write(family, "qwen2.5-3b", folder)
    rows = [peak_rss(folder, kind) for kind in KINDS]
    base = rows[0]["peak_rss_mb"]
    for row in rows:
        row["of_bfloat16"] = round(row["peak_rss_mb"] / base, 2)  # type: ignore[operator]
        print(f"memory {family} 3B {row['kind']}: {row['peak_rss_mb']} MB peak ({row['of_bfloat16']:.0%} of none)")
    return {"family": family, "shape": "qwen2.5-3b", "weights_sha256_16mb": weights, "rows": rows}


def speed(shape: str, family: str, scratch: Path, repeats: int) -> dict[str, object]:
    """ms per block pass (every logit) of each variant, in interleaved rounds (each round runs every
    variant once, so all see the same load on a shared machine), and where the denoiser packs rows
    (the native path) the same pass with the head on 16 positions (what a verify pass reads).
    Variants: none, int8 (dcode's CPU kernel), int8 with the other CPU kernel (weight-only or
    dynamic, the same weights), the issue's fbgemm path (0.5B shape alone: benchmarks/fbgemm_int8.py),
    int4. The logits' error against none's and how many positions keep none's top token."""
    import torch

    from dcode.models import load
    from dcode.models.int8_linear import Int8Linear

    folder = scratch / f"{family}-{shape}"
    weights = write(family, shape, folder)
    *_, block, cached = SHAPES[shape]
    models = {kind: load(str(folder), dtype=torch.bfloat16, quantize=kind) for kind in KINDS}
    int8 = models["int8"]
    layers = [m for m in int8.model.modules() if isinstance(m, Int8Linear)]  # type: ignore[attr-defined]
    chosen = layers[0].dynamic
    variants = {
        "none": (models["none"], None),
        f"int8 ({kernel_name(chosen)}, dcode's)": (int8, chosen),
        f"int8 ({kernel_name(not chosen)})": (int8, not chosen),
        "int4": (models["int4"], None),
    }
    if shape == "qwen2.5-0.5b":
        from fbgemm_int8 import fbgemm_copy

        variants["int8 (fbgemm, the issue's path)"] = (replace_network(int8, fbgemm_copy(int8.model)), None)  # type: ignore[attr-defined]
    ids = torch.randint(3, 1000, (1, cached + block), generator=torch.Generator().manual_seed(0))
    caches, logits = {}, {}
    for name, (model, dynamic) in variants.items():
        set_dynamic(layers, dynamic)
        caches[name] = model.new_cache()
        model(ids[:, :cached], caches[name])
        logits[name] = model(ids[:, cached:], caches[name])[0].float()
        caches[name].crop(cached)
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    read: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    for _ in range(repeats + 1):
        for name, (model, dynamic) in variants.items():
            set_dynamic(layers, dynamic)
            cache = caches[name]
            times[name].append(timed(lambda m=model, c=cache: m(ids[:, cached:], c)))
            cache.crop(cached)
            if hasattr(model, "packed"):
                read[name].append(timed(lambda m=model, c=cache: packed_pass(m, ids[0, cached:], cached, c)))
                cache.crop(cached)
    rows = []
    for name in variants:
        error = ((logits[name] - logits["none"]).norm() / logits["none"].norm()).item()
        top = (logits[name].argmax(-1) == logits["none"].argmax(-1)).float().mean().item()
        row = {"kind": name} | medians("ms_per_pass", times[name][1:])
        if read[name]:
            row |= medians("ms_16_logits_read", read[name][1:])
        rows.append(row | {"logit_error": round(error, 4), "top1_as_none": round(top, 3)})
        print(f"speed {shape} ({family}) block {block} over {cached}: {json.dumps(rows[-1])}", flush=True)
    return {"shape": shape, "family": family, "block": block, "cached": cached, "rounds": repeats,
            "weights_sha256_16mb": weights, "rows": rows}  # fmt: skip


def medians(key: str, pairs: list[tuple[float, float]]) -> dict[str, float]:
    """{key: median wall ms, "cpu_" + key: median CPU ms} of (wall, cpu) pairs."""
    walls, cpus = zip(*pairs, strict=True)
    return {key: round(statistics.median(walls), 1), f"cpu_{key}": round(statistics.median(cpus), 1)}


def kernel_name(dynamic: bool) -> str:
    return "dynamic, torch._int_mm" if dynamic else "weight-only, torch._weight_int8pack_mm"


def set_dynamic(layers: list, dynamic: bool | None) -> None:  # type: ignore[type-arg]
    """Switch dcode's int8 layers between their two CPU kernels (None: leave them)."""
    for layer in layers if dynamic is not None else []:
        layer.dynamic = dynamic


def replace_network(model: object, network: object) -> object:
    from dataclasses import replace as swapped

    return swapped(model, model=network)  # type: ignore[type-var]


def timed(run: object) -> tuple[float, float]:
    """Wall and process CPU ms of one call (on a shared machine the CPU time is the steadier)."""
    start, cpu = time.perf_counter(), time.process_time()
    run()  # type: ignore[operator]
    return (time.perf_counter() - start) * 1000, (time.process_time() - cpu) * 1000


def packed_pass(model: object, ids: object, cached: int, cache: object) -> object:
    """The block as one packed row, the head on its first 16 positions (NativeDenoiser.packed + logits)."""
    import torch

    n = len(ids)  # type: ignore[arg-type]
    positions, segments = torch.arange(cached, cached + n), torch.ones(n, dtype=torch.long)
    hidden = model.packed(ids, positions, segments, cache)  # type: ignore[attr-defined]
    return model.logits(hidden[:16])  # type: ignore[attr-defined]


def load_seconds(folder: Path, kind: str) -> float:
    """Seconds of dcode.models.load(folder, bfloat16, kind) alone, in a child process after its imports."""
    child = (
        "import sys, time, torch; from dcode.models import load, quantize; quantize.import_torchao('int8');"
        "t = time.perf_counter(); load(sys.argv[1], dtype=torch.bfloat16, quantize=sys.argv[2]);"
        "print(time.perf_counter() - t)"
    )
    done = subprocess.run([sys.executable, "-c", child, str(folder), kind], capture_output=True, text=True, check=True)
    return round(float(done.stdout.split()[-1]), 2)


def saved_copy(shape: str, family: str, scratch: Path, rounds: int) -> dict[str, object]:
    """int8 from a saved copy against int8 quantised on load (see the module docstring)."""
    from dcode.models import save_quantized, saved

    folder = scratch / (f"{family}-3b" if shape == "qwen2.5-3b" else f"{family}-{shape}")
    weights = write(family, shape, folder)
    copy = saved.copy_path(folder, "int8")
    copy.unlink(missing_ok=True)
    start = time.perf_counter()
    save_quantized(folder, "int8", "bfloat16")
    save_seconds = round(time.perf_counter() - start, 1)
    aside = copy.with_suffix(".aside")
    results: dict[str, list[dict[str, object]]] = {"quantised on load": [], "saved copy": []}
    for _ in range(rounds):
        for source in results:  # interleaved: both see the same load on a shared machine
            hidden = source == "quantised on load"  # the copy set aside: the load quantises
            (copy if hidden else aside).rename(aside if hidden else copy)
            row = peak_rss(folder, "int8") | {"load_seconds": load_seconds(folder, "int8")}
            results[source].append(row)
            print(f"saved {shape} int8 {source}: {json.dumps(row)}", flush=True)
    rows = []
    for source, runs in results.items():
        rows.append({
            "from": source,
            "peak_rss_mb": max(int(r["peak_rss_mb"]) for r in runs),  # type: ignore[call-overload]
            "new_seconds": statistics.median(float(r["seconds"]) for r in runs),  # type: ignore[arg-type]
            "load_seconds": statistics.median(float(r["load_seconds"]) for r in runs),  # type: ignore[arg-type]
            "runs": runs,
        })  # fmt: skip
    return {"shape": shape, "family": family, "weights_sha256_16mb": weights, "source_weights_id":
            saved.weights_id(folder), "copy_bytes": copy.stat().st_size, "save_seconds": save_seconds,
            "rounds": rounds, "rows": rows}  # fmt: skip


def agree(limit: int) -> dict[str, object]:
    from dcode.syntax import find_issues

    prompts = [json.loads(line) for line in (ROOT / "benchmarks" / "prompts.jsonl").read_text().splitlines()][:limit]
    answers: dict[str, list[str]] = {}
    for kind in KINDS:
        answers[kind] = []
        for p in prompts:
            command = [
                sys.executable, "-m", "dcode.cli", "new", p["prompt"], "--lang", p["lang"], "--json", "--no-log",
                "--dtype", "bfloat16", "--quantize", kind, "--no-repair",
            ]  # fmt: skip
            done = subprocess.run(command, capture_output=True, text=True)
            answers[kind].append(json.loads(done.stdout)["code"] if done.stdout else "")
    rows = []
    for kind in KINDS:
        same = sum(a == b for a, b in zip(answers[kind], answers["none"], strict=True))
        parses = sum(not find_issues(code, p["lang"]) for code, p in zip(answers[kind], prompts, strict=True))
        rows.append({"kind": kind, "identical_to_none": same, "parse": parses, "prompts": len(prompts)})
        print(f"agree dcode-tiny {kind}: {same}/{len(prompts)} identical to bfloat16, {parses} parse")
    return {"model": "dcode-tiny", "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("parts", nargs="+", choices=("memory", "speed", "saved", "agree"))
    parser.add_argument("--out", type=Path, default=Path("bench-results/quantize"))
    parser.add_argument("--family", default="qwen2", help="memory: the checkpoint format (qwen2, a2d_qwen2_bd3lm)")
    parser.add_argument("--repeats", type=int, default=3, help="speed: timed rounds (after one untimed)")
    parser.add_argument("--shapes", default="qwen2.5-0.5b,sdar-1.7b", help="speed: comma-separated shapes")
    parser.add_argument("--saved-shape", default="qwen2.5-3b", help="saved: the checkpoint's shape")
    parser.add_argument("--rounds", type=int, default=2, help="saved: runs of each source")
    parser.add_argument("--limit", type=int, default=10, help="agree: the first N prompts")
    parser.add_argument("--scratch", type=Path, default=None, help="where the random checkpoints go (kept)")
    args = parser.parse_args()
    scratch = args.scratch or Path(tempfile.mkdtemp(prefix="dcode-quantize-"))
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())  # fmt: skip
    report: dict[str, object] = {
        "command": " ".join(["python", "benchmarks/quantize.py", *sys.argv[1:]]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
    }  # fmt: skip
    if "memory" in args.parts:
        report["memory"] = memory(args.out, args.family, scratch)
    if "speed" in args.parts:
        families = {"qwen2.5-0.5b": "qwen2", "sdar-1.7b": "sdar"}
        report["speed"] = [speed(shape, families[shape], scratch, args.repeats) for shape in args.shapes.split(",")]
    if "saved" in args.parts:
        report["saved"] = saved_copy(args.saved_shape, "qwen2", scratch, args.rounds)
    if "agree" in args.parts:
        report["agree"] = agree(args.limit)
    args.out.mkdir(parents=True, exist_ok=True)
    name = "-".join(args.parts) + (f"-{args.family}" if "memory" in args.parts else "")
    name += f"-{args.saved_shape.removeprefix('qwen2.5-')}" if "saved" in args.parts else ""
    (args.out / f"{name}.json").write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
