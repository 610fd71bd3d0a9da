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

CODER = "dllm-hub/Qwen2.5-Coder-0.5B-Instruct-diffusion-bd3lm-v0.1"  # ZHZisZZ/dllm b8d76ff7: the org moved
OLD_CODER = "dllm-collection/Qwen2.5-Coder-0.5B-Instruct-diffusion-bd3lm-v0.1"


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
    assert lines[1].split()[:7] == ["sdar-1.7b", "JetLM/SDAR-1.7B-Chat", "sdar", "2.03B", "4.06", "GB", "Apache-2.0"]
    assert lines[1].split()[-3:] == ["61.6/61.1", "RAM", "(bfloat16)"]  # the CPU pick first
    rows = {line.split()[0]: line for line in lines[1:]}
    coder = rows["a2d-coder-0.5b"].split()  # what a pull downloads and prints: the head is stored twice
    assert coder[:5] == ["a2d-coder-0.5b", CODER, "a2d", "0.63B", "1.26"]
    assert coder[6:] == [
        "Apache-2.0", "1.3", "GB", "2.5", "GB", "0.6", "GB", "0.3", "GB", "39.0/33.2", "RAM", "(float32)"
    ]  # fmt: skip
    assert rows["llada-8b"].split()[-3:] == ["49.4/41.0", "RAM", "(int4)"]  # ML-GSAI/LLaDA EVAL.md; 16 GB, int4 in 8
    # the authors' tables: LLaDA2.1 tech report Table 2 (EvalPlus HumanEval+ / MBPP+; LLaDA2.0-mini's
    # 86.6 was in no authors' text), SDAR README Table 1, NVlabs/Fast-dLLM v2/README.md
    assert rows["llada2-mini"].split()[-2:] == ["81.4/78.2", "no"]
    assert rows["llada2.1-mini"].split()[-2:] == ["82.9/74.1", "no"]
    assert rows["sdar-8b"].split()[-3] == "78.7/72.0"
    assert rows["fast-dllm-v2-1.5b"].split()[3:5] == ["1.54B", "3.09"]
    assert rows["fast-dllm-v2-1.5b"].split()[-3] == "43.9/50.0"
    assert rows["sdar-1.7b-b16"].split()[1:4] == ["JetLM/SDAR-1.7B-Chat-b16", "sdar", "2.03B"]  # README 2025-09-09
    assert rows["sdar-8b-b32"].split()[1:3] == ["JetLM/SDAR-8B-Chat-b32", "sdar"]
    assert rows["stable-diffcoder-8b"].split()[3:5] == ["8.25B", "16.5"]
    assert rows["stable-diffcoder-8b"].split()[2] == "stable_diffcoder"
    # iLLaDA: its own family (not LLaDA's network); the Base card's 7.62B, no scores in the authors' text
    assert rows["illada-8b"].split()[1:6] == ["GSAI-ML/iLLaDA-8B-Instruct", "illada", "7.62B", "16.5", "GB"]
    assert rows["illada-8b"].split()[-3] == "-/-"
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
    coder = next(row for row in report["models"] if row["name"] == "a2d-coder-0.5b")
    assert coder["id"] == CODER and coder["scored_with"].startswith("greedy, one token per pass")
    assert (
        coder["memory_gb"] == {"bfloat16": 1.26, "float32": 2.52, "int8": 0.63, "int4": 0.35} and coder["loads"] is True
    )


@pytest.mark.parametrize(
    ("ram", "gpu", "want"),
    [(8.0, None, "RAM (float32)"), (2.0, None, "RAM (bfloat16)"), (1.0, None, "RAM (int8)"),
     (0.5, None, "RAM (int4)"), (0.4, None, "no"), (None, None, "?"), (1.0, 2.0, "GPU (bfloat16)"),
     (None, 1.0, "GPU (int8)"), (None, 0.3, "no")],
)  # fmt: skip
def test_fits_leaves_headroom(ram: float | None, gpu: float | None, want: str) -> None:
    assert catalogue.fits(catalogue.BY_NAME["a2d-coder-0.5b"], ram, gpu) == want  # 1.26 GB in bfloat16


