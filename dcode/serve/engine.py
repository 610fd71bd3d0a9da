"""Running jobs: admission, a worker thread per request over one BatchingDenoiser, events -> chunks.

Owns: a Job -> a Plan (token ids, answer length, sampler settings merged over the server's; a
request that does not fit the model's context is refused here, before the model, or its oldest
turns cut: dcode.serve.conversation), the fill-in-the-middle stage (prompt + masks + suffix, the
same denoise(), ending once the middle has ended), the bounded queue and the running slots,
cancelling (a client gone, or the server stopping: then an error ends the answer), and turning the
pipeline's events into what the wire sends (appended deltas of the settled text, cut at a stop
string, where the request ends; or the whole canvas with render.Describer's Frames). Knows nothing
about HTTP: chunks go to an `emit` callback.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import torch

from dcode import pipeline
from dcode.config import REPAIR_TRIES, SamplerConfig
from dcode.events import Event, Finished, RepairRound, Started, Step
from dcode.models.base import Denoiser
from dcode.render import Describer, Frame
from dcode.sampler import denoise, trim_answer
from dcode.serve import conversation, wire
from dcode.serve.batching import BatchingDenoiser, RequestCancelled
from dcode.serve.jobs import BadRequest, Job
from dcode.serve.settings import merged

Emit = Callable[[str, Any], None]  # ("chunk", dict) | ("final", dict) | ("error", BadRequest) | ("end", usage)


class Overloaded(Exception):
    """Every running slot and every queue place is taken (HTTP 503 with Retry-After)."""


@dataclass(frozen=True)
class Plan:
    job: Job
    prefix: list[int]  # token ids before the answer (chat: the templated request)
    suffix: list[int]  # token ids after the answer (fill-in-the-middle), else empty
    length: int  # answer positions to fill
    config: SamplerConfig
    rounds: int  # repair rounds (0: off)
    warning: str | None = None  # what was cut from the prompt to fit the context, for the client


def shutdown_error() -> BadRequest:
    """What ends an answer cut by the server stopping: a 503, or the stream's last event before [DONE]."""
    message = "the server is shutting down: the answer was cut short; send the request again"
    return BadRequest(message, None, 503, "server_shutdown", kind="server_error")


def fill_middle(
    model: Denoiser, prefix: list[int], suffix: list[int], length: int, config: SamplerConfig
) -> Iterator[Started | Step | Finished]:
    """`/v1/completions`: Started, then prefix + `length` masks (+ suffix) filled by denoise(); then Finished
    with the answer's text. With a suffix the masks are a middle whose length the model chooses:
    once it writes an end token the positions after it are padding (config.stop_at_eos), so a short
    middle takes the passes it needs, not those of `length`; end and pad tokens are dropped."""
    facts = model.facts
    canvas = torch.tensor(prefix + [facts.mask_id] * length + suffix, dtype=torch.long)
    fill = torch.zeros(len(canvas), dtype=torch.bool)
    fill[len(prefix) : len(prefix) + length] = True
    yield Started((len(prefix), len(canvas)), ((len(prefix), len(prefix) + length),))
    began = time.perf_counter()
    last: Step | None = None
    for last in denoise(model, canvas, len(prefix), config, fill=fill):  # the middle ends at its end token
        yield last
    assert last is not None
    middle = last.canvas[len(prefix) : len(prefix) + length]
    drop = frozenset({facts.pad_id, facts.mask_id})
    kept = (
        [t for t in middle.tolist() if t not in drop | facts.eos_ids]
        if suffix
        else trim_answer(middle, facts.eos_ids, drop)
    )
    yield Finished(
        code=pipeline.decode(model, kept),
        prompt_tokens=len(prefix) + len(suffix),
        tokens=len(kept),
        canvas=length,
        forward=last.forward,
        seconds=time.perf_counter() - began,
    )


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

    def __init__(self, plan: Plan, model: Denoiser, served: str) -> None:
        self.plan, self.model, self.served = plan, model, served
        self.job = plan.job
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

    def chunk(
        self, text: str | None, finish: str | None = None, extension: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        kind, warning = self.job.kind, self.plan.warning if self.first else None
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
        )
        self.first = False
        return out

    def completion(self, text: str, reason: str, used: dict[str, int], metadata: dict[str, Any]) -> dict[str, Any]:
        return wire.completion(
            self.job.kind,
            self.ident,
            self.served,
            text,
            reason,
            used,
            metadata,
            created=self.created,
            warning=self.plan.warning,
        )

    def stopped(self, step: Step, elapsed: float) -> Finished | None:
        """The answer as it stands when its settled text already holds a stop string: what comes
        after cannot change what the client gets, so the request ends here (repair off)."""
        plan = self.plan
        if not self.job.stop or plan.rounds:
            return None
        ids = self.settled_ids(step)
        text = pipeline.decode(self.model, ids)
        if not cut_at_stop(text, self.job.stop)[1]:
            return None
        prompt = len(plan.prefix) + len(plan.suffix)
        return Finished(text, prompt, len(ids), plan.length, step.forward, elapsed)

    def settled(self, step: Step) -> str:
        """The answer's left-to-right prefix that holds no mask, as text."""
        text = pipeline.decode(self.model, self.settled_ids(step))
        return text.lstrip("\n") if self.job.kind == "chat" else text

    def settled_ids(self, step: Step) -> list[int]:
        """The token ids of the answer's left-to-right prefix that holds no mask, end tokens dropped."""
        facts, plan = self.model.facts, self.plan
        answer = step.canvas[len(plan.prefix) : len(plan.prefix) + plan.length].tolist()
        open_at = answer.index(facts.mask_id) if facts.mask_id in answer else len(answer)
        drop = facts.eos_ids | {facts.pad_id}
        if plan.suffix:
            ids = [t for t in answer[:open_at] if t not in drop]
        else:
            ids = trim_answer(torch.tensor(answer[:open_at]), facts.eos_ids, frozenset({facts.pad_id}))
        return ids

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
        if not isinstance(event, Step) or self.plan.rounds:  # repair may change any of it: send at the end
            return []
        text, _ = cut_at_stop(self.settled(event), self.job.stop)
        now = held_back(text, self.job.stop, self.job.kind == "chat")
        if len(now) > len(self.sent) and now.startswith(self.sent):
            delta, self.sent = now[len(self.sent) :], now
            return [self.chunk(delta)]
        return []

    def finish(self, done: Finished) -> tuple[str, str, dict[str, Any], list[dict[str, Any]]]:
        """(answer text, finish reason, metadata, the stream's last chunks)."""
        text, stopped = cut_at_stop(done.code, self.job.stop)
        ended = done.tokens < done.canvas or (done.repair is not None and done.repair.rounds > 0)
        reason = "stop" if stopped or ended or self.plan.suffix else "length"
        metadata = {"model": self.model.facts.name, "language": self.job.language, **done.metadata()}
        if not self.job.stream:
            return text, reason, metadata, []
        if self.job.diffusing:
            return text, reason, metadata, [self.chunk(text, reason, wire.finished_event(text, metadata))]
        rest = text[len(self.sent) :] if text.startswith(self.sent) else ""
        return text, reason, metadata, [self.chunk(rest, reason)]


