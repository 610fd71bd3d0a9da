"""`dcode check` and `dcode repair` through CliRunner: exact output, exit codes, files untouched."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dcode.cli import app

BROKEN = "def add(a, b):\n    return a +\n\n\nprint(add(1, 2))\n"
GOOD = "def add(a, b):\n    return a + b\n"


def run(args: list[str], **kwargs):
    return CliRunner().invoke(app, args, **kwargs)


@pytest.fixture
def files(tmp_path: Path) -> Path:
    (tmp_path / "good.py").write_text(GOOD)
    (tmp_path / "broken.py").write_text(BROKEN)
    (tmp_path / "broken.js").write_text("let x = (1;\n")
    (tmp_path / "empty.py").write_text("")
    (tmp_path / "binary.py").write_bytes(b"\x00\x01\x02")
    (tmp_path / "latin1.py").write_bytes("x = 'caf\xe9'\n".encode("latin-1"))
    (tmp_path / "latin1.js").write_bytes("let x = 'caf\xe9';\n".encode("latin-1"))
    (tmp_path / "notes.xyz").write_text("hello\n")
    return tmp_path


def test_check_clean_file_exits_0_silently(files: Path) -> None:
    result = run(["check", str(files / "good.py")])
    assert (result.exit_code, result.stdout, result.stderr) == (0, "", "")


def test_check_reports_like_a_linter_and_exits_3(files: Path) -> None:
    result = run(["check", str(files / "good.py"), str(files / "broken.py"), str(files / "broken.js")])
    assert result.exit_code == 3
    lines = result.stdout.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(f"{files / 'broken.py'}:2:")
    assert lines[1].startswith(f"{files / 'broken.js'}:1:")
    assert result.stderr == ""


def test_check_json(files: Path) -> None:
    result = run(["check", "--json", str(files / "broken.py")])
    assert result.exit_code == 3
    report = json.loads(result.stdout)
    assert report[0]["language"] == "python"
    assert report[0]["issues"][0]["line"] == 2


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("missing.py", "missing.py: no such file"),
        ("binary.py", "binary.py looks binary (it holds NUL bytes)"),
        ("latin1.js", "latin1.js is not UTF-8 text (bad byte at offset 12)"),
    ],
)
def test_check_unreadable_input_exits_2(files: Path, name: str, message: str) -> None:
    result = run(["check", str(files / name), str(files / "broken.py")])
    assert result.exit_code == 2  # unreadable input wins over syntax errors
    assert result.stderr == f"dcode: error: {files}/{message}\n"
    assert result.stdout.startswith(f"{files / 'broken.py'}:2:")  # the readable file was still checked


def test_check_a_directory_and_an_unknown_language(files: Path) -> None:
    assert run(["check", str(files)]).stderr == f"dcode: error: {files} is a directory\n"
    result = run(["check", str(files / "notes.xyz"), str(files / "good.py")])
    assert result.exit_code == 2  # a file named explicitly that cannot be checked is unusable input
    assert result.stderr == f"dcode: error: {files / 'notes.xyz'}: unknown language, not checked (use --lang)\n"
    assert run(["check", "--lang", "cobol", str(files / "good.py")]).exit_code == 2


def test_check_empty_file_is_clean(files: Path) -> None:
    assert run(["check", str(files / "empty.py")]).exit_code == 0


@pytest.mark.parametrize(
    ("name", "extra", "message"),
    [
        ("missing.py", [], "missing.py: no such file"),
        ("binary.py", [], "binary.py looks binary (it holds NUL bytes)"),
        ("empty.py", [], "empty.py is empty: nothing to repair"),
        ("notes.xyz", [], "notes.xyz: unknown language (use --lang)"),
        ("broken.py", ["-o", "{dir}/good.py"], "good.py exists (use --force to overwrite)"),
    ],
)
def test_repair_bad_input_is_one_line_and_touches_nothing(files: Path, name: str, extra, message: str) -> None:
    before = {p.name: p.read_bytes() for p in files.iterdir()}
    args = ["repair", str(files / name), *[a.format(dir=files) for a in extra]]
    result = run(args)
    assert result.exit_code == 2
    assert result.stderr == f"dcode: error: {files}/{message}\n"
    assert {p.name: p.read_bytes() for p in files.iterdir()} == before


def test_repair_a_valid_file_changes_nothing(files: Path) -> None:
    result = run(["repair", str(files / "good.py"), "--json"])
    assert result.exit_code == 0
    report = json.loads(result.stdout)
    assert report["changed"] is False and report["issues_before"] == 0 and report["rounds"] == 0
    assert (files / "good.py").read_text() == GOOD


def test_repair_end_to_end_with_the_embedded_model(files: Path) -> None:
    """The shipped model repairs in place or leaves the file alone: never more errors, never a
    change outside the re-masked spans' lines, exit 0 only if it parses."""
    from dcode.dtypes import cpu_dtype
    from dcode.syntax import find_issues

    path = files / "broken.py"
    result = run(["repair", str(path), "--json", "--repair-tries", "2"])
    assert result.exit_code in (0, 3), result.stderr
    report = json.loads(result.stdout)
    assert (report["model"], report["dtype"]) == ("dcode-tiny", cpu_dtype())  # what ran, as `new --json` says it
    assert report["rounds"] <= report["attempts"] <= 2 * report["rounds"]
    after = path.read_text()
    assert len(find_issues(after, "python")) == report["issues_after"] <= report["issues_before"] == 1
    assert report["changed"] == (after != BROKEN)
    assert (result.exit_code == 0) == (report["issues_after"] == 0)
    assert after.startswith("def add(a, b):\n")  # the line before the broken one is never touched


