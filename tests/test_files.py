"""Real files on real systems: what dcode does with devices, FIFOs, symlinks, read-only files, a
BOM, CRLF line endings, stdout on a full disk or closed, a closed stdin, `-o -`, `-o FILE` naming
the input, SIGTERM in the middle of a write, and the temporary file a SIGKILL leaves. Through the
real entry points: CliRunner with a scripted model, and the `dcode` process for what only a
process has (closed descriptors, /dev/full)."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dcode.cli import app
from dcode.edit import select, write_in_place
from dcode.files import FileProblem, atomic_write, check_writable
from dcode.spans import splice
from dcode.syntax import find_issues

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
SOURCE = "import math\n\n\ndef add(a, b):\n    return a - b\n\n\ndef area(r):\n    return math.pi * r * r\n"
SUM = "def add(a, b):\n    return a + b"
BROKEN_SUM = "def add(a, b):\n    return a +"


@pytest.fixture(autouse=True)
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in list(os.environ):
        if name.startswith("DCODE_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "app.py").write_text(SOURCE)
    return tmp_path


def dcode(*args: str, input: str | None = None):
    return CliRunner().invoke(app, list(args), input=input, prog_name="dcode")


def files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file() and not p.is_symlink()}


def process(*args: str, **kwargs) -> subprocess.CompletedProcess:
    """`python -m dcode.cli ARGS` from this tree, in its own process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "dcode.cli", *args], env=env, capture_output=kwargs.pop("capture", True), **kwargs
    )


# ---------------------------------------------------------------------------------------------
# 1. -o onto something that is not a regular file


def test_output_refuses_a_fifo_and_a_device_even_with_force(workdir: Path, scripted) -> None:
    made = scripted(SUM)
    os.mkfifo(workdir / "pipe.py")
    (workdir / "null.py").symlink_to("/dev/null")
    result = dcode("new", "x", "-o", "pipe.py", "--force")
    assert (result.exit_code, result.stderr) == (2, "dcode: error: pipe.py is a FIFO, not a regular file\n")
    result = dcode("new", "x", "-o", "null.py", "--force")
    assert (result.exit_code, result.stderr) == (
        2,
        "dcode: error: /dev/null is a character device, not a regular file\n",
    )
    result = dcode("edit", "app.py", "--instruct", "x", "-o", "null.py", "--force")
    assert result.exit_code == 2
    assert stat.S_ISFIFO(os.stat(workdir / "pipe.py").st_mode) and os.path.islink(workdir / "null.py")
    assert made == []  # refused before any model loads
    with pytest.raises(FileProblem, match="character device"):
        atomic_write(Path("/dev/null"), "x")  # the writer refuses too, whoever calls it


def test_output_through_a_symlink_writes_its_target(workdir: Path, scripted) -> None:
    scripted(SUM)
    (workdir / "real.py").write_text("old\n")
    (workdir / "link.py").symlink_to("real.py")
    result = dcode("new", "x", "-o", "link.py", "--force", "-q")
    assert result.exit_code == 0, result.stderr
    assert os.path.islink(workdir / "link.py") and (workdir / "real.py").read_text() == SUM + "\n"


# ---------------------------------------------------------------------------------------------
# 2. A UTF-8 BOM is valid, kept byte for byte, and does not switch the edit guard off

BOM = "\ufeff"


def test_a_bom_is_not_a_syntax_error() -> None:
    assert find_issues(BOM + SOURCE, "python") == []
    broken = find_issues(BOM + "def f(:\n", "python")
    assert broken and broken[0].line == 1 and broken[0].start_byte >= 3


def test_an_edit_of_a_bom_file_keeps_the_bom_and_the_guard(workdir: Path, scripted) -> None:
    (workdir / "app.py").write_text(BOM + SOURCE, encoding="utf-8")
    assert select(BOM + SOURCE, "python") == (3, len((BOM + SOURCE).encode()))  # the whole file, after the BOM
    scripted(BROKEN_SUM)
    result = dcode("edit", "app.py", "--symbol", "add", "--instruct", "x", "--no-repair", "-q")
    assert result.exit_code == 3  # it parsed before: the broken edit is not written
    assert files(workdir) == {"app.py": (BOM + SOURCE).encode()}
    scripted(SUM)
    result = dcode("edit", "app.py", "--instruct", "x", "-q")  # the whole file
    assert result.exit_code == 0, result.stderr
    assert (workdir / "app.py").read_bytes() == (BOM + SUM + "\n").encode()


# ---------------------------------------------------------------------------------------------
# 3. CRLF: new lines take the file's line ending; bytes outside the region stay, repair on or off


