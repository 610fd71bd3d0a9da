"""CoDA (SalesforceAIResearch/CoDA) from a tiny checkpoint in its released layout
(dcode.models.families.coda.write_checkpoint): model_type "CoDA", Qwen3 names, bidirectional attention,
logits shifted by one position, the mask in config.json, generation_config's `alg` mapped to an
ordering where dcode has one. Logits against test_families' plain-torch forward (float32, and
bfloat16 within a tolerance); `dcode new`, `edit`, `repair` run; `dcode models --verbose` states it."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from conftest import new_edit_repair
from test_families import SDAR_NAMES, SIZE, model_card, reference_logits, some_ids

from dcode import models
from dcode.testing import checkpoints as tiny

NAMES = replace(SDAR_NAMES, head="lm_head.weight")  # Qwen3's names, CoDALanguageModel's own lm_head
EPS, THETA = 1e-6, 1e6  # rms_norm_eps and rope_theta in CoDA-v0-Instruct's config.json


@pytest.fixture(scope="module")
def coda_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("coda") / "CoDA-v0-Instruct"
    tiny.write("coda", folder, SIZE, seed=31)
    return folder


def test_facts_and_logits_match_plain_torch(coda_folder: Path) -> None:
    config = json.loads((coda_folder / "config.json").read_text())
    assert (config["model_type"], config["architectures"]) == ("CoDA", ["CoDALanguageModel"])
    model = models.load(str(coda_folder))
    f, vocab = model.facts, model.tokenizer.get_vocab()
    assert (f.family, f.shifted, f.block) == ("coda", True, None)  # shifted at inference, bidirectional
    assert f.mask_id == config["mask_token_id"] == vocab["<|mask|>"]
    assert f.pad_id == config["pad_token_id"] == vocab["<|endoftext|>"] and vocab["<|im_end|>"] in f.eos_ids
    # generation_config says alg "original", which CoDA's own sampler rejects: the README's serving
    # defaults (entropy, greedy, blocks of 32) stand
    assert f.defaults == {"ordering": "entropy", "temperature": 0.0, "block": 32}
    assert model.new_cache() is None
    ids = some_ids(model, 23)
    got = model(ids[None])[0]
    want = reference_logits(coda_folder, NAMES, ids, EPS, THETA).float()
    assert torch.allclose(got, want, atol=1e-4), (got - want).abs().max()
    causal = reference_logits(coda_folder, NAMES, ids, EPS, THETA, block=1).float()  # block 1 = causal
    assert not torch.allclose(got, causal, atol=1e-2)


def test_bfloat16_logits_are_close(coda_folder: Path) -> None:
    model = models.load(str(coda_folder), dtype=torch.bfloat16)
    ids = some_ids(model, 23)
    got = model(ids[None])[0]
    want = reference_logits(coda_folder, NAMES, ids, EPS, THETA).float()
    error = (got - want).abs().mean() / want.abs().mean()
    agree = (got.argmax(-1) == want.argmax(-1)).float().mean()
    assert error < 0.05 and agree >= 0.9, (error, agree)


@pytest.mark.parametrize(("alg", "ordering"), [("maskgit_plus", "confidence"), ("topk_margin", "margin"),
                                               ("origin", "random"), ("original", "entropy")])  # fmt: skip
def test_generation_config_alg_is_mapped(alg: str, ordering: str, coda_folder: Path, tmp_path: Path) -> None:
    folder = tmp_path / "CoDA"
    shutil.copytree(coda_folder, folder)
    generation = json.loads((folder / "generation_config.json").read_text()) | {"alg": alg}
    (folder / "generation_config.json").write_text(json.dumps(generation))
    assert models.read_facts("CoDA", folder).defaults["ordering"] == ordering


def test_new_edit_repair_run(coda_folder: Path, tmp_path: Path) -> None:
    new, _, _ = new_edit_repair(coda_folder, tmp_path)
    assert "<|mask|>" not in json.loads(new.stdout)["code"]


def test_models_verbose_states_the_facts(coda_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    card = model_card(tmp_path, monkeypatch, "Salesforce/CoDA-v0-Instruct", coda_folder)
    assert card[0].split()[1] == "coda"
    assert "mask: <|mask|>" in card[2]
    assert "logits shifted: yes   block: none (full attention)" in card[3]
