"""`dcode models` and `dcode models pull` through CliRunner, with a fake snapshot_download that
copies from a local folder laid out like the Hub (no network)."""

from __future__ import annotations

import fnmatch
import json
import shutil
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
from test_families import dream_checkpoint, llada_checkpoint  # noqa: E402

import dcode.cli as cli  # noqa: E402


def build_app():
    """The real CLI; the probe test adds a command to a throwaway copy of it."""
    return {"app": cli.app, "explicit_sampler_fields": cli.explicit_sampler_fields}


@pytest.fixture
def hub(tmp_path, monkeypatch):
    import huggingface_hub
    from huggingface_hub import constants, errors

    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    remote = tmp_path / "remote"
    dream_checkpoint(remote / "org" / "dream")
    (remote / "org" / "dream" / "pytorch_model.bin").write_bytes(b"pickle")
    (remote / "org" / "dream" / "modeling_dream.py").write_text("import os")
    llada_checkpoint(remote / "org" / "llada")
    (remote / "org" / "bert").mkdir(parents=True)
    (remote / "org" / "bert" / "config.json").write_text('{"model_type": "bert"}')
    (remote / "org" / "bert" / "model.safetensors").write_bytes(b"x" * 100)
    calls = []

    def fake_snapshot_download(repo_id, *, revision=None, allow_patterns=None, **kwargs):
        calls.append((repo_id, revision, tuple(allow_patterns or ())))
        source = remote / repo_id
        if not source.is_dir():
            import httpx2

            request = httpx2.Request("GET", f"https://huggingface.co/api/models/{repo_id}")
            response = httpx2.Response(404, request=request)
            raise errors.RepositoryNotFoundError("404 Client Error: Repository Not Found", response=response)
        snapshot = cache / ("models--" + repo_id.replace("/", "--")) / "snapshots" / "abc"
        snapshot.mkdir(parents=True, exist_ok=True)
        (snapshot.parent.parent / "refs").mkdir(exist_ok=True)
        (snapshot.parent.parent / "refs" / "main").write_text("abc")
        for f in source.iterdir():
            if any(fnmatch.fnmatch(f.name, p) for p in allow_patterns or ["*"]):
                shutil.copy(f, snapshot / f.name)
        return str(snapshot)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    return cache, calls


def run(ns, args):
    return CliRunner().invoke(ns["app"], args, prog_name="dcode")


def test_pull_then_list_then_new(hub):
    cache, calls = hub
    ns = build_app()
    result = run(ns, ["models", "pull", "org/dream"])
    assert result.exit_code == 0, (result.stderr, result.exception)
    folder = Path(result.stdout.strip())
    assert folder == cache / "models--org--dream" / "snapshots" / "abc"
    assert not (folder / "pytorch_model.bin").exists() and not (folder / "modeling_dream.py").exists()
    assert result.stderr.startswith("dcode: org/dream: dream, ") and "float32" in result.stderr
    assert calls[0] == ("org/dream", None, ("config.json",))

    listing = run(ns, ["models"])
    assert listing.exit_code == 0, listing.stderr
    print(listing.stdout)
    lines = listing.stdout.splitlines()
    assert lines[0].split() == ["NAME", "FAMILY", "PARAMS", "DTYPE", "SIZE"]
    assert lines[1].startswith("dcode-tiny") and lines[2].startswith("org/dream")
    rows = json.loads(run(ns, ["models", "--json"]).stdout)
    assert [r["name"] for r in rows] == ["dcode-tiny", "org/dream"] and rows[1]["complete"]

    out = CliRunner().invoke(
        cli.app, ["new", "x", "--model", "org/dream", "--length", "8", "--json", "-q", "--no-repair"]
    )
    assert out.exit_code in (0, 3), out.stderr
    assert json.loads(out.stdout)["model"] == "org/dream"


def test_pull_refuses_unsupported_before_the_weights(hub):
    cache, calls = hub
    ns = build_app()
    result = run(ns, ["models", "pull", "org/bert"])
    assert result.exit_code == 2
    supported = "a2d, coda, diffusion_gemma, dream, fast_dllm_v2, illada, llada, llada2, qwen2, sdar, "
    supported += "stable_diffcoder, wedlm"
    assert result.stderr == f"dcode: error: org/bert: unsupported model_type 'bert' (supported: {supported})\n"
    assert calls == [("org/bert", None, ("config.json",))]
    assert not (cache / "models--org--bert" / "snapshots" / "abc" / "model.safetensors").exists()


def test_pull_errors(hub):
    ns = build_app()
    r = run(ns, ["models", "pull", "org/nope"])
    assert (r.exit_code, r.stderr) == (
        2,
        "dcode: error: no model org/nope on the Hugging Face Hub (if it is private: `hf auth login`)\n",
    )
    r = run(ns, ["models", "pull", "../etc"])
    message = "neither a name from `dcode models available` nor a Hugging Face id (org/name): ../etc"
    assert (r.exit_code, r.stderr) == (2, f"dcode: error: {message}\n")
    r = CliRunner().invoke(cli.app, ["new", "x", "--model", "org/llada"])
    assert r.exit_code == 2 and "run `dcode models pull org/llada` to download it" in r.stderr, r.stderr