@pytest.mark.parametrize("repair", [True, False])
def test_crlf_files_stay_crlf_outside_and_inside_the_region(workdir: Path, scripted, repair: bool) -> None:
    crlf = SOURCE.replace("\n", "\r\n")
    (workdir / "app.py").write_bytes(crlf.encode())
    # the draft's lines come with bare LFs; with repair on it breaks its last line, which the repair fixes
    draft = "def add(a, b):\n    total = a + b\n    return total"
    scripts = [draft + " +", "    return (total\n)"] if repair else [draft]  # the fix is two lines
    scripted(*scripts)
    flag = "--repair" if repair else "--no-repair"
    result = dcode("edit", "app.py", "--symbol", "add", "--instruct", "x", flag, "-q", "-o", "out.py")
    assert result.exit_code == 0, result.stderr
    out = (workdir / "out.py").read_bytes()
    a = crlf.index("def add")
    b = crlf.index("\r\n\r\n\r\ndef area") + 2
    assert out[:a] == crlf.encode()[:a] and out.endswith(crlf.encode()[b:])  # every byte outside the region
    last = "    return (total\r\n)\r\n" if repair else "    return total\r\n"
    new = "def add(a, b):\r\n    total = a + b\r\n" + last
    assert out == (crlf[:a] + new + crlf[b:]).encode()  # the new lines in CRLF


def test_a_repair_after_a_crlf_edit_keeps_every_line_after_the_region(workdir: Path, scripted) -> None:
    """The bad-input battery's file (CRLF, `fibonacci` at lines 55-60, two blank lines after it). The
    edit breaks its last line; the second repair round re-masks it with a line of context on each
    side, and the line after is blank, so the span ends after a line break. A fill without one
    took the first blank line after the region away."""
    source = (DATA / "crlf_fibonacci.txt").read_bytes()
    (workdir / "crlf.py").write_bytes(source)
    draft = "def fibonacci(n: int) -> int:\n    return n\ndef pop(arg"  # broken: '(' never closed
    round_1 = ["def pop(arg,"] + ["def pop arg"] * 3  # each try still broken (later ones may not write '(')
    round_2 = "    return n\ndef pop(arg):\n    pass"  # the line before, the fix; no final line break
    scripted(draft, *round_1, round_2)
    result = dcode("edit", "crlf.py", "--symbol", "fibonacci", "--instruct", "add type hints", "-q")
    assert result.exit_code == 0, result.stderr
    out = (workdir / "crlf.py").read_bytes()
    a, b = source.index(b"def fibonacci"), source.index(b"\r\n\r\n\r\ndef main") + 2
    new = b"def fibonacci(n: int) -> int:\r\n    return n\r\ndef pop(arg):\r\n    pass\r\n"
    assert out == source[:a] + new + source[b:]  # every byte outside the region, and the region whole lines
    assert out.splitlines(keepends=True)[-13:] == source.splitlines(keepends=True)[-13:]


def test_a_fill_of_a_span_ending_after_a_line_break_ends_with_it() -> None:
    data = b"f(\r\n\r\nx = 1\n"
    assert splice(data, [(0, 4)], ["f()"]) == "f()\r\n\r\nx = 1\n"  # the blank line after the span stays
    assert splice(data, [(0, 4)], ["f()\r\n"]) == "f()\r\n\r\nx = 1\n"
    assert splice(data, [(0, 2)], ["f()"]) == "f()\r\n\r\nx = 1\n"  # a span before its line break: as is
    assert splice(data, [(0, 4)], [""]) == "\r\nx = 1\n"  # an empty fill deletes the line


def test_repair_of_a_crlf_file_writes_crlf_lines(workdir: Path, scripted) -> None:
    broken = "def add(a, b):\r\n    return a +\r\n\r\n\r\nprint(add(1, 2))\r\n"
    (workdir / "app.py").write_bytes(broken.encode())
    scripted("    return (a\n)")  # two lines, in the six masks a four-token line gets
    result = dcode("repair", "app.py", "-q")
    assert result.exit_code == 0, result.stderr
    fixed = (workdir / "app.py").read_bytes()
    assert fixed == b"def add(a, b):\r\n    return (a\r\n)\r\n\r\n\r\nprint(add(1, 2))\r\n"


# ---------------------------------------------------------------------------------------------
# 4, 5. stdout that cannot be written, stdin that is closed: one line, never a traceback


FULL = "dcode: error: cannot write to stdout: No space left on device\n"


