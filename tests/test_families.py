"""Real diffusion families on transformers' own classes, from tiny checkpoints in each family's
on-disk format: Dream (Qwen2 names, model_type "Dream", one file or shards, a remote-code
tokenizer_config) and LLaDA (OLMo names and config keys). Logits are checked against a plain-torch
forward written here from the architecture, then `dcode new` runs end to end. Also: detection
errors, the Hugging Face cache (a fake one, laid out by hand) and listing without torch.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from conftest import make_checkpoints, python_lines
from safetensors.torch import save_file
from typer.testing import CliRunner

from dcode import models
from dcode.cli import app
from dcode.config import SamplerConfig
from dcode.models import ModelError, apply_defaults, list_models
from dcode.models.checkpoint import read_header

HIDDEN, HEADS, KV_HEADS, LAYERS, INNER = 32, 4, 2, 2, 48
PAD_VOCAB = 320  # rows of the embedding: more than the tokenizer's ids, as in the real checkpoints

# ---------------------------------------------------------------------------------------------
# Tokenizers: a tiny BPE plus each family's special tokens and chat template.

# The templates and special tokens benchmarks/make_checkpoints.py writes for each family.
BENCH = make_checkpoints()
QWEN_TEMPLATE, LLAMA3_TEMPLATE = BENCH.QWEN_TEMPLATE, BENCH.LLAMA3_TEMPLATE
DREAM_SPECIALS, LLADA_SPECIALS = BENCH.DREAM_SPECIALS, BENCH.LLADA_SPECIALS


def write_tokenizer(folder: Path, specials: list[str], settings: dict, files: str) -> dict[str, int]:
    """Train a tiny BPE, add `specials`, write it as tokenizer.json ("json") or as Qwen2's
    vocab.json + merges.txt ("vocab"), with a tokenizer_config.json. Returns token -> id."""
    return BENCH.write_tokenizer(folder, BENCH.train_bpe(BENCH.SIZES["tiny"], specials), settings, files)


# ---------------------------------------------------------------------------------------------
# Weights: random tensors under each family's own names (no transformers model involved).


def random_weights(shapes: dict[str, tuple[int, ...]], seed: int) -> dict[str, torch.Tensor]:
    """Large enough that attention is far from uniform and every norm weight and bias matters."""
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for name, shape in shapes.items():
        noise = torch.randn(shape, generator=gen)
        if "norm" in name or "ln_f" in name:
            out[name] = 1.0 + 0.2 * noise
        elif name.endswith("bias"):
            out[name] = 0.3 * noise
        elif "embed_tokens" in name or "wte" in name:
            out[name] = noise
        else:
            out[name] = 0.25 * noise
    return out


def save_weights(weights: dict[str, torch.Tensor], folder: Path, shards: int, dtype: torch.dtype) -> None:
    """model.safetensors, or model-0000i-of-0000n.safetensors plus the index json."""
    weights = {k: v.to(dtype).contiguous() for k, v in weights.items()}
    if shards == 1:
        save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
        return
    names = list(weights)
    weight_map = {}
    for i in range(shards):
        file = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: weights[n] for n in names[i::shards]}
        save_file(part, str(folder / file), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(part, file))
    total = sum(v.numel() * v.element_size() for v in weights.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))


def dream_checkpoint(folder: Path, *, shards: int = 1, files: str = "vocab", seed: int = 0) -> None:
    """A tiny Dream-format checkpoint: model_type "Dream", Qwen2 names with q/k/v biases, untied head."""
    folder.mkdir(parents=True, exist_ok=True)
    remote = {
        "auto_map": {"AutoTokenizer": ["tokenization_dream.DreamTokenizer", None]},
        "tokenizer_class": "DreamTokenizer",
    }
    settings = {
        **(remote if files == "vocab" else {"tokenizer_class": "Qwen2Tokenizer"}),
        "bos_token": "<|beginoftext|>",
        "eos_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
        "mask_token": "<|mask|>",
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "chat_template": QWEN_TEMPLATE,
        "model_max_length": 131072,
        "errors": "replace",
    }
    ids = write_tokenizer(folder, DREAM_SPECIALS, settings, files)
    head = HIDDEN // HEADS
    shapes = {"model.embed_tokens.weight": (PAD_VOCAB, HIDDEN), "model.norm.weight": (HIDDEN,)}
    shapes["lm_head.weight"] = (PAD_VOCAB, HIDDEN)
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        for proj, rows in (("q", HIDDEN), ("k", KV_HEADS * head), ("v", KV_HEADS * head)):
            shapes[f"{p}self_attn.{proj}_proj.weight"] = (rows, HIDDEN)
            shapes[f"{p}self_attn.{proj}_proj.bias"] = (rows,)
        shapes[f"{p}self_attn.o_proj.weight"] = (HIDDEN, HIDDEN)
        shapes[f"{p}mlp.gate_proj.weight"] = (INNER, HIDDEN)
        shapes[f"{p}mlp.up_proj.weight"] = (INNER, HIDDEN)
        shapes[f"{p}mlp.down_proj.weight"] = (HIDDEN, INNER)
        shapes[f"{p}input_layernorm.weight"] = (HIDDEN,)
        shapes[f"{p}post_attention_layernorm.weight"] = (HIDDEN,)
    save_weights(random_weights(shapes, seed), folder, shards, torch.bfloat16)
    config = {
        "architectures": ["DreamModel"],
        "auto_map": {"AutoConfig": "configuration_dream.DreamConfig", "AutoModel": "modeling_dream.DreamModel"},
        "attention_dropout": 0.0,
        "bos_token_id": ids["<|beginoftext|>"],
        "eos_token_id": ids["<|endoftext|>"],
        "hidden_act": "silu",
        "hidden_size": HIDDEN,
        "initializer_range": 0.02,
        "intermediate_size": INNER,
        "mask_token_id": ids["<|mask|>"],
        "max_position_embeddings": 512,
        "max_window_layers": LAYERS,
        "model_type": "Dream",
        "num_attention_heads": HEADS,
        "num_hidden_layers": LAYERS,
        "num_key_value_heads": KV_HEADS,
        "pad_token_id": ids["<|endoftext|>"],
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 5000.0,  # not transformers' default, so a dropped key shows
        "sliding_window": None,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.46.2",
        "use_cache": False,
        "use_sliding_window": False,
        "vocab_size": PAD_VOCAB,
    }
    (folder / "config.json").write_text(json.dumps(config, indent=2))


def llada_checkpoint(folder: Path, *, tied: bool = False, seed: int = 1) -> None:
    """A tiny LLaDA-format checkpoint: OLMo config keys, model.transformer.* names, no biases."""
    folder.mkdir(parents=True, exist_ok=True)
    settings = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<|startoftext|>",
        "eos_token": "<|endoftext|>",
        "chat_template": LLAMA3_TEMPLATE,
        "model_max_length": 1000000000000000019884624838656,
    }
    ids = write_tokenizer(folder, LLADA_SPECIALS, settings, "json")
    head = HIDDEN // HEADS
    shapes = {"model.transformer.wte.weight": (PAD_VOCAB, HIDDEN), "model.transformer.ln_f.weight": (HIDDEN,)}
    if not tied:
        shapes["model.transformer.ff_out.weight"] = (PAD_VOCAB, HIDDEN)
    for i in range(LAYERS):
        p = f"model.transformer.blocks.{i}."
        shapes |= {
            p + "q_proj.weight": (HIDDEN, HIDDEN),
            p + "k_proj.weight": (KV_HEADS * head, HIDDEN),
            p + "v_proj.weight": (KV_HEADS * head, HIDDEN),
            p + "attn_out.weight": (HIDDEN, HIDDEN),
            p + "ff_proj.weight": (INNER, HIDDEN),
            p + "up_proj.weight": (INNER, HIDDEN),
            p + "ff_out.weight": (HIDDEN, INNER),
            p + "attn_norm.weight": (HIDDEN,),
            p + "ff_norm.weight": (HIDDEN,),
        }
    save_weights(random_weights(shapes, seed), folder, 1, torch.bfloat16)
    config = {
        "activation_type": "silu",
        "alibi": False,
        "architectures": ["LLaDAModelLM"],
        "attention_dropout": 0.0,
        "attention_layer_norm": False,
        "auto_map": {"AutoConfig": "configuration_llada.LLaDAConfig", "AutoModel": "modeling_llada.LLaDAModelLM"},
        "block_group_size": 1,
        "block_type": "llama",
        "d_model": HIDDEN,
        "embedding_size": PAD_VOCAB,
        "eos_token_id": ids["<|endoftext|>"],
        "include_bias": False,
        "include_qkv_bias": False,
        "input_emb_norm": False,
        "layer_norm_type": "rms",
        "mask_token_id": ids["<|mdm_mask|>"],
        "max_sequence_length": 512,
        "mlp_hidden_size": INNER,
        "mlp_ratio": 4,
        "model_type": "llada",
        "multi_query_attention": None,
        "n_heads": HEADS,
        "n_kv_heads": KV_HEADS,
        "n_layers": LAYERS,
        "pad_token_id": ids["<|endoftext|>"],
        "rms_norm_eps": 1e-05,
        "rope": True,
        "rope_theta": 500000.0,
        "scale_logits": False,
        "use_cache": False,
        "vocab_size": PAD_VOCAB,
        "weight_tying": tied,
    }
    (folder / "config.json").write_text(json.dumps(config, indent=2))


# ---------------------------------------------------------------------------------------------
# An independent forward: a LLaMA-shaped stack with full bidirectional attention, in float64.


@dataclass(frozen=True)
class Names:
    """Where each weight sits in a family's files; per-layer names take the layer number."""

    embed: str
    norm: str
    head: str | None  # None: tied to the embedding
    q: str
    k: str
    v: str
    o: str
    attn_norm: str
    mlp_norm: str
    gate: str  # silu(gate(h)) * up(h), then down
    up: str
    down: str
    qkv_bias: bool


