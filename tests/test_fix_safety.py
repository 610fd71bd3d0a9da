"""`dcode fix` as an unlucky user meets it (issue 37): another editor saving during a run, two
runs on one file, fills that drop code, read-only files in a folder, keys in failure output, test
commands that leave children behind or remove files, hostile escape sequences, odd numbers and a
history from a newer dcode. The concurrency cases run real `dcode fix` processes, their fill a named
scripted fake (FILL below); the others drive the loop or the command with test_fix's ScriptedFill."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_fix import ADD, CALC, DIFF, ScriptedFill, fix, invoke, names
from typer.testing import CliRunner

from dcode import fixfiles, fixloop, history
from dcode.cli import app
from dcode.failures import Failure, printable
from dcode.fixloop import Fixed, Skipped

ROOT = Path(__file__).resolve().parents[1]

# A real `dcode fix calc.py --test CMD --no-log --rounds 1` whose fill (a scripted fake) marks round 1.
FILL = """
import sys
import dcode.cli.fixing as fixing

def marked(path, source, region, instruction):
    return source.replace("return a + b + 1", "return a + b  # round 1")

fixing.regenerator = lambda run, **_: (marked, fixing.Fills(model="scripted"))
from dcode.cli import main
sys.argv = ["dcode", "fix", "calc.py", "--test", sys.argv[1], "--no-log", "--rounds", "1"]
main()
"""

# The test command: one error before round 1; round 1's text marks `started`, waits 2 s, then
# reports (`worse`: two errors, so the round is undone; `pass`: passes).
RUNNER = """
import sys, time
from pathlib import Path
if "round 1" in Path("calc.py").read_text():
    Path("started").write_text("yes")
    time.sleep(2)
    if sys.argv[1] == "pass":
        sys.exit(0)
    print("calc.py:2: error: one\\ncalc.py:1: error: two")
    sys.exit(1)
