"""--dtype: the rule behind `auto` on given CPU flag sets, and every family loaded and run in
bfloat16 on the CPU (the dtype a CUDA user runs, so its path is exercised without a GPU)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from dcode import flows, models
from dcode.cli import app
from dcode.config import SamplerConfig
from dcode.dtypes import native_bfloat16, parse_cpu_flags, resolve_dtype, running_dtype
from dcode.events import Finished, drain
from dcode.localfill import LocalFiller
from dcode.testing import checkpoints as tiny

SAPPHIRE_RAPIDS = {"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}
ZEN4 = {"avx2", "avx512f", "avx512_bf16"}
SKYLAKE_X = {"avx2", "avx512f", "avx512bw"}  # AVX-512 without its bfloat16 dot product: emulated
APPLE_OR_UNKNOWN: set[str] = set()  # no /proc/cpuinfo


@pytest.mark.parametrize(
    ("name", "device", "flags", "expected"),
    [
        ("auto", "cpu", SAPPHIRE_RAPIDS, "bfloat16"),
        ("auto", "cpu", ZEN4, "bfloat16"),
        ("auto", "cpu", SKYLAKE_X, "float32"),
        ("auto", "cpu", APPLE_OR_UNKNOWN, "float32"),
        ("auto", "cuda", APPLE_OR_UNKNOWN, "bfloat16"),
        ("auto", "mps", SAPPHIRE_RAPIDS, "float32"),  # the CPU's flags say nothing about a GPU
        ("float32", "cpu", SAPPHIRE_RAPIDS, "float32"),
        ("bfloat16", "cpu", SKYLAKE_X, "bfloat16"),  # asked for: emulated, but as asked
        ("float16", "cuda", set(), "float16"),
    ],
)
def test_auto_is_bfloat16_where_the_hardware_multiplies_it(name, device, flags, expected) -> None:
    assert resolve_dtype(name, device, flags) == expected


def test_unknown_dtype_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown dtype 'half'"):
        resolve_dtype("half", "cpu", SAPPHIRE_RAPIDS)


def test_cpu_flags_are_read_from_cpuinfo() -> None:
    x86 = "processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu avx2 amx_bf16\nbugs\t\t: spectre\n"
    arm = "processor\t: 0\nFeatures\t: fp asimd bf16\nCPU implementer\t: 0x41\n"
    assert parse_cpu_flags(x86) == {"fpu", "avx2", "amx_bf16"} and native_bfloat16(parse_cpu_flags(x86))
    assert parse_cpu_flags(arm) == {"fp", "asimd", "bf16"} and not native_bfloat16(parse_cpu_flags(arm))
    assert parse_cpu_flags("") == frozenset()


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_dtype_option_runs_the_model_in_it(dtype: str, tiny_checkpoint: Path) -> None:
    """--dtype reaches the weights: the parameters are of that dtype, and --json and the summary say so."""
    model = models.load(str(tiny_checkpoint), torch.device("cpu"), dtype)
    assert {p.dtype for p in model.model.parameters()} == {getattr(torch, dtype)}  # type: ignore[attr-defined]
    assert running_dtype(model) == dtype
    args = ["new", "x", "--model", str(tiny_checkpoint), "--length", "16", "--json", "--no-repair", "--dtype", dtype]
    result = CliRunner().invoke(app, args, prog_name="dcode")
    assert result.exit_code in (0, 3), result.stderr
    assert json.loads(result.stdout)["dtype"] == dtype
    assert result.stderr.splitlines()[0].endswith(f" tok/s, {tiny_checkpoint} in {dtype}")
    env = CliRunner().invoke(app, args[:-2], prog_name="dcode", env={"DCODE_DTYPE": dtype})
    assert json.loads(env.stdout)["dtype"] == dtype


def test_bad_dtype_is_one_line() -> None:
    result = CliRunner().invoke(app, ["new", "x", "--dtype", "half"], prog_name="dcode")
    assert result.exit_code == 2
    assert result.stderr == "dcode: error: unknown --dtype 'half' (choose from auto, bfloat16, float16, float32)\n"


@pytest.mark.parametrize("family", tiny.FAMILIES)
def test_every_family_runs_in_bfloat16_on_the_cpu(family: str, tmp_path: Path) -> None:
    """Each family's tiny checkpoint, loaded in bfloat16: its logits stay near float32's, and `new`
    fills every position of the canvas."""
    tiny.write(family, tmp_path / family, "tiny", seed=3)
    spec = str(tmp_path / family)
    low = models.load(spec, torch.device("cpu"), "bfloat16")
    high = models.load(spec, torch.device("cpu"), "float32")
    assert running_dtype(low) == "bfloat16" and running_dtype(high) == "float32"
    if family != "diffusion_gemma":  # its forward needs a cache and a previous pass: run by `new` below
        ids = torch.randint(5, 200, (1, 12), generator=torch.Generator().manual_seed(0))
        a, b = low(ids), high(ids)  # (1, 12, V)
        # bfloat16's rounding on random weights: the worst logit reaches ~5% of the largest for
        # families without q/k norms (LLaDA at seed 10, Stable-DiffCoder at seed 3); 6% bounds it.
        assert (a.float() - b).abs().max() < 0.06 * b.abs().max() + 0.05
    config = SamplerConfig(rule="threshold", threshold=0.5) if family == "diffusion_gemma" else SamplerConfig()
    finished = drain(flows.new(LocalFiller(low, config), "add two numbers", "python", 16, 0), result=Finished)
    assert finished.forward >= 1 and finished.tokens <= 16


def test_cpu_benchmarks_int8_rows_run_dcodes_int8_layers_and_fbgemms(monkeypatch: pytest.MonkeyPatch) -> None:
    """benchmarks/cpu.py's int8 rows on a small shape: every linear layer and the tied head int8
    (dcode's Int8Linear, or fbgemm's on the same values), logits close to bfloat16's."""
    from conftest import benchmark_module

    from dcode.models.int8_linear import Int8Embedding, Int8Linear

    monkeypatch.syspath_prepend(str(Path(__file__).parents[1] / "benchmarks"))  # fbgemm_int8 beside it
    cpu = benchmark_module("cpu.py")
    config = cpu.SHAPES["qwen2.5-0.5b"] | {"vocab_size": 64, "hidden_size": 64, "num_hidden_layers": 1}
    config |= {"num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128}
    ids, mask = torch.arange(8)[None], torch.ones(1, 1, 8, 8, dtype=torch.bool)
    with torch.inference_mode():
        want = cpu.random_model(config, torch.bfloat16)(ids, 0, mask).float()
        for kind in cpu.INT8:
            model = cpu.int8_model(cpu.random_model(config, torch.bfloat16), kind)
            assert isinstance(model.model.embed_tokens, Int8Embedding)
            linears = [m for m in model.modules() if isinstance(m, Int8Linear)]
            assert len(linears) == (0 if kind == "int8-fbgemm" else 8)  # 7 in the layer and the head
            got = model(ids, 0, mask).float()
            assert ((got - want).norm() / want.norm()).item() < 0.1, kind


def test_cpu_benchmark_measures_a_shape_and_judges_the_targets() -> None:
    """benchmarks/cpu.py's plumbing on a small shape (no timing is checked): every pass is timed,
    and the targets are judged from the numbers given."""
    from conftest import benchmark_module

    cpu = benchmark_module("cpu.py")
    config = cpu.SHAPES["qwen2.5-0.5b"] | {"vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 1}
    config |= {"num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 48}
    timed = cpu.shape_passes(cpu.random_model(config, torch.bfloat16), repeats=1)
    assert {f"block_{rows}_rows_wall_ms" for rows in cpu.ROWS} | {"ar_step_wall_ms"} <= timed.keys()
    assert {f"packed_{rows}_rows_wall_ms" for rows in cpu.ROWS[1:]} <= timed.keys()
    assert all(value > 0 for value in timed.values())
    tiny = [
        {"dtype": "bfloat16", "setting": "model-defaults", "tokens_per_second": 150.0},
        {"dtype": "bfloat16", "setting": "left-to-right", "tokens_per_second": 100.0},
        {"dtype": "bfloat16", "setting": "autoregressive", "tokens_per_second": 120.0},
    ]
    shape = {"shape": "qwen2.5-0.5b", "dtype": "bfloat16", "block_1_rows_wall_ms": 300.0, "ar_step_wall_ms": 160.0}
    lines = cpu.targets({"tiny": tiny, "shapes": [shape | {"block_over_step": 300 / 160}]})
    assert [line.rsplit("**", 2)[-2] for line in lines] == ["not met", "met", "met"]
    assert "1.50x" in lines[0] and "1.25x" in lines[1] and "1.88x" in lines[2]
