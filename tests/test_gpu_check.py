"""benchmarks/make_checkpoints.py, benchmarks/gpu_forward.py and benchmarks/gpu_check.sh, at the
tiny (toy) size on the CPU.

The checkpoints of every family load through dcode.models.load with the family's facts; the
real-shape forward timing runs the same code at toy shapes; and the GPU check runs end to end
(DEVICE=cpu SIZE=tiny FORWARD_SCALE=toy), so the one run a lent GPU gets does not fail on a typo:
one report per family, a summary, and a failing family that does not stop the others.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import benchmark_module, make_checkpoints

from dcode import models
from dcode.models.checkpoint import estimate_parameters, read_headers

ROOT = Path(__file__).resolve().parent.parent
MAKE = ROOT / "benchmarks" / "make_checkpoints.py"
CHECK = ROOT / "benchmarks" / "gpu_check.sh"
FAMILIES = ("qwen2", "dream", "llada", "sdar", "fast_dllm_v2", "diffusion_gemma")
# family -> (attention block, shifted logits, noise, the token that stands for "still to fill")
FACTS = {
    "qwen2": (4, True, "mask", "<|mask|>"),
    "dream": (None, True, "mask", "<|mask|>"),
    "llada": (None, False, "mask", "<|mdm_mask|>"),
    "sdar": (4, False, "mask", "<|MASK|>"),
    "fast_dllm_v2": (32, True, "mask", "|<MASK>|"),
    "diffusion_gemma": (8, False, "uniform", "<mask>"),
}
END_TOKENS = {
    "qwen2": "<|eos|>", "dream": "<|im_end|>", "llada": "<|eot_id|>", "sdar": "<|im_end|>",
    "fast_dllm_v2": "<|im_end|>", "diffusion_gemma": "<turn|>",
}  # fmt: skip
# What the end-to-end check benches on the CPU: one per kind of cache (SDAR and Fast-dLLM v2 run
# the same block-causal decoder path as qwen2's transformers fallback; test_families runs them).
BENCHED = ("qwen2", "dream", "llada", "diffusion_gemma")
MODEL_TYPES = {
    "qwen2": "qwen2", "dream": "Dream", "llada": "llada", "sdar": "sdar", "fast_dllm_v2": "Fast_dLLM_Qwen",
    "diffusion_gemma": "diffusion_gemma",
}  # fmt: skip


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("checkpoints")
    assert make_checkpoints().main([str(path), "--size", "tiny"]) == 0
    return path


@pytest.mark.parametrize("family", FAMILIES)
def test_tiny_checkpoint_loads_with_its_family_facts(folder: Path, family: str) -> None:
    path = folder / family
    config = json.loads((path / "config.json").read_text())
    assert config["model_type"] == MODEL_TYPES[family]
    headers = read_headers(path)
    assert {t.dtype for t in headers.values()} == {"F32"}  # tiny: float32
    assert 50_000 < sum(t.count for t in headers.values()) < 1_000_000
    settings = json.loads((path / "tokenizer_config.json").read_text())
    assert settings["chat_template"]

    model = models.load(str(path))
    facts = model.facts
    block, shifted, noise, placeholder = FACTS[family]
    assert (facts.family, facts.block, facts.shifted, facts.noise) == (family, block, shifted, noise)
    vocab = model.tokenizer.get_vocab()
    assert facts.mask_id == vocab[placeholder]
    assert vocab[END_TOKENS[family]] in facts.eos_ids
    assert facts.vocab_size > len(vocab)  # padded embedding rows, as the released checkpoints have
    assert model.tokenizer.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False)


def test_unknown_family_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as error:
        make_checkpoints().main([str(tmp_path), "--size", "tiny", "--families", "qwen2,gpt2"])
    assert error.value.code == 2
    assert not list(tmp_path.iterdir())  # nothing written


def run_check(out: Path, **env: str) -> subprocess.CompletedProcess[str]:
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed")
    base = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHON": sys.executable}
    base |= {"DEVICE": "cpu", "SIZE": "tiny", "LIMIT": "1", "LENGTH": "16", "REPEATS": "1"}
    base |= {"FORWARD_SCALE": "toy", "FORWARD_MODELS": "sdar-8b", "FAMILIES": ",".join(BENCHED)}
    for key in ("DCODE_MODEL", "DCODE_DEVICE", "DCODE_LENGTH", "DCODE_QUIET", "SETTINGS", "AR", "FORWARD"):
        base.pop(key, None)
    return subprocess.run(
        ["bash", str(CHECK), str(out)], env=base | env, capture_output=True, text=True, timeout=400, cwd=ROOT
    )


def test_gpu_check_runs_end_to_end_on_cpu(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = run_check(out)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    forward = json.loads((out / "forward" / "gpu_forward.json").read_text())
    assert [m["name"] for m in forward["models"]] == ["sdar-8b"] and (out / "forward" / "gpu_forward.md").is_file()
    for family in BENCHED:
        report = json.loads((out / family / "speed.json").read_text())
        assert report["device"] == "cpu" and report["length"] == 16 and report["prompts"] == 1
        rows = {row["setting"]: row for row in report["settings"]}
        assert rows["one-per-pass"]["config"]["cache"] is False  # without the cache
        fast = [row for row in report["settings"] if row["role"] == "fast"]
        assert fast[-1]["config"]["cache"] is True  # with it
        if family in ("dream", "llada"):  # the same blocks without the cache, then with the dual cache
            assert [row["setting"] for row in fast] == ["threshold-0.9-block-32-no-cache", "threshold-0.9-block-32"]
            assert fast[0]["config"]["cache"] is False and fast[1]["config"]["approx_cache"] == "dual"
        else:
            assert len(fast) == 1
        assert all(row["tokens"] == 16 and row["tokens_per_second"] > 0 for row in report["settings"])
        assert ("autoregressive" in rows) == (family != "diffusion_gemma")
        assert (out / family / "speed.md").is_file()
    summary = (out / "summary.md").read_text()
    assert summary.count("| one-per-pass | off |") == len(BENCHED)
    assert "| qwen2 | threshold-0.9 | on |" in summary
    assert "| dream | threshold-0.9-block-32 | dual (approximate) |" in summary
    assert "| llada | threshold-0.9-block-32-no-cache | off |" in summary
    assert "| diffusion_gemma | entropy-bound-0.1 | on |" in summary
    log = (out / "gpu_check.log").read_text()
    assert log == done.stdout and "nvidia-smi" in log
    assert all(f"{family}: ok in" in log for family in (*BENCHED, "forward"))
    quantized = [f"{f} --quantize {k}: ok in" for f in ("qwen2", "sdar") if f in BENCHED for k in ("int8", "int4")]
    assert quantized and all(line in log for line in quantized)  # step 3b: the same checkpoint quantised
    assert "| qwen2-int4 | threshold-0.9 | on |" in summary


def test_a_failing_family_does_not_stop_the_others_and_a_timeout_is_retried(tmp_path: Path) -> None:
    # A stand-in python: qwen2's bench fails at once (exit 2, as a usage error does), and llada's
    # first run hangs until FAMILY_TIMEOUT (45 s: a 2-core machine under other load took over 30 s
    # for the real retry alone); the retry with LIMIT=1 REPEATS=1 runs the real bench.
    stub = tmp_path / "python"
    stub.write_text(
        "#!/usr/bin/env bash\n"
        'case " $* " in *"/qwen2 --device cpu"*) echo "dcode: error: a stand-in failure" >&2; exit 2 ;; esac\n'
        'case " $* " in *"/llada --device cpu --limit 2 "*) exec sleep 90 ;; esac\n'
        f'exec "{sys.executable}" "$@"\n'
    )
    stub.chmod(0o755)
    out = tmp_path / "out"
    env = {"FAMILIES": "qwen2,llada", "SETTINGS": "one-per-pass,threshold-0.9-block-32", "AR": "0", "FORWARD": "0"}
    done = run_check(out, **env, LIMIT="2", LENGTH="8", FAMILY_TIMEOUT="45", PYTHON=str(stub))
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert "qwen2: FAILED (exit 2)" in done.stdout
    assert "llada: ok in" in done.stdout and "with LIMIT=1 REPEATS=1, after a timeout" in done.stdout
    assert not (out / "qwen2" / "speed.json").exists()
    assert (out / "llada" / "bench-timed-out.log").exists()
    report = json.loads((out / "llada" / "speed.json").read_text())
    assert (report["prompts"], report["repeats"]) == (1, 1)
    assert [row["setting"] for row in report["settings"]] == ["one-per-pass", "threshold-0.9-block-32"]
    summary = (out / "summary.md").read_text()
    assert "| qwen2 | (no report) |" in summary and "| llada | one-per-pass | off |" in summary
    assert summary.count("| 1 × 1 |") == 2


CACHES = {  # model -> the cache its family times (gpu_forward.pass_costs)
    "dream-7b": "dual cache (Fast-dLLM, 8-token window)",
    "fast-dllm-v2-7b": "exact block cache (block 8)",
    "llada-8b": "dual cache (Fast-dLLM, 8-token window)",
    "sdar-8b": "exact block cache (block 4)",
    "diffusion-gemma": "context (8-token canvas)",
}


def test_gpu_forward_at_toy_shapes(tmp_path: Path) -> None:
    """The real-shape forward timing, every model, at toy shapes on the CPU (the code a GPU runs)."""
    forward = benchmark_module("gpu_forward.py")
    assert forward.main([str(tmp_path), "--scale", "toy", "--device", "cpu", "--repeats", "1", "--warmup", "0"]) == 0
    report = json.loads((tmp_path / "gpu_forward.json").read_text())
    assert (report["scale"], report["dtype"]) == ("toy", "float32")
    for model in report["models"]:
        assert [row["length"] for row in model["lengths"]] == [16, 32, 64]
        for row in model["lengths"]:
            assert row["cache"] == CACHES[model["name"]] and row["ms_no_cache"] > 0 and row["ms_cached"] > 0
            assert [i["tokens_per_pass"] for i in row["implied"]] == [1, 3, 5]
            assert row["implied"][2]["tok_s_no_cache"] == pytest.approx(5 * row["implied"][0]["tok_s_no_cache"])
        assert [(row["rows"], row["length"]) for row in model["rows"]] == [(1, 32), (4, 32)]
        dual = model["family"] in ("dream", "llada")
        assert (model["rows"][1]["ms_cached"] is None) == dual  # the dual cache holds one canvas
    text = (tmp_path / "gpu_forward.md").read_text()
    assert "| sdar-8b | 0.14M | 64 |" in text and "Projected tok/s" in text and "not measured" in text


def test_gpu_forward_shapes_are_the_released_ones() -> None:
    """The real scale builds what the released config.json files say: every model is built on the
    meta device (shapes, no memory), so a config error shows here and not on a lent GPU."""
    import torch

    forward = benchmark_module("gpu_forward.py")
    billions = {}
    for name, (family, config) in forward.REAL.items():
        den = forward.build(family, config, torch.device("meta"), torch.bfloat16)
        billions[name] = round(sum(p.numel() for p in den.model.parameters()) / 1e9, 1)
    assert billions == {
        "dream-7b": 7.6,
        "fast-dllm-v2-7b": 7.6,
        "llada-8b": 8.0,
        "sdar-8b": 8.2,
        "diffusion-gemma": 26.1,
    }
    from dcode.models.families.llada import llama_values

    real = forward.REAL
    assert real["dream-7b"][1]["hidden_size"] == 3584 and real["dream-7b"][1]["num_key_value_heads"] == 4
    assert real["sdar-8b"][1]["block_size"] == 4 and real["fast-dllm-v2-7b"][1]["bd_size"] == 32
    values = llama_values(real["llada-8b"][1], Path("llada"), True)
    assert (values["hidden_size"], values["num_hidden_layers"], values["intermediate_size"]) == (4096, 32, 12288)
    assert estimate_parameters(real["llada-8b"][1]) == pytest.approx(8.0e9, rel=0.02)
    assert estimate_parameters(real["dream-7b"][1]) == pytest.approx(7.6e9, rel=0.02)
    assert estimate_parameters(real["sdar-8b"][1]) == pytest.approx(8.2e9, rel=0.03)