print("calc.py:2: error: one")
sys.exit(1)
"""


def start_fix(project: Path, outcome: str) -> subprocess.Popen[str]:
    (project / "runner.py").write_text(RUNNER)
    command = f"{sys.executable} runner.py {outcome}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = [sys.executable, "-c", FILL, command]
    return subprocess.Popen(args, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(path: Path, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 20
    while not path.exists() and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.02)
    assert path.exists(), process.communicate()[1]


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    (tmp_path / "calc.py").write_text(CALC)
    return tmp_path


HELPER = "\n\ndef helper():\n    return 42\n"


def test_another_editors_save_during_a_run_is_never_lost(project: Path) -> None:
    """Item 1: while round 1's tests run, the user saves a new function; the round is worse and
    would be undone: the file stays as the user left it, its backup kept, one line says so."""
    process = start_fix(project, "worse")
    try:
        wait_for(project / "started", process)
        time.sleep(0.3)
        with (project / "calc.py").open("a") as editor:
            editor.write(HELPER)
        _, stderr = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 4, stderr
    assert (project / "calc.py").read_text() == CALC.replace("a + b + 1", "a + b  # round 1") + HELPER
    assert (project / "calc.py.orig").read_text() == CALC
    warning = "dcode: warning: calc.py was changed by someone else during the run; left as they left it"
    assert f"{warning} (backup calc.py.orig)\n" in stderr
    assert "files unchanged" not in stderr.splitlines()[-1]
    assert "left as someone else left it: calc.py" in stderr.splitlines()[-1]


def test_a_second_fix_of_the_same_file_is_refused_while_the_first_runs(project: Path) -> None:
    """Item 2: run A holds calc.py; run B, started meanwhile, refuses at once in one line (exit
    1) and writes nothing; A ends as it says."""
    first = start_fix(project, "pass")
    try:
        wait_for(project / "started", first)
        second = start_fix(project, "worse")
        _, refused = second.communicate(timeout=20)
        _, stderr = first.communicate(timeout=30)
    finally:
        first.kill()
    assert second.returncode == 1 and refused.startswith("dcode: error: calc.py: another dcode fix (pid ")
    assert refused.endswith(" is changing it; run this one when it ends\n") and refused.count("\n") == 1
    assert first.returncode == 0, stderr
    assert (project / "calc.py").read_text() == CALC.replace("a + b + 1", "a + b  # round 1")


def diagnostic(message: str, line: int = 2) -> str:
    """A test command that prints one compiler-style error about calc.py and fails."""
    return f"{sys.executable} -c \"print('calc.py:{line}: error: {message}'); raise SystemExit(1)\""


def test_a_folders_file_locked_by_another_fix_is_skipped(project: Path, tmp_path_factory) -> None:
    locks = tmp_path_factory.mktemp("locks")
    held = fixfiles.lock(project / "calc.py", locks)
    try:
        fill = ScriptedFill(add=ADD)
        events = fix(["."], fill, command=diagnostic("bad"), rounds=1, locks=locks)
    finally:
        os.close(held)
    (skipped,) = [e for e in events if isinstance(e, Skipped)]
    assert skipped.reason == "another dcode fix is changing it" and fill.calls == []
    assert (project / "calc.py").read_text() == CALC and names(project) == ["calc.py"]


def test_a_fill_that_drops_a_function_no_test_asks_for_is_refused(project: Path) -> None:
    """Item 3: the region (lines around a module-level line) holds `helper`; the fill fixes the
    failing line and leaves `helper` out: refused, the file as it was."""
    source = "RATE = 3\n\n\ndef helper():\n    return 42\n"
    (project / "calc.py").write_text(source)

    def fill(path: Path, text: str, region: tuple[int, int], asked: str) -> str:
        return text.encode()[: region[0]].decode() + "RATE = 2\n" + text.encode()[region[1] :].decode()

    events = list(fixloop.fix(fixloop.Targets.of([Path("calc.py")], project), settings(1), fill))
    (skipped,) = [e for e in events if isinstance(e, Skipped)]
    assert skipped.reason == "the fill deletes helper, which no failing test asks for"
    done = events[-1]
    assert isinstance(done, Fixed) and done.exit_code == 4
    assert (project / "calc.py").read_text() == source and names(project) == ["calc.py"]


def settings(rounds: int, message: str = "bad", line: int = 1) -> fixloop.Settings:
    return fixloop.Settings(diagnostic(message, line), rounds)


def test_deleting_what_a_test_asks_for_is_a_test_matter() -> None:
    failure = Failure((), "assert old_api() == 1")
    assert fixloop.deletes("def old_api():\n    return 1\n", "x = 1\n", (failure,)) is None
    assert (
        fixloop.deletes("def f():\n    return 1\n", "# nothing\n", ())
        == "the fill deletes f, which no failing test asks for"
    )
    assert fixloop.deletes("x = 1\ny = 2\n", "\n", ()) == "the fill deletes the region's code"


def test_a_read_only_file_in_a_named_folder_is_skipped_as_when_named(project: Path) -> None:
    """Item 4: `dcode fix .` with calc.py at 444: skipped before any fill, not replaced, no backup."""
    (project / "calc.py").chmod(0o444)
    fill = ScriptedFill(add=ADD)
    events = fix(["."], fill, command=diagnostic("bad"), rounds=1)
    (skipped,) = [e for e in events if isinstance(e, Skipped)]
    assert skipped.reason == "read-only; dcode does not replace it" and fill.calls == []
    assert (project / "calc.py").read_text() == CALC and names(project) == ["calc.py"]
    assert (project / "calc.py").stat().st_mode & 0o777 == 0o444


KEY = "sk-live-7f3a9c21e5"


def test_the_endpoint_key_never_reaches_the_fill_the_terminal_or_the_history(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 5: a failing test prints the key (a config dump): the instruction sent, stderr and the
    history hold [redacted] instead."""
    (project / "runner.py").write_text(
        f'import calc, sys\nif calc.add(1, 2) != 3:\n    print(\'calc.py:2: error: config {{"key": "{KEY}"}}\')\n'
        "    sys.exit(1)\n"
    )
    fill = ScriptedFill(add=ADD)
    db = tmp_path / "logs.db"
    env = {"DCODE_ENDPOINT_KEY": KEY, "DCODE_LOG": "1", "DCODE_LOG_PATH": str(db)}
    result = invoke(["calc.py", "--test", f"{sys.executable} runner.py"], fill, monkeypatch, env)
    assert result.exit_code == 0, result.stderr
    ((_, _, asked),) = fill.calls
    assert KEY not in asked and 'config {"key": "[redacted]"}' in asked
    assert KEY not in result.stderr and "[redacted]" in result.stderr
    assert KEY.encode() not in db.read_bytes()
    (record,) = history.latest(db)
    assert record.prompt is not None and "[redacted]" in record.prompt


def test_redact_is_the_one_way_keys_leave_text() -> None:
    assert history.redact(f"a {KEY} b {KEY}", [KEY, None, "", "ab"]) == "a [redacted] b [redacted]"


def test_a_detached_child_does_not_hold_the_run_past_its_shell(project: Path) -> None:
    """Item 6: the command exits 1 at once, leaving a child in its own session on the output: the
    run takes the command's time, and the verdict is the shell's exit code."""
    command = f"{sys.executable} -c 'import os, time; os.setsid(); time.sleep(20)' & exit 1"
    began = time.monotonic()
    run = fixloop.run_command(command, 6.0)
    assert time.monotonic() - began < 4
    assert (run.exit_code, run.timed_out, run.verdict) == (1, False, "exit 1, 1 error")


def test_a_timeout_ends_the_run_at_the_timeout_with_a_detached_child_too(project: Path) -> None:
    command = f"{sys.executable} -c 'import os, time; os.setsid(); time.sleep(20)' & sleep 20"
    began = time.monotonic()
    run = fixloop.run_command(command, 1.0)
    assert time.monotonic() - began < 4 and run.timed_out and run.verdict == "timed out after 1 s"


