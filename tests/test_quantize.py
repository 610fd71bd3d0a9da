"""--quantize: every family's tiny checkpoint (dcode.testing.checkpoints, in its released format)
loads with its linear layers quantised as they are read (torchao int8 / int4) and runs on the CPU
close to its unquantised logits; bad input is one line, exit 2, nothing written; what the weights
take per quantisation (`dcode models --verbose`, the catalogue) comes from the loader's own rule."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from dcode.cli import app
from dcode.models import ModelError, load
from dcode.models import quantize as q
from dcode.models.checkpoint import read_headers
from dcode.testing import checkpoints

pytest.importorskip("torchao")

# Relative logit error of a random tiny model against its own bfloat16 logits: int8 measured
# 0.02-0.06, int4 0.25-0.55 (4 bits of random weights: a trained model's agreement is measured in
# benchmarks/quantize.py); the bounds only catch a layer left unloaded or quantised wrongly.
BOUND = {"int8": 0.15, "int4": 0.8}


def logits(model: object, ids: torch.Tensor) -> torch.Tensor:
    """One forward: a cache-reading family (DiffusionGemma) gets its context first."""
    try:
        return model(ids).float()  # type: ignore[operator]
    except ValueError:
        cache = model.new_cache()  # type: ignore[attr-defined]
        model.extend(ids[:, :4], cache)  # type: ignore[attr-defined]
        return model(ids[:, 4:], cache).float()  # type: ignore[operator]


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("quantize")
    for family in checkpoints.FAMILIES:
        checkpoints.write(family, root / family)
    return {family: root / family for family in checkpoints.FAMILIES}


@pytest.mark.parametrize("kind", q.QUANTIZED)
@pytest.mark.parametrize("family", checkpoints.FAMILIES)
def test_every_family_runs_quantised_on_the_cpu(written: dict[str, Path], family: str, kind: str) -> None:
    folder = written[family]
    ids = torch.arange(1, 13)[None]
    plain = load(str(folder), dtype=torch.bfloat16)
    quantised = load(str(folder), dtype=torch.bfloat16, quantize=kind)
    assert (q.describe(plain), q.describe(quantised)) == ("none", kind)
    network = quantised.model  # type: ignore[attr-defined]
    rule = sum(q.quantized(n, t.shape) for n, t in read_headers(folder).items())
    # llada2's router gate is a bare weight, not a linear layer; DiffusionGemma's vision tower is quantised too
    assert q.quantized_layers(network) >= rule - 1 > 0
    want, got = logits(plain, ids), logits(quantised, ids)
    assert got.shape == want.shape and torch.isfinite(got).all()
    assert 0 < ((got - want).norm() / want.norm()).item() < BOUND[kind]


def test_int8_on_a_cpu_runs_pytorchs_int8_kernels_on_torchaos_values(written: dict[str, Path]) -> None:
    """int8_cpu_kernel swaps torchao's eager int8 layers (which convert the weight back to bfloat16
    on every call) for Int8Linear on the same values and scales: with int8 activations, one scale
    per row, multiplied in integers (torch._int_mm), or weight-only (torch._weight_int8pack_mm)."""
    from dcode.models.int8_linear import Int8Embedding, Int8Linear, int8_rows

    model = load(str(written["qwen2"]), dtype=torch.float32, quantize="int8")
    network = model.model  # type: ignore[attr-defined]
    layers = [m for m in network.modules() if isinstance(m, Int8Linear)]
    assert len(layers) == 2 * 7 + 1 and model.device.type == "cpu"  # type: ignore[attr-defined]
    # the tied head reads the int8 embedding's own matrix
    assert (
        isinstance(network.model.embed_tokens, Int8Embedding)
        and network.lm_head.qdata is network.model.embed_tokens.qdata
    )
    layer = layers[0]
    x = torch.randn(5, layer.in_features)
    bias = layer.bias if layer.bias is not None else 0
    layer.dynamic = False
    assert torch.allclose(layer(x), x @ (layer.qdata.float() * layer.scale[:, None]).T + bias, atol=1e-4)
    layer.dynamic = True
    rows, scale = int8_rows(x)
    assert rows.abs().amax(dim=1).eq(127).all() and torch.allclose(rows * scale, x, atol=scale.max().item())
    integers = (rows.long() @ layer.qdata.long().T).float()  # exact sums
    assert torch.allclose(layer(x), integers * scale * layer.scale + bias, rtol=1e-6, atol=1e-6)


def test_dynamic_int8_gives_a_row_the_same_output_however_many_rows_come_with_it() -> None:
    """A row's activations are quantised on their own and summed in integers: the verify rule's
    rows, fed together, get what each would get alone, bit for bit."""
    from dcode.models.int8_linear import Int8Embedding

    head = Int8Embedding.of(torch.randn(300, 64)).head(dynamic=True)
    x = torch.randn(20, 64) * torch.logspace(-2, 2, 20)[:, None]  # rows of very different sizes
    together = head(x)
    assert all(torch.equal(head(x[i : i + 1])[0], together[i]) for i in range(len(x)))


def test_with_int8_the_verify_rules_answers_are_one_token_per_pass_answers() -> None:
    """Rows packed into one pass get what each would alone (int8 activations are quantised per row):
    the verify rule still writes one token per pass's answer (fbgemm's per-pass activation scale
    measured 5 of 6 prompts: docs/benchmarks/quantize)."""
    from dataclasses import replace

    from dcode.bench.answers import answered
    from dcode.config import SamplerConfig

    model = load(None, torch.device("cpu"), torch.bfloat16, quantize="int8")
    for prompt in ("a function that merges two sorted lists", "an LRU cache class with get and put"):
        verify = answered(model, prompt, "python", 128, replace(SamplerConfig(), rule="verify"))[0]
        one = answered(model, prompt, "python", 128, replace(SamplerConfig(), rule="verify", draft=0))[0]
        assert verify.code == one.code and verify.forward < one.forward


def test_the_int8_kernel_follows_the_cpus_int8_instructions(monkeypatch: pytest.MonkeyPatch) -> None:
    from dcode import dtypes
    from dcode.models import int8_linear

    for flags, dynamic in ((frozenset({"avx2", "avx512_vnni"}), True), (frozenset({"avx2", "avx512f"}), False)):
        monkeypatch.setattr(dtypes, "cpu_flags", lambda flags=flags: flags)
        int8_linear.dynamic_int8.cache_clear()
        assert int8_linear.dynamic_int8() is dynamic
        layer = int8_linear.Int8Linear(torch.zeros(16, 64, dtype=torch.int8), torch.ones(16), None, torch.float32)
        assert layer.dynamic is dynamic
    int8_linear.dynamic_int8.cache_clear()


def test_the_loader_holds_one_weight_at_a_time(written: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """dcode's own torch models read each weight and quantise its layer before the next one is read."""
    seen: list[torch.nn.Module] = []
    plain_before: list[int] = []
    quantize_layer = q.quantize_layer

    def watching(module: torch.nn.Module, config: object, name: str) -> None:
        plain_before.append(sum(not type(m.weight).__module__.startswith("torchao") for m in seen))
        seen.append(module)
        quantize_layer(module, config, name)

    monkeypatch.setattr(q, "quantize_layer", watching)
    model = load(str(written["qwen2"]), dtype=torch.bfloat16, quantize="int8")
    assert q.describe(model) == "int8" and len(seen) == 2 * 7  # 2 layers of q, k, v, o, gate, up, down
    assert plain_before == [0] * len(seen)  # every layer read before was already quantised


