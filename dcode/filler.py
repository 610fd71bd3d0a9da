"""What fills masked spans given their context: the protocol the flows of dcode.flows run over.

Two fillers satisfy it: dcode.localfill.LocalFiller (the local sampler over a token canvas) and
dcode.remote.filler.EndpointFiller (a served model: fill in the middle where the server takes a
`suffix`, chat otherwise). A filler yields the events of dcode.events while it works (Started, then
Steps or Drawn frames) and returns (StopIteration's value) what it wrote. Everything else - which
spans a repair rewrites, judging a fill, splicing, checking, the result records - is the flows'.

Imports nothing heavy and nothing above dcode.events. Knows nothing about argv, files or the terminal.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol
from urllib.parse import urlsplit

from dcode.events import Event, Span, Unit

if TYPE_CHECKING:
    from dcode.spans import Origin
    from dcode.syntax import Issue


class FillError(RuntimeError):
    """A filler could not answer (a server failed mid-way, or its fill repeats the text after it):
    one line. A repair pass that meets one stops and keeps the best text it had; `dcode fix`'s loop
    (dcode.fixloop) skips the region and goes on."""


@dataclass(frozen=True)
class Draft:
    """What a filler wrote for a whole answer (new) or one region (edit), and its counters."""

    text: str  # as written: a new file's code, or a region's text before it is fitted to its lines
    prompt_tokens: int  # tokens of the request (a server's usage; 0 when it sent none)
    tokens: int  # tokens written (end and pad tokens dropped; a server's usage, else the text's pieces)
    masks: int  # positions it had to fill (a server: the max_tokens asked)
    forward: int  # forward passes (a plain server: streamed chunks)
    seconds: float
    unit: Unit = "pass"
    context_tokens: int | None = None  # an edit: tokens of the file around the region on the canvas
    region_tokens: int | None = None  # an edit: tokens of the region before the edit
    extra: dict[str, object] = field(default_factory=dict)  # the filler's own --json keys
    checked: bool = False  # the filler already ran a repair of its own (a dcode server did)


@dataclass(frozen=True)
class Region:
    """A byte span of a file to regenerate, the instruction it is regenerated with and its masks
    (an update snippet's part where dcode.merge placed it)."""

    start: int
    end: int
    instruction: str
    length: int


@dataclass(frozen=True)
class Identity:
    """Who fills, as the summary line, a --json report and the history name it (never a key)."""

    model: str
    device: str | None = None  # a local model's device
    dtype: str | None = None  # the dtype a local model runs in
    endpoint: str | None = None  # a served model's address, without user, password or query
    quantize: str = "none"  # a local model's quantised weights: none, int8, int4 (dcode.models.quantize)

    @property
    def report(self) -> dict[str, object]:
        """Its keys in a --json report: the model, and the dtype and quantisation it ran in or the endpoint."""
        if self.endpoint is not None:
            return {"model": self.model, "endpoint": self.endpoint}
        return {"model": self.model, "dtype": self.dtype, "quantize": self.quantize}

    @property
    def shown(self) -> str:
        """The summary line's name for it: "dcode-tiny in bfloat16", "dcode-tiny in bfloat16 with int8
        weights", "mercury-2 at host"."""
        if self.endpoint is not None:
            return f"{self.model} at {urlsplit(self.endpoint).hostname or ''}"
        weights = f" with {self.quantize} weights" if self.quantize != "none" else ""
        return f"{self.model} in {self.dtype}{weights}" if self.dtype else self.model


@dataclass(frozen=True)
class Reading:
    """How the live view reads a filler's steps: a local model's token canvas (its tokenizer, mask
    id and the ids it hides), or a server's frames (no tokenizer)."""

    tokenizer: object | None = None
    mask_id: int = -1
    hidden: frozenset[int] = frozenset()


@dataclass(frozen=True)
class Fills:
    """What a repair try wrote: one text per span of its plan, in order."""

    texts: list[str]
    forward: int  # passes (or chunks) the try took
    tokens: int  # tokens re-masked (a server: tokens it wrote)
    masks: int  # masks placed (a server: max tokens asked)


class Plan(Protocol):
    """A repair round's spans as the filler will fill them (a local plan snaps them to tokens)."""

    @property
    def spans(self) -> tuple[Span, ...]: ...


class Filler(Protocol):
    """Something that fills masked spans given their context. `model` names it in the summary
    line, `device` in the live view's status bar; `unit` is what its forward count counts."""

    @property
    def model(self) -> str: ...
    @property
    def device(self) -> str: ...
    @property
    def unit(self) -> Unit: ...

    def identity(self) -> Identity:
        """Who fills: the model, and its device and dtype or the endpoint's address."""
        ...

    def reading(self) -> Reading:
        """How the live view (dcode.render.Describer) reads this filler's steps."""
        ...

    def draft(self, request: str, language: str, length: int, repair: bool) -> Generator[Event, None, Draft]:
        """A whole new file for `request`, at most `length` tokens (`repair`: the flow will repair it)."""
        ...

    def region(
        self, source: str, region: tuple[int, int], instruction: str, language: str, length: int | None, name: str
    ) -> Generator[Event, None, Draft]:
        """The new text of the byte span `region` of source, as `instruction` asks."""
        ...

    def placed(
        self, source: str, region: tuple[int, int], snippet: str, language: str, length: int | None, name: str
    ) -> tuple[Region, ...] | None:
        """Where this filler regenerates an update snippet's parts in the byte span `region` of
        source, each sized for its model (dcode.merge.regions; `length` caps each), or None when it
        takes the snippet whole (a server's apply path places it)."""
        ...

    def plan(
        self, text: str, spans: Sequence[tuple[int, int, str]], request: str, language: str, blamed: Sequence[Issue]
    ) -> Plan | str:
        """A repair round's byte spans (start, end, reason) made ready to fill, or why they cannot
        be (a one-line note). `request` is what the text was written for; `blamed`, the issues."""
        ...

    def fill(self, plan: Plan, round_attempt: tuple[int, int], origin: Origin) -> Generator[Event, None, Fills]:
        """One try (round, attempt) of a repair round: a new text for each span of `plan`."""
        ...
