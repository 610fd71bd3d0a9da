"""`dcode fix`: the loop driven end to end on small real projects in tmp_path, with real pytest
runs (and real gcc) as the test command, and a named scripted fake filler (ScriptedFill) in the
place of a model; one run with dcode-tiny through the command line, where only the file promises
are asserted (its answers are whatever the model gives)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dcode import fixloop, fixtargets
from dcode.cli import app, fixing
from dcode.failures import parse
from dcode.fixloop import Fixed, Settings, Targets, Workspace

PYTEST = f"{sys.executable} -m pytest -q -p no:cacheprovider"

CALC = """\
def add(a, b):
    return a + b + 1


def mean(xs):
    return sum(xs) / len(xs)
"""
TESTS = """\
from calc import add, mean


def test_add():
    assert add(1, 2) == 3


def test_mean():
    assert mean([1, 2, 3]) == 2
"""
ADD = "def add(a, b):\n    return a + b\n"
MEAN = "def mean(xs):\n    return sum(xs) / len(xs)\n"


class ScriptedFill:
    """A fake filler: the loop's `regenerate`, answering each region from a script keyed by the
    function's name (a list: one answer per call, the last repeated). Records every call."""

    def __init__(self, **script: str | list[str]) -> None:
        self.script = {name: answers if isinstance(answers, list) else [answers] for name, answers in script.items()}
        self.calls: list[tuple[str, str, str]] = []  # (file name, region text, instruction)

    def __call__(self, path: Path, source: str, region: tuple[int, int], instruction: str) -> str:
        data = source.encode()
        old = data[region[0] : region[1]].decode()
        name = re.search(r"(?:def|int|fn|function)\s+(\w+)", old)
        assert name is not None, old
        self.calls.append((path.name, old, instruction))
        answers = self.script[name[1]]
        answer = answers[min(len(self.calls_for(name[1])) - 1, len(answers) - 1)]
        return data[: region[0]].decode() + answer + data[region[1] :].decode()

    def calls_for(self, name: str) -> list[tuple[str, str, str]]:
        return [c for c in self.calls if re.search(rf"\b{name}\b", c[1])]


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")  # the test runs start in 1 s instead of 2.5
    (tmp_path / "calc.py").write_text(CALC)
    (tmp_path / "test_calc.py").write_text(TESTS)
    return tmp_path


def fix(paths: list[str], fill: ScriptedFill, command: str = PYTEST, rounds: int = 3, **extra) -> list[object]:
    """Drain the loop; returns its events."""
    targets = Targets.of([Path(p) for p in paths], Path.cwd())
    return list(fixloop.fix(targets, Settings(command, rounds, **extra), fill))


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name != "__pycache__")


def test_an_off_by_one_is_fixed_and_the_original_kept(project: Path) -> None:
    fill = ScriptedFill(add=ADD)
    events = fix(["calc.py"], fill)
    done = events[-1]
    assert isinstance(done, Fixed) and done.exit_code == 0 and done.rounds == 1
    assert (str(done.first.counts), str(done.best.counts)) == ("1 failed, 1 passed", "2 passed")
    assert (project / "calc.py").read_text() == CALC.replace("    return a + b + 1\n", "    return a + b\n")
    assert (project / "calc.py.orig").read_text() == CALC
    assert names(project) == ["calc.py", "calc.py.orig", "test_calc.py"]
    ((file, region, asked),) = fill.calls
    assert (file, region) == ("calc.py", "def add(a, b):\n    return a + b + 1\n")
    assert asked.startswith(f"Fix `add` so that `{PYTEST}` passes.\nThe test test_add fails: assert 4 == 3\n")
    assert ">       assert add(1, 2) == 3" in asked


def test_two_functions_failing_in_one_file_are_both_regenerated(project: Path) -> None:
    (project / "calc.py").write_text(CALC.replace("/ len(xs)", "/ (len(xs) - 1)"))
    fill = ScriptedFill(add=ADD, mean=MEAN)
    done = fix(["calc.py"], fill)[-1]
    assert isinstance(done, Fixed) and done.exit_code == 0 and done.rounds == 1
    assert sorted(f[1].split("(")[0] for f in fill.calls) == ["def add", "def mean"]
    assert (project / "calc.py").read_text() == ADD + "\n\n" + MEAN
    assert [len(r.before) > 0 for r in done.kept] == [True, True]