def cut_warning(prompt: conversation.Prompt, context: int) -> str | None:
    """What the response says when the oldest turns of a conversation were cut to fit."""
    if not prompt.dropped:
        return None
    tokens = f" ({prompt.dropped_tokens} tokens)" if prompt.dropped_tokens else ""
    return (
        f"the conversation did not fit the model's context of {context} tokens: "
        f"its {prompt.dropped} oldest messages{tokens} were left out"
    )


class Engine:
    """The served model, its defaults, and the requests running on it."""

    def __init__(
        self,
        model: Denoiser,
        config: SamplerConfig,
        *,
        length: int = 256,
        repair_rounds: int = 0,
        repair_tries: int = REPAIR_TRIES,
        max_batch: int = 16,
        max_queue: int = 64,
        batch: bool = True,
        busy_draft: int | None = None,
    ) -> None:
        self.model, self.config, self.length = model, config, length
        self.busy_draft = busy_draft  # the verify rule's --draft while other requests run (None: unchanged)
        self.repair_rounds, self.repair_tries = repair_rounds, repair_tries
        self.batcher = BatchingDenoiser(model, batch=batch)
        self.served = model.facts.name
        self.max_batch, self.max_queue = max_batch, max_queue
        self._slots = threading.Semaphore(max_batch)
        self._lock = threading.Lock()
        self._admitted = 0  # running + waiting
        self._running = 0
        self._tickets: dict[int, threading.Event] = {}
        self._ids = itertools.count()
        self._stopping = False  # cancel_all ran: a cut request says the server stopped
        self.created = int(time.time())  # the served model's `created` in /v1/models

    def health(self) -> dict[str, Any]:
        with self._lock:
            running, admitted = self._running, self._admitted
        return {"status": "ok", "model": self.served, "running": running, "waiting": admitted - running}

    def settings(self, job: Job) -> SamplerConfig:
        """The request's sampler options over the server's settings (settings.merged)."""
        try:
            config = merged(self.config, job.options)
        except ValueError as error:
            raise BadRequest(f"bad sampler settings: {error}", "dcode") from None
        if config.rule == "verify" and self.model.facts.noise != "mask":
            raise BadRequest(f"{self.served}: the verify strategy needs a masked-diffusion model", "dcode.strategy")
        return config

    def plan(self, job: Job) -> Plan:
        """The canvas a job needs, or BadRequest when it cannot fit the model's context. Tokenizes
        (up to a bound on characters): run it off the event loop."""
        model, facts = self.model, self.model.facts
        config, warning = self.settings(job), None
        if job.kind == "chat":
            wanted = job.max_tokens if job.max_tokens is not None else self.length
            prompt = conversation.prompt_ids(model, job.messages, job.language, min(wanted, facts.max_length - 1))
            prefix, suffix, warning = prompt.ids, [], cut_warning(prompt, facts.max_length)
        else:
            bound = conversation.character_bound(model)
            chars = len(job.text) + len(job.suffix or "")
            conversation.refuse_too_long(chars, bound, facts.max_length, "prompt")
            encode = model.tokenizer.encode
            prefix = list(encode(job.text, add_special_tokens=False)) if job.text else []
            suffix = list(encode(job.suffix, add_special_tokens=False)) if job.suffix else []
        if not prefix and (facts.shifted or facts.noise == "uniform"):
            raise BadRequest(f"{self.served} needs a non-empty prompt before the text it writes", "prompt")
        room = facts.max_length - len(prefix) - len(suffix)
        length = job.max_tokens if job.max_tokens is not None else min(self.length, room)
        if length > room or room < 1:
            raise BadRequest(
                f"the {len(prefix) + len(suffix)}-token prompt plus max_tokens {length} exceeds the model's "
                f"context of {facts.max_length} tokens (at most {max(0, room)} fit)",
                "max_tokens",
                code="context_length_exceeded",
            )
        repair = self.repair_rounds > 0 if job.repair is None else job.repair
        rounds = (self.repair_rounds or 3) if repair and job.kind == "chat" else 0
        return Plan(job, prefix, suffix, length, config, rounds, warning)

    def events(self, plan: Plan) -> Iterator[Event]:
        job, model, tries = plan.job, self.batcher, self.repair_tries
        if job.kind == "chat":
            return pipeline.new(
                model, job.text, job.language, plan.length, plan.config, plan.rounds, tries, plan.prefix
            )
        return fill_middle(model, plan.prefix, plan.suffix, plan.length, plan.config)

    def under_load(self, plan: Plan) -> Plan:
        """The plan run while other requests run too: the verify rule with --busy-draft drafts a
        pass. Its answer is the one-token-per-pass answer whatever the draft (dcode.rules), so only
        the cost changes: fewer rows per pass, fewer of them wasted, more requests per forward.
        A request that set its own draft keeps it."""
        if self.busy_draft is None or plan.config.rule != "verify" or "draft" in plan.job.options:
            return plan
        return replace(plan, config=replace(plan.config, draft=min(plan.config.draft, self.busy_draft)))

    def submit(self, plan: Plan, emit: Emit) -> Callable[[], None]:
        """Start the job in a worker thread; returns its cancel function. Overloaded when full."""
        with self._lock:
            if self._admitted >= self.max_batch + self.max_queue:
                raise Overloaded
            self._admitted += 1
            key = next(self._ids)
            cancelled = self._tickets[key] = threading.Event()
        threading.Thread(target=self._work, args=(key, plan, emit, cancelled), daemon=True, name=f"job-{key}").start()
        return cancelled.set

    def cancel_all(self) -> None:
        """Stop every request, running or waiting: the server is stopping. Each ends with
        shutdown_error() (a 503, or an error event before the stream's [DONE]), never as if complete."""
        with self._lock:
            self._stopping = True
            for event in self._tickets.values():
                event.set()

    def _work(self, key: int, plan: Plan, emit: Emit, cancelled: threading.Event) -> None:
        """A worker: wait for a slot, run the pipeline over the BatchingDenoiser, emit chunks, then the end."""
        slot = False
        try:
            while not (slot := self._slots.acquire(timeout=0.1)):
                if cancelled.is_set():
                    raise RequestCancelled
            with self._lock:
                self._running += 1
                busy = self._admitted > 1
            self._run(self.under_load(plan) if busy else plan, emit, cancelled)
        except RequestCancelled:  # the client went away (no one to tell), or the server is stopping
            if self._stopping:
                emit("error", shutdown_error())
        except Exception as error:  # a failure inside the model: a 500 with a message, never a traceback
            message = str(error).splitlines()[0] if str(error) else type(error).__name__
            emit("error", BadRequest(f"generation failed: {message}", None, 500, kind="server_error"))
        finally:
            with self._lock:
                self._admitted -= 1
                self._running -= slot
                del self._tickets[key]
            if slot:
                self._slots.release()
            emit("end", None)

    def _run(self, plan: Plan, emit: Emit, cancelled: threading.Event) -> None:
        reply = Reply(plan, self.model, self.served)
        began = time.perf_counter()
        with self.batcher.worker(cancelled):
            for event in self.events(plan):
                if cancelled.is_set():
                    raise RequestCancelled
                if isinstance(event, Step):
                    event = reply.stopped(event, time.perf_counter() - began) or event
                if isinstance(event, Finished):
                    text, reason, metadata, last = reply.finish(event)
                    for out in last:
                        emit("chunk", out)
                    emit(
                        "final", reply.completion(text, reason, wire.usage(event.prompt_tokens, event.tokens), metadata)
                    )
                    return  # (an answer ended by a stop string: closing the stream stops its sampling)
                for out in reply.on_event(event, time.perf_counter() - began):
                    emit("chunk", out)