def test_repair_diff_writes_nothing_and_o_writes_elsewhere(files: Path) -> None:
    path = files / "broken.py"
    result = run(["repair", str(path), "--diff", "-q"])
    assert result.exit_code in (0, 3)
    assert path.read_text() == BROKEN
    assert result.stdout == "" or result.stdout.startswith(f"--- a/{path}\n+++ b/{path}\n")
    other = files / "fixed.py"
    result = run(["repair", str(path), "-o", str(other), "-q"])
    assert path.read_text() == BROKEN
    assert result.exit_code in (0, 3)


# ---------------------------------------------------------------------------------------------
# What Python rejects before it parses, and files that are not files


@pytest.mark.parametrize(
    ("data", "line"),
    [
        (b"# -*- coding: uft-8 -*-\nx = 1\n", "1:1: encoding problem: uft-8"),
        (b"x = 'caf\xe9'\n", "1:9: Non-UTF-8 code starting with '\\xe9' on line 1, but no encoding declared (PEP 263)"),
        (b"#!/usr/bin/env python\n# coding: ascii\nx = '\xc3\xa9'\n", "3:6: encoding problem: ascii"),
        (b"\xef\xbb\xbf#coding: utf8\nprint('\xe6\x88\x91')\n", "1:1: encoding problem: utf8 with BOM"),
    ],
)
def test_check_follows_pythons_source_decoding(tmp_path: Path, data: bytes, line: str) -> None:
    (tmp_path / "x.py").write_bytes(data)
    result = run(["check", str(tmp_path / "x.py")])
    assert (result.exit_code, result.stdout, result.stderr) == (3, f"{tmp_path / 'x.py'}:{line}\n", "")


@pytest.mark.parametrize(
    "data",
    [
        b"\xef\xbb\xbfx = 1\n",
        b"\xef\xbb\xbf# coding: utf-8\nprint('\xe6\x88\x91')\n",
        b"# -*- coding: latin-1 -*-\nx = 'caf\xe9'\n",
        "x = 'café'\n".encode(),
    ],
)
def test_check_accepts_what_python_runs(tmp_path: Path, data: bytes) -> None:
    (tmp_path / "x.py").write_bytes(data)
    result = run(["check", str(tmp_path / "x.py")])
    assert (result.exit_code, result.stdout, result.stderr) == (0, "", "")


def test_check_reads_a_fifo_as_cat_does(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.py")
    writer = threading.Thread(target=(tmp_path / "pipe.py").write_text, args=(BROKEN,))
    writer.start()  # its open() waits for a reader, as with cat
    result = run(["check", str(tmp_path / "pipe.py")])
    writer.join(timeout=30)  # dcode read it, so the writer ends (is_alive() at once can race its close)
    if writer.is_alive():  # dcode did not read it: let the writer go
        (tmp_path / "pipe.py").read_text()
        writer.join()
    assert (result.exit_code, result.stderr) == (3, "")
    assert result.stdout.startswith(f"{tmp_path / 'pipe.py'}:2:")
    result = run(["check", "--lang", "python", "/dev/null"])  # a character device: empty, as for cat
    assert (result.exit_code, result.stdout, result.stderr) == (0, "", "")


def test_check_reads_a_process_substitution() -> None:
    """`dcode check --lang python <(printf 'def f(:\\n')` through bash, in a process of its own."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent), "HF_HUB_OFFLINE": "1"}
    command = f"{sys.executable} -m dcode.cli check --lang python <(printf 'def f(:\\n')"
    done = subprocess.run(["bash", "-c", command], env=env, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (3, "")
    assert re.fullmatch(r"/dev/fd/\d+:1:7: .*\n", done.stdout), done.stdout
