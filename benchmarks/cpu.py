"""Parallel decoding on a CPU, float32 against bfloat16, in one run.

    python benchmarks/cpu.py                       # both parts; writes docs/benchmarks/cpu/cpu.{json,md}
    python benchmarks/cpu.py --limit 5 --shapes qwen2.5-0.5b --repeats 2 --out /tmp/cpu   # a quick look

(a) dcode-tiny on the public prompts (dcode/bench/prompts.jsonl, every language), greedy, 256-token
canvas, no repair, through `dcode new`'s pipeline, in float32 and in bfloat16: one token per pass
left to right (verify with no drafts: the default's answers, with the block cache), the default
(verify), threshold 0.7 and entropy bound 0.6 (--settings adds any of dcode.bench's names); wall
time, tok/s, tokens and rows per pass, real code, key words, and how many answers are those of the
same setting in float32. Beside them the same network run as an autoregressive model: causal
attention, one token a step with its key/value cache (dcode.models.native's forward), greedy, for as
many tokens as the default answered each prompt.

(b) Real shapes with random weights on dcode.models.native's forward (Qwen2 layers; the Qwen3 and
CoDA shapes without Qwen3's per-head q/k norm, a negligible share of the work): a 256-token prefix
in the cache, then the median ms of one pass feeding a block (32 tokens; SDAR's shape its own 4) in
1, 4, 8 and 16 rows (the verify rule's rows), and of one autoregressive step (1 token, 1 row,
causal) over the same cache;
float32, bfloat16 and, at the 0.5B shape, int8 (dcode's --quantize int8 kernels and fbgemm's);
the peak memory of each. tok/s at 1, 2, 3 and 5 tokens per pass is projected from the measured
1-row block pass: only the tokens per pass are projected, the times are measured.

Results carry the command, the date, the weights' sha256, the CPU model and its flags, torch's
threads and the load average before and after (the machine is shared: compare within one run).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from dcode import localfill
from dcode.bench import PROMPTS, named, provenance, read_prompts, with_family
from dcode.bench.answers import answered
from dcode.bench.metrics import Tally
from dcode.bench.speed import PeakMemory
from dcode.config import SamplerConfig
from dcode.dtypes import NATIVE_BF16_FLAGS, cpu_flags, cpu_model
from dcode.models import EMBEDDED, load, native

OUT = Path("docs/benchmarks/cpu")
DTYPES = ("float32", "bfloat16")
SETTINGS = ("left-to-right", "model-defaults", "model-defaults-no-pack", "threshold-0.7", "entropy-bound-0.6")
WARM_UP = 3  # prompts run once, untimed, before the timed run
PREFIX, BLOCK, ROWS, PER_PASS = 256, 32, (1, 4, 8, 16), (1, 2, 3, 5)
BLOCKS = {"sdar-1.7b": 4}  # a shape whose release decodes in blocks other than BLOCK (SDAR: config.json block_size)

# Published configs (config.json of each release), as native.Shape reads them.
SHAPES: dict[str, dict[str, Any]] = {
    "qwen2.5-0.5b": {  # Qwen/Qwen2.5-Coder-0.5B(-Instruct), Tiny-A2D's bd3lm base
        "vocab_size": 151936, "hidden_size": 896, "num_hidden_layers": 24, "num_attention_heads": 14,
        "num_key_value_heads": 2, "intermediate_size": 4864, "tie_word_embeddings": True,
        "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
    },
    "qwen3-0.6b": {  # Qwen/Qwen3-0.6B, Tiny-A2D's other base
        "vocab_size": 151936, "hidden_size": 1024, "num_hidden_layers": 28, "num_attention_heads": 16,
        "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 3072, "tie_word_embeddings": True,
        "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
    },
    "sdar-1.7b": {  # JetLM/SDAR-1.7B-Chat: Qwen3-1.7B layers, an untied head (4.06 GB in bfloat16)
        "vocab_size": 151936, "hidden_size": 2048, "num_hidden_layers": 28, "num_attention_heads": 16,
        "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 6144, "tie_word_embeddings": False,
        "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
    },
    "coda-1.7b": {  # Salesforce/CoDA-v0-Instruct (Qwen3-1.7B layers)
        "vocab_size": 151936, "hidden_size": 2048, "num_hidden_layers": 28, "num_attention_heads": 16,
        "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 6144, "tie_word_embeddings": True,
        "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
    },
}  # fmt: skip


# ---------------------------------------------------------------------------------------------
# (a) dcode-tiny on the public prompts


@dataclass
class Timed:
    """One setting's answers, added up prompt by prompt."""

    tally: Tally = field(default_factory=Tally)
    cpu_seconds: float = 0.0
    fed: int = 0  # tokens fed to the model, summed over the passes
    codes: list[str] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)

    def summary(self) -> dict[str, float]:
        seconds, passes = self.cpu_seconds, max(1, self.tally.forward_passes)
        return self.tally.summary() | {
            "cpu_seconds": seconds,
            "tokens_per_cpu_second": self.tally.tokens / seconds,
            "fed_per_pass": self.fed / passes,
        }


