"""Forward-pass cost of real-size diffusion models, from random weights built on the device.

    python benchmarks/gpu_forward.py OUT                    # real shapes, bf16, on cuda (one H200: ~3-5 min)
    python benchmarks/gpu_forward.py OUT --scale toy --device cpu   # the same code at toy size (CI, ~10 s)

For each model: its released config.json values (the shapes below), mapped onto transformers'
classes the way dcode's family module maps them, built directly on the device in bf16 with random
weights (speed does not depend on the weights; nothing is written to disk) and run through dcode's
own denoisers (decoder.DecoderDenoiser, diffusion_gemma.DiffusionGemmaDenoiser). Measured, as
the median of --repeats timed calls after a warm-up:

- ms per forward pass over a 256 / 1,024 / 4,096-token canvas without a cache (every position fed);
- the same canvas with the family's cache: the exact block cache (block-causal SDAR, Fast-dLLM v2:
  the finished blocks cached, one block fed), Fast-dLLM's dual cache (full-attention Dream, LLaDA:
  a 32-token window fed against the cached rest) or DiffusionGemma's context cache (the context
  encoded once, a 256-token canvas denoised against it);
- the verify rule's batched rows: 1, 4, 8 and 16 rows of a 1,024-token canvas fed side by side;
- peak device memory (torch.cuda.max_memory_allocated).

Projected (arithmetic on the measured ms, not measured): tok/s at 1, 3 and 5 tokens committed per
pass, without the cache (k tokens per full pass) and with it (a block of B tokens takes ceil(B/k)
cached passes; the dual cache adds one full pass per 32-token window; DiffusionGemma one context
encoding per 256-token canvas, bounded by the measured uncached-minus-cached cost).

Writes OUT/gpu_forward.json and OUT/gpu_forward.md and prints the Markdown. Exit 0 when every
model was measured, 1 otherwise (the others still are).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

# Released config.json values (the shape keys), per model. Dream-7B / Dream-Coder-7B and
# Fast-dLLM v2 7B are Qwen2.5-7B; LLaDA-8B-Instruct its own OLMo keys; SDAR-8B-Chat is Qwen3-8B
# with block_size 4. DiffusionGemma is transformers' DiffusionGemmaConfig as it defines it, whose
# defaults leave the mixture of experts unset (the model cannot be built without it): the expert
# sizes below are ASSUMED (not pinned down offline) to give ~26B parameters, ~4B active; only
# num_global_key_value_heads=2 is stated for 26B-A4B in transformers' source.
GEMMA_ASSUMED_MOE = {"num_experts": 128, "top_k_experts": 8, "moe_intermediate_size": 864}
QWEN25_7B = {
    "vocab_size": 152064, "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
    "num_attention_heads": 28, "num_key_value_heads": 4, "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "tie_word_embeddings": False, "hidden_act": "silu",
}  # fmt: skip
REAL = {
    "dream-7b": ("dream", QWEN25_7B),
    "fast-dllm-v2-7b": ("fast_dllm_v2", {**QWEN25_7B, "bd_size": 32}),
    "llada-8b": ("llada", {
        "d_model": 4096, "n_layers": 32, "n_heads": 32, "n_kv_heads": 32, "mlp_hidden_size": 12288,
        "embedding_size": 126464, "vocab_size": 126464, "max_sequence_length": 4096, "rope_theta": 500000.0,
        "rms_norm_eps": 1e-05, "weight_tying": False, "block_type": "llama", "layer_norm_type": "rms",
        "activation_type": "silu",
    }),
    "sdar-8b": ("sdar", {
        "vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "tie_word_embeddings": False, "block_size": 4,
    }),
    "diffusion-gemma": ("diffusion_gemma", {"text_config": {**GEMMA_ASSUMED_MOE, "num_global_key_value_heads": 2}}),
}  # fmt: skip
TOY_QWEN = {
    "vocab_size": 512, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 1024, "hidden_act": "silu",
}  # fmt: skip
TOY = {
    "dream-7b": ("dream", TOY_QWEN),
    "fast-dllm-v2-7b": ("fast_dllm_v2", {**TOY_QWEN, "bd_size": 8}),
    "llada-8b": ("llada", {
        "d_model": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 4, "mlp_hidden_size": 128,
        "embedding_size": 512, "vocab_size": 512, "max_sequence_length": 1024,
    }),
    "sdar-8b": ("sdar", {**TOY_QWEN, "head_dim": 16, "block_size": 4}),
    "diffusion-gemma": ("diffusion_gemma", {"text_config": {
        "vocab_size": 512, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "global_head_dim": 32,
        "num_global_key_value_heads": 1, "sliding_window": 8, "max_position_embeddings": 1024,
        "layer_types": ["sliding_attention", "full_attention"], "num_experts": 4, "top_k_experts": 2,
        "moe_intermediate_size": 32,
    }, "vision_config": {
        "model_type": "gemma4_vision", "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
        "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 8, "position_embedding_size": 16,
    }, "canvas_length": 8}),
}  # fmt: skip
SCALES = {
    # scale -> (models, canvas lengths, verify rows, length the rows are timed at, window of the dual cache)
    "real": (REAL, (256, 1024, 4096), (1, 4, 8, 16), 1024, 32),
    "toy": (TOY, (16, 32, 64), (1, 4), 32, 8),
}
TOKENS_PER_PASS = (1, 3, 5)


def build(family: str, config: dict[str, Any], device: torch.device, dtype: torch.dtype) -> Any:
    """A dcode denoiser over a transformers model built on `device` with random weights, mapped
    from the released config values as dcode's family module maps them."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

    from dcode.models.base import ModelFacts
    from dcode.models.decoder import QWEN2_KEYS, QWEN3_KEYS, DecoderDenoiser
    from dcode.models.facts import positive
    from dcode.models.families import FAMILIES
    from dcode.models.families.llada import llama_values

    where = Path(family)
    if family == "diffusion_gemma":
        return build_gemma(config, device, dtype)
    if family == "llada":
        config_class, model_class, values = LlamaConfig, LlamaForCausalLM, llama_values(config, where, True)
    elif family == "sdar":
        values = {k: config[k] for k in QWEN3_KEYS if k in config} | {"model_type": "qwen3"}
        config_class, model_class = Qwen3Config, Qwen3ForCausalLM
    else:  # dream, fast_dllm_v2: Qwen2 layers
        values = {k: config[k] for k in QWEN2_KEYS if k in config} | {"model_type": "qwen2"}
        config_class, model_class = Qwen2Config, Qwen2ForCausalLM
    model_config = config_class.from_dict(values)
    model_config._attn_implementation = "sdpa"  # as decoder.load_weights asks
    model = on_device(lambda: model_class(model_config), device, dtype)
    spec = FAMILIES[family].facts
    assert spec is not None  # a mask-diffusion family
    facts = ModelFacts(
        name=family, family=family, mask_id=0, eos_ids=frozenset({1}), pad_id=1,
        shifted=bool(spec.shifted), block=positive(config, spec.block_keys),
        max_length=int(model_config.max_position_embeddings), vocab_size=int(model_config.vocab_size),
    )  # fmt: skip
    return DecoderDenoiser(model, None, facts)


