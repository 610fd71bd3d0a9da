"""The event stream as types: what `new`, `edit` and `repair` yield, and the one way to drain it.

A run is one stream: `Started` (a sampler run begins: the draft, or one try of a repair round), a
`Step` per forward pass, a `RepairRound` after each repair try, and a result record at the end
(`Finished` for new, `Edited` for edit, `Repaired` for repair). The CLI, the live view
(dcode.render.Describer), the benchmarks and the server all consume it, matching on these types,
and "just the result" is `drain(stream)`.

Imports nothing heavy (torch only for type checking): a Step's tensors are read by its consumers.
Every event but Step holds only numbers, strings, bools, tuples and other events, so
`dataclasses.asdict(event)` is ready for json.dumps. Knows nothing about models, files or the
terminal.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, overload

if TYPE_CHECKING:
    import torch

    from dcode.syntax import Issue


def rates(tokens: int, forward: int, seconds: float) -> dict[str, object]:
    """The speed keys of a result's `--json` (local or through an endpoint, where a pass is a chunk).
    Example: rates(64, 16, 2.0) -> {"forward_passes": 16, "tokens_per_forward": 4.0, "seconds": 2.0,
    "tokens_per_second": 32.0}."""
    return {
        "forward_passes": forward,
        "tokens_per_forward": round(tokens / forward, 3) if forward else 0.0,
        "seconds": round(seconds, 3),
        "tokens_per_second": round(tokens / seconds, 1) if seconds else 0.0,
    }


def regions(region: tuple[int, int], new_region: tuple[int, int]) -> dict[str, object]:
    """The byte spans of an edit's `--json`: the region rewritten and its replacement."""
    return {
        "region": {"start_byte": region[0], "end_byte": region[1]},
        "new_region": {"start_byte": new_region[0], "end_byte": new_region[1]},
    }


@dataclass(frozen=True)
class Started:
    """A sampler run begins on a canvas: the draft (repair_round=0) or one try of a repair round.

    Canvas positions from span[0] to span[1] are what the user sees (the answer; for edit and
    repair the whole file), so a view never tokenises the prompt to find where the answer starts."""

    span: tuple[int, int]  # [start, end) canvas positions of the answer; start = the prompt's token count
    fill: tuple[tuple[int, int], ...]  # [start, end) canvas ranges this run fills (masked on entry)
    repair_round: int = 0  # 0 for the draft; k for a try of the repair pass's k-th round
    attempt: int = 0  # 1-based try within the repair round; 0 for the draft

    @property
    def prompt_tokens(self) -> int:
        return self.span[0]


@dataclass(frozen=True)
class Step:
    """One forward pass of dcode.sampler.denoise."""

    canvas: torch.Tensor  # (L,) token ids after this pass (on the CPU)
    committed: torch.Tensor  # (n,) canvas positions filled by this pass
    scores: torch.Tensor  # (n,) their ordering scores (higher = more certain)
    block: tuple[int, int]  # the block being decoded, [start, end)
    forward: int  # forward passes so far, this one included
    input_tokens: int  # tokens fed to this forward pass (less than L with the cache)
    masked: int  # positions left to fill after this pass (they hold the mask id in `canvas`)
    done: bool  # nothing is left to fill
    renoised: int = 0  # positions fed as fresh random tokens to this pass (uniform-noise models)
    rows: int = 1  # canvases this pass fed side by side (the verify rule's drafts)


@dataclass(frozen=True)
class Span:
    """One stretch of text a repair round re-masked."""

    start_byte: int  # [start_byte, end_byte) in the round's input text, snapped to whole tokens
    end_byte: int
    tokens: tuple[int, int]  # [first, end) token indices of that text re-masked for this span
    reason: str  # the issue(s) and how far the round widened them


@dataclass(frozen=True)
class RepairRound:
    """One try of a repair round, after the sampler filled its masks."""

    round: int  # 1-based
    attempt: int  # 1-based try within the round: the same spans, refilled with another seed
    issues: tuple[Issue, ...]  # what the round addressed (kind, line, message, span)
    spans: tuple[Span, ...]  # what it re-masked, merged, in text order
    tokens: int  # tokens re-masked
    masks: int  # masks placed: the re-masked tokens plus room for a longer fix
    forward: int  # forward passes this round
    issues_after: int  # issues in the round's result
    kept: bool  # the result had fewer issues than the best so far and replaced it
    restored: int  # lines of the result put back as they were, since the fix did not need them


@dataclass(frozen=True)
class Repaired:
    """The repair pass's result: the last event of repair(), and part of Finished and Edited."""

    code: str  # the best text seen: never more issues than the input
    issues_before: int
    issues_after: int
    issues: tuple[Issue, ...]  # what is left in code
    rounds: int  # rounds that ran the sampler
    attempts: int  # sampler runs over all rounds (a round tries again until one is kept)
    spans: int  # spans regenerated, over all rounds
    tokens: int  # tokens re-masked, over all rounds
    forward: int  # extra forward passes, over all rounds
    seconds: float
    note: str = ""  # why repair stopped early or did not run ("" when it simply finished)

    def metadata(self) -> dict[str, object]:
        """What `--json` reports about the repair pass."""
        return {
            "issues_before": self.issues_before,
            "issues_after": self.issues_after,
            "rounds": self.rounds,
            "attempts": self.attempts,
            "spans": self.spans,
            "tokens_regenerated": self.tokens,
            "extra_forward_passes": self.forward,
            "extra_seconds": round(self.seconds, 3),
            "issues": [f"{i.line}:{i.column}: {i.message}" for i in self.issues],
            **({"note": self.note} if self.note else {}),
        }