def test_auto_is_none_and_an_unknown_kind_is_refused(written: dict[str, Path]) -> None:
    assert q.describe(load(str(written["qwen2"]), quantize="auto")) == "none"
    with pytest.raises(ModelError, match="unknown quantisation 'int3'"):
        load(str(written["qwen2"]), quantize="int3")


def test_a_device_without_the_kernels_is_one_line() -> None:
    with pytest.raises(ModelError, match=r"^--quantize int4 runs on cpu or cuda, not mps"):
        q.torchao_config("int4", torch.device("mps"))


def test_a_model_with_nothing_to_quantise_is_refused() -> None:
    with pytest.raises(ModelError, match="no linear layer it can quantise; use --quantize none"):
        q.mark(torch.nn.Embedding(4, 4), "int8")


def test_new_says_which_quantisation_ran(tmp_path: Path) -> None:
    args = ["new", "add two numbers", "--length", "8", "--no-repair", "--json", "--no-log"]
    result = CliRunner().invoke(app, [*args, "--quantize", "int8"], prog_name="dcode")
    assert result.exit_code in (0, 3), (result.stderr, result.exception)
    assert json.loads(result.stdout)["quantize"] == "int8"
    assert "dcode-tiny in " in result.stderr and " with int8 weights" in result.stderr
    plain = CliRunner().invoke(app, args, prog_name="dcode", env={"DCODE_QUANTIZE": "none"})
    assert json.loads(plain.stdout)["quantize"] == "none" and " weights" not in plain.stderr


