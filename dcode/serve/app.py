"""The HTTP face of `dcode serve`: a FastAPI app with OpenAI's paths, errors and streams.

Owns: the routes (GET /v1/models, /v1/models/{id}, /health; POST /v1/chat/completions,
/v1/completions, /v1/fim/completions), the API key check (Bearer, constant-time, before the body
is read), `Content-Type: application/json` on every POST (a web page's "simple" cross-origin POST
cannot send it), the body size and read-time limits, OpenAI's error shape for every 4xx and 5xx
(never a traceback; 405 with `Allow`; no redirect built from the client's Host), one access-log
line per request, Server-Sent Events, and cancelling a request whose client went away. Parsing
and preparing (tokenizing) run off the event loop; parsing is dcode.serve.jobs', running
dcode.serve.engine's. Connection limits and timeouts below HTTP are dcode.serve.connections'.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dcode.serve import mercury, wire
from dcode.serve.engine import Engine, Overloaded, Runner
from dcode.serve.jobs import BadRequest, parse, parse_body
from dcode.serve.replies import Prepared
from dcode.serve.wire import Kind

MAX_BODY = 4 * 2**20  # bytes: a request body above this is refused (413) before it is read whole
BODY_TIMEOUT = 30.0  # seconds to receive a whole body once its headers arrived (408 after)
RETRY_AFTER = 1  # seconds a client told "overloaded" waits before trying again
PREPARERS = 4  # threads that parse and tokenize requests (off the event loop)
WARNING_HEADER = "X-Dcode-Warning"  # says what was cut from a conversation to fit the context
log = logging.getLogger("dcode.serve")
access = logging.getLogger("dcode.serve.access")


def error_response(error: BadRequest, headers: Mapping[str, str] | None = None) -> JSONResponse:
    body = wire.error_body(error.message, error.kind, error.param, error.code)
    return JSONResponse(body, status_code=error.status, headers=headers)


class Guard:
    """The app's outer layer: one access-log line per request (when its answer has ended), and an
    exception that escapes a route as one log line and a 500 in OpenAI's shape instead of
    Starlette's traceback; a client that left in the middle of its upload is closed quietly."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        began, status = time.perf_counter(), 0

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except ClientDisconnect:
            status = status or 499  # nginx's "client closed request": nothing was answered
        except Exception as error:
            log.error("internal error: %s: %s", type(error).__name__, (str(error).splitlines() or [""])[0])
            if not status:
                failed = BadRequest(f"internal error: {type(error).__name__}", None, 500, kind="server_error")
                await error_response(failed)(scope, receive, sending)
        finally:
            client = scope.get("client") or ("-", 0)
            line = '%s:%s "%s %s" %s %.3fs'
            access.info(line, client[0], client[1], scope["method"], scope["path"], status, time.perf_counter() - began)


async def read_body(request: Request, limit: int, timeout: float) -> bytes:
    """The body, refused with 413 once it passes `limit` bytes (whatever Content-Length says), and
    with 408 when it takes longer than `timeout` seconds to arrive."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise BadRequest(f"the body is {declared} bytes; the limit is {limit}", None, 413, "request_too_large")
    parts, size = [], 0
    try:
        async with asyncio.timeout(timeout):
            async for part in request.stream():
                size += len(part)
                if size > limit:
                    raise BadRequest(f"the body is over the limit of {limit} bytes", None, 413, "request_too_large")
                parts.append(part)
    except TimeoutError:
        raise BadRequest(f"the body took over {timeout:g} s to arrive", None, 408, "request_timeout") from None
    return b"".join(parts)


def check_key(request: Request, key: str | None) -> None:
    if key is None:
        return
    given = request.headers.get("authorization", "")
    scheme, _, token = given.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), key.encode()):
        raise BadRequest("missing or wrong API key (send Authorization: Bearer <key>)", None, 401, "invalid_api_key")


def check_json(request: Request) -> None:
    """415 unless the body says it is JSON: a web page can POST text/plain to a local server
    without asking (no CORS preflight), but not application/json."""
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media != "application/json":
        shown = media or "none"
        raise BadRequest(f"the body must be sent as Content-Type: application/json (got {shown})", None, 415)


def answer_errors_as_openai(app: FastAPI) -> None:
    """A refused request, an unknown path and a wrong method answer in OpenAI's error shape."""

    @app.exception_handler(BadRequest)
    async def refused(request: Request, error: BadRequest) -> JSONResponse:
        return error_response(error)

    @app.exception_handler(HTTPException)
    async def not_found(request: Request, error: HTTPException) -> JSONResponse:
        kind = "not_found_error" if error.status_code == 404 else "invalid_request_error"
        message = {
            404: f"no such path: {request.url.path}",
            405: f"{request.method} is not allowed on {request.url.path}",
        }.get(error.status_code, str(error.detail))
        return error_response(BadRequest(message, None, error.status_code, kind=kind), error.headers)


