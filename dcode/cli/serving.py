"""`dcode serve`: the model behind an OpenAI-compatible HTTP API (see dcode.serve).

Reads the options (every sampler option is a default a request may override; the key the server
requires comes from --api-key, DCODE_SERVE_API_KEY or --api-key-file, never shown), loads the
model once, binds the socket (a port in use is a one-line error), and runs the server
(dcode.serve.server) until SIGINT or SIGTERM, which let running requests finish for
--graceful-timeout seconds, cut the rest, and exit 0. FastAPI and uvicorn are imported here,
inside the command, so the rest of the CLI starts without them.
"""

from __future__ import annotations

import logging
import socket
import sys
from pathlib import Path
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

LOCAL_HOSTS = ("127.0.0.1", "::1", "localhost")


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


def required_key(given: str | None, file: Path | None) -> str | None:
    """The key clients must send: --api-key (or DCODE_SERVE_API_KEY), or the first line of
    --api-key-file; both, an empty key or an unreadable file is a usage error."""
    if given is not None and file is not None:
        fail("give --api-key or --api-key-file, not both", USAGE)
    if file is not None:
        try:
            given = file.read_text(encoding="utf-8").splitlines()[0] if file.stat().st_size else ""
        except (OSError, UnicodeDecodeError) as error:
            fail(f"cannot read --api-key-file {file}: {getattr(error, 'strerror', None) or error}", USAGE)
    if given is not None and not given.strip():
        fail("the API key is empty", USAGE)
    return given.strip() if given is not None else None


def log_to_stderr(access_log: bool) -> None:
    """dcode.serve's records (one access line per request, errors) as `dcode: ...` lines on stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("dcode: %(message)s"))
    served = logging.getLogger("dcode.serve")
    served.addHandler(handler)
    served.setLevel(logging.INFO)
    served.propagate = False
    logging.getLogger("dcode.serve.access").disabled = not access_log


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
        typer.Option(
            "--api-key",
            envvar="DCODE_SERVE_API_KEY",
            help="Require `Authorization: Bearer KEY` on /v1/* (prefer the variable or --api-key-file: "
            "a command line is visible to every user of the machine).",
        ),
    ] = None,
    api_key_file: Annotated[
        Path | None,
        typer.Option(
            "--api-key-file",
            envvar="DCODE_SERVE_API_KEY_FILE",
            help="Read the required key from this file's first line.",
        ),
    ] = None,
    graceful_timeout: Annotated[
        float,
        typer.Option(
            "--graceful-timeout",
            envvar="DCODE_GRACEFUL_TIMEOUT",
            min=0,
            help="Seconds running requests get to finish after SIGINT/SIGTERM; the rest end with an error.",
        ),
    ] = 30.0,
    header_timeout: Annotated[
        float,
        typer.Option(
            "--header-timeout",
            envvar="DCODE_HEADER_TIMEOUT",
            min=0.1,
            help="Seconds a connection may take to send a whole request head; it is closed after.",
        ),
    ] = 10.0,
    max_connections: Annotated[
        int,
        typer.Option(
            "--max-connections",
            envvar="DCODE_MAX_CONNECTIONS",
            min=1,
            help="Open connections at most (fewer if the descriptor limit says so); more get 503.",
        ),
    ] = 1000,
    access_log: Annotated[
        bool,
        typer.Option("--access-log/--no-access-log", envvar="DCODE_ACCESS_LOG", help="One line per request on stderr."),
    ] = True,
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
    key = required_key(api_key, api_key_file)
    sock = bind(host, port)
    try:
        from dcode.serve.app import create_app
        from dcode.serve.engine import Engine
        from dcode.serve.server import descriptor_room, serve
    except ImportError as error:
        fail(f"dcode serve needs fastapi and uvicorn ({error.name} is missing)", USAGE)
    denoiser = load_model(chosen["model"], chosen["device"])
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
    if key is None and host not in LOCAL_HOSTS:
        typer.echo(f"dcode: no --api-key: anyone who can reach {host}:{where[1]} can generate", err=True)
    sys.stderr.flush()
    log_to_stderr(access_log)
    connections, burst = descriptor_room(max_connections)
    served = create_app(engine, api_key=key)
    grace, head = graceful_timeout, header_timeout
    serve(served, sock, engine.cancel_all, grace=grace, header_timeout=head, max_connections=connections, burst=burst)
    typer.echo("dcode: stopped", err=True)