def answer(model: Any, row: dict[str, str], config: SamplerConfig, timed: Timed) -> None:
    """The prompt answered as `dcode new --no-repair` would, added to `timed`."""
    cpu = time.process_time()
    done, steps, seconds = answered(model, row["prompt"], row["lang"], 256, config)
    timed.cpu_seconds += time.process_time() - cpu
    timed.tally.add(row["prompt"], done.code, done.forward, done.tokens, seconds, sum(step.rows for step in steps))
    timed.fed += sum(step.input_tokens for step in steps)
    timed.codes.append(done.code)
    timed.tokens.append(done.tokens)


@torch.inference_mode()
def autoregressive(model: Any, row: dict[str, str], count: int, timed: Timed) -> None:
    """The same network as an autoregressive model: causal attention, greedy, one token a step with
    its key/value cache, `count` new tokens (no end token stops it)."""
    network = model.model
    ids = torch.tensor([localfill.prompt_ids(model, row["prompt"], row["lang"])])
    began, cpu = time.perf_counter(), time.process_time()
    cache = native.NativeCache()
    start, step, fed = 0, ids, 0
    for _ in range(max(1, count)):
        n = step.shape[1]
        mask = native.block_causal_mask(start, n, start + n, 1, ids.device)  # block 1: causal
        logits = network(step, start, mask, cache)  # (1, n, V)
        start, fed = start + n, fed + n
        step = logits[:, -1:].float().argmax(-1)  # (1, 1)
    timed.tally.add(row["prompt"], "", max(1, count), max(1, count), time.perf_counter() - began)
    timed.cpu_seconds += time.process_time() - cpu
    timed.fed += fed


def tiny_part(rows: list[dict[str, str]], settings: tuple[str, ...]) -> list[dict[str, Any]]:
    """(a): a result row per dtype and setting, then the autoregressive row of each dtype. Each
    prompt runs under every setting in turn, then autoregressively, so that every setting sees
    the same load on a shared machine; the first prompts run once first, untimed (a warm-up:
    torch builds its kernels for each new shape once)."""
    out: list[dict[str, Any]] = []
    codes: dict[tuple[str, str], list[str]] = {}
    for dtype in DTYPES:
        model = load(None, torch.device("cpu"), getattr(torch, dtype))
        configs = {name: with_family(named(name), model.facts.defaults) for name in settings}
        for row in rows[:WARM_UP]:
            for config in configs.values():
                answer(model, row, config, Timed())
        timed = {name: Timed() for name in [*settings, "autoregressive"]}
        for row in rows:
            for name, config in configs.items():
                answer(model, row, config, timed[name])
            count = timed["model-defaults"].tokens[-1] if "model-defaults" in timed else 64
            autoregressive(model, row, count, timed["autoregressive"])
        for name in settings:
            codes[dtype, name] = timed[name].codes
            same = sum(a == b for a, b in zip(codes["float32", name], codes[dtype, name], strict=True))
            out.append({"dtype": dtype, "setting": name, **timed[name].summary(), "same_as_float32": same})
        ar = {k: v for k, v in timed["autoregressive"].summary().items() if not k.endswith("_rate")}  # no code
        out.append({"dtype": dtype, "setting": "autoregressive", **ar})
        for line in out[-len(settings) - 1 :]:
            print(json.dumps(line), flush=True)
    return out


# ---------------------------------------------------------------------------------------------
# (b) real shapes, random weights


