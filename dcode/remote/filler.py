"""dcode.filler.Filler over a served model: what dcode.flows' new, edit and repair ask of an endpoint.

Owns: a whole file as one chat request (dcode.remote.fill.new), an edit's region through the
server's apply path (dcode.remote.apply) or, like a repair span, as a fill in the middle with its
chat fallback (dcode.remote.fill.middle), the spans of a repair round as
byte spans (a server has no tokens to snap them to), the sampling of a round's later tries, and the
live view's frames of several requests drawn as one run in their file (Clock). Everything else
(checking, judging, splicing, the records) is the flows'. Knows nothing about argv or the terminal.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from dcode.config import retried
from dcode.events import Drawn, Event, Frame, Span, Started, Unit, relayed
from dcode.filler import Draft, Fills, Identity, Plan, Reading, Region
from dcode.remote import apply as applying
from dcode.remote import fill
from dcode.remote.client import Endpoint
from dcode.remote.fill import Sampling
from dcode.remote.streams import Answer, Mode, pieces
from dcode.spans import Origin, fit_line_span
from dcode.syntax import Issue

if TYPE_CHECKING:
    from dcode.constrain import Grammar


def fill_budget(old: str, room: int) -> int:
    """max_tokens for a span's fill: its tokens (a token is 2-4 bytes of code) plus room to grow,
    as a local repair (tokens + 25%) or edit (tokens + 50%, at least 16) gives its masks.
    Example: fill_budget("    return w * h +", 16) -> 25."""
    return len(old.encode()) // 2 + room


@dataclass
class Clock:
    """The run's counters, so the frames of several requests read as one run (chunk n, tok/s)."""

    began: float = field(default_factory=time.perf_counter)
    forward: int = 0
    filled: int = 0
    round: int = 0

    def around(self, frame: Frame, before: list[str | None], after: list[str | None]) -> Frame:
        """A fill's frame shown in its file: before + the fill + after, counters over the run."""
        shift = len(before)
        return replace(
            frame,
            pieces=(*before, *frame.pieces, *after),
            committed=frozenset(i + shift for i in frame.committed),
            forward=self.forward + frame.forward,
            filled=self.filled + frame.filled,
            elapsed=time.perf_counter() - self.began,
            repair_round=self.round,
        )

    def masked(self, model: str, device: str, before: list[str | None], old: str, after: list[str | None]) -> Frame:
        """The file with a span masked again, before its fill arrives."""
        holes = len(pieces(old))
        return Frame(
            (*before, *([None] * holes), *after),
            frozenset(),
            frozenset(range(len(before), len(before) + holes)),
            model,
            device,
            self.forward,
            holes,
            self.filled,
            time.perf_counter() - self.began,
            repair_round=self.round,
            unit="chunk",
        )


@dataclass(frozen=True)
class BytePlan:
    """A repair round's spans through an endpoint: byte spans of `text`, merged."""

    spans: tuple[Span, ...]
    text: str
    request: str
    language: str


