"""Tiny-A2D (ZHZisZZ/dllm, dllm/pipelines/a2d) from tiny checkpoints in its released layout
(dcode.models.families.a2d.write_checkpoint): model_type "a2d-qwen2" / "a2d-qwen3" on Qwen names, the
tokenizer as vocab.json + merges.txt with <|mask|> added, bd3lm or mdlm said by the name alone.

Logits are checked against test_families' plain-torch forward (float32, and bfloat16 within a
tolerance); bd3lm's blocks start where the answer does, and dcode's sampler is checked against a
short BD3LM sampler written here as dllm's BD3LMSampler runs: the prompt left-padded to a block
boundary, pads out of attention, rotary positions skipping them. Then `dcode new`, `edit`,
`repair` run on each, and `dcode models --verbose` states the facts.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from conftest import new_edit_repair
from test_families import (
    DREAM_NAMES,
    SDAR_NAMES,
    SIZE,
    cache_repo,
    models_verbose,
    one_line_error,
    reference_logits,
    some_ids,
)

from dcode import models
from dcode.config import SamplerConfig
from dcode.sampler import denoise
from dcode.testing import checkpoints as tiny

KINDS = ["a2d_qwen2_bd3lm", "a2d_qwen2_mdlm", "a2d_qwen3_bd3lm", "a2d_qwen3_mdlm"]
BLOCK = 32  # bd3lm's block (dllm's BD3LMSamplerConfig and the Tiny-A2D training runs)
EPS, THETA = 1e-6, 1e6  # rms_norm_eps and rope_theta in the released configs (Qwen2.5 / Qwen3)


def names_of(kind: str):  # -> test_families.Names
    """Qwen2's names with biases or Qwen3's with q/k norms; the head tied to the embedding."""
    return replace(SDAR_NAMES if "qwen3" in kind else DREAM_NAMES, head=None)


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("a2d")
    out = {}
    for seed, kind in enumerate(KINDS):
        # the released ids: dllm-hub/Qwen2.5-Coder-0.5B-Instruct-diffusion-bd3lm-v0.1 and alike
        base = "Qwen3-0.6B" if "qwen3" in kind else "Qwen2.5-Coder-0.5B-Instruct"
        out[kind] = root / f"{base}-diffusion-{kind.rsplit('_', 1)[1]}-v0.1"
        tiny.write(kind, out[kind], SIZE, seed=20 + seed)
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_facts_and_logits_match_plain_torch(kind: str, folders: dict[str, Path]) -> None:
    folder = folders[kind]
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == ("a2d-qwen3" if "qwen3" in kind else "a2d-qwen2")
    assert not (folder / "tokenizer.json").exists() and "mask_token_id" not in config
    model = models.load(str(folder))
    f, vocab = model.facts, model.tokenizer.get_vocab()
    bd3lm = kind.endswith("bd3lm")
    assert (f.family, f.shifted, f.block) == ("a2d", False, BLOCK if bd3lm else None)
    assert f.block_origin == ("answer" if bd3lm else "zero")
    assert f.mask_id == vocab["<|mask|>"] and f.pad_id == vocab["<|endoftext|>"]
    assert f.eos_ids == {vocab["<|im_end|>"], vocab["<|endoftext|>"]}
    assert f.defaults == {"ordering": "confidence", "temperature": 0.0}
    ids = some_ids(model, 50)
    origin = 13  # the answer's first position: bd3lm's blocks are [.., 13), [13, 45), [45, ..)
    got = model(ids[None], origin=origin)[0] if bd3lm else model(ids[None])[0]
    want = reference_logits(folder, names_of(kind), ids, EPS, THETA, f.block, origin=origin).float()
    assert torch.allclose(got, want, atol=1e-4), (got - want).abs().max()
    if bd3lm:  # blocks counted from 0 give other logits: the origin is used
        at_zero = reference_logits(folder, names_of(kind), ids, EPS, THETA, f.block).float()
        assert not torch.allclose(got, at_zero, atol=1e-2)
        cache = model.new_cache()
        parts = torch.cat(
            [model(ids[None, :origin], cache, origin=origin)[0], model(ids[None, origin:], cache, origin=origin)[0]]
        )
        assert torch.allclose(parts, got, atol=1e-4)  # the prompt's blocks cached exactly
    else:
        assert model.new_cache() is None


def test_bd3lm_on_qwen2_runs_the_native_forward_with_transformers_logits(folders: dict[str, Path]) -> None:
    """a2d-coder-0.5b (the CPU pick) runs on dcode.models.native, which reads the output head only
    where the sampler does: the same logits as transformers' Qwen2ForCausalLM, the path it took
    before, blocks counted from the answer, with and without the cache. The rest stay on transformers."""
    from dcode.models.families import a2d
    from dcode.models.native import NativeDenoiser

    folder = folders["a2d_qwen2_bd3lm"]
    config = json.loads((folder / "config.json").read_text())
    native = models.load(str(folder))
    twin = a2d.load(folder, torch.device("cpu"), torch.float32, str(folder), config, native_path=False)
    assert isinstance(native, NativeDenoiser) and not isinstance(twin, NativeDenoiser)
    assert native.facts == twin.facts and native.tokenizer.get_vocab() == twin.tokenizer.get_vocab()
    ids = some_ids(native, 50)[None]
    for origin in (0, 13):
        want = twin(ids, origin=origin)
        assert torch.allclose(native(ids, origin=origin), want, atol=1e-5)
        cache, split = native.new_cache(), origin or BLOCK  # the first block's end: what a cache keeps
        parts = [native(ids[:, :split], cache, origin=origin), native(ids[:, split:], cache, origin=origin)]
        assert torch.allclose(torch.cat(parts, dim=1), want, atol=1e-4)
    for kind in ("a2d_qwen2_mdlm", "a2d_qwen3_bd3lm"):
        assert not isinstance(models.load(str(folders[kind])), NativeDenoiser)


@pytest.mark.parametrize("kind", ["a2d_qwen2_bd3lm", "a2d_qwen3_mdlm"])
def test_bfloat16_logits_are_close(kind: str, folders: dict[str, Path]) -> None:
    """The dtype a CUDA user runs: within a few percent of the logits' spread."""
    folder = folders[kind]
    model = models.load(str(folder), dtype=torch.bfloat16)
    ids = some_ids(model, 40)
    got = model(ids[None], origin=7)[0] if model.facts.block else model(ids[None])[0]
    want = reference_logits(folder, names_of(kind), ids, EPS, THETA, model.facts.block, origin=7).float()
    assert got.dtype == torch.float32
    error = (got - want).abs().mean() / want.abs().mean()
    agree = (got.argmax(-1) == want.argmax(-1)).float().mean()
    print(f"bfloat16: mean error {error:.4f} of the mean logit, top-1 agreement {agree:.3f}")
    assert error < 0.05 and agree >= 0.9, (error, agree)


