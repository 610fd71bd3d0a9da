"""Real diffusion families on transformers' own classes, from tiny checkpoints in each family's
released on-disk format (each family's module writes them and cites the sources): Dream
(Qwen2 names, model_type "Dream", one file or shards, a remote-code tokenizer_config), LLaDA (OLMo
names and config keys), SDAR (model_type "sdar", Qwen3 names, eos in generation_config.json) and
Fast-dLLM v2 (model_type "Fast_dLLM_Qwen", bd_size, the mask in the tokenizer only). Logits are
checked against a plain-torch forward written here from the architecture, then `dcode new` runs
end to end. Also: detection, one-line errors, the Hugging Face cache (a fake one, laid out by
hand), listing without torch, and the facts `dcode models --verbose` states without loading.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from typer.testing import CliRunner

from dcode import models
from dcode.cli import app
from dcode.config import SamplerConfig, merge_family_defaults
from dcode.models import FAMILIES, ModelError, families, list_models
from dcode.models.checkpoint import read_header
from dcode.models.families.diffusion_gemma import GEMMA_DEFAULTS
from dcode.testing import checkpoints as tiny

SIZE = tiny.SIZES["tiny"]
HIDDEN, HEADS, LAYERS, INNER = SIZE.hidden, SIZE.heads, SIZE.layers, SIZE.inner
PAD_VOCAB = SIZE.rows  # rows of the embedding: more than the tokenizer's ids, as in the real checkpoints


def dream_checkpoint(folder: Path, *, shards: int = 1, files: str = "vocab", seed: int = 0, **options: object) -> None:
    """A tiny Dream-format checkpoint: model_type "Dream", Qwen2 names with q/k/v biases, untied head."""
    tiny.write("dream", folder, SIZE, seed=seed, shards=shards, files=files, **options)


def llada_checkpoint(folder: Path, *, tied: bool = False, seed: int = 1) -> None:
    """A tiny LLaDA-format checkpoint: OLMo config keys, model.transformer.* names, no biases."""
    tiny.write("llada", folder, SIZE, seed=seed, tied=tied)


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
    qk_norm: str | None = None  # Qwen3 / SDAR: "{}" -> per-layer prefix of q_norm / k_norm


DREAM_NAMES = Names(
    "model.embed_tokens.weight", "model.norm.weight", "lm_head.weight",
    "model.layers.{}.self_attn.q_proj", "model.layers.{}.self_attn.k_proj", "model.layers.{}.self_attn.v_proj",
    "model.layers.{}.self_attn.o_proj", "model.layers.{}.input_layernorm.weight",
    "model.layers.{}.post_attention_layernorm.weight", "model.layers.{}.mlp.gate_proj",
    "model.layers.{}.mlp.up_proj", "model.layers.{}.mlp.down_proj", qkv_bias=True,
)  # fmt: skip
# SDAR (modeling_sdar.py): Qwen3 names, no biases, RMSNorm over each head of q and k before RoPE.
SDAR_NAMES = replace(DREAM_NAMES, qkv_bias=False, qk_norm="model.layers.{}.self_attn.")
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


def reference_logits(
    folder: Path,
    names: Names,
    ids: torch.Tensor,
    eps: float,
    theta: float,
    block: int | None = None,
    *,
    origin: int = 0,
    positions: torch.Tensor | None = None,
    allowed: torch.Tensor | None = None,
) -> torch.Tensor:
    """ids (L,) -> logits (L, V) of the unshifted stack: RMSNorm, RoPE, GQA attention (no mask, or
    block-causal: query q sees key k iff (k - origin) // block <= (q - origin) // block), SwiGLU.
    positions (L,) and allowed (L, L) replace the rotary positions 0..L-1 and that mask."""
    w = all_weights(folder)
    head_dim, length = HIDDEN // HEADS, len(ids)
    kv_heads = w[names.k.format(0) + ".weight"].shape[0] // head_dim

    def linear(x: torch.Tensor, name: str, bias: bool = False) -> torch.Tensor:
        return x @ w[name + ".weight"].T + (w[name + ".bias"] if bias else 0)

    # Rotary embeddings: angle(p, j) = p / theta^(2j / d), the same angles on both halves.
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)  # (d/2,)
    position = torch.arange(length) if positions is None else positions
    angles = position.double()[:, None] * inv_freq[None]  # (L, d/2)
    cos, sin = torch.cat([angles, angles], -1).cos(), torch.cat([angles, angles], -1).sin()  # (L, d)
    if allowed is None:
        allowed = torch.ones(length, length, dtype=torch.bool)
        if block is not None:
            blocks = (torch.arange(length) - origin).div(block, rounding_mode="floor")
            allowed = blocks[None, :] <= blocks[:, None]  # (L, L): row q, column k

    x = w[names.embed][ids]  # (L, H)
    for i in range(LAYERS):
        h = rms_norm(x, w[names.attn_norm.format(i)], eps)
        q = linear(h, names.q.format(i), names.qkv_bias).view(length, HEADS, head_dim).transpose(0, 1)  # (h, L, d)
        k = linear(h, names.k.format(i), names.qkv_bias).view(length, kv_heads, head_dim).transpose(0, 1)
        v = linear(h, names.v.format(i), names.qkv_bias).view(length, kv_heads, head_dim).transpose(0, 1)
        if names.qk_norm is not None:
            q = rms_norm(q, w[names.qk_norm.format(i) + "q_norm.weight"], eps)
            k = rms_norm(k, w[names.qk_norm.format(i) + "k_norm.weight"], eps)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(HEADS // kv_heads, dim=0)  # query head j reads kv head j // (HEADS / kv_heads)
        v = v.repeat_interleave(HEADS // kv_heads, dim=0)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(head_dim)  # (h, L, L)
        attention = scores.masked_fill(~allowed, float("-inf")).softmax(-1)
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
    assert (facts.vocab_size, facts.max_length) == (PAD_VOCAB, 1024)
    assert facts.defaults == {"ordering": "entropy", "temperature": 0.1, "top_p": 0.95}
    assert model.new_cache() is None  # full attention: nothing is exact to cache
    ids = some_ids(model, 19)
    got = model(ids[None])[0]  # (L, V)
    want = reference_logits(folder, DREAM_NAMES, ids, eps=1e-6, theta=1e6).float()
    assert got.shape == want.shape == (19, PAD_VOCAB)
    assert torch.allclose(got, want, atol=1e-4), (got - want).abs().max()


@pytest.mark.parametrize("tied", ["own-head", "tied", "tied-head-saved-anyway"])
def test_llada_logits_match_plain_torch(tied: str, llada_folder: Path, tmp_path: Path) -> None:
    folder = llada_folder
    if tied != "own-head":
        folder = tmp_path / "tied"
        llada_checkpoint(folder, tied=True, seed=3)
    if tied == "tied-head-saved-anyway":
        # weight_tying true, yet an ff_out in the files: LLaDA's modeling builds no ff_out and
        # reads logits off wte, so the saved head must be left unread, not untie the model.
        from safetensors.torch import load_file

        weights = load_file(str(folder / "model.safetensors"))
        weights["model.transformer.ff_out.weight"] = torch.randn(PAD_VOCAB, HIDDEN)
        save_file(weights, str(folder / "model.safetensors"))
    config = json.loads((folder / "config.json").read_text())
    model = models.load(str(folder))
    facts = model.facts
    tokenizer = model.tokenizer
    assert (facts.family, facts.shifted, facts.block) == ("llada", False, None)
    assert facts.mask_id == config["mask_token_id"] == tokenizer.convert_tokens_to_ids("<|mdm_mask|>")
    assert facts.eos_ids == {tokenizer.convert_tokens_to_ids(t) for t in ("<|endoftext|>", "<|eot_id|>")}
    assert (facts.pad_id, facts.vocab_size, facts.max_length) == (config["eos_token_id"], PAD_VOCAB, 1024)
    assert facts.defaults == {"ordering": "confidence", "temperature": 0.0, "block": 32}
    assert model.model.config.tie_word_embeddings is (tied != "own-head")
    ids = some_ids(model, 17)
    got = model(ids[None])[0]
    names = LLADA_NAMES if tied == "own-head" else replace(LLADA_NAMES, head=None)
    want = reference_logits(folder, names, ids, eps=1e-5, theta=500000.0).float()
    assert torch.allclose(got, want, atol=1e-4), (got - want).abs().max()


def test_llada_gate_and_up_are_not_interchangeable(llada_folder: Path) -> None:
    """The reference can fail: swapping ff_proj and up_proj (silu on the wrong one) changes logits."""
    swapped = Names(**{**LLADA_NAMES.__dict__, "gate": LLADA_NAMES.up, "up": LLADA_NAMES.gate})
    model = models.load(str(llada_folder))
    ids = some_ids(model, 9)
    wrong = reference_logits(llada_folder, swapped, ids, eps=1e-5, theta=500000.0).float()
    assert not torch.allclose(model(ids[None])[0], wrong, atol=1e-2)


@pytest.mark.parametrize("which", ["dream_folder", "llada_folder", "sdar_folder", "fast_dllm_folder"])
def test_new_runs_end_to_end(which: str, request: pytest.FixtureRequest) -> None:
    folder: Path = request.getfixturevalue(which)
    args = ["new", "x", "--model", str(folder), "--length", "16", "--json", "--no-repair", "-q"]
    result = CliRunner().invoke(app, args, prog_name="dcode", env={"DCODE_MODEL": None})
    assert result.exit_code in (0, 3), (result.exit_code, result.stderr, result.exception)
    report = json.loads(result.stdout)
    assert report["model"] == str(folder)
    assert 1 <= report["forward_passes"] <= 16
    masks = {"dream_folder": "<|mask|>", "llada_folder": "<|mdm_mask|>", "sdar_folder": "<|MASK|>"}
    mask = masks.get(which, "|<MASK>|")
    assert mask not in report["code"]  # every mask was filled


def test_the_registry_is_every_family_module() -> None:
    """dcode/models/families/<name>.py declares FAMILY named <name> (modules starting with "_" are a
    family's private parts); its catalogue entries name it, it states its facts one way, and it
    writes at least one released-format test checkpoint, named after it."""
    folder = Path(families.__file__).parent
    assert sorted(FAMILIES) == sorted(p.stem for p in folder.glob("*.py") if not p.stem.startswith("_"))
    for name, family in FAMILIES.items():
        assert all(entry.family == name for entry in family.catalogue), name
        assert (family.facts is None) != (family.state_facts is None), name
        assert family.checkpoints and all(c == name or c.startswith(f"{name}_") for c in family.checkpoints)
    assert set(tiny.FAMILIES) == {c for family in FAMILIES.values() for c in family.checkpoints}


def test_family_defaults_are_valid_sampler_settings() -> None:
    stated = [family.facts.defaults for family in FAMILIES.values() if family.facts is not None]
    for defaults in [*stated, GEMMA_DEFAULTS]:
        merged = merge_family_defaults(SamplerConfig(), set(), defaults)
        assert {k: getattr(merged, k) for k in defaults} == defaults
    dream = FAMILIES["dream"].facts
    assert dream is not None
    kept = merge_family_defaults(SamplerConfig(temperature=0.7), {"temperature"}, dream.defaults)
    assert (kept.temperature, kept.ordering, kept.top_p) == (0.7, "entropy", 0.95)  # the user's value wins
    with pytest.raises(ValueError, match="top_p"):
        merge_family_defaults(SamplerConfig(), set(), {"top_p": 2.0})  # still validated


# ---------------------------------------------------------------------------------------------
# Released block-diffusion checkpoints: SDAR (Qwen3 layers) and Fast-dLLM v2 (Qwen2 layers)


@pytest.fixture(scope="module")
def sdar_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("sdar") / "SDAR-tiny"
    tiny.write("sdar", folder, SIZE, seed=7)
    return folder


@pytest.fixture(scope="module")
def fast_dllm_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("fast") / "Fast_dLLM_v2-tiny"
    tiny.write("fast_dllm_v2", folder, SIZE, seed=8)
    return folder


def test_sdar_is_unshifted_block_causal_and_ends_on_generation_config_eos(sdar_folder: Path) -> None:
    config = json.loads((sdar_folder / "config.json").read_text())
    generation = json.loads((sdar_folder / "generation_config.json").read_text())
    assert (config["model_type"], config["architectures"], config["block_size"]) == ("sdar", ["SDARForCausalLM"], 4)
    model = models.load(str(sdar_folder))
    vocab = model.tokenizer.get_vocab()
    f = model.facts
    assert (f.family, f.shifted, f.block) == ("sdar", False, 4)  # generate.py samples the same position
    assert f.mask_id == config["mask_token_id"] == vocab["<|MASK|>"]
    assert f.eos_ids == set(generation["eos_token_id"]) == {vocab["<|im_end|>"], vocab["<|endoftext|>"]}
    assert model.new_cache() is not None  # finished blocks are cached exactly
    ids = some_ids(model, 14)
    want = reference_logits(sdar_folder, SDAR_NAMES, ids, eps=1e-6, theta=1e6, block=4).float()
    whole = model(ids[None])[0]
    assert torch.allclose(whole, want, atol=1e-4), (whole - want).abs().max()
    cache = model.new_cache()
    parts = torch.cat([model(ids[None, :8], cache)[0], model(ids[None, 8:], cache)[0]])
    assert torch.allclose(parts, whole, atol=1e-5)  # the block cache is exact


def test_sdar_reference_can_fail(sdar_folder: Path) -> None:
    """Without the q/k norms, or under full attention, the reference differs: both are checked."""
    model = models.load(str(sdar_folder))
    ids = some_ids(model, 14)
    got = model(ids[None])[0]
    no_norm = reference_logits(sdar_folder, replace(SDAR_NAMES, qk_norm=None), ids, eps=1e-6, theta=1e6, block=4)
    full = reference_logits(sdar_folder, SDAR_NAMES, ids, eps=1e-6, theta=1e6)
    assert not torch.allclose(got, no_norm.float(), atol=1e-2) and not torch.allclose(got, full.float(), atol=1e-2)


def test_fast_dllm_v2_finds_its_mask_in_the_tokenizer(fast_dllm_folder: Path) -> None:
    config = json.loads((fast_dllm_folder / "config.json").read_text())
    assert config["model_type"] == "Fast_dLLM_Qwen" and "mask_token_id" not in config
    model = models.load(str(fast_dllm_folder))
    vocab = model.tokenizer.get_vocab()
    f = model.facts
    assert (f.family, f.shifted, f.block) == ("fast_dllm_v2", True, 32)
    assert f.mask_id == vocab["|<MASK>|"]
    assert vocab["<|im_end|>"] in f.eos_ids
    ids = some_ids(model, 40)  # more than one 32-token block
    want = reference_logits(fast_dllm_folder, DREAM_NAMES, ids, eps=1e-6, theta=1e6, block=32).float()
    got = model(ids[None])[0]
    assert torch.allclose(got, want, atol=1e-4), (got - want).abs().max()


def test_families_are_detected_by_model_type_architectures_or_auto_map() -> None:
    assert models.family_of({"model_type": "sdar"}) == "sdar"
    assert models.family_of({"model_type": "Fast_dLLM_Qwen"}) == "fast_dllm_v2"
    assert models.family_of({"architectures": ["SDARForCausalLM"]}) == "sdar"
    auto_map = {"AutoModelForCausalLM": "modeling.Fast_dLLM_QwenForCausalLM"}
    assert models.family_of({"model_type": "x", "auto_map": auto_map}) == "fast_dllm_v2"
    assert models.family_of({"model_type": "qwen3", "bd_size": 4}) is None  # no released checkpoint says this


@pytest.mark.parametrize("family", tiny.FAMILIES)
def test_described_facts_equal_the_loaded_ones(family: str, tmp_path: Path) -> None:
    """`dcode models --verbose` states, from the files alone, what a load states."""
    folder = tmp_path / family
    tiny.write(family, folder, SIZE)
    loaded = models.load(str(folder)).facts
    described = models.read_facts(str(folder), folder)
    assert described == loaded
    assert described.defaults == loaded.defaults


def test_real_ids_of_sdar_and_fast_dllm_are_read_where_the_release_keeps_them(tmp_path: Path) -> None:
    """The released numbers, in a folder of the released config files without weights."""
    sdar = tmp_path / "sdar"
    release_files(sdar, "sdar")
    f = models.read_facts("sdar", sdar)
    assert (f.mask_id, f.eos_ids, f.shifted, f.block) == (151669, {151645, 151643}, False, 4)
    fast = tmp_path / "fast"
    release_files(fast, "fast_dllm_v2")
    f = models.read_facts("fast", fast)
    assert (f.mask_id, 151645 in f.eos_ids, f.shifted, f.block) == (151665, True, True, 32)


def release_files(folder: Path, family: str) -> None:
    """config.json, generation_config.json and tokenizer_config.json with the released special ids
    (JetAstra/SDAR generate.py and config; Fast-dLLM v2's modeling constants), plus a vocab.json."""
    folder.mkdir(parents=True)
    added = {151643: "<|endoftext|>", 151644: "<|im_start|>", 151645: "<|im_end|>"}
    config: dict[str, object] = {"vocab_size": 151936, "eos_token_id": 151645, "max_position_embeddings": 32768}
    if family == "sdar":
        added[151669] = "<|MASK|>"
        config |= {"model_type": "sdar", "architectures": ["SDARForCausalLM"], "block_size": 4, "mask_token_id": 151669}
        generation = {"bos_token_id": 151643, "eos_token_id": [151645, 151643]}
        (folder / "generation_config.json").write_text(json.dumps(generation))
    else:
        added[151665] = "|<MASK>|"
        config |= {"model_type": "Fast_dLLM_Qwen", "bd_size": 32, "vocab_size": 152064}
    decoder = {str(i): {"content": t, "special": True} for i, t in added.items()}
    settings = {"added_tokens_decoder": decoder, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
    (folder / "tokenizer_config.json").write_text(json.dumps(settings))
    (folder / "vocab.json").write_text(json.dumps({"a": 0, "b": 1}))
    (folder / "config.json").write_text(json.dumps(config))


def test_diffucoder_answers_end_at_dlm_pad(tmp_path: Path) -> None:
    """apple/ml-diffucoder's inference_demo.py cuts the answer at <|dlm_pad|>; so must dcode."""
    from dcode.sampler import trim_answer

    folder = tmp_path / "diffucoder"
    dream_checkpoint(folder, specials=("<|dlm_pad|>",))
    model = models.load(str(folder))
    dlm_pad = model.tokenizer.convert_tokens_to_ids("<|dlm_pad|>")
    assert dlm_pad in model.facts.eos_ids
    code = model.tokenizer.encode("x = 1", add_special_tokens=False)
    answer = torch.tensor([*code, dlm_pad, *code, dlm_pad])
    assert trim_answer(answer, model.facts.eos_ids, frozenset({model.facts.pad_id})) == code


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
    edit_config(folder, model_type="mamba", architectures=["MambaForCausalLM"], auto_map=...)
    assert one_line_error(str(folder)) == (
        f"{folder}: unsupported model_type 'mamba' (supported: {', '.join(sorted(FAMILIES))})"
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
    assert one_line_error(str(folder)) == (  # named as in the user's files, not as renamed
        f"{folder}: weights do not fit the config: missing model.transformer.blocks.1.up_proj.weight"
    )
    weights["model.transformer.blocks.1.up_proj.weight"] = torch.zeros(INNER, HIDDEN)
    weights["model.transformer.blocks.0.attn_norm.bias"] = torch.zeros(HIDDEN)  # an OLMo option we lack
    save_file(weights, str(folder / "model.safetensors"))
    assert "unused model.transformer.blocks.0.attn_norm.bias" in one_line_error(str(folder))
    weights.pop("model.transformer.blocks.0.attn_norm.bias")
    weights["model.transformer.blocks.0.ff_proj.weight"] = torch.zeros(INNER + 1, HIDDEN)
    save_file(weights, str(folder / "model.safetensors"))
    shapes = f"has shape ({INNER + 1}, {HIDDEN}), the config needs ({INNER}, {HIDDEN})"
    message = f"model.transformer.blocks.0.ff_proj.weight {shapes}"
    assert message in one_line_error(str(folder))


def test_a_folder_without_tokenizer_files_is_one_line(dream_folder: Path, sdar_folder: Path, tmp_path: Path) -> None:
    for source in (dream_folder, sdar_folder, models.EMBEDDED):
        folder = tmp_path / source.name
        shutil.copytree(source, folder)
        for name in ("tokenizer.json", "vocab.json", "merges.txt", "tokenizer_config.json"):
            (folder / name).unlink(missing_ok=True)
        assert (
            one_line_error(str(folder))
            == f"{folder}: no tokenizer files (tokenizer.json, or vocab.json and merges.txt)"
        )
        result = CliRunner().invoke(app, ["new", "x", "--model", str(folder), "--length", "8", "-q"], prog_name="dcode")
        assert result.exit_code == 2, (result.stderr, result.exception)
        assert "no tokenizer files" in result.stderr and "Traceback" not in result.stderr


def test_a_tokenizer_that_cannot_load_is_named_in_full(llada_folder: Path, tmp_path: Path) -> None:
    folder = tmp_path / "m"
    shutil.copytree(llada_folder, folder)
    tokens = json.loads((folder / "tokenizer.json").read_text())["model"]["vocab"]
    (folder / "tokenizer.json").unlink()
    (folder / "vocab.json").write_text(json.dumps(tokens))  # PreTrainedTokenizerFast cannot read this alone
    message = one_line_error(str(folder))
    assert message.startswith(f"{folder}: cannot load the tokenizer: ")
    assert not message.rstrip().endswith(":") and len(message) > len(f"{folder}: cannot load the tokenizer: ") + 60


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


def models_verbose(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, repos: dict[str, Path]) -> list[str]:
    """`dcode models --verbose` over a hub cache holding `repos` (repo id -> checkpoint folder): the
    lines of its stdout, after it ended 0."""
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    for repo_id, folder in repos.items():
        cache_repo(cache, repo_id, folder)
    result = CliRunner().invoke(app, ["models", "--verbose"], prog_name="dcode")
    assert result.exit_code == 0, (result.stderr, result.exception)
    return result.stdout.splitlines()


def model_card(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, repo_id: str, folder: Path) -> list[str]:
    """`dcode models --verbose` with the checkpoint cached as `repo_id`: the lines from its row on."""
    lines = models_verbose(tmp_path, monkeypatch, {repo_id: folder})
    return lines[lines.index(next(line for line in lines if line.startswith(repo_id))) :]


@pytest.fixture(scope="module")
def fake_cache(tmp_path_factory: pytest.TempPathFactory, dream_sharded_folder: Path, llada_folder: Path) -> Path:
    cache = tmp_path_factory.mktemp("hub")
    cache_repo(cache, "org/dream-tiny", dream_sharded_folder)
    cache_repo(cache, "GSAI-ML/LLaDA-tiny", llada_folder)
    cache_repo(cache, "org/bert", None, {"config.json": '{"model_type": "bert"}'})  # not a family: listed, marked
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
    want = reference_logits(dream_sharded_folder, DREAM_NAMES, ids, eps=1e-6, theta=1e6).float()
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
        "org/bert",
        "org/dream-partial",
        "org/dream-tiny",
        "org/llada-config-only",
    ]
    assert [name for name, info in found.items() if info.problem is not None] == ["org/bert"]
    supported = ", ".join(sorted(FAMILIES))
    assert found["org/bert"].problem == f"unsupported model_type 'bert' (supported: {supported})"
    tiny = found["dcode-tiny"]
    assert (tiny.family, tiny.path, tiny.complete) == ("qwen2", models.EMBEDDED, True)
    exact = sum(math.prod(t.shape) for t in read_header(models.EMBEDDED / "model.safetensors").values())
    assert tiny.parameters == exact and tiny.dtype in ("float32", "bfloat16")

    dream, llada = found["org/dream-tiny"], found["GSAI-ML/LLaDA-tiny"]
    assert (dream.family, dream.dtype, dream.complete) == ("dream", "float32", True)
    assert dream.parameters == sum(v.numel() for v in all_weights(dream_sharded_folder).values())
    assert dream.size_bytes == sum(p.stat().st_size for p in dream_sharded_folder.glob("*.safetensors"))
    assert dream.path == fake_cache / "models--org--dream-tiny" / "snapshots" / REVISION
    assert (llada.family, llada.dtype) == ("llada", "float32")
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
    assert done.stdout.strip() == "6 []"
