"""DiffusionGemma: uniform-noise block diffusion through the one sampling loop.

A tiny random-weight DiffusionGemma checkpoint is written in the real on-disk format
(save_pretrained + a trained tokenizer) and loaded through dcode.models.load; its logits are
checked against transformers' own forward, and denoise() runs on it and through the CLI. A
UniformFake (a FakeDenoiser-style uniform-noise model) records what the sampler feeds it, so
the re-noising, the context cache, self-conditioning and the early stop can be checked pass by pass.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import python_lines
from typer.testing import CliRunner

from dcode import models
from dcode.cli import app
from dcode.config import SamplerConfig, merge_family_defaults
from dcode.events import drain
from dcode.forward import uniform_noise
from dcode.models import family_of
from dcode.models.base import ModelFacts
from dcode.models.families.diffusion_gemma import GEMMA_DEFAULTS as DEFAULTS
from dcode.models.families.diffusion_gemma import gemma_defaults as sampling_defaults
from dcode.sampler import Step, denoise, linear_temperature

CANVAS = 8  # the tiny checkpoint's canvas_length: a 16-token answer takes two canvases


def write_tiny_diffusion_gemma(folder: Path, seed: int = 0) -> None:
    """config.json, model.safetensors, generation_config.json and tokenizer files of a tiny
    random DiffusionGemma (MoE, sliding + full attention layers, a 1-layer vision tower)."""
    from transformers import DiffusionGemmaConfig, DiffusionGemmaForBlockDiffusion

    from dcode.train.tokenizer import EOS, PAD, save_tokenizer, train_tokenizer

    tokenizer = train_tokenizer(python_lines(), vocab_size=300)
    save_tokenizer(tokenizer, folder)  # its <|mask|> becomes the sampler's placeholder
    text = {
        "vocab_size": tokenizer.get_vocab_size(), "hidden_size": 32, "intermediate_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
        "global_head_dim": 16, "num_global_key_value_heads": 1, "max_position_embeddings": 512,
        "sliding_window": 8, "layer_types": ["sliding_attention", "full_attention"],
        "num_experts": 4, "top_k_experts": 2, "moe_intermediate_size": 16,
        "pad_token_id": tokenizer.token_to_id(PAD), "eos_token_id": tokenizer.token_to_id(EOS),
        "bos_token_id": None,
    }  # fmt: skip
    vision = {
        "model_type": "gemma4_vision", "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
        "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 8, "position_embedding_size": 16,
    }  # fmt: skip
    config = DiffusionGemmaConfig(text_config=text, vision_config=vision, canvas_length=CANVAS)
    torch.manual_seed(seed)
    model = DiffusionGemmaForBlockDiffusion(config)
    # Weights far from transformers' init (norms 1, scales 1), so every norm and scale matters.
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=gen)
            param.copy_(1.0 + 0.2 * noise if ("norm" in name or "scale" in name) else 0.3 * noise)
    model.save_pretrained(folder)  # safetensors; encoder/decoder and lm_head ties written once


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tiny-diffusion-gemma")
    write_tiny_diffusion_gemma(path)
    return path


@pytest.fixture(scope="module")
def model(folder: Path):
    return models.load(str(folder))


def defaults_config(model, **changes: object) -> SamplerConfig:
    return merge_family_defaults(SamplerConfig(**changes), set(changes), model.facts.defaults)  # type: ignore[arg-type]


def prompt_canvas(model, prompt: int = 5, answer: int = 16) -> torch.Tensor:
    gen = torch.Generator().manual_seed(3)
    ids = torch.randint(5, model.facts.vocab_size, (prompt,), generator=gen)
    return torch.cat([ids, torch.full((answer,), model.facts.mask_id)])


# ---------------------------------------------------------------------------------------------
# The checkpoint


def test_facts_and_defaults(model, folder: Path) -> None:
    from dcode.train.tokenizer import EOS, MASK, PAD

    vocab = model.tokenizer.get_vocab()
    facts = model.facts
    assert family_of(json.loads((folder / "config.json").read_text())) == "diffusion_gemma"
    assert (facts.family, facts.noise, facts.block, facts.shifted) == ("diffusion_gemma", "uniform", CANVAS, False)
    assert (facts.mask_id, facts.pad_id, facts.eos_ids) == (vocab[MASK], vocab[PAD], frozenset({vocab[EOS]}))
    assert (facts.vocab_size, facts.max_length) == (len(vocab), 512)
    assert facts.defaults == DEFAULTS  # generation_config.json leaves every setting unset
    merged = merge_family_defaults(SamplerConfig(), set(), facts.defaults)
    assert (merged.rule, merged.entropy_bound, merged.temperature, merged.cooling) == ("entropy-bound", 0.1, 0.8, 0.5)
    assert (merged.max_block_steps, merged.stop_entropy) == (48, 0.005)


def test_generation_config_overrides_the_defaults() -> None:
    given = {
        "t_max": 1.0, "t_min": 0.25, "max_denoising_steps": 12, "confidence_threshold": 0.01,
        "sampler_config": {"entropy_bound": 0.2, "_cls_name": "EntropyBoundSamplerConfig"},
    }  # fmt: skip
    got = sampling_defaults(given)
    assert {k: got[k] for k in ("temperature", "cooling", "max_block_steps", "entropy_bound", "stop_entropy")} == {
        "temperature": 1.0, "cooling": 0.25, "max_block_steps": 12, "entropy_bound": 0.2, "stop_entropy": 0.01,
    }  # fmt: skip
    assert sampling_defaults({"t_max": 0.0, "t_min": 0.5, "max_denoising_steps": True}) == DEFAULTS  # nonsense ignored


def test_logits_match_transformers_forward(model, folder: Path) -> None:
    from transformers import DiffusionGemmaForBlockDiffusion, DynamicCache

    reference = DiffusionGemmaForBlockDiffusion.from_pretrained(str(folder)).eval()
    gen = torch.Generator().manual_seed(1)
    vocab = model.facts.vocab_size
    prompt = torch.randint(vocab, (1, 11), generator=gen)  # longer than the sliding window
    canvas = torch.randint(vocab, (1, CANVAS), generator=gen)
    previous = 3 * torch.randn(1, CANVAS, vocab, generator=gen)
    text_config = reference.config.get_text_config(decoder=True)
    cache = model.new_cache()
    model.extend(prompt[:, :4], cache)  # the context may arrive in pieces (one per finished canvas)
    model.extend(prompt[:, 4:], cache)
    assert cache.length == 11
    for sc in (None, previous):
        with torch.no_grad():
            want = reference(
                input_ids=prompt, decoder_input_ids=canvas, cache=DynamicCache(config=text_config),
                self_conditioning_logits=sc,
            ).logits  # fmt: skip
        got = model(canvas, cache, previous=sc)
        assert got.shape == (1, CANVAS, vocab)
        assert torch.allclose(got, want, atol=1e-5), (got - want).abs().max()
    assert cache.length == 11  # decoder passes read the context, never write it
    assert not torch.allclose(model(canvas, cache), model(canvas, cache, previous=previous), atol=1e-3)


# ---------------------------------------------------------------------------------------------
# denoise() on the checkpoint


def test_denoise_fills_every_position_canvas_by_canvas(model) -> None:
    canvas = prompt_canvas(model)
    config = defaults_config(model, stop_at_eos=False)
    steps = list(denoise(model, canvas, 5, config))
    done = steps[-1]
    assert done.done and done.masked == 0 and not (done.canvas[5:] == model.facts.mask_id).any()
    assert torch.equal(done.canvas[:5], canvas[:5])
    blocks = [s.block for s in steps]
    assert sorted(set(blocks)) == [(5, 13), (13, 21)] and blocks == sorted(blocks)  # canvases from the answer's start
    left = {b: b[1] - b[0] for b in set(blocks)}
    filled: set[int] = set()
    for step in steps:
        s, e = step.block
        committed = set(step.committed.tolist())
        assert committed and all(s <= p < e for p in committed) and not committed & filled
        assert step.renoised == left[step.block]  # every unfilled position of the canvas was re-noised
        left[step.block] -= len(committed)
        filled |= committed
        assert int((step.canvas[5:] == model.facts.mask_id).sum()) == step.masked
    assert sum(1 for s in steps if s.block == (5, 13)) <= 48
    again = drain(denoise(model, canvas, 5, config))
    assert again is not None and torch.equal(again.canvas, done.canvas)  # same seed, same answer
    other = drain(denoise(model, canvas, 5, defaults_config(model, stop_at_eos=False, seed=7)))
    assert other is not None and not torch.equal(other.canvas, done.canvas)


def test_recomputing_the_context_gives_the_cached_answer(model) -> None:
    canvas = prompt_canvas(model)
    cached = list(denoise(model, canvas, 5, defaults_config(model, stop_at_eos=False)))
    fresh = list(denoise(model, canvas, 5, defaults_config(model, stop_at_eos=False, cache=False)))
    assert torch.equal(cached[-1].canvas, fresh[-1].canvas)
    assert [s.input_tokens for s in cached][:2] == [5 + CANVAS, CANVAS]  # the context is encoded once
    assert all(s.input_tokens == s.block[1] for s in fresh)  # without a cache: all of it, every pass


def test_new_runs_end_to_end(folder: Path) -> None:
    args = ["new", "x", "--model", str(folder), "--length", "16", "--json", "--no-repair", "-q"]
    result = CliRunner().invoke(app, args, prog_name="dcode", env={"DCODE_MODEL": None})
    assert result.exit_code in (0, 3), (result.exit_code, result.stderr, result.exception)
    report = json.loads(result.stdout)
    assert report["model"] == str(folder)
    assert 2 <= report["forward_passes"] <= 2 * 48  # two canvases
    assert "<|mask|>" not in report["code"]


def test_the_verify_strategy_is_refused_in_one_line(folder: Path) -> None:
    args = ["new", "x", "--model", str(folder), "--length", "16", "--strategy", "verify", "-q"]
    result = CliRunner().invoke(app, args, prog_name="dcode", env={"DCODE_MODEL": None})
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == f"dcode: error: {folder}: the verify strategy needs a masked-diffusion model\n"


# ---------------------------------------------------------------------------------------------
# The sampler's re-noising, seen by a fake


class UniformFake:
    """A test fake satisfying dcode.models.base.UniformDenoiser, FakeDenoiser-style.

    logits(i) = scale * (T[ids[i]] + P[position]) from fixed random tables, with `force` mapping
    canvas positions to a token it is certain of. Records every context it is asked to encode
    (extend) and every canvas and self-conditioning tensor it is fed.
    """

    tokenizer = None

    def __init__(self, *, vocab_size: int = 1000, block: int = 8, force: dict[int, int] | None = None) -> None:
        gen = torch.Generator().manual_seed(0)
        self.token_table = torch.randn(vocab_size, vocab_size, generator=gen)  # (V, V)
        self.position_table = torch.randn(128, vocab_size, generator=gen)  # (128, V)
        self.force = dict(force or {})
        self.facts = ModelFacts(
            name="uniform-fake", family="fake", mask_id=vocab_size - 1, eos_ids=frozenset({1}), pad_id=0,
            shifted=False, block=block, max_length=128, vocab_size=vocab_size, noise="uniform",
        )  # fmt: skip
        self.contexts: list[tuple[int, list[int]]] = []  # (cache length before, ids encoded)
        self.fed: list[tuple[int, torch.Tensor, torch.Tensor | None, torch.Tensor]] = []  # (P, ids, previous, logits)

    def logits(self, ids: torch.Tensor, start: int) -> torch.Tensor:
        """ids (B, n) at positions [start, start+n) -> (B, n, V)."""
        out = 1.5 * (self.token_table[ids] + self.position_table[start : start + ids.shape[1]])
        for position, token in self.force.items():
            if start <= position < start + ids.shape[1]:
                out[:, position - start, token] += 40.0
        out[..., self.facts.mask_id] = float("-inf")  # a trained model never predicts the placeholder
        return out

    def extend(self, ids: torch.Tensor, cache: FakeCache) -> None:
        self.contexts.append((cache.length, ids[0].tolist()))
        cache.length += ids.shape[1]

    def __call__(self, ids: torch.Tensor, cache: FakeCache | None = None, *, previous=None) -> torch.Tensor:
        assert cache is not None
        out = self.logits(ids, cache.length)
        self.fed.append((cache.length, ids[0].clone(), previous, out[0]))
        return out

    def new_cache(self) -> FakeCache:
        return FakeCache()

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")


class FakeCache:
    def __init__(self) -> None:
        self.length = 0

    def crop(self, length: int) -> None:
        raise AssertionError("a uniform-noise model's context is never cropped")


START, ANSWER = 5, 16


def fake_canvas(fake: UniformFake) -> torch.Tensor:
    return torch.tensor([3 + i for i in range(START)] + [fake.facts.mask_id] * ANSWER)


def one_per_pass(**changes: object) -> SamplerConfig:
    return SamplerConfig(rule="schedule", stop_at_eos=False, **changes)  # type: ignore[arg-type]


def test_renoising_changes_unaccepted_positions_and_keeps_accepted_ones() -> None:
    fake = UniformFake()
    steps = list(denoise(fake, fake_canvas(fake), START, one_per_pass(temperature=0.7)))
    assert len(fake.fed) == len(steps) == ANSWER
    answer = steps[-1].canvas
    for (at, ids, _, _), step, (next_at, next_ids, _, _) in zip(fake.fed, steps, fake.fed[1:], strict=False):
        s, e = step.block
        assert at == s and len(ids) == e - s  # the canvas alone, after its context
        if next_at != at:
            continue  # the next pass is on the next canvas
        holes = step.canvas[s:e] == fake.facts.mask_id  # still unfilled after this pass
        assert (next_ids[holes] != ids[holes]).all(), "unaccepted positions get fresh noise every pass"
        assert torch.equal(next_ids[~holes], answer[s:e][~holes]), "accepted positions stay"
    assert all((ids != fake.facts.mask_id).all() for _, ids, _, _ in fake.fed), "the placeholder is never fed"
    # The context is encoded once per canvas, clean: the prompt, then the finished first canvas.
    assert fake.contexts == [(0, answer[:START].tolist()), (START, answer[START : START + 8].tolist())]
    assert [s.renoised for s in steps] == [*range(8, 0, -1), *range(8, 0, -1)]


def test_self_conditioning_gets_the_last_pass_scaled_logits() -> None:
    fake = UniformFake()
    config = one_per_pass(temperature=0.8, cooling=0.5, max_block_steps=6)
    list(denoise(fake, fake_canvas(fake), START, config))
    for n, ((at, _, previous, _), (before_at, _, _, before_logits)) in enumerate(
        zip(fake.fed[1:], fake.fed, strict=False)
    ):
        if at != before_at:
            assert previous is None  # a new canvas starts without self-conditioning
            continue
        step = sum(1 for a, *_ in fake.fed[: n + 1] if a == at) - 1  # the earlier pass's index in its canvas
        expected = before_logits / linear_temperature(0.8, 0.5, step, 6)
        assert previous is not None and torch.equal(previous[0], expected)
    assert fake.fed[0][2] is None


def test_max_block_steps_commits_the_rest_greedily() -> None:
    fake = UniformFake()
    steps = list(denoise(fake, fake_canvas(fake), START, one_per_pass(temperature=0.9, max_block_steps=3)))
    assert [len(s.committed) for s in steps] == [1, 1, 6, 1, 1, 6]
    for index in (2, 5):
        last, logits = steps[index], fake.fed[index][3]
        s, _ = last.block
        expected = logits[last.committed - s].argmax(-1)
        assert torch.equal(last.canvas[last.committed], expected)


def test_stops_early_when_the_fake_is_certain() -> None:
    fake = UniformFake(force={p: 7 + p % 5 for p in range(START, START + ANSWER)})
    stopping = list(denoise(fake, fake_canvas(fake), START, one_per_pass(stop_entropy=0.005)))
    assert [len(s.committed) for s in stopping] == [1, 7, 1, 7]  # stable after two passes: the rest at once
    assert torch.equal(stopping[-1].canvas[START:], torch.tensor([7 + p % 5 for p in range(START, START + ANSWER)]))
    fake.fed.clear()
    patient = list(denoise(fake, fake_canvas(fake), START, one_per_pass()))
    assert len(patient) == ANSWER and torch.equal(patient[-1].canvas, stopping[-1].canvas)


def test_fill_marks_positions_explicitly() -> None:
    fake = UniformFake()
    canvas = torch.arange(START + ANSWER) + 10  # no placeholder anywhere: fill says what to redo
    fill = torch.zeros(START + ANSWER, dtype=torch.bool)
    fill[9:12] = True
    steps: list[Step] = list(denoise(fake, canvas, START, one_per_pass(), masks=fill))
    assert sum(len(s.committed) for s in steps) == 3 and {s.block for s in steps} == {(5, 13)}
    assert (steps[0].canvas[9:12] == fake.facts.mask_id).sum() == 2  # unfilled positions show the placeholder
    kept = torch.ones(START + ANSWER, dtype=torch.bool)
    kept[9:12] = False
    assert torch.equal(steps[-1].canvas[kept], canvas[kept])
    assert torch.equal(fake.fed[0][1][~fill[5:13]], canvas[5:13][~fill[5:13]])  # the rest of the canvas is fed as is
    with pytest.raises(ValueError, match="shape"):
        list(denoise(fake, canvas, START, one_per_pass(), masks=fill[:-1]))
    with pytest.raises(ValueError, match="prompt token"):
        list(denoise(fake, fake_canvas(fake), 0, one_per_pass()))


def test_uniform_noise_and_linear_temperature() -> None:
    gen = torch.Generator().manual_seed(0)
    noise = uniform_noise(20_000, 10, 4, gen)
    assert noise.min() >= 0 and noise.max() <= 9 and not (noise == 4).any()
    assert torch.bincount(noise, minlength=10)[[0, 1, 2, 3, 5, 6, 7, 8, 9]].min() > 2000  # ~2222 each
    assert linear_temperature(0.8, 0.5, 0, 48) == 0.8
    assert linear_temperature(0.8, 0.5, 47, 48) == pytest.approx(0.4 + 0.4 / 48)  # transformers' cur_step = 1
    assert linear_temperature(0.8, 0.5, 48, 48) == pytest.approx(0.4)
    assert linear_temperature(0.3, 1.0, 10, 48) == 0.3
    with pytest.raises(ValueError, match="cooling"):
        SamplerConfig(cooling=1.5)
