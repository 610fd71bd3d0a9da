"""One request's stream: stop strings, and events -> wire chunks.

Owns: Prepared (what a request runs: token ids, answer length, settings; the canvas itself is
dcode.localfill's, as on the command line), cutting at stop strings (and holding back what could
start one), and Reply, which turns a flow's events into what the wire sends: appended deltas of
the settled left-to-right text, or the whole canvas with render.Describer's Frames, then the
answer. Knows nothing about HTTP, threads or queues.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

from dcode.config import SamplerConfig
from dcode.events import Event, Finished, RepairRound, Step
from dcode.localfill import answer_ids, decode
from dcode.models.base import Denoiser
from dcode.render import Describer, Frame
from dcode.serve import calls, wire
from dcode.serve.jobs import BadRequest, Job


@dataclass(frozen=True)
class Prepared:
    """A job ready to run: what its canvas holds around the answer, and how it is sampled."""

    job: Job
    prefix: list[int]  # token ids before the answer (chat: the templated request)
    suffix: list[int]  # token ids after the answer (fill-in-the-middle), else empty
    length: int  # answer positions to fill
    config: SamplerConfig
    rounds: int  # repair rounds (0: off)
    warning: str | None = None  # what was cut from the prompt to fit the context, for the client
    least: int = 0  # answer positions that hold no end token: ignore_eos (all of them) or min_tokens


@dataclass(frozen=True)
class Answer:
    """A finished request: what its completion holds, and the chunks that end its stream."""

    text: str  # the content ("" when the answer is nothing but tool calls)
    reason: str  # finish_reason: stop, length, tool_calls
    metadata: dict[str, Any]
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # OpenAI's message.tool_calls
    chunks: list[dict[str, Any]] = field(default_factory=list)


def shutdown_error() -> BadRequest:
    """What ends an answer cut by the server stopping: a 503, or the stream's last event before [DONE]."""
    message = "the server is shutting down: the answer was cut short; send the request again"
    return BadRequest(message, None, 503, "server_shutdown", kind="server_error")


def cut_at_stop(text: str, stops: tuple[str, ...]) -> tuple[str, bool]:
    """text up to the first stop sequence, and whether one was found. Example: ("a\\nb", ("\\n",)) -> ("a", True)."""
    cuts = [i for i in (text.find(s) for s in stops) if i >= 0]
    return (text[: min(cuts)], True) if cuts else (text, False)


def held_back(text: str, stops: tuple[str, ...], chat: bool) -> str:
    """The part of a settled text an appended stream may send: no trailing half character, no
    trailing line breaks in a chat answer (the final code ends in exactly one), no start of a
    stop sequence."""
    text = text.rstrip("\ufffd")
    if chat:
        text = text.rstrip("\n")
    for stop in stops:
        for k in range(min(len(stop) - 1, len(text)), 0, -1):
            if text.endswith(stop[:k]):
                text = text[:-k]
                break
    return text