@dataclass
class EndpointFiller:
    """Fills through `endpoint` with the request fields of `sampling`, reading streams as `mode`
    says; `settings` are the sampler options for a dcode server (its `dcode` request field)."""

    endpoint: Endpoint
    sampling: Sampling
    mode: Mode = "auto"
    settings: dict[str, Any] = field(default_factory=dict)
    unit: Unit = "chunk"  # "pass" once a dcode server has answered with its own passes
    clock: Clock = field(default_factory=Clock)
    grammar: Grammar | None = None  # a whole answer's: sent as OpenAI's response_format (dcode.constrain)

    @property
    def model(self) -> str:
        return self.endpoint.model or ""

    @property
    def device(self) -> str:
        return self.endpoint.host

    def identity(self) -> Identity:
        return Identity(self.model, endpoint=self.endpoint.shown)

    def reading(self) -> Reading:
        return Reading()  # frames, not tokens

    def draft(self, request: str, language: str, length: int, repair: bool) -> Generator[Event, None, Draft]:
        ask = replace(self.sampling, max_tokens=length)
        yield Started((0, 0), ())
        shape = None if self.grammar is None else self.grammar.response_format()
        answer = yield from relayed(
            fill.new(self.endpoint, request, language, ask, self.mode, repair, self.settings, shape), Answer
        )
        self.unit = "pass" if answer.kind == "dcode" else "chunk"
        text = answer.text if answer.kind == "dcode" or language == "markdown" else fill.unfence(answer.text)
        self.clock.forward, self.clock.filled = answer.chunks, len(pieces(text))
        served = answer.metadata.get("repair")
        return Draft(
            text, answer.prompt_tokens, answer.tokens, length, answer.chunks, answer.seconds, self.unit,
            extra=stream_keys(answer), checked=isinstance(served, dict),
        )  # fmt: skip

    def region(
        self, source: str, region: tuple[int, int], instruction: str, language: str, length: int | None, name: str
    ) -> Generator[Event, None, Draft]:
        old = source.encode()[region[0] : region[1]].decode()
        ask = replace(self.sampling, max_tokens=length or fill_budget(old, 32))
        answer = yield from self.filled(source, region, language, ask, instruction=instruction, name=name, apply=True)
        return Draft(
            answer.text, answer.prompt_tokens, answer.tokens, ask.max_tokens, answer.chunks, answer.seconds,
            self.unit, extra=stream_keys(answer),
        )  # fmt: skip

    def placed(
        self, source: str, region: tuple[int, int], snippet: str, language: str, length: int | None, name: str
    ) -> tuple[Region, ...] | None:
        return None  # the snippet goes whole to the server's apply path, which places it (dcode.remote.apply)

    def plan(
        self, text: str, spans: Sequence[tuple[int, int, str]], request: str, language: str, blamed: Sequence[Issue]
    ) -> BytePlan:
        merged: list[Span] = []
        for start, end, reason in sorted(spans):
            if merged and start <= merged[-1].end_byte:
                last = merged[-1]
                merged[-1] = replace(last, end_byte=max(end, last.end_byte), reason=f"{last.reason}; {reason}")
            else:
                merged.append(Span(start, end, (0, 0), reason))
        return BytePlan(tuple(merged), text, request, language)

    def fill(self, plan: Plan, round_attempt: tuple[int, int], origin: Origin) -> Generator[Event, None, Fills]:
        assert isinstance(plan, BytePlan)
        attempt = round_attempt[1]
        run = self.sampling
        if attempt > 1:  # greedy again would repeat the try that was not kept; a server writes left to right
            temperature, seed = retried(run.temperature, run.seed, attempt, left_to_right=True)
            run = replace(run, temperature=temperature, seed=seed, sent=run.sent | {"temperature", "seed"})
        self.clock.round += 1
        data = plan.text.encode()
        texts, chunks, tokens, asked = [], 0, 0, 0
        for span in plan.spans:
            where = (span.start_byte, span.end_byte)
            budget = replace(run, max_tokens=fill_budget(data[where[0] : where[1]].decode(), 16))
            answer = yield from self.filled(plan.text, where, plan.language, budget, request=plan.request)
            texts.append(fit_line_span(answer.text, data[span.end_byte :]))
            chunks, tokens, asked = chunks + answer.chunks, tokens + answer.tokens, asked + budget.max_tokens
        return Fills(texts, chunks, tokens, asked)

    def filled(
        self, text: str, span: tuple[int, int], language: str, sampling: Sampling, apply: bool = False, **ask: str
    ) -> Generator[Event, None, Answer]:
        """One span of text filled through the endpoint (an edit's region by way of the server's
        apply path where it has one), drawn in its file; returns the fill's Answer."""
        data, (a, b) = text.encode(), span
        before, old, after = data[:a].decode(), data[a:b].decode(), data[b:].decode()
        head, tail = pieces(before), pieces(after)
        clock = self.clock
        yield Started((0, 0), ())
        yield Drawn(clock.masked(self.model, self.device, head, old, tail))
        answer: Answer | None = None
        if apply:
            events = applying.region(
                self.endpoint, before, old, after, language, sampling, ask["instruction"], ask["name"]
            )
        else:
            events = fill.middle(self.endpoint, before, after, language, sampling, old=old, **ask)
        for event in events:
            if isinstance(event, Drawn):
                yield Drawn(clock.around(event.frame, head, tail))
            else:
                answer = event
        assert answer is not None
        clock.forward += answer.chunks
        clock.filled += len(pieces(answer.text))
        return answer


def stream_keys(answer: Answer) -> dict[str, object]:
    """What `--json` says of a served answer besides the local keys: how it was streamed."""
    first = None if answer.first_frame is None else round(answer.first_frame, 3)
    served = answer.metadata.get("repair")
    return {"stream": answer.kind, "first_frame_seconds": first, **({"served_repair": served} if served else {})}