def test_every_entry_is_consistent() -> None:
    assert len(catalogue.BY_NAME) == len(catalogue.CATALOGUE)
    for entry in catalogue.CATALOGUE:
        assert entry.family in ("", *models.FAMILIES), entry
        assert catalogue.find(entry.repo_id) is entry and catalogue.find(entry.repo_id.upper()) is entry
        if entry.family == "a2d":  # the id names the attention: bd3lm or mdlm
            assert ("bd3lm" in entry.repo_id) != ("mdlm" in entry.repo_id)
            assert entry.repo_id.startswith("dllm-hub/")
        assert entry.scored_with or entry.humaneval is None, entry  # a score says how it was measured
    assert catalogue.BY_NAME[catalogue.CPU_PICK].family and catalogue.BY_NAME[catalogue.GPU_PICK].family


def test_the_cpu_pick_follows_the_stated_rule() -> None:
    """The best authors' HumanEval that fits 8 GB in bfloat16 and passes within 2x the 0.5B A2D
    shape's per-pass cost: SDAR-1.7B, not the habit of the smallest model."""
    assert catalogue.CPU_PICK == catalogue.cpu_pick() == "sdar-1.7b"
    slower = {**catalogue.PASS_COST, "sdar-1.7b": 2.5}  # were its pass too slow, the next best would be picked
    pinned = dict(catalogue.PASS_COST)
    try:
        catalogue.PASS_COST.clear()
        catalogue.PASS_COST.update(slower)
        assert catalogue.cpu_pick() == "a2d-qwen3-0.6b"
    finally:
        catalogue.PASS_COST.clear()
        catalogue.PASS_COST.update(pinned)
    line = catalogue.hint("dcode-tiny", terminal=True, as_json=False, quiet=False, env={})
    assert line is not None and "`dcode models pull sdar-1.7b`" in line


def test_the_old_org_is_an_alias_everywhere_an_id_resolves(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy pulled before the move (cached under dllm-collection) is found by the short name, the
    new id and the old one; `dcode models` lists it under the new id."""
    from huggingface_hub import constants

    assert catalogue.current_id(OLD_CODER) == CODER and catalogue.former_ids(CODER) == [OLD_CODER]
    assert catalogue.find(OLD_CODER) is catalogue.find(CODER) is catalogue.BY_NAME["a2d-coder-0.5b"]
    assert catalogue.current_id("someone/dllm-collection") == "someone/dllm-collection"
    source = tmp_path / "Qwen2.5-Coder-0.5B-Instruct-diffusion-bd3lm-v0.1"
    tiny.write("a2d_qwen2_bd3lm", source, SIZE, seed=4)
    cache = tmp_path / "hub"
    cache_repo(cache, OLD_CODER, source)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    for spec in ("a2d-coder-0.5b", CODER, OLD_CODER):
        folder, name = models.resolve(spec)
        assert name == CODER and folder.parent.parent.name == "models--dllm-collection--" + OLD_CODER.split("/")[1]
    assert [info.name for info in models.list_models()][1:] == [CODER]
    result = CliRunner().invoke(app, ["models"], prog_name="dcode")
    assert CODER in result.stdout and OLD_CODER not in result.stdout


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
    assert absent.exit_code == 2 and "run `dcode models pull dllm-hub/Qwen3-0.6B" in absent.stderr


def test_pull_offline_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    for spec in ("a2d-coder-0.5b", OLD_CODER):  # the old org's id asks for the current one
        result = CliRunner().invoke(app, ["models", "pull", spec], prog_name="dcode")
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
    assert line is not None and f"`dcode models pull {catalogue.CPU_PICK}`" in line and "\n" not in line
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