class Reply:
    """One request's events -> the chunks its stream sends, and its final answer."""

    def __init__(self, prepared: Prepared, model: Denoiser, served: str) -> None:
        self.prepared, self.model, self.served = prepared, model, served
        self.job = prepared.job
        self.ident = ("chatcmpl-" if self.job.kind == "chat" else "cmpl-") + uuid.uuid4().hex[:24]
        facts = model.facts
        self.describer = Describer(
            model.tokenizer,
            facts.mask_id,
            model=facts.name,
            device=model.device.type,
            language=self.job.language,
            hidden=facts.eos_ids | {facts.pad_id},
        )
        self.sent = ""  # appended stream: text sent so far
        self.first = True
        self.frame: Frame | None = None
        self.created = int(time.time())  # every chunk of the stream, and the answer, carry this one
        self._settled: tuple[Step, list[int], str] | None = None  # the last step's, decoded once
        self.calls = calls.CallStream()  # a tool-calling answer's deltas sent so far, and its call ids

    def chunk(
        self,
        text: str | None,
        finish: str | None = None,
        extension: dict[str, Any] | None = None,
        tool_calls: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        kind, warning = self.job.kind, self.prepared.warning if self.first else None
        out = wire.chunk(
            kind,
            self.ident,
            self.served,
            text,
            finish,
            created=self.created,
            first=self.first,
            extension=extension,
            warning=warning,
            tool_calls=tool_calls or (),
        )
        self.first = False
        return out

    def completion(self, answer: Answer, used: dict[str, int]) -> dict[str, Any]:
        return wire.completion(
            self.job.kind,
            self.ident,
            self.served,
            answer.text,
            answer.reason,
            used,
            answer.metadata,
            created=self.created,
            warning=self.prepared.warning,
            tool_calls=answer.tool_calls,
        )

    def stopped(self, step: Step, elapsed: float) -> Finished | None:
        """The answer as it stands when its settled text already holds a stop string: what comes
        after cannot change what the client gets, so the request ends here (repair off)."""
        prepared = self.prepared
        if not self.job.stop or prepared.rounds:
            return None
        ids, text = self.settled(step)
        if not cut_at_stop(text, self.stops(text))[1]:
            return None
        prompt = len(prepared.prefix) + len(prepared.suffix)
        return Finished(text, prompt, len(ids), prepared.length, step.forward, elapsed)

    def stops(self, text: str) -> tuple[str, ...]:
        """The stop strings that end this answer: none for an answer of tool calls (a stop string
        would cut a call's JSON), the request's for text."""
        return () if self.job.shape.calls and calls.is_calls(text) else self.job.stop

    def settled(self, step: Step) -> tuple[list[int], str]:
        """The answer's left-to-right prefix that holds no mask, as ids and as text: decoded once a
        step (stopped() and on_event() both read it)."""
        if self._settled is None or self._settled[0] is not step:
            ids = self.settled_ids(step)
            self._settled = (step, ids, self.text_of(ids))
        return self._settled[1], self._settled[2]

    def text_of(self, ids: list[int]) -> str:
        return self.text_of_answer(decode(self.model, ids))

    def text_of_answer(self, text: str) -> str:
        """A chat answer starts at its first line that is not empty (a streamed one as the final one)."""
        return text.lstrip("\n") if self.job.kind == "chat" else text

    def settled_ids(self, step: Step) -> list[int]:
        """The token ids of the answer's left-to-right prefix that holds no mask, end tokens dropped."""
        facts, prepared = self.model.facts, self.prepared
        answer = step.canvas[len(prepared.prefix) : len(prepared.prefix) + prepared.length].tolist()
        open_at = answer.index(facts.mask_id) if facts.mask_id in answer else len(answer)
        return answer_ids(facts, answer[:open_at], middle=bool(prepared.suffix))

    def on_event(self, event: Event, elapsed: float) -> list[dict[str, Any]]:
        """The chunks a streamed event sends (none for a non-streamed request). The Describer sees
        every event, as the local view's does: Started tells it where the answer is."""
        if not self.job.stream:
            return []
        if self.job.diffusing:
            frame = self.describer(event, elapsed)
            if isinstance(event, Step) and frame is not None:
                self.frame = frame
                return [self.chunk(wire.canvas_text(frame), extension=wire.frame_event(frame))]
            if isinstance(event, RepairRound):
                spans = [(s.start_byte, s.end_byte) for s in event.spans]
                ext = wire.repair_round_event(event.round, event.attempt, spans, event.issues_after, event.kept)
                return [self.chunk(wire.canvas_text(self.frame) if self.frame else "", extension=ext)]
            return []
        if not isinstance(event, Step) or self.prepared.rounds:  # repair may change any of it: send at the end
            return []
        settled = self.settled(event)[1]
        stops = self.stops(settled)
        text, _ = cut_at_stop(settled, stops)
        now = held_back(text, stops, self.job.kind == "chat")
        if self.job.shape.calls and calls.is_calls(now):
            deltas = self.calls.deltas(now)
            return [self.chunk(None, tool_calls=deltas)] if deltas else []
        if len(now) > len(self.sent) and now.startswith(self.sent):
            delta, self.sent = now[len(self.sent) :], now
            return [self.chunk(delta)]
        return []

    def finish(self, done: Finished) -> Answer:
        """The answer: its text, tool calls, finish reason and metadata, and the stream's last chunks.
        A shaped answer whose grammar did not complete ran out of room: "length", as OpenAI says
        (a tool-calling one keeps the calls it completed: a weak model may call on and on)."""
        code = self.text_of_answer(done.code)
        text, stopped = cut_at_stop(code, self.stops(code))
        ended = done.tokens < done.masks or (done.repair is not None and done.repair.rounds > 0)
        reason = "stop" if stopped or ended or self.prepared.suffix else "length"
        if done.extra.get("grammar") == "incomplete":
            reason = "length"
        metadata = {"model": self.model.facts.name, "language": self.job.language, **done.metadata()}
        called = self.job.shape.calls and calls.is_calls(text)
        made = calls.tool_calls(text, self.calls.ids) if called else []  # the calls it completed
        if called:  # out of room, it still says so ("length"), with the calls it completed
            text, reason = "", "tool_calls" if reason != "length" else reason
        answer = Answer(text, reason, metadata, made)
        if not self.job.stream:
            return answer
        if self.job.diffusing:
            indexed = [{"index": i, **call} for i, call in enumerate(made)]  # a stream's calls carry their index
            last = self.chunk(text, reason, wire.finished_event(text, metadata), indexed)
            return replace(answer, chunks=[last])
        if called:
            deltas = self.calls.deltas(code)
            rest = [self.chunk(None, tool_calls=deltas)] if deltas else []
            return replace(answer, chunks=[*rest, self.chunk(None, reason)])
        tail = text[len(self.sent) :] if text.startswith(self.sent) else ""
        return replace(answer, chunks=[self.chunk(tail, reason)])
