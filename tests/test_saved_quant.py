"""Saved quantised copies (dcode.models.saved): `dcode models pull NAME --quantize int8` keeps the
int8 network as plain tensors in safetensors beside the checkpoint; a later `--quantize int8` load
reads it (logits identical to quantising on load), a copy of other weights or another dtype is not
read (one stderr note), and a kind or family that cannot be saved is one line, exit 2, nothing
written. Pull runs against the fake Hub of tests/test_models_cli.py (no network)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
from test_models_cli import hub  # noqa: E402, F401  (the fake Hub fixture)

import dcode.cli as cli  # noqa: E402
from dcode.models import load, save_quantized, saved  # noqa: E402
from dcode.models.int8_linear import Int8Linear  # noqa: E402
from dcode.testing import checkpoints  # noqa: E402

pytest.importorskip("torchao")

IDS = torch.arange(1, 13)[None]
NATIVE = ("qwen2", "llada2", "a2d_qwen2_bd3lm")  # the families on dcode's own torch networks


def int8_layers(model: object) -> list[Int8Linear]:
    return [m for m in model.model.modules() if isinstance(m, Int8Linear)]  # type: ignore[attr-defined]


@pytest.mark.parametrize("family", NATIVE)
def test_a_saved_copy_loads_with_the_logits_of_quantising_on_load(tmp_path: Path, family: str) -> None:
    folder = tmp_path / family
    checkpoints.write(family, folder)
    on_load = load(str(folder), dtype="bfloat16", quantize="int8")
    path = save_quantized(folder, "int8", "bfloat16")
    assert path == folder / "dcode-quantized" / "int8.safetensors" and not list(path.parent.glob("*.partial"))
    metadata = saved.read_metadata(path)
    assert metadata is not None and metadata["kind"] == "int8" and metadata["dtype"] == "bfloat16"
    assert metadata["source"] == saved.weights_id(folder) and metadata["dcode_layout"] == saved.LAYOUT
    assert saved.saved_kinds(folder) == {"int8": "bfloat16"}
    from_copy = load(str(folder), dtype="bfloat16", quantize="int8")
    assert torch.equal(from_copy(IDS), on_load(IDS))  # type: ignore[operator]
    assert len(int8_layers(from_copy)) == len(int8_layers(on_load)) > 0


def test_the_load_reads_the_copy_not_the_checkpoint(tmp_path: Path) -> None:
    """A copy whose first layer's int8 values were changed on disk: the load holds the changed ones."""
    folder = tmp_path / "qwen2"
    checkpoints.write("qwen2", folder)
    path = save_quantized(folder, "int8", "bfloat16")
    tensors, metadata = load_file(str(path)), saved.read_metadata(path)
    assert metadata is not None
    name = next(k for k in tensors if k.endswith("q_proj.qdata"))
    tensors[name] = -tensors[name]
    save_file(tensors, str(path), metadata={k: v for k, v in metadata.items() if k != "tensors"})
    layer = load(str(folder), dtype="bfloat16", quantize="int8").model.get_submodule(name.removesuffix(".qdata"))  # type: ignore[attr-defined]
    assert torch.equal(layer.qdata, tensors[name])