def test_a_failure_inside_a_test_file_is_never_edited(project: Path) -> None:
    """The bug is the test's own (an undefined helper): nothing dcode may change is to blame."""
    broken = TESTS + "\n\ndef test_helper():\n    assert helper(2) == 3\n"
    (project / "test_calc.py").write_text(broken)
    (project / "calc.py").write_text(CALC.replace(" + 1", ""))
    fill = ScriptedFill(add=ADD)
    done = fix(["."], fill)[-1]  # a folder: its test files are not the fix's to change
    assert isinstance(done, Fixed) and done.exit_code == 4 and done.rounds == 0
    assert done.note == "no failure points into the files dcode may change"
    assert fill.calls == []
    assert (project / "test_calc.py").read_text() == broken
    assert names(project) == ["calc.py", "test_calc.py"]


def test_a_fill_that_makes_things_worse_is_undone(project: Path) -> None:
    """Round 1's fill breaks the module (a failing test becomes a collection error): undone, and
    round 2 starts again from the original, told that the last attempt made it worse."""
    fill = ScriptedFill(add=["def add(a, b):\n    return (a +\n", ADD])
    events = fix(["calc.py"], fill)
    tested = [e for e in events if isinstance(e, fixloop.Tested)]
    assert [(t.round, t.judged, t.run.verdict) for t in tested] == [
        (0, "first", "1 failed, 1 passed"),
        (1, "worse", "1 error"),
        (2, "better", "2 passed"),
    ]
    assert fill.calls[1][1] == "def add(a, b):\n    return a + b + 1\n"  # the original, not round 1's
    assert "An earlier attempt made it worse (1 error)" in fill.calls[1][2]
    assert events[-1].exit_code == 0  # type: ignore[attr-defined]
    assert (project / "calc.py.orig").read_text() == CALC


def test_only_worse_fills_leave_the_files_as_they_were(project: Path) -> None:
    fill = ScriptedFill(add="def add(a, b):\n    return a - b\n")  # 3 -> -1: still failing, and test_mean fine
    (project / "test_calc.py").write_text(TESTS + "\n\ndef test_add_more():\n    assert add(2, 2) == 4\n")
    (project / "calc.py").write_text(CALC.replace(" + 1", " * 1 if a > 1 else a + b + 1"))
    before = (project / "calc.py").read_text()
    events = fix(["calc.py"], fill, rounds=3)
    done = events[-1]
    assert isinstance(done, Fixed) and done.exit_code == 4
    # round 2's fill is round 1's again: not run a second time, the loop stops there
    assert [e.judged for e in events if isinstance(e, fixloop.Tested)] == ["first", "worse"]
    assert (done.rounds, done.note) == (2, "the fills repeated a round already undone")
    assert (project / "calc.py").read_text() == before
    assert names(project) == ["calc.py", "test_calc.py"]  # back as it was: no backup left behind


def test_a_command_that_hangs_is_killed_and_the_files_are_intact(project: Path) -> None:
    fill = ScriptedFill(add=ADD)
    began = time.perf_counter()
    events = fix(["calc.py"], fill, command=f"{sys.executable} -c 'import time; time.sleep(60)' & wait", timeout=0.5)
    assert time.perf_counter() - began < 5
    first = events[0]
    assert isinstance(first, fixloop.Tested) and first.run.timed_out and first.run.verdict.startswith("timed out after")
    assert isinstance(events[-1], Fixed) and events[-1].exit_code == 4 and fill.calls == []
    assert (project / "calc.py").read_text() == CALC and names(project) == ["calc.py", "test_calc.py"]


def test_a_command_that_passes_from_the_start_calls_no_fill(project: Path) -> None:
    (project / "calc.py").write_text(ADD + "\n\n" + MEAN)
    fill = ScriptedFill()
    events = fix(["calc.py"], fill)
    assert [type(e) for e in events] == [fixloop.Tested, Fixed]
    assert events[-1].exit_code == 0 and events[-1].rounds == 0  # type: ignore[attr-defined]
    assert fill.calls == [] and names(project) == ["calc.py", "test_calc.py"]


