"""The catalogue: `dcode models available` (offline, with what fits this machine), short names in
--model and `dcode models pull`, pull's one-line refusals and its offline failure, and the hint
dcode-tiny's answers carry on a terminal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_families import SIZE, cache_repo
from typer.testing import CliRunner

from dcode import models
from dcode.cli import app
from dcode.models import catalogue
from dcode.testing import checkpoints as tiny

CODER = "dllm-collection/Qwen2.5-Coder-0.5B-Instruct-diffusion-bd3lm-v0.1"


@pytest.fixture
def machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """A laptop: 8 GB of RAM, no GPU."""
    monkeypatch.setattr(catalogue, "ram_gb", lambda: 8.0)
    monkeypatch.setattr(catalogue, "gpu_gb", lambda: None)


def test_available_lists_the_catalogue_offline(machine: None) -> None:
    result = CliRunner().invoke(app, ["models", "available"], prog_name="dcode")
    assert result.exit_code == 0, (result.stderr, result.exception)
    lines = result.stdout.splitlines()
    assert lines[0].split() == [
        "NAME", "ID", "FAMILY", "PARAMS", "DOWNLOAD", "LICENCE", "BF16", "FP32", "INT8", "INT4", "HUMANEVAL/MBPP",
        "FITS",
    ]  # fmt: skip
    assert len(lines) == 1 + len(catalogue.CATALOGUE)
    coder = lines[1].split()
    assert coder[:5] == ["a2d-coder-0.5b", CODER, "a2d", "0.49B", "0.99"]
    assert coder[6:] == [
        "Apache-2.0", "1.0", "GB", "2.0", "GB", "0.5", "GB", "0.3", "GB", "39.0/33.2", "RAM", "(float32)"
    ]  # fmt: skip
    rows = {line.split()[0]: line for line in lines[1:]}
    assert rows["stable-diffcoder-8b"].split()[2] == "stable_diffcoder"
    assert "CC-BY-NC-4.0 (non-commercial)" in rows["coda-1.7b"]
    # 15 GB of weights in bfloat16, 7.6 in int8: in 8 GB only in int4 (4.8 GB)
    assert rows["dream-coder-7b"].split()[-3:] == ["82.9/79.6", "RAM", "(int4)"]
    assert result.stderr == "dcode: this machine: 8.0 GB of RAM, no GPU\n"


def test_available_json_and_what_fits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(catalogue, "ram_gb", lambda: 16.0)
    monkeypatch.setattr(catalogue, "gpu_gb", lambda: 24.0)
    result = CliRunner().invoke(app, ["models", "available", "--json"], prog_name="dcode")
    report = json.loads(result.stdout)
    assert report["machine"] == {"ram_gb": 16.0, "gpu_gb": 24.0}
    fits = {row["name"]: row["fits"] for row in report["models"]}
    assert fits["a2d-coder-0.5b"] == fits["dream-coder-7b"] == "GPU (bfloat16)"
    assert fits["llada2-mini"] == "GPU (int8)"  # 32 GB in bfloat16, 16 GB in int8: on the 24 GB GPU in int8
    coder = report["models"][0]
    assert (
        coder["memory_gb"] == {"bfloat16": 0.98, "float32": 1.96, "int8": 0.49, "int4": 0.28} and coder["loads"] is True
    )


@pytest.mark.parametrize(
    ("ram", "gpu", "want"),
    [(8.0, None, "RAM (float32)"), (2.0, None, "RAM (bfloat16)"), (1.0, None, "RAM (int8)"),
     (0.4, None, "RAM (int4)"), (0.3, None, "no"), (None, None, "?"), (1.0, 2.0, "GPU (bfloat16)"),
     (None, 1.0, "GPU (int8)"), (None, 0.3, "no")],
)  # fmt: skip
def test_fits_leaves_headroom(ram: float | None, gpu: float | None, want: str) -> None:
    assert catalogue.fits(catalogue.BY_NAME["a2d-coder-0.5b"], ram, gpu) == want  # 0.98 GB in bfloat16


def test_every_entry_is_consistent() -> None:
    assert len(catalogue.BY_NAME) == len(catalogue.CATALOGUE)
    for entry in catalogue.CATALOGUE:
        assert entry.family in ("", *models.FAMILIES), entry
        assert catalogue.find(entry.repo_id) is entry and catalogue.find(entry.repo_id.upper()) is entry
        if entry.family == "a2d":  # the id names the attention: bd3lm or mdlm
            assert ("bd3lm" in entry.repo_id) != ("mdlm" in entry.repo_id)
    assert catalogue.BY_NAME[catalogue.CPU_PICK].family and catalogue.BY_NAME[catalogue.GPU_PICK].family


def test_model_takes_a_short_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    source = tmp_path / "Qwen2.5-Coder-0.5B-Instruct-diffusion-bd3lm-v0.1"
    tiny.write("a2d_qwen2_bd3lm", source, SIZE, seed=4)
    cache = tmp_path / "hub"
    cache_repo(cache, CODER, source)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    assert models.resolve("a2d-coder-0.5b")[1] == CODER
    model = models.load("a2d-coder-0.5b")
    assert (model.facts.name, model.facts.block) == (CODER, 32)
    args = ["new", "x", "--model", "a2d-coder-0.5b", "--length", "8", "--json", "-q"]
    result = CliRunner().invoke(app, args, prog_name="dcode", env={"DCODE_MODEL": None})
    assert result.exit_code in (0, 3), (result.stderr, result.exception)
    assert json.loads(result.stdout)["model"] == CODER
    absent = CliRunner().invoke(app, ["new", "x", "--model", "a2d-qwen3-0.6b"], prog_name="dcode")
    assert absent.exit_code == 2 and "run `dcode models pull dllm-collection/Qwen3-0.6B" in absent.stderr


def test_pull_offline_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    result = CliRunner().invoke(app, ["models", "pull", "a2d-coder-0.5b"], prog_name="dcode")
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr == (
        f"dcode: error: cannot download {CODER}: offline (HF_HUB_OFFLINE is set, or the Hub is unreachable)\n"
    )


def test_pull_refuses_a_family_dcode_does_not_load_before_the_network(monkeypatch: pytest.MonkeyPatch) -> None:
    # a stand-in entry: every released model in the catalogue loads today
    unloaded = catalogue.Entry("some-coder-8b", "example-org/Some-Coder-8B", "", 8.0, 16.0, "MIT", None, None)
    monkeypatch.setitem(catalogue.BY_NAME, unloaded.name, unloaded)
    result = CliRunner().invoke(app, ["models", "pull", "some-coder-8b"], prog_name="dcode")
    assert result.exit_code == 2
    want = "example-org/Some-Coder-8B: dcode does not load some-coder-8b yet (see docs/models.md)"
    assert result.stderr == f"dcode: error: {want}\n"


def test_hint_names_the_model_to_pull_only_on_a_terminal() -> None:
    line = catalogue.hint("dcode-tiny", terminal=True, as_json=False, quiet=False, env={})
    assert line is not None and "`dcode models pull a2d-coder-0.5b`" in line and "\n" not in line
    for model, terminal, as_json, quiet, env in [
        ("dcode-tiny", False, False, False, {}),  # a pipe
        ("dcode-tiny", True, True, False, {}),
        ("dcode-tiny", True, False, True, {}),
        ("dcode-tiny", True, False, False, {"DCODE_HINTS": "0"}),
        (CODER, True, False, False, {}),  # a real model needs no hint
    ]:
        assert catalogue.hint(model, terminal=terminal, as_json=as_json, quiet=quiet, env=env) is None
    result = CliRunner().invoke(app, ["new", "x", "--length", "8"], prog_name="dcode", env={"DCODE_MODEL": None})
    assert "hint" not in result.stderr  # CliRunner's stderr is no terminal


def test_machine_memory_is_read_without_torch() -> None:
    ram = catalogue.ram_gb()
    assert ram is None or ram > 0.1