def test_a_stale_copy_is_not_read(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """The checkpoint's weights rewritten after the copy was saved, or a load in another dtype: one
    note on stderr, and the load quantises the weights it has now."""
    folder, other = tmp_path / "qwen2", tmp_path / "other"
    checkpoints.write("qwen2", folder)
    checkpoints.write("qwen2", other, seed=1)
    save_quantized(folder, "int8", "bfloat16")
    capfd.readouterr()
    weights = folder / "model.safetensors"
    weights.write_bytes((other / "model.safetensors").read_bytes())
    os.utime(weights, ns=(1, 1))  # another time than the save's, whatever the clock's resolution
    assert saved.saved_kinds(folder) == {}
    fresh = load(str(folder), dtype="bfloat16", quantize="int8")
    note = capfd.readouterr().err
    assert note.count("\n") == 1 and "the checkpoint's weights changed since it was saved" in note
    assert note.startswith("dcode: not reading the saved int8 copy ") and note.endswith("; quantising on load\n")
    want = load(str(other), dtype="bfloat16", quantize="int8")
    assert torch.equal(fresh(IDS), want(IDS))  # type: ignore[operator]
    load(str(folder), dtype="float32", quantize="int8")
    assert "made for bfloat16, this load runs in float32" in capfd.readouterr().err


def tiny_remote(cache: Path) -> Path:
    """A dcode-tiny-format (qwen2, block-causal) checkpoint on the fake Hub as org/tiny, its weights
    cached as the Hub caches them: the snapshot's file a link to blobs/<sha256 of its content>."""
    import hashlib

    remote = cache.parent / "remote" / "org" / "tiny"
    checkpoints.write("qwen2", remote)
    data = (remote / "model.safetensors").read_bytes()
    blob = cache / "models--org--tiny" / "blobs" / hashlib.sha256(data).hexdigest()
    blob.parent.mkdir(parents=True)
    blob.write_bytes(data)
    (cache / "models--org--tiny" / "snapshots" / "abc").mkdir(parents=True)
    (cache / "models--org--tiny" / "snapshots" / "abc" / "model.safetensors").symlink_to(f"../../blobs/{blob.name}")
    return remote


def run(args: list[str]) -> object:
    return CliRunner().invoke(cli.app, args, prog_name="dcode")


def test_pull_keeps_a_copy_that_new_reads_and_models_lists(hub: tuple[Path, list]) -> None:  # noqa: F811
    cache, _ = hub
    tiny_remote(cache)
    plain = CliRunner().invoke(cli.app, ["models", "pull", "org/tiny"], env={"DCODE_QUANTIZE": "int4"})
    assert plain.exit_code == 0 and not (cache / "models--org--tiny" / "dcode-quantized").exists(), plain.stderr
    pulled = run(["models", "pull", "org/tiny", "--quantize", "int8", "--dtype", "bfloat16"])
    assert pulled.exit_code == 0, pulled.stderr  # type: ignore[attr-defined]
    copy = cache / "models--org--tiny" / "dcode-quantized" / "abc" / "int8.safetensors"
    assert "dcode: saved a int8 copy (bfloat16, " in pulled.stderr and str(copy) in pulled.stderr  # type: ignore[attr-defined]
    assert saved.read_metadata(copy)["revision"] == "abc"  # type: ignore[index]
    again = run(["models", "pull", "org/tiny", "--quantize", "int8", "--dtype", "bfloat16"])
    assert f"dcode: a saved int8 copy (bfloat16) is current: {copy}\n" in again.stderr  # type: ignore[attr-defined]
    listing = run(["models"])
    row = next(line for line in listing.stdout.splitlines() if line.startswith("org/tiny"))  # type: ignore[attr-defined]
    assert row.endswith("saved int8 copy (bfloat16)")
    rows = json.loads(run(["models", "--json"]).stdout)  # type: ignore[attr-defined]
    assert [r["saved_quantized"] for r in rows if r["name"] == "org/tiny"] == [{"int8": "bfloat16"}]
    new = ["new", "x", "--model", "org/tiny", "--length", "8", "--json", "-q", "--no-repair", "--no-log"]
    from_copy = run([*new, "--quantize", "int8", "--dtype", "bfloat16"])
    assert from_copy.exit_code in (0, 3) and "saved" not in from_copy.stderr, from_copy.stderr  # type: ignore[attr-defined]
    copy.unlink()
    on_load = run([*new, "--quantize", "int8", "--dtype", "bfloat16"])
    assert json.loads(from_copy.stdout)["code"] == json.loads(on_load.stdout)["code"]  # type: ignore[attr-defined]
    assert json.loads(from_copy.stdout)["quantize"] == "int8"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["org/tiny", "--quantize", "int4"], "--quantize int4: a saved copy holds int8 only"),
        (["org/tiny", "--quantize", "int3"], "unknown --quantize 'int3' (choose from auto, none, int8, int4)"),
        (["org/dream", "--quantize", "int8"], "--quantize int8: dream runs on transformers' classes"),
    ],
)
def test_pull_refuses_a_copy_it_cannot_save(hub: tuple[Path, list], args: list[str], message: str) -> None:  # noqa: F811
    cache, calls = hub
    tiny_remote(cache)
    result = run(["models", "pull", *args])
    assert result.exit_code == 2 and result.stderr.startswith(f"dcode: error: {message}")  # type: ignore[attr-defined]
    assert result.stderr.count("\n") == 1 and result.stdout == ""  # type: ignore[attr-defined]
    assert all(patterns == ("config.json",) for _, _, patterns in calls)  # no weights fetched
    assert not list(cache.glob("*/dcode-quantized"))


def test_a_damaged_copy_is_one_line(tmp_path: Path) -> None:
    """A copy cut short after its header (its metadata still current): one-line ModelError naming it."""
    from dcode.models import ModelError

    folder = tmp_path / "qwen2"
    checkpoints.write("qwen2", folder)
    path = save_quantized(folder, "int8", "bfloat16")
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(ModelError, match=r"^cannot read the saved int8 copy .*\(delete it\)$"):
        load(str(folder), dtype="bfloat16", quantize="int8")
