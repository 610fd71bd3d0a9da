"""`dcode new` through Typer's CliRunner: exact stdout, exact one-line errors, exit codes, files.

The embedded dcode-tiny is used as shipped (its weights change, so generated text is never
asserted, only structure and determinism). Where a check needs code that is surely non-empty and
varied (file content equals stdout, seeds matter, cache equals no cache), the tiny random-weight
checkpoint from conftest.py is loaded through the same `--model` option.

`dcode new` checks (and by default repairs) the syntax of what it wrote: it exits 0 when the code
parses and 3, with one warning line, when errors remain. Which of the two a run must end with is
decided here independently, with syntax.find_issues on the code that came out.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dcode import localfill, sampler
from dcode.cli import app
from dcode.config import ORDERINGS, RULES, SamplerConfig
from dcode.dtypes import cpu_dtype
from dcode.models import EMBEDDED
from dcode.syntax import LANGUAGES, find_issues

PROMPT = "a function that adds two numbers"
SHORT = ["--length", "16"]
RULE_NAMES = "schedule, threshold, entropy-bound, verify"
KEYS = {
    "code",
    "model",
    "dtype",
    "quantize",
    "language",
    "path",
    "tokens",
    "forward_passes",
    "tokens_per_forward",
    "seconds",
    "tokens_per_second",
    "prompt_tokens",
    "canvas",
    "edits",  # tokens rewritten by token editing (0 unless --edit-threshold or the family turns it on)
}
REPAIR_KEYS = {"issues_before", "issues_after", "rounds", "spans", "tokens_regenerated", "extra_forward_passes"}
TIMING = ("seconds", "tokens_per_second")  # the only fields allowed to differ between equal runs
SUMMARY = re.compile(
    r"dcode: (\d+) tokens in (\d+) passes \((\d+(?:\.\d+)?) tok/pass\), (\d+\.\d\d) s, "
    r"(\d+(?:\.\d+)?) tok/s, ([^;\n]+)(; repair: \d+ -> \d+ issues in \d+ round\(s\), \+\d+ passes)?\n"
)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer's DCODE_* variables must not leak into these tests."""
    for name in list(os.environ):
        if name.startswith("DCODE_"):
            monkeypatch.delenv(name)


def dcode_new(args: list[str], *, input: str | bytes | None = None, env: dict[str, str | None] | None = None):
    """Run `dcode new ARGS` in-process; returns click's Result (stdout and stderr apart)."""
    return CliRunner().invoke(app, ["new", *args], input=input, env=env, prog_name="dcode")


def assert_generated(result, code: str, *, language: str = "python", where: str = "the output", quiet: bool) -> None:
    """A finished run: exit 0 if `code` parses, else 3; stderr is the summary line (unless quiet)
    and, when syntax errors remain, exactly one warning line naming `where`."""
    issues = find_issues(code, language)
    assert result.exit_code == (3 if issues else 0), (result.exit_code, result.stderr, result.exception)
    lines = result.stderr.splitlines(keepends=True)
    warning = [f"dcode: warning: {len(issues)} syntax error(s) remain in {where}\n"] if issues else []
    if quiet:
        assert lines == warning
    else:
        assert len(lines) == 1 + len(warning), result.stderr
        assert SUMMARY.fullmatch(lines[0]), lines[0]
        assert lines[1:] == warning


def assert_error(result, code: int, message: str) -> None:
    """Exit `code`, nothing on stdout, exactly one stderr line: 'dcode: error: <message>'."""
    assert result.exit_code == code, (result.exit_code, result.stderr, result.exception)
    assert result.stdout == ""
    assert result.stderr.strip().count("\n") == 0
    assert result.stderr == f"dcode: error: {message}\n"


def run_json(args: list[str], env: dict[str, str | None] | None = None, input: str | None = None) -> dict:
    result = dcode_new([*args, "--json", "-q"], env=env, input=input)
    assert result.exit_code in (0, 3), (result.exit_code, result.stderr, result.exception)
    report = json.loads(result.stdout)
    assert_generated(
        result, report["code"], language=report["language"], where=report["path"] or "the output", quiet=True
    )
    return report


def stable(report: dict) -> dict:
    """A --json report without its wall-clock fields."""
    out = {k: v for k, v in report.items() if k not in TIMING}
    if "repair" in out:
        out["repair"] = {k: v for k, v in out["repair"].items() if k != "extra_seconds"}
    return out


def embedded_blocks(prompt_tokens: int, length: int) -> int:
    """How many attention blocks the answer region spans in the embedded model."""
    block = json.loads((EMBEDDED / "config.json").read_text()).get("block_size")
    if not block:
        return 1
    return math.ceil((prompt_tokens + length) / block) - prompt_tokens // block


def assert_consistent(report: dict, length: int) -> None:
    assert KEYS <= set(report) <= KEYS | {"repair"}
    if "repair" in report:  # the syntax check's account, consistent with the code it describes
        repair = report["repair"]
        assert set(repair) >= REPAIR_KEYS
        assert repair["issues_after"] == len(find_issues(report["code"], report["language"]))
        assert 0 <= repair["issues_after"] <= repair["issues_before"]
        assert repair["rounds"] >= 0 and repair["extra_forward_passes"] >= 0
    for key in ("tokens", "forward_passes", "prompt_tokens", "canvas"):
        assert isinstance(report[key], int) and not isinstance(report[key], bool), key
    assert report["canvas"] == length
    assert 0 <= report["tokens"] <= report["canvas"]
    assert 1 <= report["forward_passes"] <= report["canvas"]  # every pass commits at least one
    assert report["prompt_tokens"] >= 1
    assert report["tokens_per_forward"] == round(report["tokens"] / report["forward_passes"], 3)
    assert report["seconds"] >= 0 and report["tokens_per_second"] >= 0
    assert isinstance(report["code"], str)
    assert report["code"] == "" or report["code"].endswith("\n")


