"""The released diffusion code models dcode knows by a short name, as ollama users expect: what
each is (Hugging Face id, family, parameters, download size, licence, the authors' HumanEval and
MBPP), the memory its weights take per dtype, and whether that fits this machine.

Torch-free: `dcode models available` and name resolution must stay fast. Owns short name -> id,
the memory arithmetic, this machine's RAM (os.sysconf) and GPU memory (nvidia-smi, when there is
one), and the hint dcode-tiny's answers carry. Knows nothing about loading.

The entries are the family modules' (dcode.models.families), each citing its numbers' sources
(the authors' own pages; "~" marks an estimate made there).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping

from dcode.models import quantize
from dcode.models.families import CATALOGUE, FAMILIES
from dcode.models.family import BYTES, Entry

__all__ = [
    "BY_NAME", "BYTES", "CATALOGUE", "CPU_PICK", "GPU_PICK", "MOVED", "Entry", "current_id", "find", "fits", "hint",
    "former_ids", "rows",
]  # fmt: skip

# Weights are not all a run holds: activations, the key/value cache and the runtime take more.
# A model "fits" when its weights times this are below the memory (a margin, not a measurement).
HEADROOM = 1.25

# The CPU pick, by the rule the README states: the best authors' HumanEval among the models dcode
# loads whose bfloat16 weights fit a CPU_RAM_GB laptop with HEADROOM, and whose one block pass over
# a 256-token cache (benchmarks/cpu.py, part (b): random weights, bfloat16, 2 cores) costs at most
# CPU_PASS_LIMIT times the 0.5B Tiny-A2D shape's 32-token pass. PASS_COST: that ratio as measured;
# a model without a measurement is not picked. Measured on a shared 2-core machine (noisy: compare
# within one run): qwen3-0.6b 272 / 185 ms and coda-1.7b 526 / 185 ms (docs/benchmarks/cpu/cpu.md,
# 2026-12-02); SDAR-1.7B's 4-token block 486 / 392 CPU ms (242 / 197 wall) in a run of both shapes
# alone on the quiet machine, load average 1.6 (docs/benchmarks/cpu/sdar-shape.md: `--shapes
# qwen2.5-0.5b,sdar-1.7b --shape-dtypes bfloat16`, 2026-12-03; 1.63x in an earlier run at load 3.5-4.6).
CPU_RAM_GB, CPU_PASS_LIMIT = 8.0, 2.0
PASS_COST = {
    "a2d-coder-0.5b": 1.0, "a2d-coder-0.5b-mdlm": 1.0, "a2d-qwen3-0.6b": 1.47, "a2d-qwen3-0.6b-mdlm": 1.47,
    "coda-1.7b": 2.84, "sdar-1.7b": 1.24,
}  # fmt: skip


def cpu_pick(entries: tuple[Entry, ...] = CATALOGUE) -> str:
    """The README's rule: the best authors' HumanEval among loadable entries that fit CPU_RAM_GB in
    bfloat16 and whose measured pass costs at most CPU_PASS_LIMIT times the 0.5B A2D shape's."""
    fit = [
        e for e in entries
        if e.family and e.humaneval is not None and e.memory_gb("bfloat16") * HEADROOM <= CPU_RAM_GB
        and PASS_COST.get(e.name, float("inf")) <= CPU_PASS_LIMIT
    ]  # fmt: skip
    return max(fit, key=lambda e: e.humaneval or 0.0).name


BY_NAME = {entry.name: entry for entry in CATALOGUE}
CPU_PICK, GPU_PICK = cpu_pick(), "dream-coder-7b"
# `dcode models available`'s order: the CPU pick first, then the rest smallest first
LISTED = (BY_NAME[CPU_PICK], *(e for e in CATALOGUE if e.name != CPU_PICK))
# former org (lower-case) -> the org its authors moved their releases to (the families' `moved`)
MOVED = {old.lower(): new for family in FAMILIES.values() for old, new in family.moved}


