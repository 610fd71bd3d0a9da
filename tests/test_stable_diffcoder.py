"""Stable-DiffCoder (ByteDance-Seed/Stable-DiffCoder-8B-Instruct, -Base) from a tiny checkpoint in
its released layout (dcode.models.families.stable_diffcoder.write_checkpoint): model_type "llama" and
StableDiffcoderForCausalLM, Llama names without biases, <[MASK_TOKEN]> at id 5 in the tokenizer.

Logits are checked against test_families' plain-torch forward run on Llama's names (float32, and
bfloat16 within a tolerance), block-causal in blocks of 4 from position 0; the exact cache of
finished blocks; dcode's sampler against a short loop written here as the authors' generate()
runs with the README's settings. Detection: a plain Llama is not taken for it. Then `dcode new`,
`edit`, `repair` run on it, and `dcode models --verbose` states its facts.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from conftest import new_edit_repair
from test_families import DREAM_NAMES, SIZE, model_card, one_line_error, reference_logits, some_ids

from dcode import models
from dcode.config import SamplerConfig
from dcode.sampler import denoise
from dcode.testing import checkpoints as tiny

BLOCK = 4  # the README's block_length
EPS, THETA = 1e-6, 500000.0  # rms_norm_eps and rope_theta (Diffulex's config defaults)
LLAMA_NAMES = replace(DREAM_NAMES, qkv_bias=False)  # Llama's names: Qwen2's without the q/k/v biases
REPO = "ByteDance-Seed/Stable-DiffCoder-8B-Instruct"


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sdc") / "Stable-DiffCoder-8B-Instruct"
    tiny.write("stable_diffcoder", out, SIZE, seed=31)
    return out


def test_facts_and_logits_match_plain_torch(folder: Path) -> None:
    config = json.loads((folder / "config.json").read_text())
    assert (config["model_type"], config["architectures"]) == ("llama", ["StableDiffcoderForCausalLM"])
    assert "mask_token_id" not in config and not any(k.endswith(".bias") for k in tiny_weights(folder))
    model = models.load(str(folder))
    f, vocab = model.facts, model.tokenizer.get_vocab()
    assert (f.family, f.shifted, f.block, f.block_origin) == ("stable_diffcoder", False, BLOCK, "zero")
    assert (f.mask_id, vocab["<[MASK_TOKEN]>"]) == (5, 5)
    assert (f.eos_ids, f.pad_id) == ({vocab["<[end▁of▁sentence]>"]}, vocab["<[PAD▁TOKEN]>"]) == ({2}, 1)
    assert f.defaults == {"ordering": "confidence", "temperature": 0.0, "rule": "schedule"}
    ids = some_ids(model, 30)
    got = model(ids[None])[0]
    want = reference_logits(folder, LLAMA_NAMES, ids, EPS, THETA, BLOCK).float()
    assert torch.allclose(got, want, atol=1e-4), (got - want).abs().max()
    full = reference_logits(folder, LLAMA_NAMES, ids, EPS, THETA).float()
    assert not torch.allclose(got, full, atol=1e-2)  # the blocks are used: full attention differs
    cache = model.new_cache()
    assert cache is not None
    parts = torch.cat([model(ids[None, :12], cache)[0], model(ids[None, 12:], cache)[0]])
    assert torch.allclose(parts, got, atol=1e-4)  # three finished blocks cached exactly


def tiny_weights(folder: Path) -> list[str]:
    from safetensors import safe_open

    with safe_open(str(folder / "model.safetensors"), "pt") as handle:
        return list(handle.keys())


def test_bfloat16_logits_are_close(folder: Path) -> None:
    """The dtype a CUDA user runs: within a few percent of the logits' spread."""
    model = models.load(str(folder), dtype=torch.bfloat16)
    ids = some_ids(model, 30)
    got = model(ids[None])[0]
    want = reference_logits(folder, LLAMA_NAMES, ids, EPS, THETA, BLOCK).float()
    assert got.dtype == torch.float32
    error = (got - want).abs().mean() / want.abs().mean()
    agree = (got.argmax(-1) == want.argmax(-1)).float().mean()
    print(f"bfloat16: mean error {error:.4f} of the mean logit, top-1 agreement {agree:.3f}")
    assert error < 0.05 and agree >= 0.9, (error, agree)


