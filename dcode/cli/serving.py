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
from dataclasses import dataclass, field
from pathlib import Path

import typer

from dcode.cli.app import RUNTIME, USAGE, app, fail
from dcode.cli.loading import load_model, with_family_defaults
from dcode.cli.options import with_options
from dcode.cli.resolve import Local, Resolved
from dcode.config import EFFORTS
from dcode.options import CPU_BUSY_DRAFT, SERVE

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


@dataclass(frozen=True)
class Serving:
    """`dcode serve`'s own options (dcode.options.SERVING); its length and repair are the run's."""

    host: str
    port: int
    api_key: str | None = field(repr=False)  # a secret: never shown
    api_key_file: str | None
    max_batch: int
    max_queue: int
    batching: bool | None  # None: on
    busy_draft: int | None  # None: CPU_BUSY_DRAFT on a CPU, --draft on a GPU
    graceful_timeout: float
    header_timeout: float
    max_connections: int
    access_log: bool


@app.command("serve")
@with_options(*SERVE, own=Serving)
def serve(run: Resolved[Serving]) -> None:
    """Serve a model over an OpenAI-compatible HTTP API (chat, completions with suffix, streams)."""
    served, local = run.own, run.fills
    assert isinstance(local, Local)  # serve has no --endpoint
    key = required_key(served.api_key, Path(served.api_key_file) if served.api_key_file is not None else None)
    sock = bind(served.host, served.port)
    try:
        from dcode.serve.app import create_app
        from dcode.serve.engine import Engine
        from dcode.serve.server import descriptor_room, serve
    except ImportError as error:
        fail(f"dcode serve needs fastapi and uvicorn ({error.name} is missing)", USAGE)
    denoiser = load_model(local.model, local.device, local.dtype, local.quantize)
    config = with_family_defaults(local.sampler, denoiser, local.explicit, local.effort)
    # a request's reasoning_effort: the family's decoding at that level under the options the server was given
    efforts = {e: with_family_defaults(local.sampler, denoiser, local.explicit, e) for e in EFFORTS}
    busy_draft, on_cpu = served.busy_draft, denoiser.device.type == "cpu"
    engine = Engine(
        denoiser,
        config,
        length=run.tokens,
        repair_rounds=run.repair.rounds,
        repair_tries=run.repair.tries,
        max_batch=served.max_batch,
        max_queue=served.max_queue,
        # On a CPU the forward passes are compute-bound: with packed passes (the prefix fed once,
        # the output head only where read) 3 drafts under load served the most answer tokens per
        # second at 16 clients, 2-4 alike (~190 tok/s against ~155 with 0 and ~175 with 15 on a
        # 2-core AMD EPYC, benchmarks/serve.py --modes busy0,busy3,busy6 --levels 16); on a GPU
        # a drafted row is nearly free, so the draft stays (not measured on a GPU).
        batch=served.batching if served.batching is not None else True,
        busy_draft=busy_draft if busy_draft is not None else (CPU_BUSY_DRAFT if on_cpu else None),
        efforts=efforts,
    )
    port = sock.getsockname()[1]
    typer.echo(f"dcode: serving {engine.served} on http://{served.host}:{port}/v1 (Ctrl-C stops)", err=True)
    if key is None and served.host not in LOCAL_HOSTS:
        typer.echo(f"dcode: no --api-key: anyone who can reach {served.host}:{port} can generate", err=True)
    sys.stderr.flush()
    log_to_stderr(served.access_log)
    connections, burst = descriptor_room(served.max_connections)
    app_, grace = create_app(engine, api_key=key), served.graceful_timeout
    serve(
        app_, sock, engine.cancel_all, grace=grace, header_timeout=served.header_timeout,
        max_connections=connections, burst=burst,
    )  # fmt: skip
    typer.echo("dcode: stopped", err=True)