@dataclass(frozen=True)
class Finished:
    """The result of `new`: the last event of pipeline.new."""

    code: str  # the answer, trailing end/pad tokens removed, repaired if repair ran
    prompt_tokens: int
    tokens: int  # answer tokens kept by the draft
    canvas: int  # answer positions the sampler had to fill
    forward: int  # forward passes of the draft
    seconds: float  # sampling wall time of the draft
    repair: Repaired | None = None  # what the repair pass did (None: off or nothing to check)
    draft: str = ""  # the answer as sampled, before repair (code when repair changed nothing)

    @property
    def tokens_per_forward(self) -> float:
        return self.tokens / self.forward if self.forward else 0.0

    @property
    def syntax_errors(self) -> int | None:
        """Issues left in the code (None when it was not checked)."""
        return self.repair.issues_after if self.repair is not None else None

    def metadata(self) -> dict[str, object]:
        """What `dcode new --json` prints besides the code."""
        out: dict[str, object] = {
            "prompt_tokens": self.prompt_tokens,
            "tokens": self.tokens,
            "canvas": self.canvas,
            **rates(self.tokens, self.forward, self.seconds),
        }
        if self.repair is not None:
            out["repair"] = self.repair.metadata()
        return out


@dataclass(frozen=True)
class Edited:
    """The result of `edit`: the last event of pipeline.edit."""

    code: str  # the new file: the source with the region rewritten (and repaired, if that was kept)
    region: tuple[int, int]  # the byte span of the source that was rewritten
    new_region: tuple[int, int]  # the byte span of its replacement in code
    prompt_tokens: int
    context_tokens: int  # tokens of the unchanged text around the region, on the canvas
    region_tokens: int  # tokens of the region before the edit
    tokens: int  # tokens the draft kept for the region (end and pad tokens dropped)
    canvas: int  # masks the sampler filled: the region's budget
    forward: int  # forward passes of the draft
    seconds: float  # sampling wall time of the draft
    original_errors: int | None  # syntax issues in the source (None: the language is not checked)
    errors_after: int | None  # syntax issues left in code
    repair: Repaired | None = None  # what the repair pass did (None: not needed, or off)
    repair_used: bool = False  # its result is in code (it is dropped if it touched text outside the region)
    window: dict[str, object] | None = None  # what of the file the canvas held (window.Window.metadata)

    @property
    def tokens_per_forward(self) -> float:
        return self.tokens / self.forward if self.forward else 0.0

    @property
    def broke(self) -> bool:
        """The source parsed and code does not."""
        return self.original_errors == 0 and bool(self.errors_after)

    def metadata(self) -> dict[str, object]:
        """What `dcode edit --json` prints besides the diff and the paths."""
        out: dict[str, object] = {
            **regions(self.region, self.new_region),
            "prompt_tokens": self.prompt_tokens,
            "context_tokens": self.context_tokens,
            "region_tokens": self.region_tokens,
            "tokens": self.tokens,
            "canvas": self.canvas,
            **rates(self.tokens, self.forward, self.seconds),
            "original_errors": self.original_errors,
            "errors_after": self.errors_after,
        }
        if self.window is not None:
            out["window"] = self.window
        if self.repair is not None:
            out["repair"] = {**self.repair.metadata(), "used": self.repair_used}
        return out


Result = Finished | Edited | Repaired  # what a stream ends with
Event = Started | Step | RepairRound | Result  # anything a stream yields

E = TypeVar("E")
R = TypeVar("R")


@overload
def drain(events: Iterable[E], each: Callable[[E], object] | None = None) -> E | None: ...
@overload
def drain(events: Iterable[E], each: Callable[[E], object] | None = None, *, result: type[R]) -> R: ...


def drain(events: Iterable[Any], each: Callable[[Any], object] | None = None, *, result: type | None = None) -> Any:
    """Run a stream to its end and return its last event: the result record (Finished, Edited,
    Repaired), or for denoise() alone the final Step; None if the stream yielded nothing.

    `each(event)` sees every event first, in order (a view draws it, a benchmark counts it); an
    exception from it stops the stream. A generator is closed here, so its cleanup runs in the
    draining thread. With `result`, the last event must be one (TypeError otherwise).
    Example: drain(pipeline.new(model, "add two numbers", "python", 64, config), result=Finished)."""
    last = None
    try:
        for last in events:
            if each is not None:
                each(last)
    finally:
        if isinstance(events, Generator):
            events.close()
    if result is not None and not isinstance(last, result):
        raise TypeError(f"the stream ended with {type(last).__name__}, not {result.__name__}")
    return last
