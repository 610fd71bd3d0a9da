"""WeDLM (Tencent/WeDLM) from a tiny checkpoint in its released layout (dcode.models.families.wedlm.
write_checkpoint): model_type "wedlm", Qwen3 names, causal attention over the canvas reordered (filled
tokens first, masks after, each at its own rotary position), logits at each mask's own slot.

Logits against test_families' plain-torch forward run on the reordered canvas (float32, and
bfloat16 within a tolerance); dcode's sampler against a short loop written here as WeDLM's
hf_compat `_generate_one_block` runs (greedy, one token per step, block by block); the mask id
151665 when config.json names none; `dcode new`, `edit`, `repair`; `dcode models --verbose`."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from conftest import new_edit_repair
from test_families import SDAR_NAMES, SIZE, model_card, reference_logits, some_ids

from dcode import models
from dcode.config import SamplerConfig
from dcode.sampler import denoise
from dcode.testing import checkpoints as tiny

NAMES = replace(SDAR_NAMES, head="lm_head.weight")  # Qwen3's names, an own head (WeDLM-8B)
EPS, THETA = 1e-6, 1e6


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wedlm") / "WeDLM-8B-Instruct"
    tiny.write("wedlm", out, SIZE, seed=41)
    return out


def reordered_reference(folder: Path, ids: torch.Tensor, mask_id: int) -> torch.Tensor:
    """ids (L,) -> logits (L, V) in canvas order: the filled positions, then the masked ones, fed
    causally, each at its own rotary position; every row's logits put back where it came from."""
    masked = ids == mask_id
    order = torch.cat([torch.arange(len(ids))[~masked], torch.arange(len(ids))[masked]])
    causal = torch.ones(len(ids), len(ids), dtype=torch.bool).tril()
    logits = reference_logits(folder, NAMES, ids[order], EPS, THETA, positions=order, allowed=causal)
    out = torch.empty_like(logits)
    out[order] = logits
    return out


def test_facts_and_logits_match_plain_torch(folder: Path) -> None:
    config = json.loads((folder / "config.json").read_text())
    assert (config["model_type"], config["architectures"], config["qk_norm"]) == ("wedlm", ["WeDLMForCausalLM"], True)
    model = models.load(str(folder))
    f = model.facts
    assert (f.family, f.shifted, f.block, f.mask_id) == ("wedlm", False, None, config["mask_token_id"])
    assert f.attention == "filled-first"
    assert f.defaults == {"ordering": "confidence", "temperature": 0.0, "block": 16}
    assert model.new_cache() is None and not hasattr(model, "new_window_cache")  # no cache is exact
    ids = some_ids(model, 21)  # masks at 3, 8, 13, 18 between filled tokens
    got = model(ids[None])[0]
    want = reordered_reference(folder, ids, f.mask_id).float()
    assert torch.allclose(got, want, atol=1e-4), (got - want).abs().max()
    in_place = reference_logits(folder, NAMES, ids, EPS, THETA, block=1).float()  # causal, not reordered
    assert not torch.allclose(got[3:], in_place[3:], atol=1e-2)
    assert torch.allclose(got[:3], in_place[:3], atol=1e-4)  # before the first mask both orders agree


def test_bfloat16_logits_are_close(folder: Path) -> None:
    model = models.load(str(folder), dtype=torch.bfloat16)
    ids = some_ids(model, 21)
    got = model(ids[None])[0]
    want = reordered_reference(folder, ids, model.facts.mask_id).float()
    error = (got - want).abs().mean() / want.abs().mean()
    agree = (got.argmax(-1) == want.argmax(-1)).float().mean()
    assert error < 0.05 and agree >= 0.9, (error, agree)


def wedlm_reference(folder: Path, prompt: list[int], new: int, block: int, mask_id: int) -> list[int]:
    """WeDLM's _generate_one_block, greedy with one token per step: each block appended as masks,
    the sequence reordered (filled first), the most probable mask filled, until the block is full."""
    x = list(prompt)
    while len(x) < len(prompt) + new:
        size = min(block, len(prompt) + new - len(x))
        x += [mask_id] * size
        for _ in range(size):
            t = torch.tensor(x)
            probs = reordered_reference(folder, t, mask_id)[-size:].softmax(-1)
            confidence, token = probs.max(-1)
            pick = int(torch.where(t[-size:] == mask_id, confidence, -1.0).argmax())
            x[len(x) - size + pick] = int(token[pick])
    return x[len(prompt) :]


def test_sampler_matches_wedlm_block_decoding(folder: Path) -> None:
    model = models.load(str(folder))
    prompt = model.tokenizer.encode("def add(a, b):\n    return", add_special_tokens=False)[:7]
    new, block = 20, 16
    canvas = torch.tensor(prompt + [model.facts.mask_id] * new)
    config = SamplerConfig(rule="schedule", ordering="confidence", temperature=0.0, steps=new, block=block)
    steps = list(denoise(model, canvas, len(prompt), replace(config, stop_at_eos=False)))
    assert {s.block for s in steps} == {(7, 23), (23, 27)}
    assert steps[-1].canvas[len(prompt) :].tolist() == wedlm_reference(folder, prompt, new, block, model.facts.mask_id)


def test_the_released_config_falls_back_to_151665(tmp_path: Path) -> None:
    """WeDLM-8B's config.json names no mask: its engine and finetuning use 151665."""
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "wedlm", "vocab_size": 151936, "qk_norm": True}))
    added = {"151643": {"content": "<|endoftext|>"}, "151645": {"content": "<|im_end|>"}}
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps({"added_tokens_decoder": added, "eos_token": "<|im_end|>"})
    )
    (tmp_path / "vocab.json").write_text(json.dumps({"a": 0}))
    f = models.read_facts("wedlm", tmp_path)
    assert (f.mask_id, f.shifted, f.block, 151645 in f.eos_ids) == (151665, False, None, True)


def test_new_edit_repair_run(folder: Path, tmp_path: Path) -> None:
    new_edit_repair(folder, tmp_path)


def test_models_verbose_states_the_facts(folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    card = model_card(tmp_path, monkeypatch, "tencent/WeDLM-8B-Instruct", folder)
    assert card[0].split()[1] == "wedlm"
    assert "mask: <tool_response>" in card[2]
    assert "logits shifted: no   block: none (causal, filled tokens first)" in card[3]