def create_app(
    engine: Engine, *, api_key: str | None = None, max_body: int = MAX_BODY, body_timeout: float = BODY_TIMEOUT
) -> FastAPI:
    """The app over `engine`; requests to /v1/* need `api_key` when one is set."""
    app = FastAPI(title="dcode serve", docs_url=None, redoc_url=None, openapi_url=None, redirect_slashes=False)
    app.add_middleware(Guard)
    answer_errors_as_openai(app)
    preparers = ThreadPoolExecutor(PREPARERS, thread_name_prefix="dcode-prepare")

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return engine.health()

    def card() -> dict[str, Any]:
        return wire.model_card(engine.served, engine.created, engine.model.facts.max_length)

    @app.get("/v1/models")
    async def models(request: Request) -> dict[str, Any]:
        check_key(request, api_key)
        return {"object": "list", "data": [card()]}

    @app.get("/v1/models/{model_id:path}")
    async def model(request: Request, model_id: str) -> dict[str, Any]:
        check_key(request, api_key)
        if model_id != engine.served:
            message = f"the model '{model_id}' does not exist; this server serves '{engine.served}'"
            raise BadRequest(message, "model", 404, "model_not_found")
        return card()

    async def accepted(request: Request) -> bytes:  # the key, the media type and the body's limits
        check_key(request, api_key)
        check_json(request)
        return await read_body(request, max_body, body_timeout)

    async def serve(request: Request, kind: Kind) -> Any:
        raw = await accepted(request)

        def prepare() -> Prepared:  # JSON and tokenizing take CPU: in a thread, never on the event loop
            return engine.prepare(parse(kind, parse_body(raw), engine.served))

        prepared = await asyncio.get_running_loop().run_in_executor(preparers, prepare)
        return await run(request, engine, prepared)

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        return await serve(request, "chat")

    @app.post("/v1/completions")
    async def completions(request: Request) -> Any:
        return await serve(request, "text")

    @app.post("/v1/fim/completions")
    async def fim(request: Request) -> Any:
        return await serve(request, "text")

    mercury.add_routes(app, engine, preparers, accepted, run)  # Inception's /v1/apply and /v1/edit paths
    return app


async def run(request: Request, engine: Engine, prepared: Prepared, runner: Runner | None = None) -> Any:
    """Submit the prepared job (run by its flow, or `runner`) and answer: one JSON object, or a stream of chunks."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

    def emit(kind: str, item: Any) -> None:  # called from the worker thread
        loop.call_soon_threadsafe(queue.put_nowait, (kind, item))

    try:
        cancel = engine.submit(prepared, emit, runner)
    except Overloaded:
        busy = BadRequest("the server is overloaded: every slot and queue place is taken", None, 503, "overloaded")
        busy.kind = "server_error"
        return error_response(busy, {"Retry-After": str(RETRY_AFTER)})
    headers = {WARNING_HEADER: prepared.warning} if prepared.warning else {}
    if prepared.job.stream:
        return StreamingResponse(
            stream(queue, cancel, prepared),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", **headers},
        )
    try:
        final: dict[str, Any] | None = None
        failure: BadRequest | None = None
        while True:
            try:
                kind, item = await asyncio.wait_for(queue.get(), timeout=0.25)
            except TimeoutError:
                if await request.is_disconnected():
                    cancel()
                continue
            if kind == "final":
                final = item
            elif kind == "error":
                failure = item
            elif kind == "end":
                break
    finally:
        cancel()  # a no-op once finished; stops the worker if this handler was cancelled
    if final is not None:
        return JSONResponse(final, headers=headers)
    return error_response(failure or BadRequest("the request was cancelled", None, 500, kind="server_error"))


async def stream(
    queue: asyncio.Queue[tuple[str, Any]], cancel: Callable[[], None], prepared: Prepared
) -> AsyncIterator[str]:
    """SSE lines from the worker's chunks; the usage chunk when asked; [DONE]. An answer cut short
    (the server stopping) ends with an error event before [DONE], so no client takes it as whole.
    If the client goes away, Starlette cancels this generator and the worker stops at its next
    forward pass."""
    usage: dict[str, int] | None = None
    final: dict[str, Any] | None = None
    try:
        while True:
            kind, item = await queue.get()
            if kind == "chunk":
                yield wire.sse(item)
            elif kind == "final":
                final, usage = item, item["usage"]
            elif kind == "error":
                yield wire.sse(wire.error_body(item.message, item.kind, item.param, item.code))
            elif kind == "end":
                break
        if final is not None and usage is not None and prepared.job.include_usage:
            yield wire.sse(wire.usage_chunk(prepared.job.kind, final["id"], final["model"], usage, final["created"]))
        yield wire.DONE
    finally:
        cancel()