def test_json_reports_a_file_the_test_command_removed(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Item 7: the command removes calc.py once it passes; --json still reports, its diff from
    memory, and says the file was left as the command left it."""
    (project / "runner.py").write_text(
        "import calc, os, sys\nif calc.add(1, 2) != 3:\n    print('calc.py:2: error: off by one')\n    sys.exit(1)\n"
        "os.remove('calc.py')\n"
    )
    result = invoke(
        ["calc.py", "--test", f"{sys.executable} runner.py", "--json", "-q"], ScriptedFill(add=ADD), monkeypatch
    )
    report = json.loads(result.stdout)
    assert report["diff"] == DIFF and report["left"] == ["calc.py"] and report["passes"] is True
    assert result.exit_code == report["exit_code"] == 4
    assert result.stderr == (
        "dcode: warning: calc.py was changed by someone else during the run; left as they left it "
        "(backup calc.py.orig)\n"
    )


def test_escape_sequences_in_the_output_never_reach_the_terminal(project: Path, monkeypatch) -> None:
    """Item 8: an OSC window title, a clear-screen and colours in a failure message."""
    hostile = r"\x1b]0;pwned\x07bad \x1b[2J\x1b[31mred\x1b[0m"
    command = f"{sys.executable} -c \"print('calc.py:2: error: {hostile}'); raise SystemExit(1)\""
    result = invoke(["calc.py", "--test", command, "--rounds", "0"], ScriptedFill(), monkeypatch)
    assert result.exit_code == 4
    assert "\x1b" not in result.stderr and "\x07" not in result.stderr
    assert "dcode:   calc.py:2: error: bad red\n" in result.stderr


def test_printable_keeps_text_and_drops_control() -> None:
    assert printable("\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\ \x9b31mc\x08\ttab\n") == "link c\ttab\n"


# ---------------------------------------------------------------------------------------------
# Item 9: odd numbers and a newer history


def dcode(*args: str, env: dict[str, str]):
    return CliRunner().invoke(app, list(args), env=env, prog_name="dcode")


def test_a_history_from_a_newer_dcode_with_an_extra_column_is_read(tmp_path: Path) -> None:
    db = tmp_path / "logs.db"
    history.record(db, history.Entry("edit", prompt="p", answer="x = 1\n"))
    with sqlite3.connect(db) as connection:
        connection.execute("ALTER TABLE records ADD COLUMN cost REAL")
    env = {"DCODE_LOG_PATH": str(db)}
    listed, shown = dcode("log", env=env), dcode("log", "show", "1", env=env)
    assert (listed.exit_code, shown.exit_code, shown.stdout) == (0, 0, "x = 1\n"), listed.stderr
    assert listed.stdout.startswith("   1  ")


@pytest.mark.parametrize("args", [["log", "show", str(2**63)], ["log", "show", "--", str(-(2**64))]])
def test_an_id_beyond_sqlites_integers_is_no_record(tmp_path: Path, args: list[str]) -> None:
    db = tmp_path / "logs.db"
    history.record(db, history.Entry("edit"))
    result = dcode(*args, env={"DCODE_LOG_PATH": str(db)})
    assert (result.exit_code, result.stderr) == (2, f"dcode: error: no record {args[-1]} in the history ({db})\n")


def test_a_count_beyond_sqlites_integers_lists_everything(tmp_path: Path) -> None:
    db = tmp_path / "logs.db"
    history.record(db, history.Entry("edit"))
    result = dcode("log", "-n", str(10**30), env={"DCODE_LOG_PATH": str(db)})
    assert result.exit_code == 0 and len(result.stdout.splitlines()) == 1, result.stderr


@pytest.mark.parametrize("value", ["inf", "1e300", "nan"])
def test_a_test_timeout_no_clock_can_wait_is_a_usage_error(project: Path, value: str) -> None:
    result = dcode("fix", "calc.py", "--test", "true", "--test-timeout", value, env={"DCODE_LOG": "0"})
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert result.stderr.startswith("dcode: error: ") and "--test-timeout" in result.stderr


def test_a_corrupt_history_costs_one_warning_a_run(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (project / "logs.db").write_bytes(b"not a database" * 100)
    fill = ScriptedFill(add=["def add(a, b):\n    return a + b + 2\n", "def add(a, b):\n    return a + b + 3\n"])
    env = {"DCODE_LOG": "1", "DCODE_LOG_PATH": str(project / "logs.db")}
    result = invoke(["calc.py", "--test", diagnostic("bad"), "--rounds", "2"], fill, monkeypatch, env)
    assert result.exit_code == 4 and len(fill.calls) == 2, result.stderr
    assert result.stderr.count("dcode: warning: not recorded in the history") == 1