def random_model(config: dict[str, Any], dtype: torch.dtype) -> native.Qwen2:
    """A native Qwen2 of `config`'s shape with N(0, 0.02) weights (norms 1) in `dtype`."""
    torch.manual_seed(0)
    with torch.device("meta"):
        model = native.Qwen2(native.Shape.of(config), config)
    model = model.to(dtype).to_empty(device="cpu")
    for name, parameter in model.named_parameters():
        if name.endswith("norm.weight"):
            parameter.data.fill_(1.0)
        else:
            parameter.data.normal_(0.0, 0.02)
    if model.shape.tied:
        model.lm_head.weight = model.model.embed_tokens.weight
    return model.eval()


INT8 = ("int8", "int8-weight-only", "int8-fbgemm")  # (b)'s int8 rows: dcode's CPU kernel, the other one, the issue's


def int8_model(model: native.Qwen2, kind: str) -> native.Qwen2:
    """`--quantize int8` on a CPU applied to a random model: each linear layer's weight in int8, one
    scale per row (absmax / 127, torchao's choice), the tied embedding in int8 rows and the output
    head on them (an untied head quantised itself). int8: Int8Linear as dcode runs it on this CPU
    (int8 activations per row and torch._int_mm where the CPU has int8 dot products);
    int8-weight-only: torch._weight_int8pack_mm; int8-fbgemm: the issue's path (benchmarks/fbgemm_int8.py)."""
    from fbgemm_int8 import fbgemm_copy

    from dcode.models.int8_linear import Int8Embedding, Int8Linear

    dynamic = None if kind == "int8" else False  # None: as the CPU allows (int8_linear.dynamic_int8)
    for name, module in list(model.model.layers.named_modules()):
        if isinstance(module, torch.nn.Linear):
            rows = Int8Embedding.of(module.weight.data)
            layer = Int8Linear(rows.qdata, rows.scale, module.bias, module.weight.dtype, dynamic)
            model.model.layers.set_submodule(name, layer)
    embedding = Int8Embedding.of(model.model.embed_tokens.weight.data)
    head = model.lm_head.weight.data
    model.model.embed_tokens = embedding  # type: ignore[assignment]
    model.lm_head = (embedding if model.shape.tied else Int8Embedding.of(head)).head(dynamic)  # type: ignore[assignment]
    del head
    return fbgemm_copy(model) if kind == "int8-fbgemm" else model  # type: ignore[return-value]


def median_ms(run: Callable[[], object], repeats: int) -> tuple[float, float]:
    """Median wall and process CPU time of `run` in ms over `repeats` calls, after one warm-up call.
    On a shared machine the CPU time is the steadier one: it leaves out the time spent waiting for a core."""
    began = time.perf_counter()
    run()
    walls, cpus = [], []
    if time.perf_counter() - began > 2.0:  # a long call: its warm-up costs nothing worth discarding it for
        repeats = max(1, repeats - 1)
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        run()
        walls.append((time.perf_counter() - wall) * 1000)
        cpus.append((time.process_time() - cpu) * 1000)
    return statistics.median(walls), statistics.median(cpus)


