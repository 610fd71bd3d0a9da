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
from typing import Any

import typer

from dcode.cli.app import RUNTIME, USAGE, app, fail
from dcode.cli.loading import load_model, sampler_config, with_family_defaults
from dcode.cli.options import with_options
from dcode.options import DEFAULT_LENGTH, MODEL, REPAIR_ROUNDS, REPAIR_TRIES_OPTION, SAMPLER, Option

LOCAL_HOSTS = ("127.0.0.1", "::1", "localhost")
CPU_BUSY_DRAFT = 3  # the verify rule's --draft under load on a CPU (measured: see serve())


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


def serve_option(name: str, kind: type, default: Any, help: str, **extra: Any) -> Option:
    """One of `dcode serve`'s own options: --NAME, DCODE_NAME (unless `env` says otherwise)."""
    flag = extra.pop("flag", "--" + name.replace("_", "-"))
    return Option(name, flag, extra.pop("env", f"DCODE_{name.upper()}"), help, kind, default, **extra)


# `dcode serve`'s own options (its sampler, model and repair options are dcode.options')
SERVE: tuple[Option, ...] = (
    serve_option("host", str, "127.0.0.1", "Address to listen on (0.0.0.0: every interface; see --api-key)."),
    serve_option("port", int, 8000, "Port to listen on.", min=0),
    serve_option(
        "api_key",
        str,
        None,
        "Require `Authorization: Bearer KEY` on /v1/* (prefer the variable or --api-key-file: a command line "
        "is visible to every user of the machine).",
        env="DCODE_SERVE_API_KEY",
        optional=True,
    ),
    serve_option(
        "api_key_file",
        str,
        None,
        "Read the required key from this file's first line.",
        env="DCODE_SERVE_API_KEY_FILE",
        optional=True,
    ),
    serve_option("max_batch", int, 16, "Requests generating at once.", min=1),
    serve_option("max_queue", int, 64, "Requests waiting beyond those; more get 503.", min=0),
    serve_option(
        "batching",
        bool,
        None,
        "Run the forward passes of requests running together as one batch (the default); --no-batching: "
        "each request runs its own forward passes in its own thread.",
        flag="--batching/--no-batching",
        optional=True,
    ),
    serve_option("length", int, DEFAULT_LENGTH, "max_tokens when a request gives none.", min=1),
    serve_option(
        "busy_draft",
        int,
        None,
        "Verify rule: --draft of a request that runs while others do (same answers, fewer rows a pass; "
        f"default: {CPU_BUSY_DRAFT} on a CPU, --draft on a GPU).",
        min=0,
        optional=True,
    ),
    serve_option(
        "repair",
        bool,
        False,
        'Repair chat answers unless a request says "dcode": {"repair": false}.',
        flag="--repair/--no-repair",
        env="DCODE_SERVE_REPAIR",
    ),
    serve_option(
        "graceful_timeout",
        float,
        30.0,
        "Seconds running requests get to finish after SIGINT/SIGTERM; the rest end with an error.",
        min=0,
    ),
    serve_option(
        "header_timeout",
        float,
        10.0,
        "Seconds a connection may take to send a whole request head; it is closed after.",
        min=1,
    ),
    serve_option(
        "max_connections",
        int,
        1000,
        "Open connections at most (fewer if the descriptor limit says so); more get 503.",
        min=1,
    ),
    serve_option("access_log", bool, True, "One line per request on stderr.", flag="--access-log/--no-access-log"),
)


@app.command("serve")
@with_options(*SERVE, *MODEL, *SAMPLER, REPAIR_ROUNDS, REPAIR_TRIES_OPTION)
def serve(ctx: typer.Context, **chosen: Any) -> None:
    """Serve a model over an OpenAI-compatible HTTP API (chat, completions with suffix, streams)."""
    config = sampler_config(chosen)
    file = chosen["api_key_file"]
    key = required_key(chosen["api_key"], Path(file) if file is not None else None)
    host = chosen["host"]
    sock = bind(host, chosen["port"])
    try:
        from dcode.serve.app import create_app
        from dcode.serve.engine import Engine
        from dcode.serve.server import descriptor_room, serve
    except ImportError as error:
        fail(f"dcode serve needs fastapi and uvicorn ({error.name} is missing)", USAGE)
    denoiser = load_model(chosen["model"], chosen["device"], chosen["dtype"])
    config = with_family_defaults(config, denoiser, ctx)
    busy_draft, batching, on_cpu = chosen["busy_draft"], chosen["batching"], denoiser.device.type == "cpu"
    engine = Engine(
        denoiser,
        config,
        length=chosen["length"],
        repair_rounds=chosen["repair_rounds"] if chosen["repair"] else 0,
        repair_tries=chosen["repair_tries"],
        max_batch=chosen["max_batch"],
        max_queue=chosen["max_queue"],
        # On a CPU the forward passes are compute-bound: with packed passes (the prefix fed once,
        # the output head only where read) 3 drafts under load served the most answer tokens per
        # second at 16 clients, 2-4 alike (~190 tok/s against ~155 with 0 and ~175 with 15 on a
        # 2-core AMD EPYC, benchmarks/serve.py --modes busy0,busy3,busy6 --levels 16); on a GPU
        # a drafted row is nearly free, so the draft stays (not measured on a GPU).
        batch=batching if batching is not None else True,
        busy_draft=busy_draft if busy_draft is not None else (CPU_BUSY_DRAFT if on_cpu else None),
    )
    port = sock.getsockname()[1]
    typer.echo(f"dcode: serving {engine.served} on http://{host}:{port}/v1 (Ctrl-C stops)", err=True)
    if key is None and host not in LOCAL_HOSTS:
        typer.echo(f"dcode: no --api-key: anyone who can reach {host}:{port} can generate", err=True)
    sys.stderr.flush()
    log_to_stderr(chosen["access_log"])
    connections, burst = descriptor_room(chosen["max_connections"])
    limits = {"header_timeout": chosen["header_timeout"], "max_connections": connections, "burst": burst}
    serve(create_app(engine, api_key=key), sock, engine.cancel_all, grace=chosen["graceful_timeout"], **limits)
    typer.echo("dcode: stopped", err=True)