@pytest.mark.skipif(shutil.which("gcc") is None, reason="no gcc")
def test_a_c_compiler_error_is_regenerated_in_its_function(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    broken = "int add(int a, int b) {\n    return a + b\n}\n\nint main(void) {\n    return add(1, 2) != 3;\n}\n"
    (tmp_path / "calc.c").write_text(broken)
    fill = ScriptedFill(add="int add(int a, int b) {\n    return a + b;\n}\n")
    done = fix(["calc.c"], fill, command="gcc calc.c -o calc && ./calc")[-1]
    assert isinstance(done, Fixed) and done.exit_code == 0, done.first.output
    assert done.first.verdict == "exit 1, 1 error"
    assert fill.calls[0][1] == "int add(int a, int b) {\n    return a + b\n}\n"
    assert (tmp_path / "calc.c").read_text() == broken.replace("a + b\n", "a + b;\n")


def test_a_recorded_tsc_error_becomes_the_function_around_it(tmp_path: Path) -> None:
    """tsc is not installed here: its output, recorded from tsc 5, is picked into a region."""
    source = "export function total(xs: number[]): number {\n  let sum: number = '0';\n  return sum;\n}\n"
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "app.ts").write_text(source)
    output = "src/app.ts(2,7): error TS2322: Type 'string' is not assignable to type 'number'.\n"
    targets = Targets.of([Path("src")], tmp_path)
    (picked,) = fixtargets.pick(tuple(parse(output)), targets, Workspace().read, 3)
    assert (picked.path, picked.symbol, picked.region) == (tmp_path / "src" / "app.ts", "total", (0, len(source)))
    asked = fixtargets.instruction(picked, "npx tsc --noEmit", 1200)
    assert asked == (
        "Fix `total` so that `npx tsc --noEmit` passes.\n"
        "It fails: error TS2322: Type 'string' is not assignable to type 'number'."
    )


def test_lines_around_when_no_function_encloses_the_line() -> None:
    source = "".join(f"x{i} = {i}\n" for i in range(1, 21))
    region, symbol = fixtargets.enclosing(source, "python", 10, 3)
    assert symbol is None and source.encode()[region[0] : region[1]].decode() == "".join(
        f"x{i} = {i}\n" for i in range(7, 14)
    )


def test_an_instruction_is_cut_to_its_budget() -> None:
    failure = parse(f"a.py:1: error: {'x' * 500}\n  context line\n")[0]
    target = fixtargets.Target(Path("a.py"), (0, 0), None, (failure,) * 3)
    assert len(fixtargets.instruction(target, "make", 200)) == 200
    assert fixtargets.instruction(target, "make", 200).endswith("...")


def test_an_interrupt_mid_round_restores_the_best_state(project: Path) -> None:
    """Round 1 fixes add (kept); round 2 writes mean, and Ctrl-C arrives while its tests run."""
    (project / "calc.py").write_text(CALC.replace("/ len(xs)", "/ (len(xs) - 1)"))
    fill = ScriptedFill(add=ADD, mean=["def mean(xs):\n    return 0\n"])
    runs = []

    def run(command: str, timeout: float, cwd: Path | None) -> fixloop.Run:
        runs.append(command)
        if len(runs) == 3:
            raise KeyboardInterrupt
        return fixloop.run_command(command, timeout, cwd)

    targets = Targets.of([Path("calc.py")], project)
    stream = fixloop.fix(targets, Settings(PYTEST, 3, most_regions=1), fill, run=run)
    with pytest.raises(KeyboardInterrupt):
        for _ in stream:
            pass
    best = CALC.replace("/ len(xs)", "/ (len(xs) - 1)").replace(" + 1\n", "\n")
    assert (project / "calc.py").read_text() == best  # round 1's result, not round 2's
    assert (project / "calc.py.orig").read_text() == CALC.replace("/ len(xs)", "/ (len(xs) - 1)")