DREAM_NAMES = Names(
    "model.embed_tokens.weight", "model.norm.weight", "lm_head.weight",
    "model.layers.{}.self_attn.q_proj", "model.layers.{}.self_attn.k_proj", "model.layers.{}.self_attn.v_proj",
    "model.layers.{}.self_attn.o_proj", "model.layers.{}.input_layernorm.weight",
    "model.layers.{}.post_attention_layernorm.weight", "model.layers.{}.mlp.gate_proj",
    "model.layers.{}.mlp.up_proj", "model.layers.{}.mlp.down_proj", qkv_bias=True,
)  # fmt: skip
# LLaDA's block: ff_proj is the gate (silu), up_proj the up projection, ff_out the down projection.
LLADA_NAMES = Names(
    "model.transformer.wte.weight", "model.transformer.ln_f.weight", "model.transformer.ff_out.weight",
    "model.transformer.blocks.{}.q_proj", "model.transformer.blocks.{}.k_proj", "model.transformer.blocks.{}.v_proj",
    "model.transformer.blocks.{}.attn_out", "model.transformer.blocks.{}.attn_norm.weight",
    "model.transformer.blocks.{}.ff_norm.weight", "model.transformer.blocks.{}.ff_proj",
    "model.transformer.blocks.{}.up_proj", "model.transformer.blocks.{}.ff_out", qkv_bias=False,
)  # fmt: skip