def build_gemma(config: dict[str, Any], device: torch.device, dtype: torch.dtype) -> Any:
    from transformers import DiffusionGemmaConfig, DiffusionGemmaForBlockDiffusion

    from dcode.models.base import ModelFacts
    from dcode.models.families.diffusion_gemma import DiffusionGemmaDenoiser

    model_config = DiffusionGemmaConfig(**config)
    model_config._attn_implementation = "sdpa"
    model = on_device(lambda: DiffusionGemmaForBlockDiffusion(model_config), device, dtype)
    text = model_config.get_text_config(decoder=True)
    facts = ModelFacts(
        name="diffusion_gemma", family="diffusion_gemma", mask_id=3, eos_ids=frozenset({1}), pad_id=0,
        shifted=False, block=int(model_config.canvas_length or 256), max_length=int(text.max_position_embeddings),
        vocab_size=int(text.vocab_size), noise="uniform",
    )  # fmt: skip
    return DiffusionGemmaDenoiser(model, None, facts)


def on_device(make: Callable[[], Any], device: torch.device, dtype: torch.dtype) -> Any:
    """make() with every parameter created on `device` in `dtype` (no CPU copy of 16 GB first)."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device), torch.no_grad():
            model = make()
    finally:
        torch.set_default_dtype(previous)
    return model.eval()


def timed(call: Callable[[], object], device: torch.device, timing: tuple[int, int]) -> float:
    """The median wall time of call() in ms; timing = (untimed warm-up calls, timed calls).
    Synchronised on CUDA, whose kernels run asynchronously."""
    samples, (warmup, repeats) = [], timing
    for number in range(warmup + repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        began = time.perf_counter()
        call()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if number >= warmup:
            samples.append((time.perf_counter() - began) * 1000)
    return statistics.median(samples)


def canvas(den: Any, rows: int, length: int, device: torch.device) -> torch.Tensor:
    gen = torch.Generator(device="cpu").manual_seed(length)
    return torch.randint(4, den.facts.vocab_size, (rows, length), generator=gen).to(device)


def pass_costs(
    den: Any, length: int, rows: int, window: int, device: torch.device, timing: tuple[int, int]
) -> dict[str, Any]:
    """ms of one pass over `rows` canvases of `length` tokens, without the cache and with it."""
    ids = canvas(den, rows, length, device)
    f = den.facts
    with torch.inference_mode():
        if f.noise == "uniform":  # DiffusionGemma: context + one canvas of f.block tokens
            context = max(length - f.block, 1)
            full = canvas(den, rows, context + f.block, device)

            def uncached() -> None:
                cache = den.new_cache()
                den.extend(full[:, :context], cache)
                den(full[:, context:], cache)

            cache = den.new_cache()
            den.extend(full[:, :context], cache)
            return {"cache": f"context ({f.block}-token canvas)", "fed": f.block,
                    "ms_no_cache": timed(uncached, device, timing),
                    "ms_cached": timed(lambda: den(full[:, context:], cache), device, timing)}  # fmt: skip
        uncached_ms = timed(lambda: den(ids), device, timing)
        if f.block is not None:  # exact: the finished blocks cached, the last block fed
            kept = length - f.block
            cache = den.new_cache()
            den(ids[:1, :kept], cache)

            def cached() -> None:
                den(ids[:, kept:], cache)
                cache.crop(kept)

            return {"cache": f"exact block cache (block {f.block})", "fed": f.block,
                    "ms_no_cache": uncached_ms, "ms_cached": timed(cached, device, timing)}  # fmt: skip
        if rows > 1:  # the dual cache holds one canvas
            return {"cache": None, "fed": length, "ms_no_cache": uncached_ms, "ms_cached": None}
        lo = (length - window) // 2
        wcache = den.new_window_cache()
        den.refresh(ids, (lo, lo + window), wcache)
        return {"cache": f"dual cache (Fast-dLLM, {window}-token window)", "fed": window,
                "ms_no_cache": uncached_ms, "ms_cached": timed(lambda: den.window(ids[:, lo:lo + window], wcache),
                                                               device, timing)}  # fmt: skip


def implied(row: dict[str, Any], family_block: int | None, noise: str) -> list[dict[str, Any]]:
    """Projected tok/s at 1, 3, 5 tokens committed per pass, from one row of pass_costs."""
    out = []
    for k in TOKENS_PER_PASS:
        no_cache = k * 1000 / row["ms_no_cache"]
        cached = None
        if row["ms_cached"] is not None:
            unit = row["fed"]  # tokens finished per cycle: a block, a window, a canvas
            passes = math.ceil(unit / min(k, unit))
            overhead = 0.0  # a full pass per window (dual cache), a context encoding per canvas (bound)
            if noise == "uniform" or family_block is None:
                overhead = row["ms_no_cache"] - row["ms_cached"]
            cached = unit * 1000 / (passes * row["ms_cached"] + overhead)
        out.append({"tokens_per_pass": k, "tok_s_no_cache": no_cache, "tok_s_cached": cached})
    return out


def measure(name: str, family: str, config: dict[str, Any], scale: str, device: torch.device,
            dtype: torch.dtype, timing: tuple[int, int]) -> dict[str, Any]:  # fmt: skip
    """Build one model on the device and time it at every length and row count."""
    _, lengths, rows_list, rows_length, window = SCALES[scale]
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    began = time.perf_counter()
    den = build(family, config, device, dtype)
    built = time.perf_counter() - began
    parameters = sum(p.numel() for p in den.model.parameters())
    f = den.facts
    lengths_out = []
    for length in lengths:
        row = {"length": length, **pass_costs(den, length, 1, window, device, timing)}
        row["implied"] = implied(row, f.block, f.noise)
        lengths_out.append(row)
    rows_out = [
        {"rows": r, "length": rows_length, **pass_costs(den, rows_length, r, window, device, timing)} for r in rows_list
    ]
    peak = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None
    del den
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return {"name": name, "family": family, "parameters": parameters, "block": f.block, "shifted": f.shifted,
            "build_seconds": built, "peak_memory_mib": peak, "lengths": lengths_out, "rows": rows_out}  # fmt: skip


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def billions(count: int) -> str:
    return f"{count / 1e9:.2f}B" if count >= 1e8 else f"{count / 1e6:.2f}M"


def markdown(report: dict[str, Any]) -> str:
    """The report as Markdown: passes by canvas length, verify's rows, projected tok/s."""
    head = f"{report['scale']} shapes, {report['dtype']}, {report['device_name']}; median of {report['repeats']}"
    lines = [f"Measured ({head}):", "",
             "| model | params | canvas | ms/pass, no cache | cache | fed | ms/pass, cached | peak MiB |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for m in report["models"]:
        if "error" in m:
            lines.append(f"| {m['name']} | FAILED: {m['error']} | | | | | | |")
            continue
        for row in m["lengths"]:
            peak = "-" if m["peak_memory_mib"] is None else f"{m['peak_memory_mib']:.0f}"
            lines.append(
                f"| {m['name']} | {billions(m['parameters'])} | {row['length']} | {ms(row['ms_no_cache'])} "
                f"| {row['cache']} | {row['fed']} | {ms(row['ms_cached'])} | {peak} |"
            )
    lines += ["", "Verify's batched rows (measured):", "",
              "| model | canvas | rows | ms/pass, no cache | ms/pass, cached |", "|---|---|---|---|---|"]  # fmt: skip
    for m in report["models"]:
        for row in m.get("rows", []):
            cells = f"{row['rows']} | {ms(row['ms_no_cache'])} | {ms(row['ms_cached'])}"
            lines.append(f"| {m['name']} | {row['length']} | {cells} |")
    columns = " | ".join(f"{k}/pass no cache | {k}/pass cached" for k in TOKENS_PER_PASS)
    lines += ["", "Projected tok/s (tokens per pass × passes per second from the ms above; not measured):", "",
              f"| model | canvas | {columns} |", "|---|---|" + "---|---|" * len(TOKENS_PER_PASS)]  # fmt: skip
    for m in report["models"]:
        for row in m.get("lengths", []):
            cells = " | ".join(f"{ms(i['tok_s_no_cache'])} | {ms(i['tok_s_cached'])}" for i in row["implied"])
            lines.append(f"| {m['name']} | {row['length']} | {cells} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder for gpu_forward.json and gpu_forward.md")
    parser.add_argument("--scale", choices=sorted(SCALES), default="real")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--models", default=",".join(REAL), help="comma-separated, from " + ", ".join(REAL))
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per figure (their median)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed calls before them")
    parser.add_argument("--budget", type=float, default=420.0, help="seconds; a model starts only with 30 s left")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    if not names or any(n not in REAL for n in names):
        parser.error(f"unknown model in {args.models!r} (choose from {', '.join(REAL)})")
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("no CUDA device: run with --device cpu --scale toy")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    import transformers

    report: dict[str, Any] = {
        "scale": args.scale, "device": str(device), "dtype": str(dtype).removeprefix("torch."),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__, "transformers": transformers.__version__, "repeats": args.repeats, "models": [],
    }  # fmt: skip
    began = time.perf_counter()
    for name in names:
        family, config = SCALES[args.scale][0][name]
        if time.perf_counter() - began > args.budget - 30:
            report["models"].append({"name": name, "family": family, "error": "skipped: budget spent"})
            continue
        try:
            timing = (args.warmup, args.repeats)
            report["models"].append(measure(name, family, config, args.scale, device, dtype, timing))
        except Exception as error:  # one model's failure must not cost the others
            traceback.print_exc()
            report["models"].append({"name": name, "family": family, "error": " ".join(str(error).split())[:200]})
        print(f"gpu_forward: {name} done at {time.perf_counter() - began:.0f} s", file=sys.stderr, flush=True)
        save(report, args.out)  # after every model: a run cut short keeps what it measured
    print(markdown(report))
    return 1 if any("error" in m for m in report["models"]) else 0


def save(report: dict[str, Any], out: Path) -> None:
    """OUT/gpu_forward.json and OUT/gpu_forward.md, each replaced whole (never half-written)."""
    out.mkdir(parents=True, exist_ok=True)
    for name, text in (("gpu_forward.json", json.dumps(report, indent=2) + "\n"), ("gpu_forward.md", markdown(report))):
        partial = out / (name + ".partial")
        partial.write_text(text)
        partial.replace(out / name)


if __name__ == "__main__":
    sys.exit(main())
