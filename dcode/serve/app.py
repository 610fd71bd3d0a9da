"""The HTTP face of `dcode serve`: a FastAPI app with OpenAI's paths, errors and streams.

Owns: the routes (GET /v1/models, GET /health, POST /v1/chat/completions, /v1/completions,
/v1/fim/completions), the API key check (Bearer, constant-time), the body size limit, OpenAI's
error shape for every 4xx and 5xx (never a traceback), Server-Sent Events, and cancelling a
request whose client went away. Parsing is dcode.serve.jobs', running dcode.serve.engine's.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException

from dcode.serve import wire
from dcode.serve.engine import Engine, Overloaded, Plan
from dcode.serve.jobs import BadRequest, parse, parse_body
from dcode.serve.wire import Kind

MAX_BODY = 4 * 2**20  # bytes: a request body above this is refused (413) before it is read whole
RETRY_AFTER = 1  # seconds a client told "overloaded" waits before trying again
log = logging.getLogger("dcode.serve")


def error_response(error: BadRequest, headers: dict[str, str] | None = None) -> JSONResponse:
    body = wire.error_body(error.message, error.kind, error.param, error.code)
    return JSONResponse(body, status_code=error.status, headers=headers)


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused with 413 once it passes `limit` bytes (whatever Content-Length says)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise BadRequest(f"the body is {declared} bytes; the limit is {limit}", None, 413, "request_too_large")
    parts, size = [], 0
    async for part in request.stream():
        size += len(part)
        if size > limit:
            raise BadRequest(f"the body is over the limit of {limit} bytes", None, 413, "request_too_large")
        parts.append(part)
    return b"".join(parts)


def check_key(request: Request, key: str | None) -> None:
    if key is None:
        return
    given = request.headers.get("authorization", "")
    scheme, _, token = given.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), key.encode()):
        raise BadRequest("missing or wrong API key (send Authorization: Bearer <key>)", None, 401, "invalid_api_key")


def create_app(engine: Engine, *, api_key: str | None = None, max_body: int = MAX_BODY) -> FastAPI:
    """The app over `engine`; requests to /v1/* need `api_key` when one is set."""
    app = FastAPI(title="dcode serve", docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(BadRequest)
    async def refused(request: Request, error: BadRequest) -> JSONResponse:
        return error_response(error)

    @app.exception_handler(HTTPException)
    async def not_found(request: Request, error: HTTPException) -> JSONResponse:
        kind = "not_found_error" if error.status_code == 404 else "invalid_request_error"
        message = (
            f"no such path: {request.method} {request.url.path}"
            if error.status_code in (404, 405)
            else str(error.detail)
        )
        return error_response(BadRequest(message, None, error.status_code, kind=kind))

    @app.exception_handler(Exception)
    async def failed(request: Request, error: Exception) -> JSONResponse:
        log.error("internal error: %s: %s", type(error).__name__, error)
        return error_response(BadRequest(f"internal error: {type(error).__name__}", None, 500, kind="server_error"))

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return engine.health()

    @app.get("/v1/models")
    async def models(request: Request) -> dict[str, Any]:
        check_key(request, api_key)
        card = {"id": engine.served, "object": "model", "created": int(time.time()), "owned_by": "dcode"}
        return {"object": "list", "data": [card]}

    async def serve(request: Request, kind: Kind) -> Any:
        check_key(request, api_key)
        job = parse(kind, parse_body(await read_body(request, max_body)), engine.served)
        plan = engine.plan(job)
        return await run(request, engine, plan)

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        return await serve(request, "chat")

    @app.post("/v1/completions")
    async def completions(request: Request) -> Any:
        return await serve(request, "text")

    @app.post("/v1/fim/completions")
    async def fim(request: Request) -> Any:
        return await serve(request, "text")

    return app


async def run(request: Request, engine: Engine, plan: Plan) -> Any:
    """Submit the plan and answer: one JSON object, or a stream of chunks."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

    def emit(kind: str, item: Any) -> None:  # called from the worker thread
        loop.call_soon_threadsafe(queue.put_nowait, (kind, item))

    try:
        cancel = engine.submit(plan, emit)
    except Overloaded:
        busy = BadRequest("the server is overloaded: every slot and queue place is taken", None, 503, "overloaded")
        busy.kind = "server_error"
        return error_response(busy, {"Retry-After": str(RETRY_AFTER)})
    if plan.job.stream:
        return StreamingResponse(
            stream(queue, cancel, plan), media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
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
        return JSONResponse(final)
    return error_response(failure or BadRequest("the request was cancelled", None, 500, kind="server_error"))


async def stream(queue: asyncio.Queue[tuple[str, Any]], cancel: Callable[[], None], plan: Plan) -> AsyncIterator[str]:
    """SSE lines from the worker's chunks; the usage chunk when asked; [DONE]. If the client goes
    away, Starlette cancels this generator and the worker stops at its next forward pass."""
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
        if final is not None and usage is not None and plan.job.include_usage:
            yield wire.sse(wire.usage_chunk(plan.job.kind, final["id"], final["model"], usage))
        yield wire.DONE
    finally:
        cancel()
