"""The event stream as types: what `new`, `edit` and `repair` yield, and the one way to drain it.

A run is one stream, whichever filler fills its masks (dcode.filler: the local sampler or an
endpoint): `Started` (a fill begins: the draft, or one try of a repair round), a `Step` per
forward pass of the local sampler or a `Drawn` frame per chunk a server streams, a `RepairRound`
after each repair try, and a result record at the end (`Finished` for new, `Edited` for edit,
`Repaired` for repair). The CLI, the live view (dcode.render.Describer), the benchmarks and the
server all consume it, matching on these types, and "just the result" is `drain(stream)`.

Imports nothing heavy (torch only for type checking): a Step's tensors are read by its consumers.
Every event but Step holds only numbers, strings, bools, tuples and other events, so
`dataclasses.asdict(event)` is ready for json.dumps. Knows nothing about models, files or the
terminal.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

if TYPE_CHECKING:
    import torch

    from dcode.syntax import Issue


# What one forward of a filler is: a pass of the local sampler (or of a dcode server, which reports
# its passes), or a streamed chunk of a plain server, which has no passes to report.
Unit = Literal["pass", "chunk"]


@dataclass(frozen=True)
class Frame:
    """What one frame of the live view shows. Positions are offsets into the answer region."""

    pieces: tuple[str | None, ...]  # per answer position: its decoded text, None while masked
    committed: frozenset[int]  # positions filled by the latest pass
    remasked: frozenset[int]  # positions the repair pass masked again (drawn apart while masked)
    model: str
    device: str
    forward: int  # forward passes so far ("pass n"), or chunks through a plain server
    masked: int  # masked positions left
    filled: int  # tokens filled so far, for tok/pass and tok/s
    elapsed: float  # seconds of sampling so far
    language: str = "python"  # for syntax highlighting once settled
    settled: bool = False  # the answer is final: highlight it as code
    repair_round: int = 0  # 0 while drafting; k during the repair pass's k-th filling (a round's tries each count)
    unit: Unit = "pass"  # what `forward` counts

    @property
    def tokens_per_pass(self) -> float:
        return self.filled / self.forward if self.forward else 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.filled / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def code(self) -> str:
        return "".join(piece or "" for piece in self.pieces)


def rates(tokens: int, forward: int, seconds: float) -> dict[str, object]:
    """The speed keys of a result's `--json` (local or through an endpoint, where a pass may be a chunk).
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
    regions: tuple[tuple[int, int], ...]  # [start, end) canvas ranges this run fills (masked on entry)
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
class Drawn:
    """One chunk a server streamed, as the live view draws it: what an endpoint yields instead of
    Steps (a server sends text, or a dcode server its own frames, never token ids)."""

    frame: Frame


@dataclass(frozen=True)
class Span:
    """One stretch of text a repair round re-masked."""

    start_byte: int  # [start_byte, end_byte) in the round's input text (locally snapped to whole tokens)
    end_byte: int
    tokens: tuple[int, int]  # [first, end) token indices of that text re-masked ((0, 0) through an endpoint)
    reason: str  # the issue(s) and how far the round widened them


@dataclass(frozen=True)
class RepairRound:
    """One try of a repair round, after the sampler filled its masks."""

    round: int  # 1-based
    attempt: int  # 1-based try within the round: the same spans, refilled with another seed
    issues: tuple[Issue, ...]  # what the round addressed (kind, line, message, span)
    spans: tuple[Span, ...]  # what it re-masked, merged, in text order
    tokens: int  # tokens re-masked (through an endpoint: tokens the server wrote)
    masks: int  # masks placed: the re-masked tokens plus room for a longer fix (an endpoint: max tokens asked)
    forward: int  # forward passes this round (chunks, through a plain server)
    issues_after: int  # issues in the round's result
    kept: bool  # the result had fewer issues than the best so far and replaced it
    restored: int  # lines of the result put back as they were, since the fix did not need them


@dataclass(frozen=True)
class Repaired:
    """The repair pass's result: the last event of dcode.flows.repair, and part of Finished and Edited."""

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
    unit: Unit = "pass"  # what `forward` counts

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
    """The result of `new`: the last event of dcode.flows.new."""

    code: str  # the answer, trailing end/pad tokens removed, repaired if repair ran
    prompt_tokens: int
    tokens: int  # answer tokens kept by the draft
    masks: int  # answer positions the sampler had to fill (--json's "canvas")
    forward: int  # forward passes of the draft
    seconds: float  # sampling wall time of the draft
    repair: Repaired | None = None  # what the repair pass did (None: off or nothing to check)
    draft: str = ""  # the answer as sampled, before repair (code when repair changed nothing)
    unit: Unit = "pass"  # what `forward` counts
    extra: dict[str, object] = field(default_factory=dict)  # the filler's own --json keys (a stream's kind)

    @property
    def syntax_errors(self) -> int | None:
        """Issues left in the code (None when it was not checked)."""
        return self.repair.issues_after if self.repair is not None else None

    def metadata(self) -> dict[str, object]:
        """What `dcode new --json` prints besides the code."""
        out: dict[str, object] = {
            "prompt_tokens": self.prompt_tokens,
            "tokens": self.tokens,
            "canvas": self.masks,
            **rates(self.tokens, self.forward, self.seconds),
            **self.extra,
        }
        if self.repair is not None:
            out["repair"] = self.repair.metadata()
        return out


@dataclass(frozen=True)
class Edited:
    """The result of `edit`: the last event of dcode.flows.edit."""

    code: str  # the new file: the source with the region rewritten (and repaired, if that was kept)
    region: tuple[int, int]  # the byte span of the source that was rewritten
    new_region: tuple[int, int]  # the byte span of its replacement in code
    prompt_tokens: int
    context_tokens: int | None  # tokens of the unchanged text around the region, on the canvas (None: a server's)
    region_tokens: int | None  # tokens of the region before the edit (None: a server's)
    tokens: int  # tokens the draft kept for the region (end and pad tokens dropped)
    masks: int  # masks the sampler filled: the region's budget (--json's "canvas")
    forward: int  # forward passes of the draft
    seconds: float  # sampling wall time of the draft
    original_errors: int | None  # syntax issues in the source (None: the language is not checked)
    errors_after: int | None  # syntax issues left in code
    repair: Repaired | None = None  # what the repair pass did (None: not needed, or off)
    repair_used: bool = False  # its result is in code (it is dropped if it touched text outside the region)
    unit: Unit = "pass"  # what `forward` counts
    extra: dict[str, object] = field(default_factory=dict)  # the filler's own --json keys (the window, a stream's kind)

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
            "canvas": self.masks,
            **rates(self.tokens, self.forward, self.seconds),
            "original_errors": self.original_errors,
            "errors_after": self.errors_after,
            **self.extra,
        }
        if self.repair is not None:
            out["repair"] = {**self.repair.metadata(), "used": self.repair_used}
        return out


Result = Finished | Edited | Repaired  # what a stream ends with
Event = Started | Step | Drawn | RepairRound | Result  # anything a stream yields

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
    Example: drain(flows.new(LocalFiller(model, config), "add two numbers", "python", 64), result=Finished)."""
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


def relayed(events: Iterable[Any], result: type[R]) -> Generator[Any, None, R]:
    """Yield a stream's events but its `result` record, and return that record: `done = yield from
    relayed(stream, Repaired)` passes a sub-stream on and keeps what it ended with.
    The stream must yield one (AssertionError otherwise)."""
    found: R | None = None
    for event in events:
        if isinstance(event, result):
            found = event
        else:
            yield event
    assert found is not None
    return found