def bd3lm_reference(folder: Path, kind: str, prompt: list[int], new: int, mask_id: int, pad_id: int) -> list[int]:
    """dllm's BD3LMSampler, greedy with one token per step: the prompt left-padded with pad_id to a
    multiple of the block; each block appended as masks and filled most-confident first; a pad is
    neither query nor key, and rotary positions count the tokens that are not pads."""
    x = [pad_id] * (-len(prompt) % BLOCK) + prompt
    for _ in range(-(-new // BLOCK)):
        size = min(BLOCK, new - (len(x) - len(prompt) - (-len(prompt) % BLOCK)))
        x += [mask_id] * size
        for _ in range(size):
            t = torch.tensor(x)
            valid = t != pad_id
            positions = (valid.long().cumsum(0) - 1).clamp(min=0) * valid
            blocks = torch.where(valid, torch.arange(len(x)) // BLOCK, -1)
            allowed = (blocks[None, :] <= blocks[:, None]) & valid[None, :] & valid[:, None]
            allowed |= torch.eye(len(x), dtype=torch.bool)  # a pad row sees itself (its output is unused)
            logits = reference_logits(folder, names_of(kind), t, EPS, THETA, positions=positions, allowed=allowed)
            probs = logits[-size:].softmax(-1)
            confidence, token = probs.max(-1)
            masked = t[-size:] == mask_id
            pick = int(torch.where(masked, confidence, -1.0).argmax())
            x[len(x) - size + pick] = int(token[pick])
    return x[-(len(x) - len(prompt) - (-len(prompt) % BLOCK)) :]


@pytest.mark.parametrize("cache", [True, False])
def test_sampler_fills_blocks_from_the_answer_as_dllm_does(cache: bool, folders: dict[str, Path]) -> None:
    kind = "a2d_qwen2_bd3lm"
    model = models.load(str(folders[kind]))
    f = model.facts
    prompt = model.tokenizer.encode("def add(a, b):\n    return", add_special_tokens=False)[:9]
    new = 40  # a whole block and part of the next
    canvas = torch.tensor(prompt + [f.mask_id] * new)
    config = SamplerConfig(rule="schedule", ordering="confidence", temperature=0.0, steps=new, cache=cache)
    config = replace(config, stop_at_eos=False)
    steps = list(denoise(model, canvas, len(prompt), config))
    assert {s.block for s in steps} == {(9, 41), (41, 49)}  # blocks start where the answer does
    got = steps[-1].canvas[len(prompt) :].tolist()
    assert got == bd3lm_reference(folders[kind], kind, prompt, new, f.mask_id, f.pad_id)


def test_a_name_that_says_neither_is_one_line(folders: dict[str, Path], tmp_path: Path) -> None:
    folder = tmp_path / "my-a2d"
    shutil.copytree(folders["a2d_qwen2_bd3lm"], folder)
    assert one_line_error(str(folder)) == (
        f"{folder}: only the checkpoint's name says its attention here; name the folder with 'bd3lm' or 'mdlm'"
    )
    cache = tmp_path / "hub"
    cache_repo(cache, "dllm-hub/Qwen2.5-Coder-0.5B-Instruct-diffusion-mdlm-v0.1", folder)
    model = models.load("dllm-hub/Qwen2.5-Coder-0.5B-Instruct-diffusion-mdlm-v0.1", cache_dir=cache)
    assert model.facts.block is None  # the id says mdlm, whatever the snapshot folder is called


@pytest.mark.parametrize("kind", KINDS)
def test_new_edit_repair_run(kind: str, folders: dict[str, Path], tmp_path: Path) -> None:
    new, _, _ = new_edit_repair(folders[kind], tmp_path)
    report = json.loads(new.stdout)
    assert report["model"] == str(folders[kind]) and "<|mask|>" not in report["code"]


def test_models_verbose_states_the_facts(
    folders: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repos = {
        "dllm-hub/Qwen2.5-Coder-0.5B-Instruct-diffusion-bd3lm-v0.1": folders["a2d_qwen2_bd3lm"],
        "dllm-hub/Qwen3-0.6B-diffusion-mdlm-v0.1": folders["a2d_qwen3_mdlm"],
    }
    lines = models_verbose(tmp_path, monkeypatch, repos)
    bd3lm = lines.index(next(line for line in lines if line.startswith("dllm-hub/Qwen2.5-Coder")))
    assert lines[bd3lm].split()[1] == "a2d"
    assert "block: 32 from the answer" in lines[bd3lm + 3] and "logits shifted: no" in lines[bd3lm + 3]
    assert "mask: <|mask|>" in lines[bd3lm + 2]
    mdlm = lines.index(next(line for line in lines if line.startswith("dllm-hub/Qwen3-0.6B")))
    assert "block: none (full attention)" in lines[mdlm + 3]