def all_weights(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    out: dict[str, torch.Tensor] = {}
    for path in sorted(folder.glob("*.safetensors")):
        out |= {k: v.double() for k, v in load_file(str(path)).items()}
    return out


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def reference_logits(folder: Path, names: Names, ids: torch.Tensor, eps: float, theta: float) -> torch.Tensor:
    """ids (L,) -> logits (L, V) of the unshifted stack: RMSNorm, RoPE, GQA attention with no mask, SwiGLU."""
    w = all_weights(folder)
    head_dim, length = HIDDEN // HEADS, len(ids)

    def linear(x: torch.Tensor, name: str, bias: bool = False) -> torch.Tensor:
        return x @ w[name + ".weight"].T + (w[name + ".bias"] if bias else 0)

    # Rotary embeddings: angle(p, j) = p / theta^(2j / d), the same angles on both halves.
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)  # (d/2,)
    angles = torch.arange(length, dtype=torch.float64)[:, None] * inv_freq[None]  # (L, d/2)
    cos, sin = torch.cat([angles, angles], -1).cos(), torch.cat([angles, angles], -1).sin()  # (L, d)

    x = w[names.embed][ids]  # (L, H)
    for i in range(LAYERS):
        h = rms_norm(x, w[names.attn_norm.format(i)], eps)
        q = linear(h, names.q.format(i), names.qkv_bias).view(length, HEADS, head_dim).transpose(0, 1)  # (h, L, d)
        k = linear(h, names.k.format(i), names.qkv_bias).view(length, KV_HEADS, head_dim).transpose(0, 1)
        v = linear(h, names.v.format(i), names.qkv_bias).view(length, KV_HEADS, head_dim).transpose(0, 1)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(HEADS // KV_HEADS, dim=0)  # query head j reads kv head j // 2
        v = v.repeat_interleave(HEADS // KV_HEADS, dim=0)
        attention = ((q @ k.transpose(-1, -2)) / math.sqrt(head_dim)).softmax(-1)  # (h, L, L): no mask
        x = x + linear((attention @ v).transpose(0, 1).reshape(length, HIDDEN), names.o.format(i))
        h = rms_norm(x, w[names.mlp_norm.format(i)], eps)
        gate, up = linear(h, names.gate.format(i)), linear(h, names.up.format(i))
        x = x + linear(torch.nn.functional.silu(gate) * up, names.down.format(i))
    x = rms_norm(x, w[names.norm], eps)
    head = w[names.head] if names.head is not None and names.head in w else w[names.embed]
    return x @ head.T  # (L, V)


def some_ids(model: models.Denoiser, length: int) -> torch.Tensor:
    ids = model.tokenizer("def total(items):\n    return sum(x * 2 for x in items if x)\n")["input_ids"]
    ids = torch.tensor((ids * length)[:length])
    ids[3::5] = model.facts.mask_id
    return ids


# ---------------------------------------------------------------------------------------------
# Checkpoints (built once per module) and their facts and logits


@pytest.fixture(scope="module")
def dream_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("dream") / "Dream-tiny"
    dream_checkpoint(folder)
    return folder


@pytest.fixture(scope="module")
def dream_sharded_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("dream-sharded") / "Dream-tiny-sharded"
    dream_checkpoint(folder, shards=3, files="json", seed=5)
    return folder


@pytest.fixture(scope="module")
def llada_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("llada") / "LLaDA-tiny"
    llada_checkpoint(folder)
    return folder


@pytest.mark.parametrize("which", ["dream_folder", "dream_sharded_folder"])
def test_dream_logits_match_plain_torch(which: str, request: pytest.FixtureRequest) -> None:
    folder: Path = request.getfixturevalue(which)
    config = json.loads((folder / "config.json").read_text())
    model = models.load(str(folder))
    facts = model.facts
    tokenizer = model.tokenizer
    assert (facts.family, facts.shifted, facts.block, facts.name) == ("dream", True, None, str(folder))
    assert facts.mask_id == config["mask_token_id"] == tokenizer.convert_tokens_to_ids("<|mask|>")
    assert facts.eos_ids == {tokenizer.convert_tokens_to_ids(t) for t in ("<|endoftext|>", "<|im_end|>")}
    assert facts.pad_id == config["pad_token_id"]
    assert (facts.vocab_size, facts.max_length) == (PAD_VOCAB, 512)
    assert facts.defaults == {"ordering": "entropy", "temperature": 0.1, "top_p": 0.95}
    assert model.new_cache() is None  # full attention: nothing is exact to cache
    ids = some_ids(model, 19)
    got = model(ids[None])[0]  # (L, V)
    want = reference_logits(folder, DREAM_NAMES, ids, eps=1e-6, theta=5000.0).float()
    assert got.shape == want.shape == (19, PAD_VOCAB)
    assert torch.allclose(got, want, atol=1e-4), (got - want).abs().max()


@pytest.mark.parametrize("tied", [False, True], ids=["own-head", "tied"])
def test_llada_logits_match_plain_torch(tied: bool, llada_folder: Path, tmp_path: Path) -> None:
    folder = llada_folder
    if tied:
        folder = tmp_path / "tied"
        llada_checkpoint(folder, tied=True, seed=3)
    config = json.loads((folder / "config.json").read_text())
    model = models.load(str(folder))
    facts = model.facts
    tokenizer = model.tokenizer
    assert (facts.family, facts.shifted, facts.block) == ("llada", False, None)
    assert facts.mask_id == config["mask_token_id"] == tokenizer.convert_tokens_to_ids("<|mdm_mask|>")
    assert facts.eos_ids == {tokenizer.convert_tokens_to_ids(t) for t in ("<|endoftext|>", "<|eot_id|>")}
    assert (facts.pad_id, facts.vocab_size, facts.max_length) == (config["eos_token_id"], PAD_VOCAB, 512)
    assert facts.defaults == {"ordering": "confidence", "temperature": 0.0, "block": 32}
    assert model.model.config.tie_word_embeddings is tied
    ids = some_ids(model, 17)
    got = model(ids[None])[0]
    want = reference_logits(folder, LLADA_NAMES, ids, eps=1e-5, theta=500000.0).float()
    assert torch.allclose(got, want, atol=1e-4), (got - want).abs().max()


def test_llada_gate_and_up_are_not_interchangeable(llada_folder: Path) -> None:
    """The reference can fail: swapping ff_proj and up_proj (silu on the wrong one) changes logits."""
    swapped = Names(**{**LLADA_NAMES.__dict__, "gate": LLADA_NAMES.up, "up": LLADA_NAMES.gate})
    model = models.load(str(llada_folder))
    ids = some_ids(model, 9)
    wrong = reference_logits(llada_folder, swapped, ids, eps=1e-5, theta=500000.0).float()
    assert not torch.allclose(model(ids[None])[0], wrong, atol=1e-2)


@pytest.mark.parametrize("which", ["dream_folder", "llada_folder"])
def test_new_runs_end_to_end(which: str, request: pytest.FixtureRequest) -> None:
    folder: Path = request.getfixturevalue(which)
    args = ["new", "x", "--model", str(folder), "--length", "16", "--json", "--no-repair", "-q"]
    result = CliRunner().invoke(app, args, prog_name="dcode", env={"DCODE_MODEL": None})
    assert result.exit_code in (0, 3), (result.exit_code, result.stderr, result.exception)
    report = json.loads(result.stdout)
    assert report["model"] == str(folder)
    assert 1 <= report["forward_passes"] <= 16
    mask = {"dream_folder": "<|mask|>", "llada_folder": "<|mdm_mask|>"}[which]
    assert mask not in report["code"]  # every mask was filled


def test_family_defaults_are_valid_sampler_settings() -> None:
    from dcode.models import dream, llada

    for defaults in (dream.DEFAULTS, llada.DEFAULTS):
        merged = apply_defaults(SamplerConfig(), defaults, explicit=set())
        assert {k: getattr(merged, k) for k in defaults} == defaults
    kept = apply_defaults(SamplerConfig(temperature=0.7), dream.DEFAULTS, explicit={"temperature"})
    assert (kept.temperature, kept.ordering, kept.top_p) == (0.7, "entropy", 0.95)  # the user's value wins
    with pytest.raises(ValueError, match="top_p"):
        apply_defaults(SamplerConfig(), {"top_p": 2.0}, explicit=set())  # still validated


# ---------------------------------------------------------------------------------------------
# SDAR-style block diffusion on Qwen3 layers


def test_qwen3_block_checkpoint_loads_block_causal(tmp_path: Path) -> None:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from dcode.train.tokenizer import EOS, MASK, PAD, save_tokenizer, train_tokenizer

    tokenizer = train_tokenizer(python_lines(), vocab_size=300)
    save_tokenizer(tokenizer, tmp_path)
    config = Qwen3Config(
        vocab_size=tokenizer.get_vocab_size(), hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=256,
        tie_word_embeddings=True, eos_token_id=tokenizer.token_to_id(EOS), pad_token_id=tokenizer.token_to_id(PAD),
    )  # fmt: skip
    torch.manual_seed(0)
    state = {k: v for k, v in Qwen3ForCausalLM(config).state_dict().items() if k != "lm_head.weight"}
    save_file(
        {k: (v + 0.1 * torch.randn_like(v)).contiguous() for k, v in state.items()}, str(tmp_path / "model.safetensors")
    )
    data = config.to_dict() | {"model_type": "qwen3", "bd_size": 4, "mask_token_id": tokenizer.token_to_id(MASK)}
    (tmp_path / "config.json").write_text(json.dumps(data))
    model = models.load(str(tmp_path))
    assert (model.facts.family, model.facts.block, model.facts.shifted) == ("qwen3", 4, True)
    ids = some_ids(model, 14)
    changed = ids.clone()
    changed[13] = (int(ids[13]) + 7) % model.facts.vocab_size
    whole, other = model(ids[None])[0], model(changed[None])[0]
    assert torch.equal(whole[:12], other[:12]) and not torch.allclose(whole[12:], other[12:])
    cache = model.new_cache()
    parts = torch.cat([model(ids[None, :8], cache)[0], model(ids[None, 8:], cache)[0]])
    assert torch.allclose(parts, whole, atol=1e-5)  # the block cache is exact


# ---------------------------------------------------------------------------------------------
# One-line errors


def one_line_error(spec: str, **kwargs: object) -> str:
    with pytest.raises(ModelError) as error:
        models.load(spec, **kwargs)  # type: ignore[arg-type]
    message = str(error.value)
    assert message and "\n" not in message and message.strip() == message
    return message


def edit_config(folder: Path, **changes: object) -> None:
    config = json.loads((folder / "config.json").read_text())
    for key, value in changes.items():
        if value is ...:
            del config[key]
        else:
            config[key] = value
    (folder / "config.json").write_text(json.dumps(config))


def test_unknown_and_not_yet_supported_model_types(llada_folder: Path, tmp_path: Path) -> None:
    folder = tmp_path / "m"
    shutil.copytree(llada_folder, folder)
    edit_config(folder, model_type="mamba", architectures=["MambaForCausalLM"])
    assert one_line_error(str(folder)) == (
        f"{folder}: unsupported model_type 'mamba' (supported: diffusion_gemma, dream, llada, qwen2, qwen3)"
    )
    edit_config(folder, model_type="diffusion_gemma")
    assert "uniform-noise diffusion" in one_line_error(str(folder))
    edit_config(folder, model_type=..., architectures=["LLaDAModelLM"])  # architectures alone suffice
    assert models.load(str(folder)).facts.family == "llada"


def test_missing_or_unused_weights_are_named(llada_folder: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file

    folder = tmp_path / "m"
    shutil.copytree(llada_folder, folder)
    weights = load_file(str(folder / "model.safetensors"))
    del weights["model.transformer.blocks.1.up_proj.weight"]
    save_file(weights, str(folder / "model.safetensors"))
    assert one_line_error(str(folder)) == (
        f"{folder}: weights do not fit the config: missing model.layers.1.mlp.up_proj.weight"
    )
    weights["model.transformer.blocks.1.up_proj.weight"] = torch.zeros(INNER, HIDDEN)
    weights["model.transformer.blocks.0.attn_norm.bias"] = torch.zeros(HIDDEN)  # an OLMo option we lack
    save_file(weights, str(folder / "model.safetensors"))
    assert "unused model.layers.0.input_layernorm.bias" in one_line_error(str(folder))  # named as renamed
    weights.pop("model.transformer.blocks.0.attn_norm.bias")
    weights["model.transformer.blocks.0.ff_proj.weight"] = torch.zeros(INNER + 1, HIDDEN)
    save_file(weights, str(folder / "model.safetensors"))
    message = "model.layers.0.mlp.gate_proj.weight has shape (49, 32), the config needs (48, 32)"  # ff_proj
    assert message in one_line_error(str(folder))


def test_missing_shard_and_truncated_file(dream_sharded_folder: Path, tmp_path: Path) -> None:
    folder = tmp_path / "m"
    shutil.copytree(dream_sharded_folder, folder)
    (folder / "model-00002-of-00003.safetensors").unlink()
    assert one_line_error(str(folder)) == (
        f"{folder} lacks weight shard model-00002-of-00003.safetensors named by "
        "model.safetensors.index.json (incomplete download?)"
    )
    shutil.copy(dream_sharded_folder / "model-00002-of-00003.safetensors", folder)
    shard = folder / "model-00003-of-00003.safetensors"
    shard.write_bytes(shard.read_bytes()[:-10])
    assert "is truncated" in one_line_error(str(folder))


GARBLED = {  # config.json content -> part of the message
    "not JSON": ("{model_type: Dream", "is not valid JSON"),
    "a list": ("[1, 2]", "expected an object, got list"),
    "no hidden_size": ({"hidden_size": ...}, "config.json lacks 'hidden_size'"),
    "bad hidden_size": ({"hidden_size": "wide"}, "'hidden_size' must be a positive integer, got 'wide'"),
    "llada without d_model": ({"model_type": "llada", "d_model": ...}, "config.json lacks 'd_model'"),
    "llada biases": ({"model_type": "llada", "include_bias": True}, "include_bias=True (biases on every linear"),
    "llada layer norm": ({"model_type": "llada", "layer_norm_type": "default"}, "layer_norm_type='default' is not"),
}


@pytest.mark.parametrize("case", list(GARBLED))
def test_garbled_config_is_one_line(case: str, dream_folder: Path, llada_folder: Path, tmp_path: Path) -> None:
    content, expected = GARBLED[case]
    llada = isinstance(content, dict) and content.get("model_type") == "llada"
    folder = tmp_path / "m"
    shutil.copytree(llada_folder if llada else dream_folder, folder)
    if isinstance(content, str):
        (folder / "config.json").write_text(content)
    else:
        edit_config(folder, **content)
    assert expected in one_line_error(str(folder))


# ---------------------------------------------------------------------------------------------
# The Hugging Face cache, laid out by hand: models--org--name/{blobs, refs/main, snapshots/<hash>/}


REVISION = "0123456789abcdef0123456789abcdef01234567"  # a snapshot folder is named by its commit


def cache_repo(cache: Path, repo_id: str, source: Path | None, files: dict[str, str] | None = None) -> Path:
    """Put `source`'s files (or `files`: name -> text) in the cache the way huggingface_hub does:
    content in blobs/, snapshot entries as relative symlinks, refs/main naming the snapshot."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    revision = REVISION
    snapshot = repo / "snapshots" / revision
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(revision)
    contents = {p.name: p.read_bytes() for p in sorted(source.iterdir())} if source else {}
    contents |= {name: text.encode() for name, text in (files or {}).items()}
    for i, (name, data) in enumerate(contents.items()):
        blob = repo / "blobs" / f"blob{i:04d}"
        blob.write_bytes(data)
        (snapshot / name).symlink_to(Path("..") / ".." / "blobs" / blob.name)
    return snapshot


@pytest.fixture(scope="module")
def fake_cache(tmp_path_factory: pytest.TempPathFactory, dream_sharded_folder: Path, llada_folder: Path) -> Path:
    cache = tmp_path_factory.mktemp("hub")
    cache_repo(cache, "org/dream-tiny", dream_sharded_folder)
    cache_repo(cache, "GSAI-ML/LLaDA-tiny", llada_folder)
    cache_repo(cache, "org/bert", None, {"config.json": '{"model_type": "bert"}'})  # not a family: not listed
    partial = cache_repo(cache, "org/dream-partial", dream_sharded_folder)
    (partial / "model-00003-of-00003.safetensors").unlink()  # an interrupted download
    config_only = cache_repo(cache, "org/llada-config-only", None)
    shutil.copy(llada_folder / "config.json", config_only / "config.json")
    (cache / "models--org--empty" / "snapshots").mkdir(parents=True)  # no snapshot: not listed
    (cache / "datasets--org--data").mkdir()
    return cache


def test_hub_id_loads_from_the_cache(fake_cache: Path, dream_sharded_folder: Path) -> None:
    model = models.load("org/dream-tiny", cache_dir=fake_cache)
    assert (model.facts.name, model.facts.family) == ("org/dream-tiny", "dream")
    ids = some_ids(model, 11)
    want = reference_logits(dream_sharded_folder, DREAM_NAMES, ids, eps=1e-6, theta=5000.0).float()
    assert torch.allclose(model(ids[None])[0], want, atol=1e-4)


def test_hub_id_absent_from_the_cache(fake_cache: Path) -> None:
    assert one_line_error("org/absent", cache_dir=fake_cache) == (
        f"org/absent is neither a folder nor in the Hugging Face cache ({fake_cache}): "
        "run `dcode models pull org/absent` to download it"
    )
    assert one_line_error("org/empty", cache_dir=fake_cache).endswith(
        "run `dcode models pull org/empty` to download it"
    )
    assert one_line_error("no-such-folder") == "model folder not found: no-such-folder"


def test_list_models_reads_the_cache(fake_cache: Path, dream_sharded_folder: Path, llada_folder: Path) -> None:
    found = {info.name: info for info in list_models(fake_cache)}
    assert list(found) == [
        "dcode-tiny",
        "GSAI-ML/LLaDA-tiny",
        "org/dream-partial",
        "org/dream-tiny",
        "org/llada-config-only",
    ]
    tiny = found["dcode-tiny"]
    assert (tiny.family, tiny.path, tiny.complete) == ("qwen2", models.EMBEDDED, True)
    exact = sum(math.prod(t.shape) for t in read_header(models.EMBEDDED / "model.safetensors").values())
    assert tiny.parameters == exact and tiny.dtype in ("float32", "bfloat16")

    dream, llada = found["org/dream-tiny"], found["GSAI-ML/LLaDA-tiny"]
    assert (dream.family, dream.dtype, dream.complete) == ("dream", "bfloat16", True)
    assert dream.parameters == sum(v.numel() for v in all_weights(dream_sharded_folder).values())
    assert dream.size_bytes == sum(p.stat().st_size for p in dream_sharded_folder.glob("*.safetensors"))
    assert dream.path == fake_cache / "models--org--dream-tiny" / "snapshots" / REVISION
    assert (llada.family, llada.dtype) == ("llada", "bfloat16")
    assert llada.parameters == sum(v.numel() for v in all_weights(llada_folder).values())
    assert found["org/dream-partial"].complete is False
    only = found["org/llada-config-only"]
    assert (only.complete, only.dtype, only.size_bytes) == (False, None, 0)
    assert only.parameters is not None  # estimated from config.json, leaving out the norms
    assert 0 <= llada.parameters - only.parameters <= (2 * LAYERS + 1) * HIDDEN


def test_listing_imports_no_torch(fake_cache: Path) -> None:
    code = (
        "import sys\nimport dcode.models as m\n"
        f"names = [i.name for i in m.list_models({str(fake_cache)!r})]\n"
        "m.resolve('org/dream-tiny', " + repr(str(fake_cache)) + ")\n"
        "print(len(names), sorted(x for x in sys.modules if x.split('.')[0] in ('torch', 'transformers')))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("DCODE_")} | {"OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "5 []"