# ---------------------------------------------------------------------------------------------
# The prompt and stdout


def test_prompt_from_argument_dash_and_piped_stdin_agree(tiny_checkpoint: Path) -> None:
    args = [*SHORT, "--model", str(tiny_checkpoint)]
    from_argument = run_json([PROMPT, *args])
    from_dash = run_json(["-", *args], input=PROMPT + "\n")
    from_pipe = run_json(args, input=PROMPT + "\n")
    literal_dash = run_json(["a -", *args])  # a different prompt really changes the report
    assert stable(from_dash) == stable(from_argument)
    assert stable(from_pipe) == stable(from_argument)
    assert literal_dash["prompt_tokens"] != from_argument["prompt_tokens"]


def test_argument_wins_over_piped_stdin(tiny_checkpoint: Path) -> None:
    args = [*SHORT, "--model", str(tiny_checkpoint)]
    assert stable(run_json([PROMPT, *args], input="something else entirely\n")) == stable(run_json([PROMPT, *args]))


@pytest.mark.parametrize("model", ["embedded", "tiny"])
def test_same_seed_gives_byte_identical_stdout(model: str, tiny_checkpoint: Path) -> None:
    args = [PROMPT, *SHORT, "--temperature", "1.0", "--seed", "3", "-q"]
    if model == "tiny":
        args += ["--model", str(tiny_checkpoint)]
    first, second = dcode_new(args), dcode_new(args)
    assert_generated(first, first.stdout, quiet=True)
    assert first.stdout_bytes == second.stdout_bytes
    assert (first.exit_code, first.stderr) == (second.exit_code, second.stderr)


def test_seed_changes_sampled_output(tiny_checkpoint: Path) -> None:
    args = [PROMPT, *SHORT, "--model", str(tiny_checkpoint), "--temperature", "1.0"]
    codes = {seed: run_json([*args, "--seed", str(seed)])["code"] for seed in (3, 4)}
    assert codes[3] != codes[4]


@pytest.mark.parametrize("model", ["embedded", "tiny"])
def test_stdout_is_exactly_the_json_code(model: str, tiny_checkpoint: Path) -> None:
    args = [PROMPT, *SHORT] + (["--model", str(tiny_checkpoint)] if model == "tiny" else [])
    report = run_json(args)
    quiet = dcode_new([*args, "-q"])
    assert quiet.stdout == report["code"]
    assert_generated(quiet, report["code"], quiet=True)
    talkative = dcode_new(args)  # the summary line goes to stderr, never into stdout
    assert talkative.stdout == report["code"]
    assert_generated(talkative, report["code"], quiet=False)
    if model == "tiny":
        assert report["code"].strip()  # the random checkpoint always says something


# ---------------------------------------------------------------------------------------------
# -o FILE


def test_output_file_gets_what_stdout_would_have_had(tmp_path: Path, tiny_checkpoint: Path) -> None:
    args = [PROMPT, *SHORT, "--model", str(tiny_checkpoint)]
    plain = dcode_new([*args, "-q"])
    assert_generated(plain, plain.stdout, quiet=True)
    target = tmp_path / "out.py"
    written = dcode_new([*args, "-o", str(target)])
    assert written.stdout == ""
    assert target.read_bytes() == plain.stdout_bytes
    assert_generated(written, plain.stdout, where=str(target), quiet=False)
    assert plain.stdout.strip()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.py"]  # no temporary files left
    mode = stat.S_IMODE(target.stat().st_mode)
    umask = os.umask(0)
    os.umask(umask)
    assert mode == 0o666 & ~umask


def test_output_with_json_writes_the_file_and_reports_it(tmp_path: Path) -> None:
    target = tmp_path / "x.js"
    report = run_json([PROMPT, *SHORT, "-o", str(target)])
    assert_consistent(report, 16)
    assert report["language"] == "javascript"
    assert report["path"] == str(target)
    assert target.read_text(encoding="utf-8") == report["code"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.js"]


def test_output_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    target = tmp_path / "keep.py"
    target.write_text("keep me\n")
    result = dcode_new([PROMPT, *SHORT, "-o", str(target)])
    assert_error(result, 2, f"{target} exists (use --force to overwrite)")
    assert target.read_text() == "keep me\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.py"]


def test_output_force_overwrites_and_keeps_the_mode(tmp_path: Path, tiny_checkpoint: Path) -> None:
    args = [PROMPT, *SHORT, "--model", str(tiny_checkpoint), "-q"]
    target = tmp_path / "replace.py"
    target.write_text("old\n")
    target.chmod(0o640)
    plain = dcode_new(args)
    result = dcode_new([*args, "-o", str(target), "--force"])
    assert_generated(result, plain.stdout, where=str(target), quiet=True)
    assert result.stdout == ""
    assert target.read_bytes() == plain.stdout_bytes != b"old\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["replace.py"]