@torch.inference_mode()
def shape_passes(model: native.Qwen2, repeats: int, block: int = BLOCK) -> dict[str, float]:
    """ms (CPU time; wall time beside it) of a `block`-token block pass in 1/4/8/16 rows and of a
    1-token causal step, over a 256-token cache."""
    vocab = model.shape.vocab
    prefix = torch.randint(0, vocab, (1, PREFIX), generator=torch.Generator().manual_seed(1))
    cache = native.NativeCache()
    model(prefix, 0, native.block_causal_mask(0, PREFIX, PREFIX, 1, prefix.device), cache)
    result: dict[str, float] = {}

    def block_pass(rows: int) -> Callable[[], object]:
        ids = torch.randint(0, vocab, (rows, block), generator=torch.Generator().manual_seed(2))
        mask = native.block_causal_mask(PREFIX, block, PREFIX + block, block, ids.device)  # the block sees itself

        def run() -> object:
            cache.widen(rows)
            logits = model(ids, PREFIX, mask, cache)
            cache.crop(PREFIX)
            return logits

        return run

    def packed_pass(rows: int) -> Callable[[], object]:
        """The same rows packed into one sequence (dcode.forward.PackedRows), the output head on the
        positions a verify pass reads: one per row, and the last row's rest of the block."""
        ids = torch.randint(0, vocab, (rows * block,), generator=torch.Generator().manual_seed(2))
        positions = torch.arange(PREFIX, PREFIX + block).repeat(rows)
        segments = torch.arange(1, rows + 1).repeat_interleave(block)
        mask = native.packed_mask(positions, segments, PREFIX, block)
        firsts = torch.arange(rows) * (block + 1)  # row r at offset r
        read = torch.cat([firsts, (rows - 1) * block + torch.arange(rows, block)])

        def run() -> object:
            cache.widen(1)
            hidden = model.hidden(ids[None], positions, mask, cache)[0]  # (rows * block, hidden)
            cache.crop(PREFIX)
            return native.head_logits(model.lm_head, hidden[read])

        return run

    for rows in ROWS[1:]:
        result[f"block_{rows}_rows_wall_ms"], result[f"block_{rows}_rows_ms"] = median_ms(block_pass(rows), repeats)
        packed = median_ms(packed_pass(rows), repeats) if rows < block else (float("nan"),) * 2  # a row per position
        result[f"packed_{rows}_rows_wall_ms"], result[f"packed_{rows}_rows_ms"] = packed
    step_ids = torch.tensor([[5]])
    step_mask = native.block_causal_mask(PREFIX, 1, PREFIX + 1, 1, step_ids.device)

    def step() -> object:
        cache.widen(1)
        logits = model(step_ids, PREFIX, step_mask, cache)
        cache.crop(PREFIX)
        return logits

    # the ratio the targets use, measured in alternation so that both see the same load
    block, walls, cpus = block_pass(1), {"block": [], "step": []}, {"block": [], "step": []}
    for _ in range(max(5, repeats)):
        for name, run in (("block", block), ("step", step)):
            wall, cpu = time.perf_counter(), time.process_time()
            run()
            walls[name].append((time.perf_counter() - wall) * 1000)
            cpus[name].append((time.process_time() - cpu) * 1000)
    result["block_1_rows_wall_ms"], result["block_1_rows_ms"] = map(statistics.median, (walls["block"], cpus["block"]))
    result["ar_step_wall_ms"], result["ar_step_ms"] = map(statistics.median, (walls["step"], cpus["step"]))
    return result


