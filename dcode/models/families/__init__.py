"""The registry of model families, built from the family modules in this folder.

Each module here but this one (and those whose name starts with "_", a family's private parts)
declares one family as `FAMILY` (dcode.models.family.Family): how its config.json is recognized,
its facts with their sources, its loader, its catalogue entries and its released-format test
checkpoint writers. Adding a family is adding its module (and its tests, and docs/models.md);
nothing here names one. Torch-free: importing this imports every family module, and those
import torch and transformers only inside their loaders and writers.
"""

from __future__ import annotations

import importlib
import pkgutil

from dcode.models.family import Entry, Family

__all__ = ["CATALOGUE", "FAMILIES", "Family", "discover"]


def discover() -> dict[str, Family]:
    """Family name -> Family, from the modules in this folder, by name."""
    found: dict[str, Family] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda info: info.name):
        if info.name.startswith("_"):
            continue
        family = importlib.import_module(f"{__name__}.{info.name}").FAMILY
        if not isinstance(family, Family) or family.name != info.name:
            raise TypeError(f"{__name__}.{info.name}.FAMILY must be a Family named {info.name!r}")
        found[family.name] = family
    return found


FAMILIES = discover()
# Every family's released checkpoints, smallest first (the CPU sizes at the top).
CATALOGUE: tuple[Entry, ...] = tuple(
    sorted((entry for family in FAMILIES.values() for entry in family.catalogue), key=lambda e: e.parameters)
)