@pytest.mark.parametrize(
    ("args", "env", "line"),
    [
        (["--quantize", "int3"], {}, "dcode: error: unknown --quantize 'int3' (choose from auto, none, int8, int4)\n"),
        ([], {"DCODE_QUANTIZE": "nf4"}, "dcode: error: unknown DCODE_QUANTIZE 'nf4' (choose from auto, none, int8, int4)\n"),  # noqa: E501
    ],
)  # fmt: skip
def test_a_bad_kind_is_a_usage_error_and_writes_nothing(
    tmp_path: Path, args: list[str], env: dict[str, str], line: str
) -> None:
    out = tmp_path / "x.py"
    result = CliRunner().invoke(app, ["new", "x", "-o", str(out), "--no-log", *args], prog_name="dcode", env=env)
    assert (result.exit_code, result.stderr, out.exists()) == (2, line, False)


def test_models_verbose_says_what_each_quantisation_takes() -> None:
    result = CliRunner().invoke(app, ["models", "--verbose", "--json"], prog_name="dcode")
    tiny = next(row for row in json.loads(result.stdout) if row["name"] == "dcode-tiny")
    loaded = tiny["facts"]["loaded_bytes"]
    assert loaded["none"] > loaded["int8"] > loaded["int4"] > 0


def test_weight_bytes_follow_the_loaders_rule() -> None:
    from dcode.models.checkpoint import Tensor

    tensors = {
        "model.embed_tokens.weight": Tensor("BF16", (100, 64)),  # kept: looked up by row
        "model.layers.0.mlp.up_proj.weight": Tensor("BF16", (128, 64)),
        "model.layers.0.input_layernorm.weight": Tensor("BF16", (64,)),
        "router.weight": Tensor("BF16", (4, 64)),  # kept: 4 rows, int4's kernels pack 16
    }
    kept = (100 * 64 + 64 + 4 * 64) * 2
    assert q.weight_bytes(tensors, "bfloat16", "none") == kept + 128 * 64 * 2
    assert q.weight_bytes(tensors, "bfloat16", "int8") == kept + 128 * 64
    assert q.weight_bytes(tensors, "bfloat16", "int4") == kept + int(128 * 64 * (0.5 + 4 / q.GROUP))


def test_stderr_carries_dcodes_lines_alone_with_torchao_installed(written: dict[str, Path]) -> None:
    """transformers imports torchao, which logs a warning per GPU extension a CPU lacks (and torch
    one per enum it registers): a fresh process's stderr must still hold dcode's lines alone."""
    import subprocess
    import sys

    command = [sys.executable, "-m", "dcode.cli", "new", "x", "--model", str(written["sdar"]), "--length", "4"]
    done = subprocess.run([*command, "--no-repair", "--no-log", "--quantize", "none"], capture_output=True, text=True)
    noise = [line for line in done.stderr.splitlines() if not line.startswith("dcode:")]
    assert done.returncode in (0, 3) and not [line for line in noise if "torchao" in line or "_pytree" in line]