def one_line(stderr: bytes) -> str:
    text = stderr.decode()
    assert text.count("\n") == 1 and "Traceback" not in text, text
    return text


def test_stdout_on_a_full_disk_or_closed_is_one_line_exit_1(workdir: Path) -> None:
    (workdir / "bad.py").write_text("def f(:\n")
    with open("/dev/full", "w") as full:
        done = process("check", "bad.py", stdout=full, capture=False, stderr=subprocess.PIPE)
    assert (done.returncode, one_line(done.stderr)) == (
        1,
        "dcode: error: cannot write to stdout: No space left on device\n",
    )
    done = process(
        "check", "bad.py", capture=False, stdout=None, stderr=subprocess.PIPE, preexec_fn=lambda: os.close(1)
    )
    assert (done.returncode, one_line(done.stderr)) == (1, "dcode: error: cannot write to stdout: stdout is closed\n")


@pytest.mark.parametrize(
    "args",
    [
        ["new", "x", "--length", "8", "-q"],
        ["edit", "app.py", "--instruct", "x", "--lines", "5", "--length", "8", "--diff", "-q"],
        ["repair", "bad.py", "--diff", "--repair-rounds", "1", "--repair-tries", "1", "-q"],
    ],
)
def test_generating_commands_on_a_full_stdout(workdir: Path, args: list[str]) -> None:
    (workdir / "bad.py").write_text("def f(a):\n    return a +\n")
    with open("/dev/full", "w") as full:
        done = process(*args, stdout=full, capture=False, stderr=subprocess.PIPE)
    if args[0] != "new" and done.returncode in (0, 3):
        pytest.skip("the model's result was empty: nothing reached stdout")  # an empty diff writes nothing
    assert (done.returncode, one_line(done.stderr)) == (
        1,
        "dcode: error: cannot write to stdout: No space left on device\n",
    )
    assert sorted(p.name for p in workdir.iterdir()) == ["app.py", "bad.py"]