def test_output_into_a_missing_folder(tmp_path: Path) -> None:
    target = tmp_path / "missing" / "x.py"
    result = dcode_new([PROMPT, *SHORT, "-o", str(target)])
    assert_error(result, 2, f"cannot write {target}: folder {target.parent} does not exist")
    assert list(tmp_path.iterdir()) == []


def test_output_onto_a_directory(tmp_path: Path) -> None:
    folder = tmp_path / "sub"
    folder.mkdir()
    for extra in ([], ["--force"]):
        result = dcode_new([PROMPT, *SHORT, "-o", str(folder), *extra])
        assert_error(result, 2, f"{folder} is a directory")
        assert list(folder.iterdir()) == []
    assert [p.name for p in tmp_path.iterdir()] == ["sub"]


def test_output_with_trailing_slash_to_a_missing_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = dcode_new([PROMPT, *SHORT, "-q", "-o", "missing/"])
    assert list(tmp_path.iterdir()) == []
    assert result.exit_code == 2
    assert result.stderr.startswith("dcode: error: ") and result.stderr.count("\n") == 1


def test_failed_write_leaves_no_temporary_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    def full_disk(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full_disk)
    target = tmp_path / "out.py"
    result = dcode_new([PROMPT, *SHORT, "-o", str(target)])
    assert_error(result, 1, f"cannot write {target}: {os.strerror(errno.ENOSPC)}")
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------------------------
# --json and --lang


def test_json_report_is_complete_and_consistent() -> None:
    result = dcode_new([PROMPT, *SHORT, "--json"])
    report = json.loads(result.stdout)
    assert_generated(result, report["code"], quiet=False)
    assert_consistent(report, 16)
    assert report["model"] == "dcode-tiny"
    assert report["dtype"] == cpu_dtype()  # --dtype auto on this machine's CPU
    assert report["language"] == "python"
    assert report["path"] is None
    # the stderr summary describes the same run
    summary = SUMMARY.fullmatch(result.stderr.splitlines(keepends=True)[0])
    assert summary is not None, result.stderr
    tokens, passes, per_pass, seconds, per_second, model, repaired = summary.groups()
    assert (int(tokens), int(passes), float(per_pass)) == (
        report["tokens"],
        report["forward_passes"],
        report["tokens_per_forward"],
    )
    assert seconds == f"{report['seconds']:.2f}"
    assert float(per_second) == report["tokens_per_second"]
    assert model == f"dcode-tiny in {report['dtype']}"
    rounds = report.get("repair", {}).get("rounds", 0)
    assert (repaired is not None) == (rounds > 0)


def test_summary_line_reports_the_repair(tiny_checkpoint: Path) -> None:
    """The random checkpoint writes code that does not parse: repair runs and is accounted for."""
    args = [PROMPT, *SHORT, "--model", str(tiny_checkpoint), "--repair-rounds", "2"]
    result = dcode_new([*args, "--json"])
    report = json.loads(result.stdout)
    assert_generated(result, report["code"], quiet=False)
    assert_consistent(report, 16)
    repair = report["repair"]
    assert 1 <= repair["rounds"] <= 2
    summary = result.stderr.splitlines()[0]
    assert summary.endswith(
        f"; repair: {repair['issues_before']} -> {repair['issues_after']} issues in {repair['rounds']} round(s), "
        f"+{repair['extra_forward_passes']} passes"
    )
    off = run_json([*args, "--no-repair"])
    assert off["repair"]["rounds"] == 0 and off["repair"]["extra_forward_passes"] == 0
    plain = [PROMPT, *SHORT, "--model", str(tiny_checkpoint)]
    assert run_json(plain, env={"DCODE_REPAIR": "0"})["repair"]["rounds"] == 0
    assert run_json(plain, env={"DCODE_REPAIR_ROUNDS": "1"})["repair"]["rounds"] == 1
    # The random checkpoint's fills never parse, so every round uses all its tries.
    tried = run_json([*plain, "--repair-rounds", "2", "--repair-tries", "3"])["repair"]
    assert tried["issues_after"] > 0 and (tried["rounds"], tried["attempts"]) == (2, 6)
    from_env = run_json([*plain, "--repair-rounds", "1"], env={"DCODE_REPAIR_TRIES": "2"})["repair"]
    assert (from_env["rounds"], from_env["attempts"]) == (1, 2)


