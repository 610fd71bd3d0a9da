"""dcode.models.native (Qwen2 in plain torch) and dcode.models.plain_tokenizer against transformers.

The native path exists for start-up time only, so it must compute what transformers' Qwen2 would:
the same logits with and without the cache and with rows fed side by side, and the same text.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from test_imports import heavy_modules_after
from tokenizers import Tokenizer

from dcode import models
from dcode.models import native, plain_tokenizer
from dcode.models.checkpoint import read_config
from dcode.models.families import qwen2

CODE = 'def total(items):\n    """Sum é ✓."""\n\treturn sum(x * 2 for x in items if x)  # 10000\n\n\n'


def transformers_twin(folder: Path) -> models.Denoiser:
    """The same folder on transformers' Qwen2ForCausalLM and tokenizer (decoder.build)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from dcode.models.decoder import build, make_config

    config = read_config(folder)
    return build(
        folder,
        config,
        Qwen2ForCausalLM,
        make_config(Qwen2Config, config, folder),
        torch.device("cpu"),
        torch.float32,
        name="twin",
        family="qwen2",
    )


@pytest.fixture(scope="module")
def untied_checkpoint(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tiny_checkpoint with an output head of its own (tie_word_embeddings false)."""
    folder = tmp_path_factory.mktemp("untied")
    shutil.copytree(tiny_checkpoint, folder, dirs_exist_ok=True)
    weights = load_file(str(folder / "model.safetensors"))
    weights["lm_head.weight"] = torch.randn(
        weights["model.embed_tokens.weight"].shape, generator=torch.Generator().manual_seed(5)
    )
    save_file(weights, str(folder / "model.safetensors"))
    config = json.loads((folder / "config.json").read_text())
    config["tie_word_embeddings"] = False
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize("which", ["tied", "untied", "dcode-tiny"])
def test_native_logits_are_transformers_logits(which: str, tiny_checkpoint: Path, untied_checkpoint: Path) -> None:
    folder = {"tied": tiny_checkpoint, "untied": untied_checkpoint, "dcode-tiny": models.EMBEDDED}[which]
    model, twin = models.load(str(folder)), transformers_twin(folder)
    assert isinstance(model, native.NativeDenoiser) and isinstance(model.model, native.Qwen2)
    assert model.model.shape.tied is (which != "untied")
    ids_of = [(m.facts.mask_id, m.facts.eos_ids, m.facts.pad_id, m.facts.vocab_size) for m in (model, twin)]
    assert ids_of[0] == ids_of[1]
    block = model.facts.block
    assert block is not None
    prefix = 2 * block
    ids = torch.randint(5, model.facts.vocab_size, (3, prefix + 7), generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(model(ids), twin(ids), rtol=0, atol=1e-5)
    # The cache: a prefix of whole blocks once, then three rows that share it fed side by side.
    ids[1:, :prefix] = ids[0, :prefix]
    mine, theirs = model.new_cache(), twin.new_cache()
    assert mine is not None and theirs is not None
    torch.testing.assert_close(model(ids[:1, :prefix], mine), twin(ids[:1, :prefix], theirs), rtol=0, atol=1e-5)
    mine.crop(prefix), theirs.crop(prefix)
    rows = model(ids[:, prefix:], mine)
    torch.testing.assert_close(rows, twin(ids[:, prefix:], theirs), rtol=0, atol=1e-5)
    torch.testing.assert_close(rows, model(ids)[:, prefix:], rtol=0, atol=1e-5)  # exact: block-causal
    assert mine.length == theirs.length == ids.shape[1]
    mine.crop(prefix)
    assert (mine.length, mine.layers[0][0].shape[0]) == (prefix, 1)  # back to one copy of the prefix


def test_native_path_only_for_what_it_computes_exactly(tiny_checkpoint: Path, tiny_full_checkpoint: Path) -> None:
    config = read_config(tiny_checkpoint)
    assert qwen2.native_fits(config)
    for change in (
        {"block_size": None},  # full attention: transformers' path, with Fast-dLLM's window cache
        {"model_type": "qwen3"},
        {"hidden_act": "gelu"},
        {"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1000.0}},
        {"use_sliding_window": True},
        {"layer_types": ["sliding_attention", "full_attention"]},
    ):
        assert not qwen2.native_fits({**config, **change}), change
    full = models.load(str(tiny_full_checkpoint))
    assert type(full).__name__ == "DecoderDenoiser" and full.new_window_cache() is not None


def test_native_load_errors_are_one_line(tiny_checkpoint: Path, tmp_path: Path) -> None:
    folder = tmp_path / "bad"
    shutil.copytree(tiny_checkpoint, folder)
    weights = load_file(str(folder / "model.safetensors"))
    del weights["model.norm.weight"]
    weights["model.layers.0.mlp.up_proj.weight"] = weights["model.layers.0.mlp.up_proj.weight"][:, :5].contiguous()
    weights["model.extra.weight"] = torch.zeros(2)
    save_file(weights, str(folder / "model.safetensors"))
    with pytest.raises(models.ModelError) as error:
        models.load(str(folder))
    assert str(error.value) == f"{folder}: weights do not fit the config: missing model.norm.weight (and 2 more)"


def test_the_embedded_model_and_dcode_new_import_no_transformers() -> None:
    done, heavy = heavy_modules_after(
        "from dcode.cli import main\nmain()", argv=["dcode", "new", "a function that adds", "--length", "32", "-q"]
    )
    assert done.returncode in (0, 3), done.stderr  # 3: the tiny model's code did not parse
    assert done.stdout.strip()
    assert "torch" in heavy and not [m for m in heavy if m.startswith("transformers")]


# ---------------------------------------------------------------------------------------------
# The tokenizer


def test_the_embedded_tokenizer_encodes_as_training_did() -> None:
    """transformers 5's AutoTokenizer reads dcode-tiny's folder as a Qwen2Tokenizer and swaps in
    Qwen2's pre-tokenizer (indentation and numbers split differently from the training data);
    the loaded model must see code as the training data encoded it."""
    trained = Tokenizer.from_file(str(models.EMBEDDED / "tokenizer.json"))
    tokenizer = models.load(None).tokenizer
    assert tokenizer.encode(CODE, add_special_tokens=False) == trained.encode(CODE, add_special_tokens=False).ids
    assert tokenizer.decode(trained.encode(CODE).ids) == CODE


def test_the_transformers_path_reads_the_tokenizer_class_the_folder_names() -> None:
    from dcode.models.decoder import load_tokenizer

    trained = Tokenizer.from_file(str(models.EMBEDDED / "tokenizer.json"))
    tokenizer = load_tokenizer(models.EMBEDDED)  # tokenizer_config: PreTrainedTokenizerFast, not Qwen2's
    assert tokenizer.encode(CODE, add_special_tokens=False) == trained.encode(CODE, add_special_tokens=False).ids


@pytest.mark.parametrize("which", ["tiny", "dcode-tiny"])
def test_plain_tokenizer_is_transformers_fast_tokenizer(which: str, tiny_checkpoint: Path) -> None:
    from transformers import PreTrainedTokenizerFast

    folder = tiny_checkpoint if which == "tiny" else models.EMBEDDED
    assert plain_tokenizer.fits(folder)
    mine, theirs = plain_tokenizer.PlainTokenizer(folder), PreTrainedTokenizerFast.from_pretrained(str(folder))
    assert mine.encode(CODE, add_special_tokens=False) == theirs.encode(CODE, add_special_tokens=False)
    got = mine(CODE, add_special_tokens=False, return_offsets_mapping=True)
    want = theirs(CODE, add_special_tokens=False, return_offsets_mapping=True)
    assert (got["input_ids"], got["offset_mapping"]) == (want["input_ids"], [tuple(o) for o in want["offset_mapping"]])
    ids = got["input_ids"]
    assert mine.decode(ids, skip_special_tokens=False) == theirs.decode(ids, skip_special_tokens=False) == CODE
    pieces = [
        mine.convert_tokens_to_string(mine.convert_ids_to_tokens([i])) for i in range(mine.backend.get_vocab_size())
    ]
    assert pieces == [theirs.convert_tokens_to_string(theirs.convert_ids_to_tokens([i])) for i in range(len(pieces))]
    ids_of = (mine.mask_token_id, mine.eos_token_id, mine.pad_token_id)
    assert ids_of == (theirs.mask_token_id, theirs.eos_token_id, theirs.pad_token_id) and None not in ids_of
    assert mine.get_vocab() == theirs.get_vocab()
    messages = [{"role": "user", "content": "  a function that adds  "}]
    assert mine.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == theirs.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True
    )


def test_plain_tokenizer_renders_a_qwen_style_template_as_transformers(tiny_checkpoint: Path, tmp_path: Path) -> None:
    from transformers import PreTrainedTokenizerFast

    folder = tmp_path / "chat"
    shutil.copytree(tiny_checkpoint, folder)
    settings = json.loads((folder / "tokenizer_config.json").read_text())
    settings["chat_template"] = (
        "{% for m in messages %}{% if loop.first and m['role'] != 'system' %}<|im_start|>system\nBe brief.<|im_end|>\n"
        "{% endif %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}{{ eos_token | tojson }}"
    )
    (folder / "tokenizer_config.json").write_text(json.dumps(settings))
    messages = [{"role": "user", "content": 'say "hi"'}]
    mine = plain_tokenizer.PlainTokenizer(folder).apply_chat_template(messages, add_generation_prompt=True)
    theirs = PreTrainedTokenizerFast.from_pretrained(str(folder)).apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True
    )
    assert mine == theirs


def test_folders_the_plain_tokenizer_does_not_read(tiny_checkpoint: Path, tmp_path: Path) -> None:
    for change in ({"tokenizer_class": "Qwen2Tokenizer"}, {"auto_map": {"AutoTokenizer": ["x.T", None]}}):
        folder = tmp_path / next(iter(change))
        shutil.copytree(tiny_checkpoint, folder)
        settings = json.loads((folder / "tokenizer_config.json").read_text())
        (folder / "tokenizer_config.json").write_text(json.dumps({**settings, **change}))
        assert not plain_tokenizer.fits(folder), change


def test_a_broken_tokenizer_json_is_a_one_line_error(tiny_checkpoint: Path, tmp_path: Path) -> None:
    folder = tmp_path / "broken"
    shutil.copytree(tiny_checkpoint, folder)
    (folder / "tokenizer.json").write_text('{"version": "1.0", "model": ')
    with pytest.raises(models.ModelError) as error:
        models.load(str(folder))
    message = str(error.value)
    assert message.startswith(f"{folder}: cannot load the tokenizer: ") and "\n" not in message