def test_family_defaults_merge(hub):
    ns = {"app": typer.Typer(cls=cli.OneLineErrors), "explicit_sampler_fields": cli.explicit_sampler_fields}
    ns["app"].command("other")(cli.version)  # two commands, so "probe" is a subcommand
    seen = {}

    @ns["app"].command("probe")
    def probe(
        ctx: typer.Context,
        order: str = typer.Option("confidence", "--order", envvar="DCODE_ORDER"),
        temperature: float = typer.Option(0.0, "--temperature", envvar="DCODE_TEMPERATURE"),
    ):
        seen["fields"] = ns["explicit_sampler_fields"](ctx)

    run(ns, ["probe"])
    assert seen["fields"] == set()
    CliRunner().invoke(ns["app"], ["probe", "--temperature", "0.5"], env={"DCODE_ORDER": "margin"})
    assert seen["fields"] == {"temperature", "ordering"}


def test_models_verbose_states_what_dcode_believes(hub, tmp_path):
    """End-of-answer tokens, pad, mask, shift and block of each model, read from its files alone;
    here an SDAR folder with the released ids (JetAstra/SDAR config and generation_config)."""
    from test_families import cache_repo, release_files

    from dcode.dtypes import cpu_dtype

    cache, _ = hub
    release_files(tmp_path / "sdar", "sdar")
    cache_repo(cache, "JetLM/SDAR-4B-Chat", tmp_path / "sdar")
    result = run(build_app(), ["models", "--verbose"])
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[1].startswith("dcode-tiny") and lines[10].startswith("JetLM/SDAR-4B-Chat")
    # the weights' size per --quantize (the SDAR release here has no weight files)
    loaded = [line for line in lines if line.startswith("  weights loaded, per --quantize: none ")]
    assert [lines.index(line) for line in loaded] == [9] and all(", int8 " in s and ", int4 " in s for s in loaded)
    runs_in = f"  runs in: {cpu_dtype()} on this CPU, bfloat16 on CUDA (--dtype auto)"
    assert lines[2:6] == [
        "  end of answer: <|eos|> (1)",
        "  pad: <|pad|> (0)   mask: <|mask|> (2)",
        "  logits shifted: yes   block: 16   max length: 2048",
        runs_in,
    ]
    assert lines[6:9] == [  # what --effort runs, its family's decodings over its config.json's defaults
        "  --effort low: entropy-bound 0.6, draft_floor=0.3, threshold=0.7",
        "  --effort medium: verify, 15 drafts, draft_floor=0.3, entropy_bound=0.6, threshold=0.7",
        "  --effort high: verify, 15 drafts, draft_floor=0.3, entropy_bound=0.6, threshold=0.7",
    ]
    assert lines[11:18] == [
        "  end of answer: <|endoftext|> (151643), <|im_end|> (151645)",
        "  pad: <|endoftext|> (151643)   mask: <|MASK|> (151669)",
        "  logits shifted: no   block: 4   max length: 32768",
        runs_in,
        "  --effort low: threshold 0.7",
        "  --effort medium: threshold 0.9",
        "  --effort high: schedule, one token per pass",
    ]
    rows = json.loads(run(build_app(), ["models", "--verbose", "--json"]).stdout)
    sdar = rows[1]["facts"]
    assert (sdar["mask"], sdar["shifted"], sdar["block"]) == ({"id": 151669, "token": "<|MASK|>"}, False, 4)
    assert sdar["efforts"]["high"] == {"rule": "schedule", "steps": None}
    assert "facts" not in json.loads(run(build_app(), ["models", "--json"]).stdout)[0]


def test_pull_quiet_or_piped_sets_the_progress_bars_without_crashing(tmp_path):
    """A fresh process (huggingface_hub.utils not yet imported), stderr a pipe and -q: the switch
    that hides huggingface_hub's progress bars must be reached through a module it imports."""
    import os
    import subprocess

    source = tmp_path / "remote"
    dream_checkpoint(source)
    script = f"""
import shutil, sys
from pathlib import Path
import huggingface_hub

def fake_snapshot_download(repo_id, *, revision=None, allow_patterns=None, **kwargs):
    snapshot = Path({str(tmp_path / "hub")!r}) / "models--org--dream" / "snapshots" / "abc"
    shutil.copytree({str(source)!r}, snapshot, dirs_exist_ok=True)
    (snapshot.parents[1] / "refs").mkdir(exist_ok=True)
    (snapshot.parents[1] / "refs" / "main").write_text("abc")
    return str(snapshot)

huggingface_hub.snapshot_download = fake_snapshot_download  # no network
from dcode.cli import app
app(["models", "pull", "org/dream", *sys.argv[1:]], prog_name="dcode")
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DCODE_")} | {"HF_HUB_CACHE": str(tmp_path / "hub")}
    for args in (["-q"], []):
        done = subprocess.run(
            [sys.executable, "-c", script, *args], capture_output=True, text=True, env=env, timeout=120
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.strip().endswith("snapshots/abc") and "Traceback" not in done.stderr