@pytest.mark.parametrize(
    ("args", "language"),
    [
        (["-o", "x.js"], "javascript"),
        (["-o", "x.rs"], "rust"),
        (["-o", "x.txt"], "python"),  # unknown suffix: the default
        ([], "python"),
        (["--lang", "rs"], "rust"),
        (["--lang", "golang"], "go"),
        (["-o", "x.js", "--lang", "python"], "python"),  # explicit beats the suffix
    ],
)
def test_language(args: list[str], language: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    report = run_json([PROMPT, *SHORT, *args])
    assert report["language"] == language


def test_unknown_language_is_one_line(tmp_path: Path) -> None:
    target = tmp_path / "x.cob"
    result = dcode_new([PROMPT, *SHORT, "--lang", "cobol", "-o", str(target)])
    assert_error(result, 2, f"unknown language 'cobol'; supported: {', '.join(LANGUAGES)}")
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------------------------
# Environment variables


def test_env_length_and_the_option_wins() -> None:
    assert run_json([PROMPT], env={"DCODE_LENGTH": "16"})["canvas"] == 16
    assert run_json([PROMPT, "--length", "8"], env={"DCODE_LENGTH": "16"})["canvas"] == 8


def test_env_json_and_quiet() -> None:
    result = dcode_new([PROMPT, *SHORT], env={"DCODE_JSON": "1"})
    report = json.loads(result.stdout)
    assert_consistent(report, 16)
    assert_generated(result, report["code"], quiet=False)
    quiet = dcode_new([PROMPT, *SHORT], env={"DCODE_JSON": "1", "DCODE_QUIET": "1"})
    assert stable(json.loads(quiet.stdout)) == stable(report)
    assert_generated(quiet, report["code"], quiet=True)
    plain = dcode_new([PROMPT, *SHORT], env={"DCODE_JSON": "0", "DCODE_QUIET": "0"})
    assert plain.stdout == report["code"]
    assert_generated(plain, report["code"], quiet=False)


def test_env_model(tiny_checkpoint: Path, tmp_path: Path) -> None:
    assert run_json([PROMPT, *SHORT], env={"DCODE_MODEL": str(tiny_checkpoint)})["model"] == str(tiny_checkpoint)
    missing = tmp_path / "nowhere"
    assert_error(
        dcode_new([PROMPT, *SHORT], env={"DCODE_MODEL": str(missing)}), 2, f"model folder not found: {missing}"
    )


def test_env_seed_and_temperature(tiny_checkpoint: Path) -> None:
    args = [PROMPT, *SHORT, "--model", str(tiny_checkpoint)]
    greedy = run_json(args)["code"]
    sampled = {seed: run_json([*args, "--temperature", "1.0", "--seed", str(seed)])["code"] for seed in (0, 3)}
    assert len({greedy, sampled[0], sampled[3]}) == 3  # preconditions: temperature and seed matter
    assert run_json(args, env={"DCODE_TEMPERATURE": "1.0"})["code"] == sampled[0]
    assert run_json(args, env={"DCODE_TEMPERATURE": "1.0", "DCODE_SEED": "3"})["code"] == sampled[3]


def test_env_strategy_steps_and_entropy_bound(tiny_checkpoint: Path) -> None:
    args = [PROMPT, *SHORT, "--model", str(tiny_checkpoint)]
    one_per_pass = run_json([*args, "--strategy", "schedule"])["forward_passes"]
    scheduled = run_json(args, env={"DCODE_STRATEGY": "schedule", "DCODE_STEPS": "4"})
    assert stable(scheduled) == stable(run_json([*args, "--strategy", "schedule", "--steps", "4"]))
    assert scheduled["forward_passes"] < one_per_pass
    eb = {"DCODE_STRATEGY": "entropy-bound"}
    tight = run_json(args, env=eb)["forward_passes"]
    loose = run_json(args, env=eb | {"DCODE_ENTROPY_BOUND": "1e9"})["forward_passes"]
    assert loose < tight  # an unbounded budget fills each attention block in one pass


def test_a_rules_own_option_alone_picks_the_rule(tiny_checkpoint: Path) -> None:
    args = [PROMPT, *SHORT, "--model", str(tiny_checkpoint)]
    assert stable(run_json([*args, "--steps", "4"])) == stable(
        run_json([*args, "--strategy", "schedule", "--steps", "4"])
    )
    loose = run_json([*args, "--entropy-bound", "1e9"])
    assert stable(loose) == stable(run_json([*args, "--strategy", "entropy-bound", "--entropy-bound", "1e9"]))
    # two rules' options and no --strategy: the default rule (threshold), as before
    both = run_json([*args, "--entropy-bound", "1e9", "--steps", "4"])
    assert stable(both) == stable(run_json([*args, "--strategy", "threshold"]))


def test_repetition_penalty_option_and_env(tiny_checkpoint: Path) -> None:
    args = [PROMPT, *SHORT, "--model", str(tiny_checkpoint)]
    penalized = stable(run_json([*args, "--repetition-penalty", "1e6"]))
    assert penalized == stable(run_json(args, env={"DCODE_REPETITION_PENALTY": "1e6"}))
    assert penalized != stable(run_json(args))  # the random checkpoint repeats itself


def test_hold_conflicts_option_and_env(tiny_checkpoint: Path) -> None:
    args = [PROMPT, *SHORT, "--model", str(tiny_checkpoint), "--threshold", "0.01", "--no-repair"]
    free = stable(run_json([*args, "--no-hold-conflicts"]))
    assert free == stable(run_json(args, env={"DCODE_HOLD_CONFLICTS": "0"}))
    # The random checkpoint's passes write neighbours alike: held back, they take more passes.
    assert stable(run_json(args))["forward_passes"] > free["forward_passes"]


def test_env_order_lang_cache_and_device(tiny_checkpoint: Path) -> None:
    args = [PROMPT, *SHORT, "--model", str(tiny_checkpoint)]
    assert run_json(args, env={"DCODE_LANG": "rs"})["language"] == "rust"
    cached = run_json(args)
    assert stable(run_json(args, env={"DCODE_CACHE": "0"})) == stable(cached)
    assert stable(run_json(args, env={"DCODE_DEVICE": "cpu"})) == stable(cached)
    assert stable(run_json(args, env={"DCODE_ORDER": "random", "DCODE_STRATEGY": "schedule"})) != stable(
        run_json([*args, "--strategy", "schedule"])
    )


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"DCODE_STRATEGY": "fastest"}, f"unknown strategy 'fastest' (choose from {RULE_NAMES})"),
        ({"DCODE_ORDER": "best"}, "unknown ordering 'best' (choose from confidence, margin, entropy, random)"),
        ({"DCODE_THRESHOLD": "1.5"}, "threshold must be in (0, 1]"),
        ({"DCODE_TEMPERATURE": "-1"}, "temperature must be a finite number >= 0"),
        ({"DCODE_TOP_P": "0"}, "top_p must be in (0, 1]"),
        ({"DCODE_REPETITION_PENALTY": "0.5"}, "repetition penalty must be a finite number >= 1"),
        ({"DCODE_STEPS": "0"}, "steps must be at least 1"),
        ({"DCODE_BLOCK": "0"}, "block must be at least 1"),
        ({"DCODE_APPROX_CACHE": "both"}, "unknown approximate cache 'both' (choose from dual, prefix, off)"),
        ({"DCODE_LENGTH": "0"}, "DCODE_LENGTH must be at least 1 token"),  # the variable that set it
        ({"DCODE_LANG": "cobol"}, f"unknown language 'cobol'; supported: {', '.join(LANGUAGES)}"),
        ({"DCODE_DEVICE": "tpu"}, "unknown --device 'tpu' (choose from auto, cpu, cuda, mps)"),
    ],
)
def test_bad_env_values_are_one_line_usage_errors(env: dict[str, str], message: str) -> None:
    assert_error(dcode_new([PROMPT], env=env), 2, message)