def test_a_reader_that_has_gone_stays_quiet(workdir: Path) -> None:
    (workdir / "bad.py").write_text("def f(:\n" * 20000)
    reader = subprocess.Popen(["head", "-c", "1"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    done = process("check", "bad.py", stdout=reader.stdin, capture=False, stderr=subprocess.PIPE)
    reader.stdin.close()  # type: ignore[union-attr]
    reader.wait()
    assert b"Traceback" not in done.stderr and done.stderr == b""


def test_a_closed_stdin_is_one_line_exit_2(workdir: Path) -> None:
    done = process("new", "-", preexec_fn=lambda: os.close(0))
    assert (done.returncode, one_line(done.stderr)) == (
        2,
        "dcode: error: no prompt: stdin is closed; pass it as an argument, or pipe it on stdin\n",
    )


# ---------------------------------------------------------------------------------------------
# 6. -o FILE naming the input is an in-place edit: a backup, and the guard


def test_output_onto_the_input_is_an_in_place_edit(workdir: Path, scripted) -> None:
    scripted(SUM)
    result = dcode("edit", "app.py", "--symbol", "add", "--instruct", "x", "-o", "app.py", "--force")
    assert result.exit_code == 0, result.stderr
    assert (workdir / "app.py.orig").read_text() == SOURCE
    assert "backup: app.py.orig" in result.stderr and "untouched" not in result.stderr
    scripted(BROKEN_SUM)
    (workdir / "link.py").symlink_to("app.py")
    edited = (workdir / "app.py").read_bytes()
    result = dcode("edit", "app.py", "--symbol", "add", "--instruct", "x", "-o", "link.py", "--no-repair", "-q")
    assert result.exit_code == 3 and (workdir / "app.py").read_bytes() == edited  # the guard held


# ---------------------------------------------------------------------------------------------
# 8. SIGTERM in the middle of the atomic write; what a SIGKILL leaves


def test_sigterm_inside_the_atomic_write_cleans_up_and_exits_143(workdir: Path, scripted, monkeypatch) -> None:
    scripted(SUM)
    real_fsync = os.fsync

    def terminated(fd: int) -> None:  # the signal lands between the write and the rename
        real_fsync(fd)
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr("dcode.files.os.fsync", terminated)
    before = signal.getsignal(signal.SIGTERM)
    result = dcode("edit", "app.py", "--symbol", "add", "--instruct", "x")
    assert result.exit_code == 143
    assert result.stderr.endswith("dcode: terminated\n")
    assert files(workdir) == {"app.py": SOURCE.encode()}  # no temp file, no redundant .orig
    assert signal.getsignal(signal.SIGTERM) == before  # the handler is dcode's only while it runs
    result = dcode("new", "x", "-o", "new.py", "-q")
    assert result.exit_code == 143 and files(workdir) == {"app.py": SOURCE.encode()}


def test_a_killed_writers_temp_file_is_named_and_removed_by_the_next_write(workdir: Path) -> None:
    from dcode.files import remove_stale_temps

    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = workdir / f".app.py.{dead.pid}.k3j2l1ab.dcode-tmp"
    stale.write_text("half")
    live = workdir / f".app.py.{os.getppid()}.zzzzzzzz.dcode-tmp"  # a running process: not ours to remove
    live.write_text("busy")
    other = workdir / f".other.py.{dead.pid}.k3j2l1ab.dcode-tmp"
    other.write_text("another file's")
    write_in_place(workdir / "app.py", SOURCE + "# more\n")
    assert not stale.exists() and live.exists() and other.exists()
    assert remove_stale_temps(workdir / "other.py") == [other]


# ---------------------------------------------------------------------------------------------
# 9. The benchmark prompt set ships inside the package


def test_the_bench_prompt_set_is_package_data() -> None:
    from importlib import resources

    from dcode.bench import PROMPTS, read_prompts

    shipped = resources.files("dcode.bench").joinpath("prompts.jsonl")
    assert shipped.is_file() and Path(str(PROMPTS)) == Path(str(shipped))
    assert len(read_prompts(PROMPTS)) >= 25
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert '"dcode.bench" = ["prompts.jsonl"]' in pyproject


# ---------------------------------------------------------------------------------------------
# 11. read-only files, repair checks before the model, `-o -`, where a bad value came from


def test_read_only_files_are_refused_not_replaced(workdir: Path, scripted) -> None:
    made = scripted(SUM)
    (workdir / "app.py").chmod(0o444)
    (workdir / "bad.py").write_text("def f(:\n")
    (workdir / "bad.py").chmod(0o444)
    (workdir / "ro.py").write_text("old\n")
    (workdir / "ro.py").chmod(0o444)
    for args, name in [
        (["edit", "app.py", "--instruct", "x"], "app.py"),
        (["repair", "bad.py"], "bad.py"),
        (["new", "x", "-o", "ro.py", "--force"], "ro.py"),
    ]:
        result = dcode(*args)
        assert result.exit_code == 2
        assert (
            result.stderr
            == f"dcode: error: {name} is read-only; dcode does not replace it (chmod u+w {name} to allow that)\n"
        )
    assert made == []  # every refusal comes before the model loads (repair too)
    with pytest.raises(FileProblem, match="read-only"):
        check_writable(workdir / "ro.py", True)


def test_output_dash_is_stdout(workdir: Path, scripted) -> None:
    scripted(SUM)
    result = dcode("new", "x", "-o", "-", "-q")
    assert (result.exit_code, result.stdout) == (0, SUM + "\n")
    result = dcode("edit", "app.py", "--symbol", "add", "--instruct", "x", "-o", "-", "-q")
    assert (result.exit_code, result.stdout) == (0, SOURCE.replace("def add(a, b):\n    return a - b", SUM))
    (workdir / "bad.py").write_text("def f(a):\n    return a +\n")
    scripted("    return a + 1")
    result = dcode("repair", "bad.py", "-o", "-", "-q")
    assert (result.exit_code, result.stdout) == (0, "def f(a):\n    return a + 1\n")
    assert sorted(p.name for p in workdir.iterdir()) == ["app.py", "bad.py"]  # no file named '-'


def test_errors_name_the_flag_or_the_variable_that_gave_the_value(workdir: Path) -> None:
    result = dcode("new", "x", "--length", "abc")
    assert result.exit_code == 2 and "env var" not in result.stderr and "'--length'" in result.stderr
    result = CliRunner().invoke(app, ["new", "x"], env={"DCODE_LENGTH": "abc"})
    assert result.exit_code == 2 and "(env var: 'DCODE_LENGTH')" in result.stderr
    result = CliRunner().invoke(app, ["new", "x"], env={"DCODE_LENGTH": "0"})
    assert result.stderr == "dcode: error: DCODE_LENGTH must be at least 1 token\n"
    result = CliRunner().invoke(app, ["edit", "app.py", "--instruct", "x"], env={"DCODE_EDIT_LENGTH": "0"})
    assert result.stderr == "dcode: error: DCODE_EDIT_LENGTH must be at least 1 token\n"
    assert dcode("new", "x", "--length", "0").stderr == "dcode: error: --length must be at least 1 token\n"
