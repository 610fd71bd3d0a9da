"""What the sampler needs from a model: a protocol and a record of facts. No torch import.

A model is anything callable from token ids (B, L) to logits (B, L, V) that carries `facts` and
can make a key/value cache (or says it cannot). The embedded model, every real family and the
tests' fake all satisfy it; nothing inherits from a dcode class. A uniform-noise model
(facts.noise == "uniform", DiffusionGemma) satisfies UniformDenoiser, which adds two things.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    import torch


class ModelError(Exception):
    """A model folder that is missing, incomplete or of an unsupported kind (one-line message)."""


@dataclass(frozen=True)
class ModelFacts:
    name: str  # what the user asked for: a folder, an id, or "dcode-tiny"
    family: str  # the family module that loaded it
    mask_id: int  # the token that marks a position still to be generated
    eos_ids: frozenset[int]  # tokens that end the answer
    pad_id: int  # filler after the end of the answer
    shifted: bool  # logits for position i come from hidden state i-1 (Dream, Fast-dLLM v2)
    block: int | None  # block-causal attention block size; None = full attention
    max_length: int  # longest canvas (prompt + answer) the model's positions allow
    vocab_size: int
    # How training corrupted tokens. "mask": a position still to fill holds mask_id and the model
    # sees it. "uniform" (DiffusionGemma): it holds a random token, drawn afresh before every pass;
    # mask_id is then only the sampler's placeholder in the canvases it yields, never fed.
    noise: Literal["mask", "uniform"] = "mask"
    # Where block-causal attention counts its blocks from. "zero": blocks [0, block), [block, 2 block)
    # (SDAR, Fast-dLLM v2). "answer": the answer's first position starts a block and the prompt's
    # blocks count back from it (Tiny-A2D's bd3lm pads the prompt on the left to a block boundary);
    # such a model is called with origin=<the answer's first position>.
    block_origin: Literal["zero", "answer"] = "zero"
    # What the attention sees besides the block: "full" (every position), or "filled-first": causal
    # attention over the canvas reordered, filled tokens first and masks after (WeDLM; the model
    # reorders inside its call, so the sampler need not know).
    attention: Literal["full", "filled-first"] = "full"
    prompt: str = "new"  # prompt template in dcode/prompts ("new-bare" for models trained on bare requests)
    # The family's recommended sampler settings, as SamplerConfig field names -> values (e.g.
    # {"ordering": "entropy", "temperature": 0.1}); the CLI applies them to options the user left
    # unset (dcode.config.merge_family_defaults). Not hashed: a dict.
    defaults: Mapping[str, object] = field(default_factory=dict, hash=False)
    # Keyword arguments the chat template is rendered with, as the authors render it (Tiny-A2D:
    # {"enable_thinking": False}); dcode.models.chat.render applies them. Not hashed: a dict.
    chat_options: Mapping[str, object] = field(default_factory=dict, hash=False)
    # The family's decodings by effort level (dcode.config.EFFORTS: "low", "medium", "high"), each
    # whole settings like `defaults` (medium is `defaults`); a level missing here is `defaults`.
    efforts: Mapping[str, Mapping[str, object]] = field(default_factory=dict, hash=False)

    def decoding(self, effort: str | None) -> Mapping[str, object]:
        """The family's settings at an effort level (None: medium, its defaults).
        Example: LLaDA2.1's decoding("low") -> {..., "threshold": 0.5, "edit_threshold": 0.0}."""
        return self.efforts.get(effort, self.defaults) if effort else self.defaults


class Cache(Protocol):
    """Keys/values of the first `length` canvas positions."""

    @property
    def length(self) -> int: ...

    def crop(self, length: int) -> None: ...


class Denoiser(Protocol):
    facts: ModelFacts
    tokenizer: Any

    def __call__(self, ids: torch.Tensor, cache: Any = None) -> torch.Tensor: ...

    def new_cache(self) -> Cache | None: ...

    @property
    def device(self) -> torch.device: ...


class UniformDenoiser(Denoiser, Protocol):
    """A uniform-noise block-diffusion model (DiffusionGemma): an encoder writes the context
    before a block into the cache, clean and once; then each pass denoises the block alone,
    reading the cache without writing it, optionally fed the previous pass's logits
    (self-conditioning). The sampler calls extend(context, cache), then model(block, cache, previous=...)."""

    def __call__(
        self, ids: torch.Tensor, cache: Any = None, *, previous: torch.Tensor | None = None
    ) -> torch.Tensor: ...  # ids (B, n) at positions [P, P+n), P = cache.length -> logits (B, n, V)

    def extend(self, ids: torch.Tensor, cache: Any) -> None: ...  # encode ids (B, n) at [P, P+n) into the cache

    def new_cache(self) -> Cache: ...  # always a cache: the block reads its context from it


class PackedDenoiser(Denoiser, Protocol):
    """A block-causal model that can run several rows packed into one sequence after its cache,
    each row seeing the cache, the shared pieces and itself (dcode.models.native.packed_mask), and
    make logits only from the final hidden states the sampler reads."""

    def packed(
        self, ids: torch.Tensor, positions: torch.Tensor, segments: torch.Tensor, cache: Any, origin: int = 0
    ) -> torch.Tensor: ...  # ids, positions, segments (N,) -> final hidden states (N, hidden)

    def logits(self, hidden: torch.Tensor, exact: bool = True) -> torch.Tensor: ...  # (n, hidden) -> (n, V) float32


class WindowDenoiser(Denoiser, Protocol):
    """A full-attention model that offers Fast-dLLM's approximate cache (optional: the sampler
    looks for new_window_cache). refresh runs the whole canvas and caches every position outside
    the window; window then feeds the window's tokens alone against that cache."""

    def new_window_cache(self) -> Any: ...  # None when the model has an exact cache instead

    def refresh(self, ids: torch.Tensor, window: tuple[int, int], cache: Any) -> torch.Tensor: ...  # (B, L, V)

    def window(self, ids: torch.Tensor, cache: Any) -> torch.Tensor: ...  # ids (B, hi-lo) -> (B, hi-lo, V)
