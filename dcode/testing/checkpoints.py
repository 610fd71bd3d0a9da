"""Random-weight checkpoints of every family dcode loads, each in that family's released format.

Shared by the tests (tiny size, built in a temporary folder and loaded through dcode.models.load)
and benchmarks/make_checkpoints.py (the sizes a GPU check times). Each family module
(dcode.models.families.<name>) owns its writers and cites its sources: config.json with the keys,
values and model_type the released checkpoints carry, safetensors under the family's own weight
names, generation_config.json where the family keeps its end-of-answer ids there, and tokenizer
files with the family's special tokens (their released spellings) and chat template. The ids are
the tiny vocabulary's, not the released numbers (151669 needs a 152K-row embedding); where each id
is written (config.json, generation_config.json or the tokenizer alone) follows the release. The
parts they share are in dcode.testing.kit. Imports torch when a writer runs, never at import time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dcode.models.families import FAMILIES as LOADED
from dcode.models.family import Writer
from dcode.testing.kit import SIZES, Size

__all__ = ["FAMILIES", "SIZES", "WRITERS", "Size", "write"]

# checkpoint name -> its family's writer; a name is a family's, or says which release of it
# (Tiny-A2D's a2d_qwen2_bd3lm: the name carries bd3lm / mdlm, as the released ids do)
WRITERS: dict[str, Writer] = {name: w for family in LOADED.values() for name, w in family.checkpoints.items()}
FAMILIES: tuple[str, ...] = tuple(WRITERS)


def write(family: str, folder: Path, size: str | Size = "tiny", *, seed: int = 0, **options: Any) -> int:
    """A random checkpoint of `family` (a name of WRITERS) in `folder` (created), on the CPU;
    options go to the family's writer (dream: shards, files; llada: tied). Returns its parameter count."""
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    chosen = SIZES[size] if isinstance(size, str) else size
    return WRITERS[family](folder, chosen, torch.device("cpu"), seed, **options)