# ---------------------------------------------------------------------------------------------
# Strategies, orderings, cache


@pytest.mark.parametrize("order", ORDERINGS)
@pytest.mark.parametrize("strategy", RULES)
def test_every_strategy_and_ordering_runs(strategy: str, order: str) -> None:
    report = run_json([PROMPT, *SHORT, "--strategy", strategy, "--order", order])
    assert_consistent(report, 16)


def test_random_ordering_is_deterministic_per_seed(tiny_checkpoint: Path) -> None:
    args = [PROMPT, *SHORT, "--model", str(tiny_checkpoint), "--order", "random", "--strategy", "schedule"]
    assert stable(run_json([*args, "--seed", "5"])) == stable(run_json([*args, "--seed", "5"]))


def test_schedule_steps_bound_the_forward_passes() -> None:
    report = run_json([PROMPT, *SHORT, "--strategy", "schedule", "--steps", "4"])
    assert_consistent(report, 16)
    assert report["forward_passes"] <= 16
    # the 4 passes are shared among the attention blocks the answer spans (a pass or so each)
    assert report["forward_passes"] <= 4 + embedded_blocks(report["prompt_tokens"], 16)


def test_drafts_change_the_passes_not_the_code(tiny_checkpoint: Path) -> None:
    default = run_json([PROMPT, *SHORT])  # dcode-tiny decodes with the verify rule
    one_by_one = run_json([PROMPT, *SHORT], env={"DCODE_DRAFT": "0"})
    assert one_by_one["code"] == default["code"]
    assert one_by_one["forward_passes"] > default["forward_passes"]
    # On a model whose default rule is another, --draft alone picks the verify rule.
    tiny = [PROMPT, *SHORT, "--model", str(tiny_checkpoint), "--seed", "3"]
    left_to_right = run_json([*tiny, "--strategy", "verify", "--draft", "0"])
    assert run_json([*tiny, "--draft", "4"])["code"] == left_to_right["code"]


@pytest.mark.parametrize("model", ["embedded", "tiny"])
def test_no_cache_gives_the_same_code(model: str, tiny_checkpoint: Path) -> None:
    args = [PROMPT, "--length", "32"] + (["--model", str(tiny_checkpoint)] if model == "tiny" else [])
    cached = run_json(args)
    uncached = run_json([*args, "--no-cache"])
    assert stable(uncached) == stable(cached)


# ---------------------------------------------------------------------------------------------
# Bad input: one line on stderr, the right exit code, no file


BAD_INPUTS = [  # (args, stdin, exit code, message); {m}: a folder of broken models
    ([""], None, 2, "the prompt is empty"),
    (["  \n\t "], None, 2, "the prompt is empty"),
    (["-"], "   \n", 2, "the prompt is empty"),
    ([], "", 2, "the prompt is empty"),
    (["-"], b"\xff\xfe", 2, "stdin is not UTF-8 text (bad byte at offset 0)"),
    ([], b"ok \xff", 2, "stdin is not UTF-8 text (bad byte at offset 3)"),
    (["--strategy", "greedy"], None, 2, f"unknown strategy 'greedy' (choose from {RULE_NAMES})"),
    (["--order", "left"], None, 2, "unknown ordering 'left' (choose from confidence, margin, entropy, random)"),
    (["--approx-cache", "on"], None, 2, "unknown approximate cache 'on' (choose from dual, prefix, off)"),
    (["--length", "0"], None, 2, "--length must be at least 1 token"),
    (["--length", "-3"], None, 2, "--length must be at least 1 token"),
    (["--model", "{m}/no-such-model"], None, 2, "model folder not found: {m}/no-such-model"),
    (["--model", "{m}/empty"], None, 2, "{m}/empty is not a model folder: no config.json"),
    (["--model", "{m}/w.bin"], None, 2, "--model must be a folder holding config.json, got a file: {m}/w.bin"),
    (
        ["--model", "{m}/llama"],
        None,
        2,
        "{m}/llama: unsupported model_type 'llama' "
        "(supported: a2d, coda, diffusion_gemma, dream, fast_dllm_v2, illada, llada, llada2, qwen2, sdar, "
        "stable_diffcoder, wedlm)",
    ),
    (["--model", "{m}/bare"], None, 2, "{m}/bare has no .safetensors weights (pickle weights are not loaded)"),
    (["--threshold", "0"], None, 2, "threshold must be in (0, 1]"),
    (["--threshold", "1.5"], None, 2, "threshold must be in (0, 1]"),
    (["--temperature", "-0.5"], None, 2, "temperature must be a finite number >= 0"),
    (["--top-p", "0"], None, 2, "top_p must be in (0, 1]"),
    (["--top-p", "1.5"], None, 2, "top_p must be in (0, 1]"),
    (["--steps", "0"], None, 2, "steps must be at least 1"),
    (["--block", "0"], None, 2, "block must be at least 1"),
    (["--device", "tpu"], None, 2, "unknown --device 'tpu' (choose from auto, cpu, cuda, mps)"),
]  # fmt: skip


