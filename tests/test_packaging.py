"""The wheel holds every package of dcode: a subpackage missing from pyproject.toml's list would
import from a checkout (and an editable install) but not from `pip install .`."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_dcode_package_is_in_the_wheel() -> None:
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for init in (ROOT / "dcode").rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    assert found - listed == set()
