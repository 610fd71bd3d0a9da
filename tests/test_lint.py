"""The package reads as STYLE.md asks: ruff (lint and format) and mypy pass on dcode/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_ruff_lint_and_format() -> None:
    lint = run("ruff", "check", "dcode", "tests", "benchmarks")
    assert lint.returncode == 0, lint.stdout[-3000:]
    formatted = run("ruff", "format", "--check", "dcode", "tests", "benchmarks")
    assert formatted.returncode == 0, formatted.stdout[-3000:]


def test_mypy_on_the_package(tmp_path: Path) -> None:
    checked = run("mypy", "dcode", "--cache-dir", str(tmp_path / "mypy-cache"))
    assert checked.returncode == 0, checked.stdout[-3000:]
