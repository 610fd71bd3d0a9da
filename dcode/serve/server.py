"""uvicorn as `dcode serve` runs it: bounded connections, bounded waits, a log no flood can fill,
and a graceful stop.

Owns what lies below HTTP: the h11 protocol with a header timeout (uvicorn arms its keep-alive
timer only after an answer, and any byte stops it, so a client that never finishes a request head
would hold its connection forever); a cap on open connections, kept below the descriptor limit
(raised to the hard limit where allowed), past which a connection is answered 503 and closed at
once; collapsing repeated log records (asyncio's accept errors, uvicorn's warnings about broken
requests) into the first one and a count; and the stop: SIGINT or SIGTERM stops accepting, lets
running requests finish for a grace period, then cuts the rest (each ends with an error, never as
if complete: dcode.serve.engine), and returns normally (exit 0). A second Ctrl-C cuts at once.
Imports uvicorn and h11: the CLI imports this module inside `dcode serve` only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import resource
import signal
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

HEADER_TIMEOUT = 10.0  # seconds a connection may take to send a whole request head (after opening or an answer)
KEEP_ALIVE = 5.0  # seconds an idle connection stays open after an answer (uvicorn's timeout_keep_alive)
MAX_CONNECTIONS = 1000  # open connections at most, unless the descriptor limit allows fewer
MAX_HEAD = 16 * 1024  # bytes of a request head (uvicorn's h11_max_incomplete_event_size)
GRACE = 30.0  # seconds running requests get to finish after SIGINT/SIGTERM
COLLAPSE = 10.0  # seconds over which repeats of one log record are counted, not written
BUSY = b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
TIMED_OUT = b"HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
log = logging.getLogger("dcode.serve")


def descriptor_room(wanted: int) -> tuple[int, int]:
    """(connections the process can hold, connections accepted per turn of the event loop):
    `wanted`, or fewer when the descriptor limit (its soft limit raised to the hard one where
    allowed) leaves less beside those open now. asyncio accepts a whole burst (the listen backlog)
    before any refused connection is closed, so the cap leaves room for three bursts.
    Example: a limit of 128 with 9 open -> (77, 14)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        with contextlib.suppress(ValueError, OSError):
            target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
    try:
        opened = len(os.listdir("/proc/self/fd"))
    except OSError:
        opened = 32
    room = soft - opened
    burst = max(8, min(128, room // 8))
    return max(1, min(wanted, room - 3 * burst)), burst


class GuardedH11(H11Protocol):
    """uvicorn's h11 protocol with a cap on connections and a deadline for every request head."""

    header_timeout = HEADER_TIMEOUT
    max_connections = MAX_CONNECTIONS

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._head_timer: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            transport.write(BUSY)
            transport.close()
            return
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
        super().connection_lost(exc)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm()  # the next request's head has its own deadline

    def _arm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
        self._head_timer = self.loop.call_later(self.header_timeout, self._head_late)

    def _head_late(self) -> None:
        """Close the connection unless a request on it is being answered (its head arrived)."""
        self._head_timer = None
        answering = self.cycle is not None and not self.cycle.response_complete
        if not answering and not self.transport.is_closing():
            if self.conn.their_state is h11.IDLE and self.conn.our_state is h11.IDLE:
                self.transport.write(TIMED_OUT)
            self.transport.close()


class Collapse(logging.Filter):
    """Lets the first of a run of records with the same message through; counts the repeats and
    reports them in one line when the next arrives after COLLAPSE seconds. Example: 60,000
    `socket.accept() out of system resource` in 18 s -> two or three lines."""

    def __init__(self, window: float = COLLAPSE) -> None:
        super().__init__()
        self.window = window
        self.seen: dict[str, tuple[float, int]] = {}  # message -> (when first let through, repeats since)

    def filter(self, record: logging.LogRecord) -> bool:
        key = str(record.msg)
        now = time.monotonic()
        first, repeats = self.seen.get(key, (0.0, 0))
        if now - first < self.window:
            self.seen[key] = (first, repeats + 1)
            return False
        if len(self.seen) > 1000:
            self.seen.clear()
        self.seen[key] = (now, 0)
        if repeats:
            record.msg = f"{record.getMessage()} (and {repeats} more like it in the last {now - first:.0f} s)"
            record.args = ()
        return True


def loop_errors(collapse: Collapse) -> Callable[[asyncio.AbstractEventLoop, dict[str, Any]], None]:
    """An event loop's exception handler that logs one line (no traceback) per kind of error, collapsed."""

    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        error = context.get("exception")
        detail = f": {type(error).__name__}: {error}" if error is not None else ""
        record = log.makeRecord(log.name, logging.ERROR, __file__, 0, context.get("message", "error"), (), None)
        if collapse.filter(record):
            log.error("%s%s", record.getMessage(), detail)

    return handle


class Server(uvicorn.Server):
    """uvicorn's server with dcode's signals, loop errors and graceful stop (see the module docstring)."""

    def __init__(self, config: uvicorn.Config, on_stop: Callable[[], None], grace: float) -> None:
        super().__init__(config)
        self.on_stop, self.grace = on_stop, grace

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # uvicorn re-raises the signal after shutting down (the process would die of it): here a
        # signal is the normal way to stop, so it ends the server and nothing else.
        def stop(sig: int, frame: Any) -> None:
            if self.should_exit:  # a second signal: cut the running requests now
                self.on_stop()
                self.force_exit = True
            self.should_exit = True

        previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        collapse = Collapse()
        asyncio.get_running_loop().set_exception_handler(loop_errors(collapse))
        for name in ("uvicorn.error", "asyncio"):
            logging.getLogger(name).addFilter(collapse)
        await super().startup(sockets)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        running = len(self.server_state.tasks)
        if running:
            log.warning("stopping: %d requests get %g s to finish (Ctrl-C again cuts them)", running, self.grace)
        cut = asyncio.get_running_loop().call_later(self.grace, self.on_stop)
        try:
            await super().shutdown(sockets)
        finally:
            cut.cancel()


def serve(
    app: Any,
    sock: socket.socket,
    on_stop: Callable[[], None],
    *,
    grace: float = GRACE,
    header_timeout: float = HEADER_TIMEOUT,
    max_connections: int = MAX_CONNECTIONS,
    burst: int = 128,
) -> None:
    """uvicorn on the bound socket until SIGINT/SIGTERM, with at most `max_connections` open and
    at most `burst` accepted per turn of the event loop (the listen backlog)."""
    protocol = type("Protocol", (GuardedH11,), {"header_timeout": header_timeout, "max_connections": max_connections})
    config = uvicorn.Config(
        app,
        http=protocol,
        log_level="warning",
        access_log=False,  # dcode.serve.app.Guard writes one line per request
        lifespan="off",
        timeout_keep_alive=int(min(KEEP_ALIVE, header_timeout)) or 1,
        limit_concurrency=max_connections,
        h11_max_incomplete_event_size=MAX_HEAD,
        backlog=burst,
        # a backstop: on_stop ends every request at `grace`; this cancels what still runs later
        timeout_graceful_shutdown=int(grace) + 5,
    )
    Server(config, on_stop, grace).run(sockets=[sock])
