"""`dcode bench speed` / `dcode bench quality` end to end on the tiny random checkpoint through
CliRunner, the sandbox's limits on real child processes, the report files, and the one harness
the scripts in benchmarks/ share: its registry of settings, its metrics and its provenance."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import benchmark_module
from typer.testing import CliRunner

import dcode.cli.bench  # noqa: F401  (registers `dcode bench` on the app)
from dcode.bench import PROMPTS, REGISTRY, custom, named, provenance, read_prompts, select, settings, with_family
from dcode.bench.metrics import Tally, has_key_words, key_word_share, words
from dcode.bench.quality import docstring, load_problems, program, trim_completion
from dcode.bench.sandbox import NETWORK_MESSAGE, Limits, run_python
from dcode.cli import app
from dcode.config import SamplerConfig

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def bench(*args: str):
    return CliRunner().invoke(app, ["bench", *args], prog_name="dcode")


# ---------------------------------------------------------------------------------------------
# The suites, end to end


def test_speed_suite_end_to_end(tiny_checkpoint: Path, tmp_path: Path) -> None:
    out = tmp_path / "results"
    result = bench(
        "speed", "--model", str(tiny_checkpoint), "--device", "cpu", "--limit", "2", "--repeats", "1",
        "--length", "8", "--out", str(out),
    )  # fmt: skip
    assert result.exit_code == 0, (result.stderr, result.exception)
    report = json.loads((out / "speed.json").read_text())
    names = [row["setting"] for row in report["settings"]]
    assert names == ["one-per-pass", "threshold-0.9", "entropy-bound-0.1", "verify", "autoregressive"]
    assert report["prompts"] == 2 and report["attention_block"] == 4
    assert len(report["runs"]) == 5 * 2  # every setting on every prompt, one repeat
    rows = {row["setting"]: row for row in report["settings"]}
    for row in rows.values():  # equal work: every run decodes exactly --length tokens
        assert row["tokens"] == 8
        assert row["tokens_per_second"] > 0 and row["wall_seconds"] > 0 and row["peak_memory_mb"] >= 0
        assert 0 < row["first_draft_seconds"] <= row["wall_seconds"]
    assert rows["one-per-pass"]["forward_passes"] == 8  # one token per forward pass
    assert rows["one-per-pass"]["config"]["cache"] is False
    assert rows["autoregressive"]["forward_passes"] == 8 and rows["autoregressive"]["first_draft_tokens"] == 4
    for name in ("threshold-0.9", "entropy-bound-0.1", "verify"):
        assert rows[name]["vs_one_per_pass"] > 0 and rows[name]["vs_autoregressive"] > 0
    assert "vs_one_per_pass" not in rows["one-per-pass"]
    markdown = (out / "speed.md").read_text()
    assert result.stdout == markdown  # the table on stdout, the file names on stderr
    assert "| setting | passes |" in markdown and "| autoregressive |" in markdown
    assert result.stderr == f"dcode: wrote {out / 'speed.json'}, {out / 'speed.md'}\n"  # no progress bar
    measured = report["provenance"]  # how the numbers were made, in the JSON and atop the table
    assert measured["command"].startswith("dcode bench speed --model ") and len(measured["weights_sha256"]) == 64
    assert "--limit 2 --length 8 --repeats 1" in measured["command"]  # what was run, not pytest's own argv
    assert markdown.startswith(f"Command: `{measured['command']}`  \nWeights: sha256 `{measured['weights_sha256']}`")


def test_quality_suite_end_to_end(tiny_checkpoint: Path, tmp_path: Path) -> None:
    out = tmp_path / "results"
    result = bench(
        "quality", "--model", str(tiny_checkpoint), "--device", "cpu", "--limit", "2", "--length", "8",
        "--out", str(out), "--settings", "one-per-pass,threshold-0.9", "--timeout", "5", "-q",
    )  # fmt: skip
    assert result.exit_code == 0, (result.stderr, result.exception)
    assert result.stderr == ""  # -q
    report = json.loads((out / "quality.json").read_text())
    assert [row["setting"] for row in report["settings"]] == ["one-per-pass", "threshold-0.9"]
    assert report["problems"] == 2 and report["prompts"] == 2
    for row in report["settings"]:
        parse, human = row["parse"], row["humaneval"]
        assert parse["checked"] == 2 and 0 <= parse["valid_before_repair"] <= parse["valid_after_repair"] <= 1
        assert [r["task_id"] for r in human["results"]] == ["HumanEval/0", "HumanEval/1"]
        # HumanEval/1 does not fit the tiny model's 512 positions; HumanEval/0 ran in the sandbox
        assert [r["status"] for r in human["results"]][1] == "too long" and human["too_long"] == 1
        assert human["results"][0]["status"] in ("passed", "failed", "timeout", "memory")
        assert human["pass@1"] == human["passed"] / 2
    markdown = (out / "quality.md").read_text()
    assert result.stdout == markdown and "| setting | parse-valid | after repair | HumanEval pass@1 |" in markdown
    assert (out / "quality.png").read_bytes().startswith(PNG_MAGIC)


def test_quality_without_the_extra_names_it(tiny_checkpoint: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    result = bench("quality", "--model", str(tiny_checkpoint), "--limit", "1")
    assert result.exit_code == 2
    assert result.stderr == "dcode: error: matplotlib is not installed: pip install 'dcode[bench]'\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--settings", "fastest"], "unknown setting 'fastest' (choose from one-per-pass, threshold-0.9, "),
        (["--prompts", "missing.jsonl"], "cannot read --prompts missing.jsonl: No such file or directory"),
        (["--length", "0"], "--length must be at least 1 token"),
        (["--dtype", "float8"], "unknown --dtype 'float8' (choose from auto, bfloat16, float16, float32)"),
        (["--repeats", "0"], "--repeats must be at least 1"),
    ],
)
def test_bad_options_are_one_line_usage_errors(tiny_checkpoint: Path, args: list[str], message: str) -> None:
    result = bench("speed", "--model", str(tiny_checkpoint), "--device", "cpu", "--limit", "1", *args)
    assert result.exit_code == 2, (result.stderr, result.exception)
    assert result.stderr.startswith(f"dcode: error: {message}") and result.stderr.count("\n") == 1
    assert result.stdout == ""


def test_importing_the_bench_command_imports_no_torch() -> None:
    code = "import sys, dcode.cli.bench; print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "[]\n"


# ---------------------------------------------------------------------------------------------
# The sandbox


def test_a_program_that_loops_forever_is_killed() -> None:
    outcome = run_python("while True:\n    pass\n", Limits(seconds=1))
    assert outcome.status == "timeout" and not outcome.passed
    assert outcome.seconds < 5


def test_a_program_that_allocates_without_bound_is_stopped() -> None:
    source = "chunks = []\nwhile True:\n    chunks.append(bytearray(50 * 2**20))\n"
    outcome = run_python(source, Limits(seconds=20, memory_mb=256))
    assert outcome.status == "memory", outcome
    assert outcome.seconds < 10  # stopped by the limit, not by the clock


@pytest.mark.parametrize(
    "attempt",
    [
        "socket.create_connection(('192.0.2.1', 80), timeout=1)",  # TEST-NET-1: never routed
        "socket.socket(socket.AF_INET, socket.SOCK_STREAM).connect(('127.0.0.1', 9))",  # a closed port
        "socket.getaddrinfo('example.com', 443)",  # a DNS query is traffic too
        "__import__('urllib.request').request.urlopen('http://192.0.2.1/', timeout=1)",
    ],
)
def test_a_program_cannot_open_a_connection(attempt: str) -> None:
    source = textwrap.dedent(
        f"""\
        import socket
        try:
            {attempt}
        except OSError as error:
            assert {NETWORK_MESSAGE!r} in str(error), error  # refused before any packet was sent
        else:
            raise SystemExit("connected")
        """
    )
    assert run_python(source, Limits(seconds=10)).status == "passed"


def test_a_program_runs_in_a_fresh_folder_with_a_stripped_environment() -> None:
    source = textwrap.dedent(
        """\
        import os
        assert os.path.basename(os.getcwd()).startswith("dcode-bench-"), os.getcwd()
        assert sorted(os.listdir()) == ["sandbox.py", "solution.py", "stderr", "stdout"], os.listdir()
        assert "PATH" not in os.environ and "VIRTUAL_ENV" not in os.environ, sorted(os.environ)
        with open("scratch.txt", "w") as f:  # writing inside the folder is fine
            f.write("x")
        """
    )
    assert run_python(source).status == "passed"


@pytest.mark.parametrize("escape", ["raise SystemExit(0)", "import os; os._exit(0)"])
def test_a_program_that_exits_before_its_end_fails(escape: str) -> None:
    outcome = run_python(f"{escape}\nraise AssertionError('the checks would fail')\n")
    assert outcome.status == "failed"


def test_a_correct_humaneval_solution_passes_and_a_wrong_one_fails() -> None:
    problem = load_problems(1)[0]
    right = run_python(program(problem, problem["canonical_solution"]))
    assert right.status == "passed", right
    wrong = run_python(program(problem, "    return False\n"))
    assert wrong.status == "failed" and wrong.detail == "AssertionError"


# ---------------------------------------------------------------------------------------------
# Small parts


def test_trim_completion_keeps_the_body_and_helpers_and_drops_top_level_calls() -> None:
    text = "    return helper(x)\n\n\ndef helper(x):\n    return x\n\nprint(f(1))\nassert f(1)\n"
    assert trim_completion(text) == "    return helper(x)\n\n\ndef helper(x):\n    return x\n\n"
    assert trim_completion("") == ""


def test_the_request_is_the_entry_points_docstring() -> None:
    problem = load_problems(1)[0]
    assert docstring(problem).startswith("Check if in given list of numbers, are any two numbers closer")


def test_read_prompts_reads_the_shipped_set_and_names_a_bad_line(tmp_path: Path) -> None:
    rows = read_prompts(PROMPTS, limit=3)
    assert [r["id"] for r in rows] == ["p00", "p01", "p02"] and rows[0]["lang"] == "python"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\n{"text": "no prompt"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: not a JSON object"):
        read_prompts(bad)


def test_a_model_with_its_own_defaults_gets_a_row_that_runs_them() -> None:
    own = {"threshold": 0.7, "repetition_penalty": 1.2}
    assert "model-defaults" not in [s.name for s in settings(4)]
    rows = {s.name: s for s in settings(4, own)}
    assert list(rows)[-1] == "model-defaults"
    assert with_family(rows["model-defaults"], own) == SamplerConfig(threshold=0.7, repetition_penalty=1.2)
    fixed = with_family(rows["threshold-0.9"], own)  # a setting keeps what it decides, takes the rest
    assert (fixed.threshold, fixed.repetition_penalty) == (0.9, 1.2)
    assert with_family(rows["one-per-pass"], own).rule == "schedule"


# ---------------------------------------------------------------------------------------------
# One registry, one set of metrics, one provenance


def test_words_split_identifiers_and_key_words_match_on_five_letters() -> None:
    assert words("mergeSorted_lists HTTPServer") == {"merge", "sorted", "lists", "http", "server"}
    assert key_word_share("merge two sorted lists", "def merge_sorted(a): ...") == pytest.approx(2 / 3)
    assert key_word_share("a function that returns it", "x = 1") == 1.0  # no content words to miss
    assert has_key_words("parse an ISO date", "def parse_date(text):")  # 2 of 3: parse, date
    assert not has_key_words("parse an ISO date", "def f(x):")


def test_a_tally_gives_every_benchmark_the_same_row() -> None:
    tally = Tally()
    tally.add("merge two sorted lists", "def merge(a, b):\n    return sorted(a + b)\n", 4, 10, 0.5, rows=12, edits=3)
    tally.add("parse an ISO date", "def (:\n", 6, 6, 1.5)  # not real code, no key words; one row a pass
    row = tally.summary()
    assert row == {
        "prompts": 2,
        "forward_passes": 10,
        "rows_per_pass": 1.8,  # (12 + 6) / 10
        "tokens": 16,
        "tokens_per_forward": 1.6,
        "tokens_per_second": 8.0,
        "wall_seconds": 2.0,
        "real_code_rate": 0.5,
        "key_words_rate": 0.5,
        "edits": 3,  # tokens token editing rewrote, summed
    }
    assert Tally().summary()["tokens_per_forward"] == 0.0  # nothing answered: zeros, not a division error


def test_the_registry_names_every_setting_and_parametric_names_build_more() -> None:
    assert {s.name for s in settings(None, {"rule": "verify"})} <= set(REGISTRY)
    assert named("entropy-bound-1.2").config.entropy_bound == 1.2
    assert named("entropy-bound-1.2").config.rule == "entropy-bound"
    assert (named("threshold-0.5").config.rule, named("threshold-0.5").config.threshold) == ("threshold", 0.5)
    assert (named("verify-0").config.rule, named("verify-0").config.draft) == ("verify", 0)
    assert named("verify") is REGISTRY["verify"]
    for bad in ("threshold-high", "fastest", "verify-1.5"):
        with pytest.raises(ValueError, match="unknown setting"):
            named(bad)
    # --settings takes the model's own rows, any registry row and parametric ones, in the order given
    chosen = select(settings(4), ["verify", "left-to-right", "threshold-0.5"])
    assert [s.name for s in chosen] == ["verify", "left-to-right", "threshold-0.5"]


def test_a_custom_setting_runs_what_dcode_new_runs_with_those_options() -> None:
    own = {"rule": "verify", "entropy_bound": 0.6, "threshold": 0.7}  # dcode-tiny's recommended values
    alone = with_family(custom("eb", {"entropy_bound": 1.0}), own)  # a rule's own setting alone picks it
    assert (alone.rule, alone.entropy_bound) == ("entropy-bound", 1.0)
    assert with_family(custom("none", {}), own) == with_family(REGISTRY["model-defaults"], own)
    assert with_family(custom("seeded", {"seed": 3}), own).rule == "verify"


def test_provenance_hashes_the_weights_and_dates_the_measurement(tmp_path: Path) -> None:
    import datetime
    import hashlib

    (tmp_path / "model.safetensors").write_bytes(b"weights")
    when = datetime.datetime(2026, 1, 2, tzinfo=datetime.UTC)
    assert provenance("dcode bench speed", tmp_path, when) == {
        "command": "dcode bench speed",
        "weights_sha256": hashlib.sha256(b"weights").hexdigest(),
        "date": "2026-01-02",
    }
    assert provenance("python benchmarks/startup.py", None, when)["weights_sha256"] is None


def test_the_sampling_script_runs_registry_settings_and_reports_the_metrics(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    sampling = benchmark_module("sampling.py")
    args = ["--model", str(tiny_checkpoint), "--limit", "1", "--length", "8", "--settings", "one-per-pass"]
    args += [
        "--thresholds",
        "0.5",
        "--drafts",
        "0",
        "--json",
        str(tmp_path / "out.json"),
        "--markdown",
        str(tmp_path / "out.md"),
    ]
    results = sampling.main(args)
    assert list(results) == ["one-per-pass", "threshold-0.5", "verify-0"]
    assert set(results["one-per-pass"]) == set(Tally().summary())  # the harness's metrics, nothing else
    assert results["one-per-pass"]["prompts"] == 1
    report = json.loads((tmp_path / "out.json").read_text())
    assert report["results"] == results and report["provenance"]["command"].startswith("python benchmarks/sampling.py")
    assert (tmp_path / "out.md").read_text().startswith("Command: `python benchmarks/sampling.py --model")
    with pytest.raises(SystemExit):
        sampling.main(["--settings", "fastest"])


def test_bench_settings_lists_the_registry_and_the_parametric_names() -> None:
    result = bench("settings")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [line.split()[0] for line in lines[: len(REGISTRY)]] == list(REGISTRY)
    assert "left-to-right                     fast      rule=verify, draft=0" in lines
    assert "model-defaults                    fast      the model's own defaults" in lines
    assert "verify-<draft>                    fast      rule=verify, draft=<draft>" in lines


def test_bench_settings_shows_what_each_effort_means_for_each_family() -> None:
    from dcode.models.families import FAMILIES

    lines = bench("settings").stdout.splitlines()
    efforts = lines[lines.index("a sampler option the user sets wins:") + 1 :]
    named = {(line[:18].strip(), line[18:26].strip()): line[26:] for line in efforts}
    assert {family for family, _ in named} == set(FAMILIES) | {"llada2 (llada2.1)"}
    assert named["llada", "high"] == "schedule, one token per pass, ordering=confidence, temperature=0.0, block=32"
    assert named["llada2 (llada2.1)", "medium"] == (
        "threshold 0.7, ordering=confidence, temperature=0.0, edit_threshold=0.5, edit_passes=16"
    )
    assert named["diffusion_gemma", "all"].startswith("the checkpoint's own decoding")
