"""What a first real pull meets: the catalogue's newer entries and the older or odder layouts the
authors ship, as tiny checkpoints in those layouts (each family module's writer, its sources there).
Each loads through dcode.models.load with the facts its release implies, answers `dcode new`, and
`dcode serve` answers a chat and a fill-in-the-middle request with it. And the prompt a Tiny-A2D
model reads carries the authors' empty think block, in the CLI and in the server alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import serve_once
from test_families import SIZE
from typer.testing import CliRunner

from dcode import localfill, models
from dcode.cli import app
from dcode.serve import conversation
from dcode.testing import checkpoints as tiny

THINK_OFF = "<|im_start|>assistant\n<think>\n\n</think>\n\n"

# (writer, the folder's name as the release's id ends, what the loaded facts must say)
RELEASES = {
    # Tiny-A2D as released: the tied head also stored as lm_head.weight (1.26 GB for 0.49B)
    "a2d-duplicated-head": ("a2d_qwen2_bd3lm", "Qwen2.5-Coder-0.5B-Instruct-diffusion-bd3lm-v0.1", ("a2d", 32)),
    # Stable-DiffCoder's transformers-4.46 revision: SeedDiffcoderForCausalLM, architectures LlamaForCausalLM
    "stable-diffcoder-older": ("stable_diffcoder_older", "Stable-DiffCoder-8B-Instruct", ("stable_diffcoder", 4)),
    # iLLaDA: its own network (Llama names, GQA, tied head, full attention), mask 5 named by no file
    "illada": ("illada", "iLLaDA-8B-Instruct", ("illada", None)),
    "fast-dllm-v2-1.5b": ("fast_dllm_v2_1_5b", "Fast_dLLM_v2_1.5B", ("fast_dllm_v2", 32)),
    "sdar-1.7b": ("sdar", "SDAR-1.7B-Chat", ("sdar", 4)),
    # the larger-block releases say their block in the name alone (config.json names none)
    "sdar-4b-b64": ("sdar", "SDAR-4B-Chat-b64", ("sdar", 64)),
    # LLaDA2.1-mini ships LLaDA2.0-mini's format (llada2_moe)
    "llada2.1-mini": ("llada2", "LLaDA2.1-mini", ("llada2", 32)),
}


@pytest.fixture(scope="module")
def released(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("releases")
    out = {}
    for seed, (name, (writer, folder, _)) in enumerate(RELEASES.items()):
        out[name] = root / folder
        tiny.write(writer, out[name], SIZE, seed=40 + seed)
    return out


@pytest.mark.parametrize("name", RELEASES)
def test_a_release_loads_generates_and_serves(name: str, released: dict[str, Path]) -> None:
    folder = released[name]
    model = models.load(str(folder))
    assert (model.facts.family, model.facts.block) == RELEASES[name][2]
    env = {"DCODE_MODEL": str(folder), "DCODE_LENGTH": None}
    result = CliRunner().invoke(app, ["new", "add two numbers", "--length", "8", "--json", "-q"], env=env)
    assert result.exit_code in (0, 3), (result.stderr, result.exception)
    assert json.loads(result.stdout)["model"] == str(folder)
    serve_once(folder)


def test_the_duplicated_head_is_the_embedding(released: dict[str, Path]) -> None:
    folder = released["a2d-duplicated-head"]
    headers = models.checkpoint.read_headers(folder)
    assert headers["lm_head.weight"].shape == headers["model.embed_tokens.weight"].shape
    info = models.model_info("a2d", folder)  # what `dcode models pull` prints: both copies counted
    assert info.parameters == sum(t.count for t in headers.values())


def test_the_older_stable_diffcoder_is_told_from_a_plain_llama(released: dict[str, Path]) -> None:
    config = json.loads((released["stable-diffcoder-older"] / "config.json").read_text())
    assert (config["model_type"], config["architectures"]) == ("llama", ["LlamaForCausalLM"])
    assert not (released["stable-diffcoder-older"] / "generation_config.json").exists()
    assert models.family_of(config) == "stable_diffcoder"
    assert models.family_of({**config, "auto_map": {}}) is None  # a plain Llama stays refused


def test_illada_masks_with_id_5_where_no_file_names_a_mask(released: dict[str, Path]) -> None:
    folder = released["illada"]
    config = json.loads((folder / "config.json").read_text())
    assert "mask_token_id" not in config
    model = models.load(str(folder))
    assert (model.facts.mask_id, model.tokenizer.mask_token_id) == (5, None)
    other = folder.parent / "llada"  # LLaDA itself still masks with its own <|mdm_mask|>
    tiny.write("llada", other, SIZE, seed=1)
    plain = models.load(str(other))
    assert plain.tokenizer.convert_ids_to_tokens([plain.facts.mask_id]) == ["<|mdm_mask|>"]


@pytest.mark.parametrize(("kind", "think"), [("a2d_qwen3_bd3lm", True), ("a2d_qwen2_bd3lm", False)])
def test_a2d_prompts_carry_the_authors_think_block_in_cli_and_server(kind: str, think: bool, tmp_path: Path) -> None:
    """dllm renders with enable_thinking=False (bcb6bed5): Qwen3's template then writes an empty
    think block; Qwen2.5's has none to write. The CLI's prompt and a served conversation agree."""
    folder = tmp_path / "Qwen3-0.6B-diffusion-bd3lm-v0.1"
    tiny.write(kind, folder, SIZE, seed=5)
    model = models.load(str(folder))
    cli = model.tokenizer.decode(localfill.prompt_ids(model, "add two numbers", "python"))
    served = model.tokenizer.decode(conversation.encoded(model, [("user", "add two numbers")], "python"))
    assert cli == served
    assert cli.endswith(THINK_OFF) is think and cli.endswith("<|im_start|>assistant\n") is not think


# Fast_dLLM_v2_1.5B's config.json as released (copied whole in HoangMaizzz/failfasttesting at
# 7cc16bb): the keys besides the shape's, and the values that decide how dcode reads it.
FAST_DLLM_1_5B_KEYS = {
    "architectures", "attention_dropout", "auto_map", "bd_size", "bos_token_id", "eos_token_id", "hidden_act",
    "hidden_size", "initializer_range", "intermediate_size", "layer_types", "max_position_embeddings",
    "max_window_layers", "model_type", "num_attention_heads", "num_hidden_layers", "num_key_value_heads",
    "pad_token_id", "rms_norm_eps", "rope_scaling", "rope_theta", "sliding_window", "tie_word_embeddings",
    "torch_dtype", "transformers_version", "use_cache", "use_sliding_window", "vocab_size",
}  # fmt: skip


def test_the_fast_dllm_1_5b_checkpoint_is_written_as_released(released: dict[str, Path]) -> None:
    folder = released["fast-dllm-v2-1.5b"]
    config = json.loads((folder / "config.json").read_text())
    assert set(config) == FAST_DLLM_1_5B_KEYS
    assert config["auto_map"] == {
        "AutoConfig": "configuration.Fast_dLLM_QwenConfig", "AutoModel": "modeling.Fast_dLLM_QwenModel",
        "AutoModelForCausalLM": "modeling.Fast_dLLM_QwenForCausalLM",
    }  # fmt: skip
    assert (config["bd_size"], config["tie_word_embeddings"], config["layer_types"][0]) == (32, True, "full_attention")
    model = models.load(str(folder))
    im_end = model.tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert config["eos_token_id"] == config["pad_token_id"] == im_end
    assert model.facts.pad_id == im_end and im_end in model.facts.eos_ids  # pads with <|im_end|>, as released
    assert model.tokenizer.convert_ids_to_tokens([model.facts.mask_id]) == ["|<MASK>|"]
