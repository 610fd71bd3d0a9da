"""`dcode bench speed` / `dcode bench quality` end to end on the tiny random checkpoint through
CliRunner, the sandbox's limits on real child processes, and the report files."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

import dcode.cli.bench  # noqa: F401  (registers `dcode bench` on the app)
from dcode.bench import PROMPTS, read_prompts, settings, with_family
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