def release_memory() -> None:
    """Give freed weights back to the system (glibc keeps freed heap pages, and the next model's
    peak would then look smaller than it is)."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):  # not glibc
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def shapes_part(names: list[str], repeats: int, int8: bool, dtypes: tuple[str, ...] = DTYPES) -> list[dict[str, Any]]:
    """(b): a row per shape and dtype (and int8 linears where asked): ms per pass, memory, projections."""
    out: list[dict[str, Any]] = []
    for name in names:
        config = SHAPES[name]
        kinds = [*dtypes, *(INT8 if int8 and name == "qwen2.5-0.5b" else [])]
        for kind in kinds:
            with PeakMemory(torch.device("cpu")) as peak:
                model = random_model(config, torch.bfloat16 if kind in INT8 else getattr(torch, kind))
                if kind in INT8:
                    model = int8_model(model, kind)
                    release_memory()
                timed = shape_passes(model, repeats, BLOCKS.get(name, BLOCK))
            weights = sum(p.numel() * p.element_size() for p in model.parameters() if p.is_floating_point())
            del model
            release_memory()
            one = timed["block_1_rows_wall_ms"]
            row = {"shape": name, "dtype": kind, "block": BLOCKS.get(name, BLOCK), **timed, "peak_mib": round(peak.mb)}
            row["memory"] = peak.kind
            row["float_weights_mib"] = round(weights / 2**20)
            row["block_over_step"] = one / timed["ar_step_wall_ms"]
            row["ar_tok_s"] = 1000 / timed["ar_step_wall_ms"]
            row |= {f"tok_s_at_{k}_per_pass": k * 1000 / one for k in PER_PASS}
            out.append(row)
            print(json.dumps(row), flush=True)
    return out


# ---------------------------------------------------------------------------------------------
# (d) Tiny-A2D's format at the 0.5B shape: the native forward against transformers'


@torch.inference_mode()
def a2d_part(repeats: int, scratch: Path) -> list[dict[str, Any]]:
    """Tiny-A2D's bd3lm format (dcode.testing.checkpoints, random weights) at the 0.5B shape, bfloat16:
    a 32-token block over a 256-token cache on dcode.models.native (every logit, and 16 read as a verify
    pass reads them) and on transformers' Qwen2ForCausalLM (every logit: the a2d path before),
    median wall and CPU ms of interleaved rounds (the first dropped)."""
    from quantize import medians, packed_pass, timed, write

    from dcode.models.families import a2d

    folder = scratch / "a2d-qwen2.5-0.5b-bd3lm"
    weights = write("a2d_qwen2_bd3lm", "qwen2.5-0.5b", folder)
    config = json.loads((folder / "config.json").read_text())
    cpu, bf16 = torch.device("cpu"), torch.bfloat16
    paths = {"native": a2d.load(folder, cpu, bf16, str(folder), config)}
    paths["transformers"] = a2d.load(folder, cpu, bf16, str(folder), config, native_path=False)
    ids = torch.randint(3, 1000, (1, PREFIX + BLOCK), generator=torch.Generator().manual_seed(2))
    caches = {name: model.new_cache() for name, model in paths.items()}
    for name, model in paths.items():
        model(ids[:, :PREFIX], caches[name], origin=0)
    times: dict[str, list[tuple[float, float]]] = {"transformers": [], "native": [], "native, 16 logits read": []}
    for _ in range(repeats + 1):
        for name, model in paths.items():
            cache = caches[name]
            times[name].append(timed(lambda m=model, c=cache: m(ids[:, PREFIX:], c, origin=0)))
            cache.crop(PREFIX)
            if name == "native":
                read = timed(lambda m=model, c=cache: packed_pass(m, ids[0, PREFIX:], PREFIX, c))
                times["native, 16 logits read"].append(read)
                cache.crop(PREFIX)
    rows = [
        {"shape": "qwen2.5-0.5b", "format": "a2d bd3lm", "path": name, "weights_sha256_16mb": weights}
        | medians("ms_per_pass", walls[1:])
        for name, walls in times.items()
    ]
    for row in rows:
        print(json.dumps(row), flush=True)
    return rows


def a2d_markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["| path | ms per 32-token pass (CPU ms) |", "|---|---|"]
    lines += [f"| {r['path']} | {r['ms_per_pass']:.0f} ({r['cpu_ms_per_pass']:.0f}) |" for r in rows]
    return (
        "\n## Tiny-A2D's format, native against transformers\n\nA random checkpoint in Tiny-A2D's bd3lm format "
        f"at the Qwen2.5-Coder-0.5B shape, bfloat16: a {BLOCK}-token block over a {PREFIX}-token cache, interleaved "
        "rounds (wall ms, the process's CPU ms in brackets). transformers: Qwen2ForCausalLM, every logit (the a2d "
        "path before); native: dcode.models.native, every logit, and with the output head on the 16 positions a "
        "verify pass reads.\n\n" + "\n".join(lines) + "\n"
    )


# ---------------------------------------------------------------------------------------------
# (c) llama.cpp, the peer


def llama_part(args: argparse.Namespace) -> list[dict[str, Any]]:
    """benchmarks/llama_cpp.py's measurements (one JSON object a line) at (b)'s threads."""
    script = Path(__file__).with_name("llama_cpp.py")
    argv = [args.llama_python, str(script), "--llama-bench", str(args.llama_bench), "--gguf-dir", str(args.gguf_dir)]
    done = subprocess.run([*argv, "--threads", str(args.shape_threads)], capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"llama_cpp.py failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def llama_markdown(report: dict[str, Any]) -> str:
    """llama.cpp's figures beside dcode's on the same shape: its tokens per second generating one at a
    time, against dcode's bfloat16 block passes at the tokens per pass they would need to match."""
    if not report["llama_cpp"]:
        return (
            "\n## llama.cpp\n\nNot measured in this run: pass `--llama-bench PATH` (benchmarks/llama_cpp.py says "
            "how to build it offline) and `--llama-python` (a python with gguf).\n"
        )
    lines = ["| quant | threads | test | tok/s |", "|---|---|---|---|"]
    for r in report["llama_cpp"]:
        lines.append(f"| {r['quant']} | {r['threads']} | {r['test']} | {r['tok_s']:.1f} ± {r['tok_s_stdev']:.1f} |")
    ours = [r for r in report["shapes"] if r["shape"] == "qwen2.5-0.5b" and r["dtype"] == "bfloat16"]
    generation = max((r["tok_s"] for r in report["llama_cpp"] if r["test"] == "tg64"), default=0.0)
    stand = ""
    if ours and generation:
        one, packed = ours[0]["block_1_rows_wall_ms"], ours[0]["packed_4_rows_wall_ms"]
        stand = (
            f"\n\nWhere dcode stands: llama.cpp generates {generation:.1f} tok/s on this shape (its faster quant). "
            f"dcode's bfloat16 block pass takes {one:.0f} ms in 1 row and {packed:.0f} ms in 4 packed rows (a verify "
            f"pass checking 3 drafts), so it would need {generation * one / 1000:.1f} tokens a 1-row pass, or "
            f"{generation * packed / 1000:.1f} a 4-row pass, to match it; dcode-tiny's verify rule commits about 3.\n"
        )
    commit = report["llama_cpp"][0].get("llama_cpp_commit", "?")
    return (
        f"\n## llama.cpp\n\nllama.cpp {commit} (llama-bench, built from llama-cpp-python's sdist: "
        "benchmarks/llama_cpp.py) on the same random Qwen2.5-Coder-0.5B shape: tg64 generates 64 tokens one at "
        "a time from an empty cache, pp32 runs one 32-token batch (the size of a block pass); mean ± stdev.\n\n"
        + "\n".join(lines)
        + stand
    )


