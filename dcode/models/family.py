"""What a family module declares: the records dcode.models.families builds its registry from.

Torch-free. A family module (dcode/models/families/<name>.py) states one `Family`: how a
config.json is recognized as its own, what its checkpoints mean (facts.FamilyFacts, or a function
that states them), the released checkpoints the catalogue names (`Entry`), its loader and its
released-format test checkpoint writers. Knows nothing about weights, sampling or the terminal.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dcode.models import facts
from dcode.models.base import ModelFacts

if TYPE_CHECKING:
    import torch

    from dcode.models.base import Denoiser

BYTES = {"bfloat16": 2, "float32": 4}  # bytes per parameter of the dtypes dcode runs in

# (folder, config.json, tokenizer, name) -> the facts of a checkpoint
StateFacts = Callable[[Path, Mapping[str, Any], Any, str], ModelFacts]
# (folder, device, dtype, name, config.json) -> a denoiser; imports torch when called
Loader = Callable[[Path, "torch.device", "torch.dtype", str, dict[str, Any]], "Denoiser"]
# (folder, dcode.testing.kit.Size, device, seed, **options) -> parameter count; imports torch when called
Writer = Callable[..., int]


@dataclass(frozen=True)
class Entry:
    """A released checkpoint the catalogue names (`dcode models available`)."""

    name: str  # the short name --model and `dcode models pull` take
    repo_id: str  # the Hugging Face id
    family: str  # the Family.name that loads it; "" = released, not loaded by dcode yet
    parameters: float  # in billions (total; a mixture of experts counts every expert)
    download_gb: float  # safetensors as released (bfloat16 unless said)
    licence: str
    humaneval: float | None  # pass@1 as the authors report it
    mbpp: float | None
    note: str = ""

    def memory_gb(self, dtype: str) -> float:
        """The weights' size in `dtype`, GB. Example: 0.49B parameters in bfloat16 -> 0.98."""
        return self.parameters * BYTES[dtype]


@dataclass(frozen=True, kw_only=True)
class Family:
    """One family dcode loads, as its module declares it."""

    name: str  # what ModelFacts.family reports; the module's own name
    model_types: frozenset[str]  # config.json model_type, lower-case
    architectures: frozenset[str] = frozenset()  # config.json classes, tried when model_type is unknown
    # auto_map modules ("modeling_x" of "modeling_x.Class"), for a release whose model_type and
    # class names are another model's (Stable-DiffCoder's "llama" + LlamaForCausalLM).
    modules: frozenset[str] = frozenset()
    facts: facts.FamilyFacts | None = None  # a mask-diffusion family's beliefs; None: state_facts
    state_facts: StateFacts | None = None  # how a family of another kind states them (DiffusionGemma)
    catalogue: tuple[Entry, ...] = ()  # its released checkpoints, as `dcode models available` lists them
    load: Loader  # reads a checkpoint folder; heavy imports happen inside it
    # checkpoint name -> writer of a random checkpoint in the released format (dcode.testing.checkpoints)
    checkpoints: Mapping[str, Writer] = field(default_factory=dict)

    def state(self, folder: Path, config: Mapping[str, Any], tokenizer: Any, name: str) -> ModelFacts:
        """The facts of a checkpoint of this family (a transformers tokenizer or a TokenTable)."""
        if self.facts is not None:
            return facts.state(self.name, self.facts, folder, config, tokenizer, name)
        if self.state_facts is None:
            raise TypeError(f"family {self.name} states no facts")
        return self.state_facts(folder, config, tokenizer, name)