def test_restore_puts_the_best_state_back(tmp_path: Path) -> None:
    path = tmp_path / "a.py"
    path.write_text("one\n")
    space = Workspace()
    space.write(path, "two\n")
    space.keep()
    space.write(path, "three\n")
    space.restore()
    assert path.read_text() == "two\n" and (tmp_path / "a.py.orig").read_text() == "one\n"
    space.write(path, "one\n")
    space.keep()
    space.drop_needless_backups()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.py"]


# ---------------------------------------------------------------------------------------------
# The command


def invoke(args: list[str], fill: ScriptedFill, monkeypatch: pytest.MonkeyPatch, env: dict[str, str] | None = None):
    scripted_regenerator(fill, monkeypatch)
    return CliRunner().invoke(app, ["fix", *args], env={"DCODE_LOG": "0", **(env or {})}, prog_name="dcode")


def scripted_regenerator(fill: ScriptedFill, monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The command's fill is `fill`; returns the fillers it was handed (`dcode new`'s, with --test)."""
    handed: list[object] = []

    def regenerator(run, length=None, ready=None):
        handed.append(ready)
        return fill, fixing.Fills(model="scripted")

    monkeypatch.setattr(fixing, "regenerator", regenerator)
    return handed


def test_the_command_fixes_prints_the_rounds_and_exits_0(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = invoke(["calc.py", "--test", PYTEST], ScriptedFill(add=ADD), monkeypatch)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ""
    lines = re.sub(r"\d+\.\d s", "T s", result.stderr).splitlines()
    assert lines == [
        f"dcode: fix: {PYTEST}: 1 failed, 1 passed (T s)",
        "dcode:   test_calc.py:5: test_add: assert 4 == 3",
        "dcode: round 1: regenerating calc.py: add (lines 1-2)",
        "dcode: round 1: 2 passed",
        "dcode: passes: 1 failed, 1 passed -> 2 passed in 1 round(s), T s; "
        "changed calc.py (backup calc.py.orig); scripted",
    ]


DIFF = """\
--- a/calc.py
+++ b/calc.py
@@ -1,5 +1,5 @@
 def add(a, b):
-    return a + b + 1
+    return a + b
 \n \n def mean(xs):
"""


def test_json_report(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = invoke(["calc.py", "--test", PYTEST, "--json", "-q"], ScriptedFill(add=ADD), monkeypatch)
    assert result.exit_code == 0 and result.stderr == ""
    report = json.loads(result.stdout)
    assert report["exit_code"] == 0 and report["passes"] is True
    assert (report["before"]["failed"], report["before"]["passed"], report["after"]["passed"]) == (1, 1, 2)
    assert report["rounds"][0]["regions"] == [{"path": "calc.py", "symbol": "add", "lines": [1, 2]}]
    assert report["rounds"][0]["judged"] == "better" and report["rounds"][0]["test"]["exit_code"] == 0
    assert report["files"] == [{"path": "calc.py", "backup": "calc.py.orig"}]
    assert report["diff"] == DIFF


def test_diff_prints_the_change(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = invoke(["calc.py", "--test", PYTEST, "--diff", "-q"], ScriptedFill(add=ADD), monkeypatch)
    assert (result.exit_code, result.stdout, result.stderr) == (0, DIFF, "")


def test_still_failing_exits_4(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = invoke(
        ["calc.py", "--test", PYTEST, "--rounds", "1"], ScriptedFill(add=CALC.split("\n\n\n")[0] + "\n"), monkeypatch
    )
    assert result.exit_code == 4, result.stderr
    assert result.stderr.splitlines()[-1].startswith("dcode: still fails: 1 failed, 1 passed -> 1 failed, 1 passed")
    assert (project / "calc.py").read_text() == CALC


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["calc.py"], "dcode: error: no test command: pass --test CMD (for example --test 'python -m pytest -q')\n"),
        (["nope.py", "--test", "true"], "dcode: error: nope.py: no such file\n"),
        (["calc.txt", "--test", "true"], "dcode: error: calc.txt: unknown language\n"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(project: Path, monkeypatch, args: list[str], message: str) -> None:
    (project / "calc.txt").write_text("hello\n")
    result = invoke(args, ScriptedFill(), monkeypatch)
    assert (result.exit_code, result.stderr) == (2, message)


SLOW_FILL = """
import sys, time
from pathlib import Path
import dcode.cli.fixing as fixing