# ---------------------------------------------------------------------------------------------
# Report


def machine() -> dict[str, Any]:
    """CPU model, the flags that decide bfloat16 and int8 speed, torch and its threads, load average."""
    model_name = cpu_model() or platform.processor()
    wanted = sorted(
        f for f in cpu_flags() if f in NATIVE_BF16_FLAGS or f.startswith(("avx512", "amx", "avx2", "avx_vnni"))
    )
    return {
        "cpu": model_name,
        "cores": os.cpu_count(),
        "flags": wanted,
        "torch": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
    }


def percent(row: dict[str, Any], key: str) -> str:
    return f"{100 * row[key]:.0f}%" if key in row else "–"


def tiny_markdown(rows: list[dict[str, Any]], prompts: int) -> str:
    by = {(r["dtype"], r["setting"]): r for r in rows}
    lines = [
        "| dtype | setting | passes | rows a pass | tokens fed a pass | tokens | tok/pass | wall s | CPU s | tok/s "
        "| × left to right | × autoregressive | real code | key words | answers as float32's |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        l2r, ar = by[(r["dtype"], "left-to-right")], by[(r["dtype"], "autoregressive")]
        speed = r["tokens_per_second"]
        same = f"{r['same_as_float32']}/{prompts}" if "same_as_float32" in r else "–"
        lines.append(
            f"| {r['dtype']} | {r['setting']} | {r['forward_passes']} | {r['rows_per_pass']:.1f} "
            f"| {r['fed_per_pass']:.0f} | {r['tokens']} | {r['tokens_per_forward']:.2f} | {r['wall_seconds']:.1f} "
            f"| {r['cpu_seconds']:.1f} | {speed:.1f} | {speed / l2r['tokens_per_second']:.2f}× "
            f"| {speed / ar['tokens_per_second']:.2f}× "
            f"| {percent(r, 'real_code_rate')} | {percent(r, 'key_words_rate')} | {same} |"
        )
    return "\n".join(lines) + "\n"


def shapes_markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| shape | dtype | block | block pass, 1 row ms (CPU) | 4 rows | 8 rows | 16 rows | packed 4 / 8 / 16 rows "
        "| AR step ms (CPU) | block / step | peak MiB (float weights) | AR tok/s "
        "| projected tok/s at 1 / 2 / 3 / 5 tok/pass |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        projected = " / ".join(f"{r[f'tok_s_at_{k}_per_pass']:.1f}" for k in PER_PASS)
        packed = " / ".join(f"{r[f'packed_{k}_rows_wall_ms']:.0f}" for k in ROWS[1:])
        lines.append(
            f"| {r['shape']} | {r['dtype']} | {r.get('block', BLOCK)} "
            f"| {r['block_1_rows_wall_ms']:.0f} ({r['block_1_rows_ms']:.0f}) "
            f"| {r['block_4_rows_wall_ms']:.0f} | {r['block_8_rows_wall_ms']:.0f} | {r['block_16_rows_wall_ms']:.0f} "
            f"| {packed} "
            f"| {r['ar_step_wall_ms']:.0f} ({r['ar_step_ms']:.0f}) | {r['block_over_step']:.2f} "
            f"| {r['peak_mib']} ({r['float_weights_mib']}) "
            f"| {r['ar_tok_s']:.1f} | {projected} |"
        )
    return "\n".join(lines) + "\n"


def targets(report: dict[str, Any]) -> list[str]:
    """Issue 28's targets, each met or not, with the numbers measured in this run."""
    lines = []
    tiny = {(r["dtype"], r["setting"]): r["tokens_per_second"] for r in report["tiny"]}
    for dtype in DTYPES:
        if (dtype, "model-defaults") not in tiny or (dtype, "left-to-right") not in tiny:
            continue
        default, l2r, ar = tiny[dtype, "model-defaults"], tiny[dtype, "left-to-right"], tiny[dtype, "autoregressive"]
        best_ar = max(tiny[d, "autoregressive"] for d in DTYPES if (d, "autoregressive") in tiny)
        lines.append(
            f"- dcode-tiny {dtype}, default decoding >= 2x one token per pass: {default:.1f} against {l2r:.1f} tok/s, "
            f"{default / l2r:.2f}x: **{'met' if default >= 2 * l2r else 'not met'}**"
        )
        lines.append(
            f"- dcode-tiny {dtype}, default decoding faster per token than the same-size autoregressive model with "
            f"its cache: {default:.1f} against {ar:.1f} tok/s in {dtype} ({default / ar:.2f}x), {best_ar:.1f} "
            f"in its faster dtype ({default / best_ar:.2f}x): **{'met' if default > best_ar else 'not met'}**"
        )
    for r in report["shapes"]:
        if r["shape"] == "qwen2.5-0.5b" and r["dtype"] == "bfloat16":
            ratio = r["block_over_step"]
            lines.append(
                f"- Qwen2.5-Coder-0.5B shape, bfloat16: a 32-token block pass <= 2x a one-token step: "
                f"{r['block_1_rows_wall_ms']:.0f} against {r['ar_step_wall_ms']:.0f} ms, {ratio:.2f}x: "
                f"**{'met' if ratio <= 2 else 'not met'}**"
            )
    return lines


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=0, help="torch threads for (a) (0: torch's, as dcode runs)")
    parser.add_argument("--shape-threads", type=int, default=0, help="torch threads for (b) (0: as (a))")
    parser.add_argument("--limit", type=int, default=0, help="(a): the first N prompts (0: all)")
    parser.add_argument("--shapes", default=",".join(SHAPES), help="(b): comma-separated (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=2, help="(b): timed calls per median (default: %(default)s)")
    parser.add_argument("--no-int8", action="store_true", help="(b): skip the int8 rows")
    parser.add_argument("--shape-dtypes", default=",".join(DTYPES), help="(b): dtypes (default: %(default)s)")
    parser.add_argument("--settings", default=",".join(SETTINGS), help="(a): setting names (default: %(default)s)")
    parser.add_argument("--skip-tiny", action="store_true")
    parser.add_argument("--a2d", action="store_true", help="(d): Tiny-A2D's format, native against transformers")
    parser.add_argument("--scratch", type=Path, default=None, help="(d): where its random checkpoint goes (kept)")
    parser.add_argument("--llama-bench", type=Path, help="(c): llama.cpp's llama-bench")
    parser.add_argument("--llama-python", default=sys.executable, help="(c): a python with gguf installed")
    parser.add_argument("--gguf-dir", type=Path, default=Path(".bench/gguf"), help="(c): where the GGUF files are kept")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    command = shlex.join(["python", "benchmarks/cpu.py", *(sys.argv[1:] if argv is None else argv)])
    report: dict[str, Any] = {"provenance": provenance(command, EMBEDDED), "load_before": os.getloadavg()}
    rows = read_prompts(PROMPTS, args.limit)
    began = time.perf_counter()
    torch.set_num_threads(args.threads or torch.get_num_threads())
    args.threads = torch.get_num_threads()
    report["machine"] = machine()
    settings = tuple(n.strip() for n in args.settings.split(",") if n.strip())
    report["tiny"] = [] if args.skip_tiny else tiny_part(rows, settings)
    torch.set_num_threads(args.shape_threads or args.threads)
    args.shape_threads = torch.get_num_threads()
    names = [n.strip() for n in args.shapes.split(",") if n.strip()]
    report["shapes"] = shapes_part(names, args.repeats, not args.no_int8, tuple(args.shape_dtypes.split(",")))
    scratch = args.scratch or Path(tempfile.mkdtemp(prefix="dcode-cpu-"))
    report["a2d"] = a2d_part(args.repeats, scratch) if args.a2d else []
    report["llama_cpp"] = llama_part(args) if args.llama_bench else []
    report |= {"load_after": os.getloadavg(), "seconds": round(time.perf_counter() - began)}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "cpu.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.out / "cpu.md").write_text(markdown(report, len(rows), args))
    print(markdown(report, len(rows), args), end="")
    return report


def markdown(report: dict[str, Any], prompts: int, args: argparse.Namespace) -> str:
    measured, box = report["provenance"], report["machine"]
    load = ", ".join(f"{x:.2f}" for x in report["load_before"]), ", ".join(f"{x:.2f}" for x in report["load_after"])
    head = (
        f"Command: `{measured['command']}`  \nWeights: sha256 `{measured['weights_sha256']}`  \n"
        f"Measured: {measured['date']}  \n"
        f"CPU: {box['cpu']}, {box['cores']} cores, flags {' '.join(box['flags'])}; torch {box['torch']} "
        f"({box['cpu_capability']}); load average (1, 5, 15 min) {load[0]} before, {load[1]} after; "
        f"{report['seconds']} s in all.\n"
    )
    parts = [head, "\n## Targets (issue 28)\n\n" + "\n".join(targets(report)) + "\n"]
    if report["tiny"]:
        parts.append(
            f"\n## dcode-tiny, float32 and bfloat16\n\n{prompts} public prompts (dcode/bench/prompts.jsonl), 256-token "
            f"canvas, greedy, no repair, {args.threads} thread(s) (what `dcode new` runs on this machine). "
            "model-defaults is what `dcode new` runs (verify, its rows packed into one sequence); -no-pack feeds "
            "the same rows as a batch (the same answers); left-to-right is one token per pass left to right "
            "(verify with no drafts: the same answers); autoregressive is the same network run causally, one "
            "token a step with its key/value cache, for as many tokens as model-defaults wrote. Each prompt runs "
            f"under every setting in turn, then autoregressively (after {WARM_UP} prompts untimed), so that all "
            "see the same load; tok/s and the × columns (ratios within the dtype) are wall time. CPU s is the "
            "process's CPU time (with 2 threads, both threads' time).\n\n" + tiny_markdown(report["tiny"], prompts)
        )
    if report["shapes"]:
        parts.append(
            f"\n## Real shapes, random weights\n\ndcode.models.native's forward, {args.shape_threads} thread(s), "
            "in wall ms (the process's CPU ms in brackets: with several threads, all of their time): "
            f"a {BLOCK}-token block over a {PREFIX}-token cached prefix, fed in 4, 8 "
            f"and 16 rows (median of {args.repeats} after a warm-up), the same rows packed into one sequence with "
            "the output head only where a verify pass reads (one position a row, and the last row's rest: "
            "dcode.forward.PackedRows), and in 1 row alternating with one "
            f"autoregressive step (1 token) over the same cache (median of {max(5, args.repeats)} pairs); "
            "peak MiB is the process's memory high-water mark over its level before the model was "
            "built (the float weights' share in brackets: the int8 layers are not in it). int8 (the 0.5B shape): "
            "`--quantize int8` as dcode runs it on this CPU, every linear layer and the output head in int8 "
            "(one scale per row), bfloat16 activations, quantised per row to int8 for torch._int_mm where the CPU "
            "has int8 dot products; int8-weight-only the same weights through torch._weight_int8pack_mm; "
            "int8-fbgemm the same weights through fbgemm's dynamic int8 linear (torch.ao, activations quantised "
            "per call, reduce_range=False: benchmarks/fbgemm_int8.py). The projected tok/s "
            "multiply the measured 1-row block pass by tokens per pass; only the tokens per pass are projected.\n\n"
            + shapes_markdown(report["shapes"])
        )
    if report.get("a2d"):
        parts.append(a2d_markdown(report["a2d"]))
    parts.append(llama_markdown(report))
    return "".join(parts)


if __name__ == "__main__":
    main()
