"""The real loader on tiny random-weight checkpoints: facts, logits against an independent
plain-torch forward, the exact key/value cache, and one-line errors for bad folders."""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from conftest import write_tiny_checkpoint

from dcode import models
from dcode.config import SamplerConfig, merge_family_defaults
from dcode.models import ModelError
from dcode.sampler import denoise

# ---------------------------------------------------------------------------------------------
# An independent forward pass of the same weights, written from the Qwen2 architecture.


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def reference_logits(folder: Path, ids: torch.Tensor) -> torch.Tensor:
    """ids (L,) -> logits (L, V), in float64, from config.json and model.safetensors alone."""
    from safetensors.torch import load_file

    config = json.loads((folder / "config.json").read_text())
    w = {k: v.double() for k, v in load_file(str(folder / "model.safetensors")).items()}
    hidden, heads, kv_heads = config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"]
    head_dim = hidden // heads
    eps = config["rms_norm_eps"]
    theta = config.get("rope_theta") or (config.get("rope_parameters") or {}).get("rope_theta") or 10000.0
    length = len(ids)
    pos = torch.arange(length)

    # Rotary embeddings: angle(p, j) = p / theta^(2j / d), the same angles on both halves.
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)  # (d/2,)
    angles = pos[:, None].double() * inv_freq[None]  # (L, d/2)
    cos, sin = torch.cat([angles, angles], -1).cos(), torch.cat([angles, angles], -1).sin()  # (L, d)

    # Block-causal: query q sees key k iff block(k) <= block(q); no block = full attention.
    block = config.get("block_size")
    if block is None:
        sees = torch.ones(length, length, dtype=torch.bool)
    else:
        sees = (pos[None, :] // block) <= (pos[:, None] // block)  # (Lq, Lk)

    x = w["model.embed_tokens.weight"][ids]  # (L, H)
    for layer in range(config["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = h @ w[p + "self_attn.q_proj.weight"].T + w[p + "self_attn.q_proj.bias"]  # (L, heads*d)
        k = h @ w[p + "self_attn.k_proj.weight"].T + w[p + "self_attn.k_proj.bias"]  # (L, kv*d)
        v = h @ w[p + "self_attn.v_proj.weight"].T + w[p + "self_attn.v_proj.bias"]
        q = q.view(length, heads, head_dim).transpose(0, 1)  # (heads, L, d)
        k = k.view(length, kv_heads, head_dim).transpose(0, 1)  # (kv, L, d)
        v = v.view(length, kv_heads, head_dim).transpose(0, 1)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        # Grouped-query attention: query head j reads key/value head j // (heads / kv).
        k = k.repeat_interleave(heads // kv_heads, dim=0)  # (heads, L, d)
        v = v.repeat_interleave(heads // kv_heads, dim=0)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(head_dim)  # (heads, L, L)
        attention = scores.masked_fill(~sees, float("-inf")).softmax(-1)
        out = (attention @ v).transpose(0, 1).reshape(length, hidden)  # (L, H)
        x = x + out @ w[p + "self_attn.o_proj.weight"].T  # no bias on o_proj
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        gate, up = h @ w[p + "mlp.gate_proj.weight"].T, h @ w[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, w["model.norm.weight"], eps)
    return x @ w["model.embed_tokens.weight"].T  # tied lm_head


def some_ids(model: models.Denoiser, length: int) -> torch.Tensor:
    """Real tokens of some code, cut to `length`, with a few mask tokens mixed in."""
    ids = model.tokenizer("def total(items):\n    return sum(x * 2 for x in items if x)\n")["input_ids"]
    ids = torch.tensor((ids * length)[:length])
    ids[3::5] = model.facts.mask_id
    return ids


# ---------------------------------------------------------------------------------------------
# Facts and logits


@pytest.fixture(scope="module")
def block_model(tiny_checkpoint: Path) -> models.Denoiser:
    return models.load(str(tiny_checkpoint))


@pytest.fixture(scope="module")
def full_model(tiny_full_checkpoint: Path) -> models.Denoiser:
    return models.load(str(tiny_full_checkpoint))


def test_facts_follow_config(block_model, full_model, tiny_checkpoint: Path) -> None:
    config = json.loads((tiny_checkpoint / "config.json").read_text())
    facts = block_model.facts
    assert (facts.block, facts.shifted, facts.family, facts.name) == (4, True, "qwen2", str(tiny_checkpoint))
    assert facts.mask_id == config["mask_token_id"] == block_model.tokenizer.mask_token_id
    assert facts.eos_ids == frozenset({config["eos_token_id"]}) == {block_model.tokenizer.eos_token_id}
    assert facts.pad_id == config["pad_token_id"] == block_model.tokenizer.pad_token_id
    assert (facts.max_length, facts.vocab_size) == (512, config["vocab_size"])
    assert full_model.facts.block is None
    assert block_model.device == torch.device("cpu")
    assert block_model.new_cache() is not None  # block-causal: finished blocks can be cached
    assert full_model.new_cache() is None  # full attention: every pass changes every key


def test_unshifted_config_gives_unshifted_facts(tmp_path: Path) -> None:
    write_tiny_checkpoint(tmp_path, block=8, shifted=False)
    facts = models.load(str(tmp_path)).facts
    assert (facts.shifted, facts.block) == (False, 8)


@pytest.mark.parametrize("which", ["block", "full"])
def test_logits_match_plain_torch_forward(which: str, block_model, full_model) -> None:
    model = block_model if which == "block" else full_model
    folder = Path(model.facts.name)
    ids = some_ids(model, 19)  # not a multiple of the block
    got = model(ids[None])[0]  # (L, V)
    want = reference_logits(folder, ids).float()
    assert got.shape == want.shape == (19, model.facts.vocab_size)
    assert torch.allclose(got, want, atol=1e-4), (got - want).abs().max()


def test_block_causal_logits_ignore_later_blocks(block_model) -> None:
    """Changing block 3 leaves the logits of blocks 0-2 alone and changes its own block's."""
    ids = some_ids(block_model, 16)
    changed = ids.clone()
    changed[13] = (int(ids[13]) + 7) % block_model.facts.vocab_size
    a, b = block_model(ids[None])[0], block_model(changed[None])[0]
    assert torch.equal(a[:12], b[:12])
    assert not torch.allclose(a[12:], b[12:])


def test_full_attention_logits_see_later_tokens(full_model) -> None:
    ids = some_ids(full_model, 16)
    changed = ids.clone()
    changed[15] = (int(ids[15]) + 7) % full_model.facts.vocab_size
    assert not torch.allclose(full_model(ids[None])[0, :4], full_model(changed[None])[0, :4])


def test_cached_call_matches_uncached_rows(block_model) -> None:
    """Feeding [0, 8) then [8, 14) through one cache gives the rows of one uncached call."""
    ids = some_ids(block_model, 14)
    whole = block_model(ids[None])[0]
    cache = block_model.new_cache()
    first = block_model(ids[None, :8], cache)[0]
    assert cache.length == 8
    second = block_model(ids[None, 8:], cache)[0]
    assert cache.length == 14
    assert torch.allclose(torch.cat([first, second]), whole, atol=1e-5)
    cache.crop(8)
    assert cache.length == 8
    again = block_model(ids[None, 8:], cache)[0]
    assert torch.allclose(again, second, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# The cache in the sampler: exactly the uncached result, for fewer input tokens.


@pytest.fixture(scope="module")
def unshifted_block_model(tmp_path_factory: pytest.TempPathFactory) -> models.Denoiser:
    folder = tmp_path_factory.mktemp("tiny-block4-unshifted")
    write_tiny_checkpoint(folder, block=4, shifted=False, seed=2)
    return models.load(str(folder))


SETTINGS = [
    SamplerConfig(rule="schedule", steps=None, stop_at_eos=False),
    SamplerConfig(rule="schedule", steps=7, ordering="margin", stop_at_eos=False),
    SamplerConfig(rule="threshold", threshold=0.3, ordering="entropy"),
    SamplerConfig(rule="entropy-bound", entropy_bound=0.5, temperature=0.7, seed=3),
    SamplerConfig(rule="threshold", threshold=0.5, ordering="random", temperature=0.7, top_p=0.9, seed=5),
    SamplerConfig(rule="verify", draft_floor=0.0),
    SamplerConfig(rule="verify", draft=3, temperature=0.7, seed=4),
]


# Prompt lengths that are not multiples of the block (4); with 5 the position before the answer
# starts its own attention block, so a shifted model's carried row must be recomputed each pass.
@pytest.mark.parametrize(
    ("shifted", "start"), [(True, 6), (True, 5), (False, 6)], ids=["shifted", "shifted-5", "unshifted"]
)
@pytest.mark.parametrize("config", SETTINGS, ids=lambda c: f"{c.rule}-{c.ordering}-T{c.temperature}")
def test_cache_gives_the_uncached_canvas(shifted: bool, start: int, config: SamplerConfig, request) -> None:
    model = request.getfixturevalue("block_model" if shifted else "unshifted_block_model")
    mask = model.facts.mask_id
    prompt = model.tokenizer("def count(items):\n")["input_ids"][:start]
    assert len(prompt) == start
    canvas = torch.tensor(prompt + [mask] * 14)

    runs = {}
    for cache in (True, False):
        # Snapshot each step while iterating: Step.canvas may be the sampler's live tensor.
        runs[cache] = [
            (step.canvas.clone(), step.committed.clone(), step.scores, step.input_tokens // step.rows, step.masked)
            for step in denoise(model, canvas, start, replace(config, cache=cache))
        ]
    cached, plain = runs[True], runs[False]
    assert len(cached) == len(plain) > 1
    for (a, placed_a, scores_a, _, left_a), (b, placed_b, scores_b, _, left_b) in zip(cached, plain, strict=True):
        assert torch.equal(a, b)
        assert torch.equal(placed_a, placed_b)
        assert torch.allclose(scores_a, scores_b, atol=1e-5)  # same certainty, not just same argmax
        assert left_a == left_b
    assert cached[-1][4] == 0
    assert all(fed == len(canvas) for *_, fed, _ in plain)
    assert sum(fed for *_, fed, _ in cached) < sum(fed for *_, fed, _ in plain)


# ---------------------------------------------------------------------------------------------
# Fast-dLLM's approximate cache for full attention: exact until the window changes, close after.


def test_only_full_attention_offers_a_window_cache(block_model, full_model) -> None:
    # its exact cache is better (the native block-causal path has no window cache to offer)
    assert getattr(block_model, "new_window_cache", lambda: None)() is None
    assert full_model.new_window_cache() is not None


@pytest.mark.parametrize("window", [(5, 9), (5, 19), (0, 4)], ids=["dual", "prefix", "at-start"])
def test_window_pass_on_an_unchanged_canvas_is_the_full_pass(full_model, window: tuple[int, int]) -> None:
    """Nothing changed since the refresh: the window's rows are the full pass's rows (the math is exact)."""
    ids = some_ids(full_model, 19)
    cache = full_model.new_window_cache()
    full = full_model.refresh(ids[None], window, cache)[0]  # (L, V)
    assert torch.equal(full, full_model(ids[None])[0])
    lo, hi = window
    assert cache.length == 19 - (hi - lo)
    got = full_model.window(ids[None, lo:hi], cache)[0]
    assert cache.length == 19 - (hi - lo)  # the window's keys/values are not kept
    # float32 rounding of logits ~10 (two attention kernels of different shapes)
    assert torch.allclose(got, full[lo:hi], atol=1e-4), (got - full[lo:hi]).abs().max()
    with pytest.raises(ValueError, match="holds"):
        full_model.window(ids[None, lo : hi - 1], cache)


def test_window_pass_after_a_change_is_close_to_the_full_pass(full_model) -> None:
    """Tokens inside the window change: the cached keys outside are stale, so the rows differ from a
    full pass, but less than from the rows before the change (the change itself is seen)."""
    ids = some_ids(full_model, 19)
    cache = full_model.new_window_cache()
    before = full_model.refresh(ids[None], (6, 10), cache)[0]
    changed = ids.clone()
    changed[7] = (int(ids[7]) + 11) % full_model.facts.vocab_size
    approx = full_model.window(changed[None, 6:10], cache)[0]
    exact = full_model(changed[None])[0, 6:10]
    assert not torch.allclose(approx, exact, atol=1e-5)  # approximate
    assert (approx - exact).abs().max() < (before[6:10] - exact).abs().max()


@pytest.mark.parametrize("approx_cache", ["dual", "prefix"])
@pytest.mark.parametrize("shifted", [True, False], ids=["shifted", "unshifted"])
def test_approximate_cache_in_the_sampler(approx_cache: str, shifted: bool, tmp_path: Path) -> None:
    """Same passes as without the cache on a full-attention model; fewer tokens fed; each block's
    first pass is the exact one; with --no-cache or approx_cache off, exactly the old result."""
    write_tiny_checkpoint(tmp_path, block=None, shifted=shifted, seed=4)
    model = models.load(str(tmp_path))
    mask = model.facts.mask_id
    prompt = model.tokenizer("def count(items):\n")["input_ids"][:6]
    canvas = torch.tensor(prompt + [mask] * 16)
    config = SamplerConfig(rule="schedule", block=4, stop_at_eos=False, approx_cache=approx_cache)

    def run(config: SamplerConfig) -> list[tuple[list[int], int, tuple[int, int]]]:
        return [(step.canvas.tolist(), step.input_tokens, step.block) for step in denoise(model, canvas, 6, config)]

    approx, plain = run(config), run(replace(config, cache=False))
    assert run(replace(config, approx_cache="off")) == plain
    assert len(approx) == len(plain) == 16  # one token per pass either way
    assert all(fed == len(canvas) for _, fed, _ in plain)
    for i, (_, fed, (s, e)) in enumerate(approx):
        first = i == 0 or approx[i - 1][2] != (s, e)  # the block's first pass runs the whole canvas
        lo, hi = s - 1 if shifted else s, e if approx_cache == "dual" else len(canvas)
        assert fed == (len(canvas) if first else hi - lo), (i, s, e, fed)
    assert approx[0] == plain[0]  # the first pass is the exact one
    assert mask not in approx[-1][0]


# ---------------------------------------------------------------------------------------------
# Folders that are not models: a ModelError with a one-line message.


def bad_folder(case: str, tmp: Path) -> Path:
    """A path that is not a usable model folder, one way per case."""
    folder = tmp / "model"
    if case == "missing":
        return folder
    folder.mkdir()
    config = folder / "config.json"
    if case == "a file":
        config.write_text("{}")
        return config
    if case == "config not JSON":
        config.write_text("{model_type: qwen2")
    elif case == "config not UTF-8":
        config.write_bytes(b"\xff\xfe{")
    elif case == "no safetensors":
        config.write_text(json.dumps({"model_type": "qwen2", "vocab_size": 8}))
    elif case == "unsupported model_type":
        config.write_text(json.dumps({"model_type": "llama"}))
        (folder / "model.safetensors").write_bytes(b"")
    return folder  # "no config.json": an empty folder


EXPECTED = {
    "missing": "model folder not found",
    "a file": "got a file",
    "no config.json": "no config.json",
    "config not JSON": "not valid JSON",
    "config not UTF-8": "not valid JSON",
    "no safetensors": "no .safetensors",
    "unsupported model_type": "unsupported model_type 'llama'",
}


@pytest.mark.parametrize("case", list(EXPECTED))
def test_bad_folder_raises_one_line_model_error(case: str, tmp_path: Path) -> None:
    folder = bad_folder(case, tmp_path)
    with pytest.raises(ModelError) as error:
        models.load(str(folder))
    message = str(error.value)
    assert "\n" not in message and message.strip() == message and message
    assert EXPECTED[case] in message


# config.json files often say "pad_token_id": null (transformers' own default) or leave a key
# out; the loader should then fall back to the tokenizer's special tokens. It does not yet:
# config.get(key, fallback) returns None for a null key, and `pad_token_id or ...` drops id 0.
FALLBACKS = {
    "pad null": ("pad_token_id", None, "pad_id", "pad_token_id"),
    "pad absent": ("pad_token_id", ..., "pad_id", "pad_token_id"),
    "eos null": ("eos_token_id", None, "eos_ids", "eos_token_id"),
    "mask null": ("mask_token_id", None, "mask_id", "mask_token_id"),
}


@pytest.mark.parametrize("case", list(FALLBACKS))
def test_special_ids_fall_back_to_the_tokenizer(case: str, tiny_checkpoint: Path, tmp_path: Path) -> None:
    key, value, fact, tokenizer_attr = FALLBACKS[case]
    folder = tmp_path / "model"
    shutil.copytree(tiny_checkpoint, folder)
    config = json.loads((folder / "config.json").read_text())
    if value is ...:
        del config[key]
    else:
        config[key] = value
    (folder / "config.json").write_text(json.dumps(config))
    model = models.load(str(folder))
    want = getattr(model.tokenizer, tokenizer_attr)
    got = getattr(model.facts, fact)
    assert got == (frozenset({want}) if fact == "eos_ids" else want)


def test_what_dcode_new_runs_with_some_options_set() -> None:
    tiny = {"rule": "entropy-bound", "entropy_bound": 0.6, "threshold": 0.7}
    alone = merge_family_defaults(SamplerConfig(threshold=0.5), {"threshold"}, tiny)
    assert (alone.rule, alone.threshold, alone.entropy_bound) == ("threshold", 0.5, 0.6)  # its own rule
    assert merge_family_defaults(SamplerConfig(), set(), tiny) == SamplerConfig(**tiny)  # type: ignore[arg-type]
    both = merge_family_defaults(SamplerConfig(threshold=0.5, steps=4), {"threshold", "steps"}, tiny)
    assert both.rule == "entropy-bound"  # two rules' settings: neither is implied, the family's rule stays
    drafted = merge_family_defaults(SamplerConfig(draft=4), {"draft"}, tiny)
    assert (drafted.rule, drafted.draft) == ("verify", 4)
    chosen = merge_family_defaults(SamplerConfig(rule="schedule", threshold=0.5), {"rule", "threshold"}, tiny)
    assert (chosen.rule, chosen.threshold) == ("schedule", 0.5)