def slow(path, source, region, instruction):  # a scripted fill whose answer the tests block on
    return source.replace("return a + b + 1", "return a + b  # round 1")

fixing.regenerator = lambda run, **_: (slow, fixing.Fills(model="scripted"))
from dcode.cli import main
sys.argv = ["dcode", "fix", "calc.py", "--test", sys.argv[1], "--no-log"]
main()
"""

RUNNER = """
import os, time
from pathlib import Path
import calc
if "round 1" in Path("calc.py").read_text():
    Path("started").write_text(str(os.getpid()))
    time.sleep(60)
assert calc.add(1, 2) == 3
"""


def test_sigterm_mid_loop_restores_the_original_and_ends_the_tests(project: Path) -> None:
    """A real process: SIGTERM while round 1's tests run -> the file as it was, exit 143, and the
    test command's process group killed."""
    (project / "runner.py").write_text(RUNNER)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    command = f"{sys.executable} runner.py"
    process = subprocess.Popen(
        [sys.executable, "-c", SLOW_FILL, command], cwd=project, env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 20
        while not (project / "started").exists() and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.05)
        assert (project / "started").exists(), process.stderr.read() if process.stderr else ""
        assert "round 1" in (project / "calc.py").read_text()
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=20)
    finally:
        process.kill()
    assert process.returncode == 143, stderr
    assert stderr.endswith("dcode: terminated\n")
    assert (project / "calc.py").read_text() == CALC
    assert "calc.py.orig" not in names(project)
    runner = int((project / "started").read_text())
    for _ in range(100):
        try:
            os.kill(runner, 0)
        except ProcessLookupError:
            break
        time.sleep(0.02)
    else:
        pytest.fail("the test command still runs")