@pytest.fixture
def broken_models(tmp_path: Path) -> Path:
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "empty").mkdir()
    (folder / "w.bin").write_bytes(b"\0")
    (folder / "llama").mkdir()
    (folder / "llama" / "config.json").write_text('{"model_type": "llama"}')
    (folder / "bare").mkdir()
    (folder / "bare" / "config.json").write_text('{"model_type": "qwen2", "vocab_size": 10}')
    return folder


@pytest.mark.parametrize(("args", "stdin", "code", "message"), BAD_INPUTS)
def test_bad_input_is_one_line_and_touches_no_file(
    args: list[str], stdin: str | bytes | None, code: int, message: str, broken_models: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    prompt = [] if stdin is not None or args[:1] in ([""], ["  \n\t "]) else [PROMPT]
    args = [a.format(m=broken_models) for a in args]
    result = dcode_new([*prompt, *args, "-o", str(out / "x.py")], input=stdin)
    assert_error(result, code, message.format(m=broken_models))
    assert list(out.iterdir()) == []


def test_invalid_json_config_is_one_line(tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    result = dcode_new([PROMPT, *SHORT, "--model", str(broken)])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.strip().count("\n") == 0
    assert result.stderr.startswith(f"dcode: error: {broken / 'config.json'} is not valid JSON: ")


def test_length_beyond_the_context_is_one_line() -> None:
    result = dcode_new([PROMPT, "--length", "100000"])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.strip().count("\n") == 0
    found = re.fullmatch(
        r"dcode: error: --length 100000 plus the (\d+)-token prompt exceeds the model's context of "
        r"(\d+) tokens \(at most (\d+) fit\)\n",
        result.stderr,
    )
    assert found is not None, result.stderr
    prompt_tokens, context, fit = map(int, found.groups())
    assert context == json.loads((EMBEDDED / "config.json").read_text())["max_position_embeddings"]
    assert fit == context - prompt_tokens
    assert prompt_tokens == run_json([PROMPT, *SHORT])["prompt_tokens"]


def test_the_longest_length_that_fits_is_accepted(tiny_checkpoint: Path) -> None:
    args = [PROMPT, "--model", str(tiny_checkpoint), "--strategy", "schedule", "--steps", "4", "--no-repair"]
    result = dcode_new([*args, "--length", "100000"])
    fit = int(re.search(r"at most (\d+) fit", result.stderr).group(1))
    assert_consistent(run_json([*args, "--length", str(fit)]), fit)
    result = dcode_new([*args, "--length", str(fit + 1)])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"dcode: error: --length {fit + 1} plus the ")
    assert result.stderr.endswith(f"(at most {fit} fit)\n")


def test_unknown_option_is_a_usage_error() -> None:
    result = dcode_new([PROMPT, "--xyzzy"])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == "dcode: error: No such option: --xyzzy\n"
    near = dcode_new([PROMPT, "--round", "2"])  # click names the options it may mean, on the same line
    assert (near.exit_code, near.stderr) == (
        2,
        "dcode: error: No such option: --round (Possible options: --entropy-bound, --repair-rounds, --rounds)\n",
    )


@pytest.mark.parametrize(
    ("args", "env"),
    [
        ([PROMPT, "--bogus"], None),
        ([PROMPT], {"DCODE_LENGTH": "many"}),
        ([PROMPT, "--repair-rounds", "-1"], None),
        ([PROMPT, "--repair-tries", "0"], None),
        ([PROMPT, "--draft", "-1"], None),
    ],
)
def test_click_usage_errors_are_one_line(args: list[str], env: dict[str, str] | None) -> None:
    result = dcode_new(args, env=env)
    assert result.exit_code == 2
    assert result.stderr.strip().count("\n") == 0
    assert result.stderr.startswith("dcode: error: ")


def test_seed_out_of_range_is_one_line(tmp_path: Path) -> None:
    result = dcode_new([PROMPT, *SHORT, "--seed", str(2**64), "-o", str(tmp_path / "x.py")])
    assert list(tmp_path.iterdir()) == []
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.exit_code == 2
    assert result.stderr.startswith("dcode: error: ") and result.stderr.count("\n") == 1


def test_nan_temperature_is_rejected() -> None:
    result = dcode_new([PROMPT, *SHORT, "--temperature", "nan"])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith("dcode: error: ") and result.stderr.count("\n") == 1


# ---------------------------------------------------------------------------------------------
# stderr: one plain summary line, or nothing


def test_default_stderr_is_one_summary_line_and_quiet_is_silent() -> None:
    result = dcode_new([PROMPT, *SHORT])
    assert_generated(result, result.stdout, quiet=False)  # summary (+ warning if errors remain)
    assert result.stderr.startswith("dcode: ")
    found = SUMMARY.fullmatch(result.stderr.splitlines(keepends=True)[0])
    assert found.group(6) == f"dcode-tiny in {cpu_dtype()}"
    assert int(found.group(1)) <= 16
    quiet = dcode_new([PROMPT, *SHORT, "-q"])
    assert quiet.stdout == result.stdout
    assert_generated(quiet, quiet.stdout, quiet=True)
    if quiet.exit_code == 0:
        assert quiet.stderr == ""


@pytest.mark.parametrize(
    "args",
    [
        [PROMPT, *SHORT],
        [PROMPT, *SHORT, "--json"],
        [PROMPT, *SHORT, "--live"],  # asked for, but stderr is not a terminal
        [PROMPT, *SHORT, "--strategy", "nope"],
        [PROMPT, "--bogus"],
        ["--help"],
    ],
)
def test_no_escape_codes_even_on_a_colour_terminal(args: list[str]) -> None:
    env = {"NO_COLOR": None, "TERM": "xterm-256color", "COLORTERM": "truecolor"}
    result = dcode_new(args, env=env)
    assert result.exit_code in (0, 2, 3), (result.exit_code, result.exception)
    assert result.stdout or result.stderr
    assert "\x1b" not in result.stdout
    assert "\x1b" not in result.stderr


# ---------------------------------------------------------------------------------------------
# Ctrl-C


def interrupt_after_first_step(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Make the sampler raise KeyboardInterrupt after its first step; returns a step counter."""
    real = sampler.denoise
    steps: list[int] = []

    def interrupted(*args, **kwargs):
        for step in real(*args, **kwargs):
            steps.append(step.forward)
            yield step
            raise KeyboardInterrupt

    monkeypatch.setattr(sampler, "denoise", interrupted)
    monkeypatch.setattr(localfill, "denoise", interrupted)
    return steps


def test_ctrl_c_exits_130_and_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    steps = interrupt_after_first_step(monkeypatch)
    target = tmp_path / "x.py"
    result = dcode_new([PROMPT, *SHORT, "-o", str(target)])
    assert result.exit_code == 130, (result.exit_code, result.stderr, result.exception)
    assert steps == [1]
    assert result.stdout == ""
    assert result.stderr == "dcode: interrupted\n"
    assert not target.exists()
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_with_force_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    steps = interrupt_after_first_step(monkeypatch)
    target = tmp_path / "x.py"
    target.write_text("old\n")
    result = dcode_new([PROMPT, *SHORT, "-o", str(target), "--force", "--json"])
    assert result.exit_code == 130
    assert steps == [1]
    assert result.stdout == ""
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["x.py"]


# ---------------------------------------------------------------------------------------------
# End to end at the default length


@pytest.mark.slow
def test_end_to_end_default_length_with_the_shipped_model(tmp_path: Path) -> None:
    target = tmp_path / "merge.py"
    result = dcode_new(["a function that merges two sorted lists", "-o", str(target), "--json"])
    report = json.loads(result.stdout)
    assert_generated(result, report["code"], where=str(target), quiet=False)
    assert_consistent(report, 256)
    assert report["model"] == "dcode-tiny"
    assert report["path"] == str(target)
    assert target.read_text(encoding="utf-8") == report["code"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["merge.py"]


# ---------------------------------------------------------------------------------------------
# Options: declared once in dcode.options, built into every command, listed in the README


def readme_option_rows() -> dict[str, tuple[str, str]]:
    """The README's option table: flag cell -> (env var cell, default cell)."""
    text = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
    table = text.split("| option | env var | default | meaning |\n|---|---|---|---|\n", 1)[1].split("\n\n", 1)[0]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in table.splitlines()]
    return {flag: (env, default) for flag, env, default, *_ in rows}


def test_the_readme_option_table_matches_the_declarations() -> None:
    from dcode.options import ALL

    rows = readme_option_rows()
    assert "`--threshold`" in rows and len(rows) >= len(ALL)  # the table was found and read
    for option in ALL:
        flag = option.cell
        assert flag in rows, f"README has no row for {flag}"
        env, default = rows[flag]
        assert env == (f"`{option.env}`" if option.env else ""), flag
        assert default.startswith(option.shown_default), (flag, default, option.shown_default)


@pytest.mark.parametrize("command", ["new", "edit", "repair"])
def test_commands_build_their_options_from_the_declarations(command: str) -> None:
    """Each declared option a command takes has the declared flag, env var, help and default."""
    import typer.main

    from dcode.options import EDIT, NEW, REPAIR_FILE, REPAIR_TRIES_OPTION, SAMPLER

    params = {p.name: p for p in typer.main.get_command(app).commands[command].params}  # type: ignore[attr-defined]
    declared = {"new": NEW, "edit": EDIT, "repair": REPAIR_FILE}[command]
    assert {"output", "force", "lang", "as_json", "endpoint", "endpoint_key", "stream_mode", "timeout"} <= set(params)
    assert len(declared) >= 8 and ("threshold" in params) == (command != "repair")
    for option in declared:
        param = params[option.name]
        flags = [*param.opts, *param.secondary_opts]
        assert "/".join(f for f in flags if f.startswith("--")) == option.flag
        assert (param.envvar, param.help) == (option.env, option.help)
        if option.name != "repair_tries":  # `dcode repair` tries harder; see below
            assert param.default == option.default
    if command == "repair":
        rounds = next(o for o in declared if o.name == "repair_rounds")
        assert params["repair_tries"].default == 4 and rounds.min == 1  # checked by dcode.cli.resolve
    else:
        assert params["repair_tries"].default == REPAIR_TRIES_OPTION.default
    for option in SAMPLER:  # a sampler option's default is SamplerConfig's own
        assert option.field is not None
        assert option.default == getattr(SamplerConfig(), option.field)


@pytest.mark.parametrize("command", ["fix", "log"])
def test_fix_and_log_build_their_options_from_the_declarations(command: str) -> None:
    import typer.main

    from dcode.options import FIX, LOG_LIST

    params = {p.name: p for p in typer.main.get_command(app).commands[command].params}  # type: ignore[attr-defined]
    declared = {"fix": FIX, "log": LOG_LIST}[command]
    assert {"fix": {"test", "rounds", "test_timeout", "log", "endpoint_key"}, "log": {"count"}}[command] <= set(params)
    for option in declared:
        param = params[option.name]
        flags = [*param.opts, *param.secondary_opts]
        assert "/".join(f for f in flags if f.startswith("--")) == option.flag
        assert (param.envvar, param.help, param.default) == (option.env, option.help, option.default)


def test_every_flag_is_declared_once_and_no_secret_is_recorded() -> None:
    """Each option of every command comes from dcode.options (one declaration a flag, variants by
    `replace`), and the history records only what the table marks recorded: never a secret."""
    import dataclasses

    import typer.main

    from dcode import options

    tables = [
        v if isinstance(v, tuple) else (v,) for v in vars(options).values() if isinstance(v, tuple | options.Option)
    ]
    declared = {o.flag.split("/")[0] for table in tables for o in table if isinstance(o, options.Option)}
    group = typer.main.get_command(app)
    commands = [*group.commands.values()]  # type: ignore[attr-defined]
    commands += [c for g in list(commands) for c in getattr(g, "commands", {}).values()]
    flags = {
        o for c in commands for p in c.params if p.param_type_name == "option" for o in p.opts if o.startswith("--")
    }
    assert flags - {"--help"} <= declared and "--dtype" in {
        o for p in group.commands["bench"].commands["speed"].params for o in p.opts
    }  # type: ignore[attr-defined]
    assert not any(o.recorded for o in (options.ENDPOINT_KEY, *options.SERVING) if o.secret)
    with pytest.raises(ValueError, match="a secret option cannot be recorded"):
        dataclasses.replace(options.ENDPOINT_KEY, recorded=True)


def test_sampler_settings_by_option_name() -> None:
    from dcode.options import fields_set_by, sampler_settings

    config = sampler_settings({"strategy": "schedule", "steps": 8, "order": "margin", "top_p": 0.5, "port": 1})
    assert config == SamplerConfig(rule="schedule", steps=8, ordering="margin", top_p=0.5)
    assert fields_set_by(["strategy", "seed", "port"]) == {"rule", "seed"}
    with pytest.raises(ValueError, match="unknown strategy"):
        sampler_settings({"strategy": "fastest"})


def test_effort_picks_the_familys_decoding_and_sampler_options_still_win() -> None:
    """dcode-tiny (the embedded model): low is the entropy bound 0.6, medium and high its default,
    the verify rule (its facts; docs/dcode-tiny.md)."""
    args = [PROMPT, *SHORT, "--no-repair"]
    low = stable(run_json([*args, "--effort", "low"]))
    assert low == stable(run_json([*args, "--strategy", "entropy-bound", "--entropy-bound", "0.6"]))
    assert low == stable(run_json(args, env={"DCODE_EFFORT": "low"}))
    default = stable(run_json(args))
    assert low["forward_passes"] != default["forward_passes"]
    assert stable(run_json([*args, "--effort", "high"])) == default == stable(run_json([*args, "--effort", "medium"]))
    assert stable(run_json([*args, "--effort", "low", "--strategy", "verify"])) == default  # the option wins


def test_unknown_effort_is_a_usage_error() -> None:
    assert_error(dcode_new([PROMPT, "--effort", "max"]), 2, "--effort must be one of low, medium, high, not 'max'")
    result = dcode_new([PROMPT], env={"DCODE_EFFORT": "fast"})
    assert_error(result, 2, "DCODE_EFFORT must be one of low, medium, high, not 'fast'")


def test_edit_threshold_rewrites_tokens_and_json_counts_them(tiny_checkpoint: Path) -> None:
    args = [PROMPT, *SHORT, "--model", str(tiny_checkpoint), "--threshold", "0.05", "--no-repair"]
    plain = run_json(args)
    edited = run_json([*args, "--edit-threshold", "0.0"])
    assert plain["edits"] == 0 and edited["edits"] > 0
    assert edited["forward_passes"] > plain["forward_passes"]  # a filled block takes passes while they edit
    assert stable(run_json(args, env={"DCODE_EDIT_THRESHOLD": "0"})) == stable(edited)
