"""iLLaDA (GSAI-ML/iLLaDA-8B-Instruct) from a tiny checkpoint in its released layout
(dcode.models.families.illada.write_checkpoint): model_type "illada", ILLaDAForCausalLM under both
auto classes, Llama's weight names, grouped-query attention, a tied head, mask id 5 named by no file.

Logits are checked against a forward written here from modeling_illada.py's layer math (RMSNorm
in float32, default RoPE over hidden / heads, repeat_kv, attention without any mask, SwiGLU, the
optional q/k/v/o and MLP biases, the head read off the embedding), in float64; a causal run of the
same math differs, so the bidirectional attention is what matches. dcode's sampler is checked
against a short loop written as LLaDA's generate() runs with the README's mask_id=5. A LayerNorm
or scaled-RoPE config is refused in one line; `dcode new --model <folder>` writes an answer.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from test_families import SIZE, model_card, one_line_error, some_ids
from typer.testing import CliRunner

from dcode import models
from dcode.cli import app
from dcode.config import SamplerConfig
from dcode.sampler import denoise
from dcode.testing import checkpoints as tiny

REPO = "GSAI-ML/iLLaDA-8B-Instruct"


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """plain: as released (as far as known); biases: attention_bias and mlp_bias on; head: the tied
    head stored a second time as lm_head.weight (same seed: the same network as plain)."""
    root = tmp_path_factory.mktemp("illada")
    out = {}
    for kind, options in {"plain": {}, "biases": {"biases": True}, "head": {"head": True}}.items():
        out[kind] = root / kind / "iLLaDA-8B-Instruct"
        tiny.write("illada", out[kind], SIZE, seed=7, **options)
    return out


def illada_forward(folder: Path, ids: torch.Tensor, *, causal: bool = False) -> torch.Tensor:
    """ids (L,) -> logits (L, V), float64, as modeling_illada.py computes them (causal: the same
    with a causal mask, for the comparison that shows the attention is not that)."""
    config = json.loads((folder / "config.json").read_text())
    w = {k: v.double() for k, v in load_file(str(folder / "model.safetensors")).items()}
    heads, kv_heads, eps = config["num_attention_heads"], config["num_key_value_heads"], config["rms_norm_eps"]
    d, length = config["hidden_size"] // heads, len(ids)

    def norm(x: torch.Tensor, name: str) -> torch.Tensor:  # ILLaDARMSNorm
        return w[name + ".weight"] * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)

    def linear(x: torch.Tensor, name: str) -> torch.Tensor:  # nn.Linear, bias per config
        return x @ w[name + ".weight"].T + w.get(name + ".bias", torch.zeros(()))

    def rotate_half(x: torch.Tensor) -> torch.Tensor:
        return torch.cat([-x[..., d // 2 :], x[..., : d // 2]], -1)

    inv_freq = 1.0 / config["rope_theta"] ** (torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,)
    freqs = torch.arange(length, dtype=torch.float64)[:, None] * inv_freq  # (L, d/2)
    cos, sin = torch.cat([freqs, freqs], -1).cos(), torch.cat([freqs, freqs], -1).sin()  # (L, d)
    allowed = torch.ones(length, length, dtype=torch.bool).tril(0 if causal else length)
    x = w["model.embed_tokens.weight"][ids]  # (L, H)
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = norm(x, p + "input_layernorm")
        q, k, v = (linear(h, p + f"self_attn.{n}_proj").view(length, -1, d).transpose(0, 1) for n in "qkv")  # (h, L, d)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = k.repeat_interleave(heads // kv_heads, 0), v.repeat_interleave(heads // kv_heads, 0)  # repeat_kv
        scores = (q @ k.transpose(-1, -2) / math.sqrt(d)).masked_fill(~allowed, float("-inf"))  # (h, L, L)
        x = x + linear((scores.softmax(-1) @ v).transpose(0, 1).reshape(length, -1), p + "self_attn.o_proj")
        h = norm(x, p + "post_attention_layernorm")
        gate, up = linear(h, p + "mlp.gate_proj"), linear(h, p + "mlp.up_proj")
        x = x + linear(torch.nn.functional.silu(gate) * up, p + "mlp.down_proj")
    return norm(x, "model.norm") @ w["model.embed_tokens.weight"].T  # the tied head


def test_the_checkpoint_is_written_as_the_modeling_code_reads_it(folders: dict[str, Path]) -> None:
    config = json.loads((folders["plain"] / "config.json").read_text())
    assert (config["model_type"], config["architectures"]) == ("illada", ["ILLaDAForCausalLM"])
    assert config["auto_map"]["AutoModel"] == config["auto_map"]["AutoModelForCausalLM"]
    assert config["auto_map"]["AutoModel"] == "modeling_illada.ILLaDAForCausalLM"
    assert "mask_token_id" not in config and config["layer_norm_eps"] is None
    assert config["num_key_value_heads"] < config["num_attention_heads"]  # grouped-query attention
    names = set(load_file(str(folders["plain"] / "model.safetensors")))
    assert "lm_head.weight" not in names and "model.layers.0.self_attn.o_proj.weight" in names
    assert not any(name.endswith(".bias") for name in names)
    assert "model.layers.1.mlp.down_proj.bias" in set(load_file(str(folders["biases"] / "model.safetensors")))


@pytest.mark.parametrize("kind", ["plain", "biases", "head"])
def test_facts_and_logits_match_the_modeling_code(kind: str, folders: dict[str, Path]) -> None:
    model = models.load(str(folders[kind]))
    f, vocab = model.facts, model.tokenizer.get_vocab()
    assert (f.family, f.shifted, f.block, f.attention, f.max_length) == ("illada", False, None, "full", 1024)
    assert (f.mask_id, vocab["<[MASK]>"], model.tokenizer.mask_token_id) == (5, 5, None)
    assert (f.eos_ids, f.pad_id) == ({vocab["<[end▁of▁sentence]>"]}, vocab["<[PAD▁TOKEN]>"]) == ({2}, 1)
    assert f.defaults == {"ordering": "confidence", "temperature": 0.0, "block": 32}
    ids = some_ids(model, 30)
    got = model(ids[None])[0]
    want = illada_forward(folders[kind], ids).float()
    assert torch.allclose(got, want, atol=1e-4), (got - want).abs().max()
    causal = illada_forward(folders[kind], ids, causal=True).float()
    assert not torch.allclose(got, causal, atol=1e-2)  # every position sees the later ones too
    if kind == "head":  # the stored copy changes nothing: the network is plain's
        assert torch.allclose(got, illada_forward(folders["plain"], ids).float(), atol=1e-4)


def llada_generate(folder: Path, prompt: list[int], new: int, mask_id: int) -> list[int]:
    """LLaDA's generate() as the README runs iLLaDA (mask_id=5, temperature 0, low_confidence,
    steps = gen_length, one block): each pass commits the masked position whose most probable
    token is the most probable of all."""
    x = prompt + [mask_id] * new
    for _ in range(new):
        probs = illada_forward(folder, torch.tensor(x)).softmax(-1)[len(prompt) :]
        confidence, token = probs.max(-1)
        masked = torch.tensor(x[len(prompt) :]) == mask_id
        pick = int(torch.where(masked, confidence, -1.0).argmax())
        x[len(prompt) + pick] = int(token[pick])
    return x[len(prompt) :]


def test_sampler_fills_as_llada_generate_does_with_mask_5(folders: dict[str, Path]) -> None:
    model = models.load(str(folders["plain"]))
    prompt = model.tokenizer.encode("def add(a, b):\n    return", add_special_tokens=False)[:7]
    new = 9
    canvas = torch.tensor(prompt + [model.facts.mask_id] * new)
    settings = model.facts.efforts["high"]  # eval_illada.sh's: one token per pass
    config = replace(SamplerConfig(approx_cache="off"), **settings, stop_at_eos=False)  # type: ignore[arg-type]
    steps = list(denoise(model, canvas, len(prompt), config))
    assert len(steps) == new
    assert steps[-1].canvas[len(prompt) :].tolist() == llada_generate(folders["plain"], prompt, new, 5)


def test_detection_by_model_type_class_or_module() -> None:
    assert models.family_of({"model_type": "illada"}) == "illada"
    assert models.family_of({"model_type": "x", "architectures": ["ILLaDAForCausalLM"]}) == "illada"
    remote = {"AutoModel": "GSAI-ML/iLLaDA-8B-Instruct--modeling_illada.ILLaDAForCausalLM"}
    assert models.family_of({"auto_map": remote}) == "illada"
    assert models.family_of({"model_type": "llada", "architectures": ["LLaDAModelLM"]}) == "llada"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"layer_norm_eps": 1e-5}, "layer_norm_eps=1e-05 asks for LayerNorm norms; dcode runs iLLaDA with RMSNorm"),
        ({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "rope_scaling={'rope_type': 'linear', 'factor'"),
    ],
)
def test_what_the_llama_classes_cannot_run_is_one_line(change: dict, message: str, tmp_path: Path) -> None:
    folder = tmp_path / "iLLaDA-8B-Instruct"
    tiny.write("illada", folder, SIZE, seed=2, layer_norm="layer_norm_eps" in change)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | change))
    assert one_line_error(str(folder)).startswith(f"{folder / 'config.json'}: {message}")


def test_new_with_model_writes_an_answer(folders: dict[str, Path]) -> None:
    folder = str(folders["plain"])
    args = ["new", "add two numbers", "--model", folder, "--length", "8", "--json", "-q"]
    result = CliRunner().invoke(app, args, env={"DCODE_MODEL": None, "DCODE_LENGTH": None})
    assert result.exit_code in (0, 3), (result.stderr, result.exception)
    report = json.loads(result.stdout)
    assert report["model"] == folder and "<[MASK]>" not in report["code"]


def test_models_verbose_states_the_facts(
    folders: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    card = model_card(tmp_path, monkeypatch, REPO, folders["plain"])
    assert card[0].split()[1] == "illada"
    described = "\n".join(card[1:5])
    assert "mask: <[MASK]> (5)" in described, described
    assert "logits shifted: no   block: none" in described, described