def test_dcode_tiny_keeps_every_file_promise(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The embedded model through the real command: whatever it writes, the file ends at the best
    state (the original, or a better one with a byte-identical backup) and the exit code says so."""
    monkeypatch.setenv("DCODE_LOG", "0")
    result = CliRunner().invoke(app, ["fix", "calc.py", "--test", PYTEST, "--rounds", "1", "--json", "-q"])
    assert result.exit_code in (0, 4), result.stderr
    report = json.loads(result.stdout)
    assert report["model"] == "dcode-tiny" and len(report["rounds"]) == 1
    now = (project / "calc.py").read_text()
    if result.exit_code == 4 and report["rounds"][0]["judged"] != "better":
        assert now == CALC and names(project) == ["calc.py", "test_calc.py"]
    else:
        assert (project / "calc.py.orig").read_text() == CALC
    assert textwrap.dedent(TESTS) == (project / "test_calc.py").read_text()


def test_through_an_endpoint_over_a_real_socket(project: Path) -> None:
    """The endpoint's fill (a replay server on loopback, answering fill-in-the-middle) fixes it."""
    from test_endpoint import ReplayServer, fim_server

    server = ReplayServer(fim_server(ADD))
    try:
        args = ["fix", "calc.py", "--test", PYTEST, "--endpoint", server.url, "--model", "m", "--no-repair", "-q"]
        result = CliRunner().invoke(app, args, env={"DCODE_LOG": "0"}, prog_name="dcode")
    finally:
        server.close()
    assert result.exit_code == 0, result.stderr
    assert (project / "calc.py").read_text() == CALC.replace(" + 1\n", "\n")
    (post,) = server.posts
    assert "Fix `add` so that" in post.body["prompt"] and post.body["suffix"].startswith("\n\ndef mean(xs):")


def test_the_loop_knows_nothing_of_models_or_the_command_line() -> None:
    from test_imports import dcode_imports, heavy_modules_after

    assert dcode_imports("dcode.failures") == set() and dcode_imports("dcode.history") == set()
    assert dcode_imports("dcode.fixtargets") <= {"dcode.failures", "dcode.edit", "dcode.syntax"}
    allowed = {"dcode.failures", "dcode.fixtargets", "dcode.edit", "dcode.files", "dcode.filler"}
    allowed |= {"dcode.fixfiles", "dcode.fixes", "dcode.history"}
    assert dcode_imports("dcode.fixfiles") <= {"dcode.files", "dcode.edit"}
    assert dcode_imports("dcode.fixloop") <= allowed
    done, heavy = heavy_modules_after("from dcode.cli import main\nmain()", argv=["dcode", "fix", "--help"])
    assert done.returncode == 0 and done.stdout.startswith("Usage: dcode fix [OPTIONS]"), done.stderr
    assert heavy == []


def test_new_with_test_runs_the_same_loop_on_the_written_file(
    project: Path, monkeypatch: pytest.MonkeyPatch, scripted
) -> None:
    """`dcode new -o calc.py --test CMD`: the scripted model writes calc.py (an off-by-one), then
    the fix loop, handed the filler that wrote it, fixes it; exit as fix's."""
    (project / "calc.py").unlink()
    made = scripted(CALC)
    handed = scripted_regenerator(fill := ScriptedFill(add=ADD), monkeypatch)
    args = ["new", "add two numbers", "-o", "calc.py", "--length", "40", "--no-repair", "--test", PYTEST]
    result = CliRunner().invoke(app, [*args, "--json", "-q"], env={"DCODE_LOG": "0"}, prog_name="dcode")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["code"] == CALC and result.stderr == ""  # new's report, as written
    assert (project / "calc.py").read_text() == CALC.replace(" + 1\n", "\n") and len(fill.calls) == 1
    assert (project / "calc.py.orig").read_text() == CALC
    assert len(made) == 1 and getattr(handed[0], "denoiser", None) is made[0]  # one model, loaded once


def test_new_with_test_that_still_fails_exits_4(project: Path, monkeypatch: pytest.MonkeyPatch, scripted) -> None:
    (project / "calc.py").unlink()
    scripted(CALC)
    scripted_regenerator(ScriptedFill(add=CALC.split("\n\n\n")[0] + "\n"), monkeypatch)
    args = ["new", "add", "-o", "calc.py", "--length", "40", "--no-repair", "--test", PYTEST, "--rounds", "1"]
    result = CliRunner().invoke(app, args, env={"DCODE_LOG": "0"}, prog_name="dcode")
    assert result.exit_code == 4, result.stderr
    assert result.stderr.splitlines()[-1].startswith("dcode: still fails: 1 failed, 1 passed -> 1 failed, 1 passed")
    assert (project / "calc.py").read_text() == CALC


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--test", "true"], "--test runs on the written file: give it with -o FILE"),
        (["-o", "-", "--test", "true"], "--test runs on the written file: give it with -o FILE"),
        (["-o", "x.py", "--test", " "], "no test command: pass --test CMD (for example --test 'python -m pytest -q')"),
        (["-o", "x.py", "--test", "true", "--test-timeout", "0"], "--test-timeout must be more than 0 seconds"),
        (
            ["-o", "x.py", "--test", "true", "--test-timeout", "inf"],
            "--test-timeout must be a finite number of seconds",
        ),
    ],
)
def test_new_test_without_a_file_is_a_usage_error(project: Path, args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["new", "add", *args], env={"DCODE_LOG": "0"}, prog_name="dcode")
    assert (result.exit_code, result.stdout, result.stderr) == (2, "", f"dcode: error: {message}\n")
    assert not (project / "x.py").exists()


def test_the_local_model_loads_at_the_first_fill_through_the_edit_flow(
    project: Path, monkeypatch: pytest.MonkeyPatch, scripted
) -> None:
    """No model loads when the tests pass; when they fail, one loads and dcode.flows.edit (the
    scripted model filling the region's masks) writes the fix."""
    (project / "calc.py").write_text(ADD + "\n\n" + MEAN)
    made = scripted("def add(a, b):\n    return a + b\n")
    passing = CliRunner().invoke(app, ["fix", "calc.py", "--test", PYTEST, "-q"], env={"DCODE_LOG": "0"})
    assert passing.exit_code == 0 and made == []
    (project / "calc.py").write_text(CALC)
    args = ["fix", "calc.py", "--test", PYTEST, "-q", "--no-repair", "--rounds", "1", "--json"]
    result = CliRunner().invoke(app, args, env={"DCODE_LOG": "0"})
    assert result.exit_code == 0, result.stderr
    assert (project / "calc.py").read_text() == ADD + "\n\n" + MEAN and len(made) == 1
    assert json.loads(result.stdout)["model"] == "scripted"


