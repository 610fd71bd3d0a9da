"""The released diffusion code models dcode knows by a short name, as ollama users expect: what
each is (Hugging Face id, family, parameters, download size, licence, the authors' HumanEval and
MBPP), the memory its weights take per dtype, and whether that fits this machine.

Torch-free: `dcode models available` and name resolution must stay fast. Owns the table, short
name -> id, the memory arithmetic, this machine's RAM (os.sysconf) and GPU memory (nvidia-smi,
when there is one), and the hint dcode-tiny's answers carry. Knows nothing about loading.

Sources of the numbers (the authors' own pages; "~" marks an estimate made here):
- Tiny-A2D: ZHZisZZ/dllm examples/a2d/README.md (Table 1: HumanEval / MBPP of the Coder 0.5B
  releases, reproduced with dllm's framework; the Qwen3 0.6B releases' evaluation table); licence
  Apache-2.0 (the model cards' metadata). Parameters: the source models (Qwen2.5-Coder-0.5B-Instruct
  0.49B, Qwen3-0.6B 0.60B, tied heads).
- Dream-Coder-v0-Instruct-7B: its model card (HumanEval 82.9, MBPP 79.6), Apache-2.0, 7.6B.
- LLaDA-8B-Instruct: the LLaDA paper (HumanEval 49.4), MIT.
- CoDA-v0-Instruct: SalesforceAIResearch/CoDA README (HumanEval 54.3, MBPP 47.2), CC-BY-NC-4.0.
- Stable-DiffCoder-8B-Instruct: ByteDance-Seed/Stable-DiffCoder README (86.6 / 85.7), MIT.
- WeDLM-8B-Instruct: Tencent/WeDLM Readme.md (HumanEval 80.49), Apache-2.0; ~8.2B (Qwen3-8B's).
- LLaDA2.0-mini: inclusionAI's model card (HumanEval 86.6), Apache-2.0; 16B MoE, 1.4B active.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

BYTES = {"bfloat16": 2, "float32": 4}  # bytes per parameter of the dtypes dcode runs in
# Weights are not all a run holds: activations, the key/value cache and the runtime take more.
# A model "fits" when its weights times this are below the memory (a margin, not a measurement).
HEADROOM = 1.25


@dataclass(frozen=True)
class Entry:
    name: str  # the short name --model and `dcode models pull` take
    repo_id: str  # the Hugging Face id
    family: str  # dcode.models.FAMILIES key that loads it; "" = released, not loaded by dcode yet
    parameters: float  # in billions (total; a mixture of experts counts every expert)
    download_gb: float  # safetensors as released (bfloat16 unless said)
    licence: str
    humaneval: float | None  # pass@1 as the authors report it
    mbpp: float | None
    note: str = ""

    def memory_gb(self, dtype: str) -> float:
        """The weights' size in `dtype`, GB. Example: 0.49B parameters in bfloat16 -> 0.98."""
        return self.parameters * BYTES[dtype]


CATALOGUE = (
    # The CPU pick: block diffusion (exact cache of finished 32-token blocks), 0.5B.
    Entry("a2d-coder-0.5b", "dllm-collection/Qwen2.5-Coder-0.5B-Instruct-diffusion-bd3lm-v0.1",
          "a2d", 0.49, 0.99, "Apache-2.0", 39.0, 33.2, "block diffusion; the model for a CPU"),
    Entry("a2d-coder-0.5b-mdlm", "dllm-collection/Qwen2.5-Coder-0.5B-Instruct-diffusion-mdlm-v0.1",
          "a2d", 0.49, 0.99, "Apache-2.0", 28.1, 23.0, "full attention"),
    Entry("a2d-qwen3-0.6b", "dllm-collection/Qwen3-0.6B-diffusion-bd3lm-v0.1",
          "a2d", 0.60, 1.19, "Apache-2.0", 46.3, 38.2, "block diffusion; general, not code-tuned"),
    Entry("a2d-qwen3-0.6b-mdlm", "dllm-collection/Qwen3-0.6B-diffusion-mdlm-v0.1",
          "a2d", 0.60, 1.19, "Apache-2.0", 30.5, 29.2, "full attention"),
    Entry("dream-coder-7b", "Dream-org/Dream-Coder-v0-Instruct-7B",
          "dream", 7.6, 15.2, "Apache-2.0", 82.9, 79.6, "the model for a GPU"),
    Entry("llada-8b", "GSAI-ML/LLaDA-8B-Instruct", "llada", 8.0, 16.0, "MIT", 49.4, None),
    Entry("coda-1.7b", "Salesforce/CoDA-v0-Instruct", "coda", 1.7, 6.9, "CC-BY-NC-4.0 (non-commercial)", 54.3, 47.2,
          "float32 weights as released"),
    Entry("stable-diffcoder-8b", "ByteDance-Seed/Stable-DiffCoder-8B-Instruct", "stable_diffcoder", 8.0, 16.0, "MIT",
          86.6, 85.7, "block diffusion, blocks of 4"),
    Entry("wedlm-8b", "tencent/WeDLM-8B-Instruct", "wedlm", 8.2, 16.4, "Apache-2.0", 80.5, None,
          "causal, decodes filled tokens first; no cache in dcode"),
    Entry("llada2-mini", "inclusionAI/LLaDA2.0-mini", "llada2", 16.0, 32.0, "Apache-2.0", 86.6, None,
          "mixture of experts, 1.4B active"),
)  # fmt: skip
BY_NAME = {entry.name: entry for entry in CATALOGUE}
CPU_PICK, GPU_PICK = "a2d-coder-0.5b", "dream-coder-7b"


def find(spec: str) -> Entry | None:
    """The entry a short name or a Hugging Face id names (ids compare case-insensitively)."""
    if spec in BY_NAME:
        return BY_NAME[spec]
    return next((e for e in CATALOGUE if e.repo_id.lower() == spec.lower()), None)


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


def fits(entry: Entry, ram: float | None, gpu: float | None) -> str:
    """Where the weights fit with headroom: 'GPU (bfloat16)', 'RAM (float32)', 'RAM (bfloat16)' or
    'no', best first; '?' when neither memory is known.
    Example: fits(BY_NAME["a2d-coder-0.5b"], 8.0, None) -> 'RAM (float32)'."""
    if gpu is not None and entry.memory_gb("bfloat16") * HEADROOM <= gpu:
        return "GPU (bfloat16)"
    if ram is None:
        return "?" if gpu is None else "no"
    for dtype in ("float32", "bfloat16"):
        if entry.memory_gb(dtype) * HEADROOM <= ram:
            return f"RAM ({dtype})"
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
            "memory_gb": {dtype: round(e.memory_gb(dtype), 2) for dtype in BYTES},
            "humaneval": e.humaneval,
            "mbpp": e.mbpp,
            "fits": fits(e, ram, gpu),
            "note": e.note,
        }
        for e in CATALOGUE
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
