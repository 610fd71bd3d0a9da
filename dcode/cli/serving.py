"""`dcode serve`: the model behind an OpenAI-compatible HTTP API (see dcode.serve).

Reads the options (every sampler option is a default a request may override), loads the model
once, binds the socket (a port in use is a one-line error), and runs uvicorn until SIGINT or
SIGTERM, which cancel the running requests and exit 0. FastAPI and uvicorn are imported here,
inside the command, so the rest of the CLI starts without them.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import sys
from collections.abc import Iterator
from typing import Annotated, Any

import typer

from dcode.cli.common import (
    DEFAULT_LENGTH,
    RUNTIME,
    USAGE,
    app,
    fail,
    load_model,
    sampler_config,
    with_family_defaults,
)
from dcode.cli.options import with_options
from dcode.options import MODEL, REPAIR_ROUNDS, REPAIR_TRIES_OPTION, SAMPLER


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port, or a one-line error (port in use, bad host)."""
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as error:
        fail(f"cannot listen on {host}:{port}: {error.strerror or error}", RUNTIME)
    return sock


def run_server(app_: Any, sock: socket.socket, on_stop: Any) -> None:
    """uvicorn on the bound socket until SIGINT/SIGTERM; returns normally (exit 0) after a signal."""
    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            # uvicorn re-raises the signal after shutting down (the process would die of it):
            # here a signal is the normal way to stop, so it ends the server and nothing else.
            def stop(sig: int, frame: Any) -> None:
                on_stop()
                self.handle_exit(sig, frame)

            previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

    config = uvicorn.Config(app_, log_level="warning", access_log=False, timeout_graceful_shutdown=5, lifespan="off")
    Server(config).run(sockets=[sock])


@app.command("serve")
@with_options(*MODEL, *SAMPLER, REPAIR_ROUNDS, REPAIR_TRIES_OPTION)
def serve(
    ctx: typer.Context,
    host: Annotated[str, typer.Option("--host", envvar="DCODE_HOST", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[
        int, typer.Option("--port", envvar="DCODE_PORT", min=0, max=65535, help="Port to listen on.")
    ] = 8000,
    api_key: Annotated[
        str | None,
        typer.Option("--api-key", envvar="DCODE_API_KEY", help="Require `Authorization: Bearer KEY` on /v1/*."),
    ] = None,
    max_batch: Annotated[
        int, typer.Option("--max-batch", envvar="DCODE_MAX_BATCH", min=1, help="Requests generating at once.")
    ] = 16,
    max_queue: Annotated[
        int,
        typer.Option(
            "--max-queue", envvar="DCODE_MAX_QUEUE", min=0, help="Requests waiting beyond those; more get 503."
        ),
    ] = 64,
    batching: Annotated[
        bool | None,
        typer.Option(
            "--batching/--no-batching",
            envvar="DCODE_BATCHING",
            help="Run the forward passes of requests running together as one batch (the default); "
            "--no-batching: each request runs its own forward passes in its own thread.",
        ),
    ] = None,
    length: Annotated[
        int, typer.Option("--length", envvar="DCODE_LENGTH", min=1, help="max_tokens when a request gives none.")
    ] = DEFAULT_LENGTH,
    busy_draft: Annotated[
        int | None,
        typer.Option(
            "--busy-draft",
            envvar="DCODE_BUSY_DRAFT",
            min=0,
            help="Verify rule: --draft of a request that runs while others do (same answers, fewer rows a pass; "
            "default: 0 on a CPU, --draft on a GPU).",
        ),
    ] = None,
    repair: Annotated[
        bool,
        typer.Option(
            "--repair/--no-repair",
            envvar="DCODE_SERVE_REPAIR",
            help='Repair chat answers unless a request says "dcode": {"repair": false}.',
        ),
    ] = False,
    **chosen: Any,
) -> None:
    """Serve a model over an OpenAI-compatible HTTP API (chat, completions with suffix, streams)."""
    config = sampler_config(chosen)
    sock = bind(host, port)
    try:
        from dcode.serve.app import create_app
        from dcode.serve.engine import Engine
    except ImportError as error:
        fail(f"dcode serve needs fastapi and uvicorn ({error.name} is missing)", USAGE)
    denoiser = load_model(chosen["model"], chosen["device"], chosen["dtype"])
    config = with_family_defaults(config, denoiser, ctx)
    engine = Engine(
        denoiser,
        config,
        length=length,
        repair_rounds=chosen["repair_rounds"] if repair else 0,
        repair_tries=chosen["repair_tries"],
        max_batch=max_batch,
        max_queue=max_queue,
        # On a CPU the forward passes are compute-bound: batched requests that feed one row a pass
        # served the most requests per second there (docs/benchmarks/serve/serve.md); on a GPU a
        # drafted row is nearly free, so the draft stays (not measured on a GPU).
        batch=batching if batching is not None else True,
        busy_draft=busy_draft if busy_draft is not None else (0 if denoiser.device.type == "cpu" else None),
    )
    where = sock.getsockname()
    typer.echo(f"dcode: serving {engine.served} on http://{host}:{where[1]}/v1 (Ctrl-C stops)", err=True)
    sys.stderr.flush()
    run_server(create_app(engine, api_key=api_key or None), sock, engine.cancel_all)
    typer.echo("dcode: stopped", err=True)
