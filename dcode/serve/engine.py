"""Running jobs: admission, a worker thread per request over one BatchingDenoiser, cancelling.

Owns: a Job -> Prepared (token ids, answer length, sampler settings merged over the server's; a
request that does not fit the model's context is refused here, before the model, or its oldest
turns cut: dcode.serve.conversation), the bounded queue and the running slots, the worker that
runs its flow (dcode.flows.new or complete over dcode.localfill.LocalFiller) and emits dcode.serve.replies.Reply's
chunks, ending a request at its first stop string, and cancelling (a client gone, or the server
stopping: then an error ends the answer, never a cut answer that looks whole). Knows nothing
about HTTP: chunks go to an `emit` callback.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from typing import Any

from dcode import flows
from dcode.config import REPAIR_TRIES, SamplerConfig
from dcode.events import Event, Finished, Step
from dcode.flows import InputError, check_room
from dcode.localfill import LocalFiller
from dcode.models.base import Denoiser
from dcode.serve import conversation, wire
from dcode.serve.batching import BatchingDenoiser, RequestCancelled
from dcode.serve.jobs import BadRequest, Job
from dcode.serve.replies import Prepared, Reply, shutdown_error
from dcode.serve.settings import merged

Emit = Callable[[str, Any], None]  # ("chunk", dict) | ("final", dict) | ("error", BadRequest) | ("end", usage)
Runner = Callable[[Prepared, Emit, threading.Event], None]  # a worker's body: run the job, emit its chunks


class Overloaded(Exception):
    """Every running slot and every queue place is taken (HTTP 503 with Retry-After)."""


def least_tokens(job: Job, length: int) -> int:
    """Answer positions an end token may not take: all `length` with ignore_eos, else min_tokens;
    BadRequest when min_tokens asks for more than the answer holds (vLLM refuses it too)."""
    if job.min_tokens > length:
        raise BadRequest(
            f"'min_tokens' ({job.min_tokens}) is more than the answer's {length} tokens (max_tokens)", "min_tokens"
        )
    return length if job.ignore_eos else job.min_tokens


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
        efforts: Mapping[str, SamplerConfig] | None = None,
    ) -> None:
        self.model, self.config, self.length = model, config, length
        self.efforts = dict(efforts or {})  # a request's reasoning_effort -> the settings it runs over
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
            base = self.efforts.get(job.effort, self.config) if job.effort else self.config
            config = merged(base, job.options)
        except ValueError as error:
            raise BadRequest(f"bad sampler settings: {error}", "dcode") from None
        if config.rule == "verify" and self.model.facts.noise != "mask":
            raise BadRequest(f"{self.served}: the verify strategy needs a masked-diffusion model", "dcode.strategy")
        return config

    def prepare(self, job: Job) -> Prepared:
        """The canvas a job needs, or BadRequest when it cannot fit the model's context. Tokenizes
        (up to a bound on characters): run it off the event loop."""
        model, facts = self.model, self.model.facts
        config, warning = self.settings(job), None
        if job.kind == "chat":
            wanted = job.max_tokens if job.max_tokens is not None else self.length
            answer = min(wanted, facts.max_length - 1)
            prompt = conversation.prompt_ids(model, job.messages, job.language, answer, job.shape)
            prefix, suffix, warning = prompt.ids, [], prompt.warning(facts.max_length)
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
        length = job.max_tokens if job.max_tokens is not None else max(1, min(self.length, room))
        try:
            check_room(len(prefix) + len(suffix), length, facts.max_length, "max_tokens")
        except InputError as error:
            raise BadRequest(str(error), "max_tokens", code="context_length_exceeded") from None
        repair = self.repair_rounds > 0 if job.repair is None else job.repair
        rounds = (self.repair_rounds or 3) if repair and job.kind == "chat" and not job.shape.structured else 0
        self.check_grammar(job, bool(suffix))
        return Prepared(job, prefix, suffix, length, config, rounds, warning, least_tokens(job, length))

    def check_grammar(self, job: Job, middle: bool) -> None:
        """A 400 naming the field, before the model, when the request's grammar cannot run on this
        model (its tokenizer is not one llguidance reads) or on a fill-in-the-middle."""
        grammar = job.shape.grammar
        if grammar is None:
            return
        param = "tools" if job.shape.calls else "response_format"
        if middle:
            raise BadRequest(f"'{param}' shapes a whole answer: it cannot take a 'suffix'", param)
        from dcode.constrain import GrammarError

        try:  # the draft's own constraint (it caches llguidance's view of the vocabulary: once)
            LocalFiller(self.model, self.config, grammar=grammar).constraint()
        except GrammarError as error:
            raise BadRequest(f"'{param}' cannot be enforced with {self.served}: {error}", param) from None

    def events(self, prepared: Prepared) -> Iterator[Event]:
        """The flow a job runs, over the local filler on the BatchingDenoiser: `new` for a chat (its
        prefix the templated conversation), `complete` for a completion (prefix, masks, suffix) and
        for a shaped chat (response_format, tools: its grammar's answer, as written, not repaired)."""
        job = prepared.job
        config, least, grammar = prepared.config, prepared.least, job.shape.grammar
        filler = LocalFiller(self.batcher, config, prepared.prefix, prepared.suffix, least=least, grammar=grammar)
        if job.kind == "chat" and not job.shape.structured:
            return flows.new(filler, job.text, job.language, prepared.length, prepared.rounds, self.repair_tries)
        return flows.complete(filler, prepared.length)

    def under_load(self, prepared: Prepared) -> Prepared:
        """The job run while other requests run too: the verify rule with --busy-draft drafts a
        pass. Its answer is the one-token-per-pass answer whatever the draft (dcode.rules), so only
        the cost changes: fewer rows per pass, fewer of them wasted, more requests per forward.
        A request that set its own draft keeps it."""
        if self.busy_draft is None or prepared.config.rule != "verify" or "draft" in prepared.job.options:
            return prepared
        return replace(prepared, config=replace(prepared.config, draft=min(prepared.config.draft, self.busy_draft)))

    def submit(self, prepared: Prepared, emit: Emit, runner: Runner | None = None) -> Callable[[], None]:
        """Start the job in a worker thread (its flow, or `runner`'s: dcode.serve.mercury's edits);
        returns its cancel function. Overloaded when full;
        shutdown_error() once the server is cutting its requests (a request tokenized while the
        cut came would otherwise run whole past it, until uvicorn's backstop cancels it)."""
        with self._lock:
            if self._stopping:
                raise shutdown_error()
            if self._admitted >= self.max_batch + self.max_queue:
                raise Overloaded
            self._admitted += 1
            key = next(self._ids)
            cancelled = self._tickets[key] = threading.Event()
        work = (key, prepared, emit, cancelled, runner or self._run)
        threading.Thread(target=self._work, args=work, daemon=True, name=f"job-{key}").start()
        return cancelled.set

    def cancel_all(self) -> None:
        """Stop every request, running or waiting: the server is stopping. Each ends with
        shutdown_error() (a 503, or an error event before the stream's [DONE]), never as if complete."""
        with self._lock:
            self._stopping = True
            for event in self._tickets.values():
                event.set()

    def _work(self, key: int, prepared: Prepared, emit: Emit, cancelled: threading.Event, runner: Runner) -> None:
        """A worker: wait for a slot, run its flow over the BatchingDenoiser, emit chunks, then the end."""
        slot = False
        try:
            while not (slot := self._slots.acquire(timeout=0.1)):
                if cancelled.is_set():
                    raise RequestCancelled
            with self._lock:
                self._running += 1
                busy = self._admitted > 1
            runner(self.under_load(prepared) if busy else prepared, emit, cancelled)
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

    def _run(self, prepared: Prepared, emit: Emit, cancelled: threading.Event) -> None:
        reply = Reply(prepared, self.model, self.served)
        began = time.perf_counter()
        with self.batcher.worker(cancelled):
            for event in self.events(prepared):
                if cancelled.is_set():
                    raise RequestCancelled
                if isinstance(event, Step):
                    event = reply.stopped(event, time.perf_counter() - began) or event
                if isinstance(event, Finished):
                    answer = reply.finish(event)
                    for out in answer.chunks:
                        emit("chunk", out)
                    used = wire.usage(event.prompt_tokens, event.tokens)
                    emit("final", reply.completion(answer, used))
                    return  # (an answer ended by a stop string: closing the stream stops its sampling)
                for out in reply.on_event(event, time.perf_counter() - began):
                    emit("chunk", out)