def current_id(repo_id: str) -> str:
    """The id under the org its authors use now; any other id as given.
    Example: current_id("dllm-collection/Qwen3-0.6B-v0.1") -> "dllm-hub/Qwen3-0.6B-v0.1"."""
    org, slash, name = repo_id.partition("/")
    return f"{MOVED[org.lower()]}/{name}" if slash and org.lower() in MOVED else repo_id


def former_ids(repo_id: str) -> list[str]:
    """The spellings an id had before its org moved (older cached copies sit under them)."""
    org, slash, name = current_id(repo_id).partition("/")
    return [f"{old}/{name}" for old, new in MOVED.items() if slash and new.lower() == org.lower()]


def find(spec: str) -> Entry | None:
    """The entry a short name or a Hugging Face id names (ids compare case-insensitively, a moved
    org's old spelling as its new one)."""
    if spec in BY_NAME:
        return BY_NAME[spec]
    wanted = current_id(spec).lower()
    return next((e for e in CATALOGUE if e.repo_id.lower() == wanted), None)


def ram_gb() -> float | None:
    """This machine's memory, GB (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
    except (ValueError, OSError, AttributeError):
        return None


def gpu_gb() -> float | None:
    """The first NVIDIA GPU's memory, GB, from nvidia-smi (no torch import); None without one."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        done = subprocess.run(
            [smi, "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return float(done.stdout.split()[0]) * 1.048576e-3 if done.returncode == 0 else None  # MiB -> GB
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return None


# The forms a model loads in, as `dcode models available` names them: a dtype, or a --quantize kind.
FORMS = ("float32", "bfloat16", *quantize.QUANTIZED)


def memory_gb(entry: Entry, form: str) -> float:
    """The weights' size loaded in `form` (a dtype or int8 / int4), GB, by the bytes per weight the
    loader's quantisation takes (dcode.models.quantize). Example: 0.49B parameters in int8 -> 0.49."""
    dtype, kind = (form, "none") if form in BYTES else ("bfloat16", form)
    return entry.parameters * quantize.bytes_per_parameter(dtype, kind)


def fits(entry: Entry, ram: float | None, gpu: float | None) -> str:
    """Where the weights fit with headroom, best first: on the GPU in bfloat16, int8 or int4, else in
    RAM in float32, bfloat16, int8 or int4 ('GPU (int4)', 'RAM (bfloat16)'); 'no'; '?' when neither
    memory is known. Example: fits(BY_NAME["a2d-coder-0.5b"], 8.0, None) -> 'RAM (float32)'."""
    if gpu is not None:
        for form in FORMS[1:]:
            if memory_gb(entry, form) * HEADROOM <= gpu:
                return f"GPU ({form})"
    if ram is None:
        return "?" if gpu is None else "no"
    for form in FORMS:
        if memory_gb(entry, form) * HEADROOM <= ram:
            return f"RAM ({form})"
    return "no"


def rows(ram: float | None, gpu: float | None) -> list[dict[str, object]]:
    """The catalogue as JSON-ready rows, with what fits this machine."""
    return [
        {
            "name": e.name,
            "id": e.repo_id,
            "family": e.family or None,
            "loads": bool(e.family),
            "parameters_b": e.parameters,
            "download_gb": e.download_gb,
            "licence": e.licence,
            "memory_gb": {form: round(memory_gb(e, form), 2) for form in FORMS},
            "humaneval": e.humaneval,
            "mbpp": e.mbpp,
            "fits": fits(e, ram, gpu),
            "note": e.note,
            "scored_with": e.scored_with or None,
        }
        for e in LISTED
    ]


def hint(model: str, *, terminal: bool, as_json: bool, quiet: bool, env: Mapping[str, str]) -> str | None:
    """The stderr line dcode-tiny's answers carry on a terminal: which model to pull for real code.
    None in pipes, with --json or -q, with DCODE_HINTS=0 (`env`: the CLI's environment), and for
    any other model."""
    if model != "dcode-tiny" or not terminal or as_json or quiet or env.get("DCODE_HINTS", "1") == "0":
        return None
    return (
        f"dcode: hint: dcode-tiny is a 7M-parameter demonstration; for real code run "
        f"`dcode models pull {CPU_PICK}` and use `--model {CPU_PICK}` (`dcode models available` lists more)"
    )
