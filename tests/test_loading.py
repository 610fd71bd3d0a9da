"""Checkpoints in released layouts that used to fail to load or to list: a Qwen-style tokenizer
shipped as vocab.json + merges.txt with no tokenizer.json and a tokenizer_config that names no
class transformers can build from them (it asked for sentencepiece or tiktoken), and cached
models `dcode models` cannot run (once left out of the list without a word)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from test_families import SIZE, cache_repo
from typer.testing import CliRunner

from dcode import models
from dcode.cli import app
from dcode.testing import checkpoints as tiny


@pytest.fixture(scope="module")
def a2d_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("a2d") / "Qwen2.5-Coder-0.5B-Instruct-diffusion-mdlm-v0.1"
    tiny.write("a2d_qwen2_mdlm", folder, SIZE, seed=3)
    return folder


@pytest.mark.parametrize("settings", ["no class", "PreTrainedTokenizerFast", "no tokenizer_config"])
def test_vocab_and_merges_load_on_tokenizers_alone(settings: str, a2d_folder: Path, tmp_path: Path) -> None:
    folder = tmp_path / a2d_folder.name
    shutil.copytree(a2d_folder, folder)
    assert not (folder / "tokenizer.json").exists() and (folder / "merges.txt").is_file()
    path = folder / "tokenizer_config.json"
    config = json.loads(path.read_text())
    if settings == "no tokenizer_config":
        path.unlink()
    else:
        config.pop("tokenizer_class")
        if settings != "no class":
            config["tokenizer_class"] = settings
        path.write_text(json.dumps(config))
    model = models.load(str(folder))  # raised "You need to have sentencepiece or tiktoken installed"
    want = models.load(str(a2d_folder)).tokenizer  # the same files read as the release names them
    text = "def f(x123):\n    return x<|im_end|>"
    assert model.tokenizer.encode(text, add_special_tokens=False) == want.encode(text, add_special_tokens=False)
    assert model.facts.mask_id == want.get_vocab()["<|mask|>"]


def test_models_lists_what_it_cannot_load_with_the_reason(
    a2d_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    cache_repo(cache, "org/bert", None, {"config.json": '{"model_type": "bert"}'})
    cache_repo(cache, "org/garbled", None, {"config.json": "{model_type"})
    untokenized = tmp_path / "untokenized"
    shutil.copytree(a2d_folder, untokenized)
    for name in ("vocab.json", "merges.txt", "tokenizer_config.json"):
        (untokenized / name).unlink()
    cache_repo(cache, "org/a2d-mdlm-untokenized", untokenized)
    cache_repo(cache, "org/a2d-mdlm", a2d_folder)
    result = CliRunner().invoke(app, ["models"], prog_name="dcode")
    assert result.exit_code == 0, (result.stderr, result.exception)
    rows = {line.split()[0]: line for line in result.stdout.splitlines()[1:]}
    assert list(rows) == ["dcode-tiny", "org/a2d-mdlm", "org/a2d-mdlm-untokenized", "org/bert", "org/garbled"]
    assert "cannot load" not in rows["org/a2d-mdlm"] and rows["org/a2d-mdlm"].split()[1] == "a2d"
    supported = ", ".join(sorted(models.FAMILIES))
    assert rows["org/bert"].endswith(f"cannot load: unsupported model_type 'bert' (supported: {supported})")
    assert (
        "cannot load: no tokenizer files (tokenizer.json, or vocab.json and merges.txt)"
        in rows["org/a2d-mdlm-untokenized"]
    )
    assert "cannot load: is not valid JSON" in rows["org/garbled"]
    listed = json.loads(CliRunner().invoke(app, ["models", "--json", "--verbose"], prog_name="dcode").stdout)
    errors = {row["name"]: row.get("error") for row in listed}
    assert errors["org/a2d-mdlm"] is None and errors["org/bert"].startswith("unsupported model_type 'bert'")
    assert "facts" not in next(row for row in listed if row["name"] == "org/bert")