def authors_generate(folder: Path, prompt: list[int], new: int, mask_id: int) -> list[int]:
    """The authors' generate() with the README's settings (temperature 0, low_confidence, steps =
    gen_length, threshold None, shift False), eos left aside: blocks of 4 from position 0, the
    first one cut where the prompt ends; one token per pass, the most probable of the block's masks."""
    x = prompt + [mask_id] * new
    start = len(prompt)
    while start < len(x):
        end = min((start // BLOCK + 1) * BLOCK, len(x))
        for _ in range(end - start):
            probs = reference_logits(folder, LLAMA_NAMES, torch.tensor(x), EPS, THETA, BLOCK)[start:end].softmax(-1)
            confidence, token = probs.max(-1)
            masked = torch.tensor(x[start:end]) == mask_id
            pick = int(torch.where(masked, confidence, -1.0).argmax())
            x[start + pick] = int(token[pick])
        start = end
    return x[len(prompt) :]


@pytest.mark.parametrize("cache", [True, False])
def test_sampler_fills_blocks_as_the_authors_generate_does(cache: bool, folder: Path) -> None:
    model = models.load(str(folder))
    prompt = model.tokenizer.encode("def add(a, b):\n    return", add_special_tokens=False)[:7]
    new = 9  # a partial block after the prompt, one whole block, part of the next
    canvas = torch.tensor(prompt + [model.facts.mask_id] * new)
    config = replace(SamplerConfig(cache=cache), **model.facts.defaults, stop_at_eos=False)  # type: ignore[arg-type]
    steps = list(denoise(model, canvas, len(prompt), config))
    assert {s.block for s in steps} == {(7, 8), (8, 12), (12, 16)}  # blocks counted from position 0
    assert len(steps) == new  # one token per pass
    got = steps[-1].canvas[len(prompt) :].tolist()
    assert got == authors_generate(folder, prompt, new, model.facts.mask_id)


def test_a_plain_llama_is_not_taken_for_it(folder: Path, tmp_path: Path) -> None:
    assert models.family_of({"model_type": "llama", "architectures": ["StableDiffcoderForCausalLM"]}) == (
        "stable_diffcoder"
    )
    earlier = {"AutoModelForCausalLM": "modeling_stable_diffcoder.LlamaForCausalLM"}  # its module alone says it
    assert models.family_of({"model_type": "llama", "architectures": ["LlamaForCausalLM"], "auto_map": earlier})
    remote = {"AutoModelForCausalLM": "ByteDance-Seed/Stable-DiffCoder-8B-Base--modeling_stable_diffcoder.M"}
    assert models.family_of({"model_type": "llama", "auto_map": remote}) == "stable_diffcoder"
    assert models.family_of({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}) is None
    plain = tmp_path / "Llama-tiny"
    shutil.copytree(folder, plain)
    config = json.loads((plain / "config.json").read_text())
    del config["auto_map"]
    (plain / "config.json").write_text(json.dumps(config | {"architectures": ["LlamaForCausalLM"]}))
    assert one_line_error(str(plain)).startswith(f"{plain}: unsupported model_type 'llama' (supported: ")


def test_the_mask_is_5_where_the_tokenizer_does_not_name_it(tmp_path: Path) -> None:
    """The released numbers in config and tokenizer files without weights: vocabulary 155136,
    bos / pad / eos 0 / 1 / 2, and a tokenizer without <[MASK_TOKEN]> (the released code's 5)."""
    added = {0: "<[begin▁of▁sentence]>", 1: "<[PAD▁TOKEN]>", 2: "<[end▁of▁sentence]>"}
    decoder = {str(i): {"content": t, "special": True} for i, t in added.items()}
    settings = {"added_tokens_decoder": decoder, "bos_token": added[0], "eos_token": added[2], "pad_token": added[1]}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(settings))
    (tmp_path / "vocab.json").write_text(json.dumps({"a": 3, "b": 4}))
    config = {"model_type": "llama", "architectures": ["StableDiffcoderForCausalLM"], "vocab_size": 155136}
    config |= {"bos_token_id": 0, "pad_token_id": 1, "eos_token_id": 2, "max_position_embeddings": 8192}
    (tmp_path / "config.json").write_text(json.dumps(config))
    f = models.read_facts(REPO, tmp_path)
    assert (f.mask_id, f.eos_ids, f.pad_id, f.block, f.shifted, f.max_length) == (5, {2}, 1, 4, False, 8192)


BROKEN = (
    "def total(items):\n    return sum(x for x in items\n\n\ndef mean(items):\n    return total(items) / len(items)\n"
)


def test_new_edit_repair_run(folder: Path, tmp_path: Path) -> None:
    new, _, _ = new_edit_repair(folder, tmp_path)
    report = json.loads(new.stdout)
    assert report["model"] == str(folder) and "<[MASK_TOKEN]>" not in report["code"]


def test_models_verbose_states_the_facts(folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    card = model_card(tmp_path, monkeypatch, REPO, folder)
    assert card[0].split()[1] == "stable_diffcoder"
    described = "\n".join(card[1:5])
    assert "mask: <[MASK_TOKEN]> (5)" in described, described
    assert "logits shifted: no   block: 4   max length: 1024" in described, described