def run_of(output: str, code: int = 1, timed_out: bool = False) -> fixloop.Run:
    from dcode.failures import counts

    return fixloop.Run(code, output, 1.0, counts(output), tuple(parse(output)), timed_out)


@pytest.mark.parametrize(
    ("new", "best", "judged"),
    [
        (run_of("2 passed in 0.1s", 0), run_of("1 failed, 1 passed in 0.1s"), "better"),
        (run_of("1 failed, 1 passed in 0.1s"), run_of("2 failed in 0.1s"), "better"),
        (run_of("1 failed, 3 passed in 0.1s"), run_of("1 failed, 1 passed in 0.1s"), "better"),  # -x got further
        (run_of("1 failed, 1 passed in 0.1s"), run_of("1 failed, 1 passed in 0.1s"), "same"),
        (run_of("1 error in 0.1s"), run_of("1 failed, 1 passed in 0.1s"), "worse"),  # now an import error
        (run_of("2 failed in 0.1s"), run_of("1 failed, 1 passed in 0.1s"), "worse"),
        (run_of("1 failed in 0.1s"), run_of("1 failed, 1 passed in 0.1s"), "worse"),  # a passing test is gone
        (run_of("", -9, timed_out=True), run_of("1 failed, 1 passed in 0.1s"), "worse"),
        (run_of("Segmentation fault"), run_of("1 failed, 1 passed in 0.1s"), "worse"),  # no summary any more
        (run_of("a.c:1:1: error: x\na.c:2:1: error: y\n"), run_of("a.c:1:1: error: x\n"), "worse"),
        (run_of("a.c:1:1: error: x\n"), run_of("a.c:1:1: error: x\na.c:2:1: error: y\n"), "better"),
    ],
)
def test_judging_a_round(new: fixloop.Run, best: fixloop.Run, judged: str) -> None:
    assert fixloop.compare(new, best) == judged


def test_paths_printed_from_the_runners_root_find_the_named_file(tmp_path: Path) -> None:
    """pytest prints paths from its rootdir; dcode fix may run in a folder below it."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "calc.py").write_text(CALC)
    targets = Targets.of([Path("calc.py")], tmp_path / "pkg")
    assert targets.allows("pkg/calc.py") == targets.allows("calc.py") == (tmp_path / "pkg" / "calc.py").resolve()
    assert targets.allows("other/calc.py") is None and targets.allows("test_calc.py") is None


def test_the_command_when_the_tests_pass_already(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (project / "calc.py").write_text(ADD + "\n\n" + MEAN)
    result = invoke(["calc.py", "--test", PYTEST], ScriptedFill(), monkeypatch)
    assert result.exit_code == 0, result.stderr
    assert re.sub(r"\d+\.\d s", "T s", result.stderr) == (
        f"dcode: fix: {PYTEST}: 2 passed (T s)\ndcode: passes: 2 passed; nothing to fix\n"
    )


@pytest.mark.parametrize(("status", "code"), [(500, 1), (401, 2)])
def test_a_server_that_fails_stops_the_fix_with_the_files_intact(project: Path, status: int, code: int) -> None:
    """A server failing (500) or refusing the request (401) would fail every region: the fix
    stops there with one line and the exit code of `dcode edit`, no file changed, no backup."""
    from test_endpoint import ReplayServer, Reply

    server = ReplayServer(lambda seen: Reply(status=status, body='{"error": {"message": "no"}}'))
    try:
        args = ["fix", "calc.py", "--test", PYTEST, "--endpoint", server.url, "--model", "m", "-q"]
        result = CliRunner().invoke(app, args, env={"DCODE_LOG": "0"}, prog_name="dcode")
    finally:
        server.close()
    assert result.exit_code == code, result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith("dcode: error: fix stopped: ") and f"({status})" in line
    assert (project / "calc.py").read_text() == CALC and names(project) == ["calc.py", "test_calc.py"]
