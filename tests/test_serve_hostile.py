"""`dcode serve` against careless and hostile clients, over real loopback sockets.

Connections that never finish a request head, under a lowered descriptor limit (in a child
process, so the suite's own limit is untouched), a flood of accept errors, malformed bodies, a
client that leaves mid-upload, a prompt of megabytes, cross-origin "simple" requests, trailing-slash
redirects, and a stop with requests running. Each case is bounded in count and time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx2
import pytest

pytest.importorskip("uvicorn")

import test_serve  # noqa: E402
from test_serve import CHAT, KEY, OK_MESSAGES, Served, free_socket, post  # noqa: E402

from dcode.serve.server import Collapse, loop_errors  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
server = test_serve.server  # the module's in-process server (its own instance here)
CHILD = """
import resource, runpy, sys
limit = int(sys.argv[1])
if limit:
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
sys.argv = ["dcode", "serve", *sys.argv[2:]]
runpy.run_module("dcode.cli", run_name="__main__")
"""


def start_cli(*args: str, nofile: int = 0, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], int]:
    """`dcode serve ARGS` in a child process (its descriptor limit lowered to `nofile`), once /health answers."""
    sock = free_socket()
    port = sock.getsockname()[1]
    sock.close()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", **(env or {})}
    argv = [sys.executable, "-c", CHILD, str(nofile), "--port", str(port), *args]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    for _ in range(600):
        try:
            if httpx2.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc, port
        except httpx2.TransportError:
            if proc.poll() is not None:
                break
            time.sleep(0.1)
    proc.kill()
    raise AssertionError(f"dcode serve did not start: {proc.communicate()[1][-2000:]}")


def stop(proc: subprocess.Popen[str]) -> str:
    """SIGTERM, exit 0, and the server's stderr."""
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err[-2000:]
    return err


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server has closed the connection (whatever it wrote before closing)."""
    sock.settimeout(0.2)
    try:
        while sock.recv(4096):
            pass
        return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


# ---------------------------------------------------------------------------------------------
# Connections


def test_slow_heads_are_closed_and_connections_capped_below_a_low_descriptor_limit() -> None:
    """150 connections that send a header byte every 0.25 s, against a server whose descriptor
    limit is 128: it keeps answering /health, closes every one of them after --header-timeout,
    and writes no flood of accept errors (before: 'OSError: [Errno 24]' tracebacks by the
    thousand, /health timing out, the slow connections open for good)."""
    proc, port = start_cli("--header-timeout", "1", nofile=128)
    slow: list[socket.socket] = []
    try:
        for _ in range(150):
            slow.append(socket.create_connection(("127.0.0.1", port), timeout=2))
            slow[-1].sendall(b"GET /health HTTP/1.1\r\n")
        began, answered = time.monotonic(), []
        while time.monotonic() - began < 2.5:  # trickle header bytes past the 1 s deadline
            for sock in slow:
                with contextlib.suppress(OSError):
                    sock.sendall(b"X")
            if not answered:  # the server answers a fresh client meanwhile (200, or 503 at the cap)
                answered.append(httpx2.get(f"http://127.0.0.1:{port}/health", timeout=3).status_code)
            time.sleep(0.25)
        assert answered[0] in (200, 503)
        still_open = [sock for sock in slow if not closed_by_server(sock)]
        assert still_open == []
        assert httpx2.get(f"http://127.0.0.1:{port}/health", timeout=3).status_code == 200
    finally:
        for sock in slow:
            sock.close()
        err = stop(proc) if proc.poll() is None else proc.communicate()[1]
    assert "Errno 24" not in err and "Traceback" not in err
    assert len(err.splitlines()) < 20, err[-2000:]


def test_a_flood_of_loop_errors_is_one_line_and_a_count(caplog: pytest.LogCaptureFixture) -> None:
    """asyncio logs an accept error per try, as fast as it can (a traceback each by default):
    10,001 of them are a line a second at most, each with the count of those it stands for."""
    collapse = Collapse(window=1.0)
    loop = asyncio.new_event_loop()
    loop.set_exception_handler(loop_errors(collapse))
    error = OSError(24, "Too many open files")
    context = {"message": "socket.accept() out of system resource", "exception": error}
    began = time.monotonic()
    with caplog.at_level(logging.ERROR, logger="dcode.serve"):
        for _ in range(10_000):
            loop.call_exception_handler(context)
        time.sleep(1.05)
        loop.call_exception_handler(context)
    loop.close()
    lines = [r.getMessage() for r in caplog.records]
    assert all(r.exc_info is None for r in caplog.records) and "Too many open files" in lines[0]
    assert len(lines) <= 2 + (time.monotonic() - began)
    counts = [int(line.split("(and ")[1].split()[0]) for line in lines[1:]]
    assert len(lines) + sum(counts) == 10_001 and "more like it" in lines[-1]


# ---------------------------------------------------------------------------------------------
# Bodies and requests


DEEP = b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
MALFORMED = [
    ("a lone surrogate", b'{"messages": [{"role": "user", "content": "\\ud800"}]}', "messages[0].content"),
    ("nested 100,000 deep", DEEP, None),
    ("an integer of 5,000 digits", b'{"messages": [], "max_tokens": ' + b"9" * 5000 + b"}", None),
    ("NaN", b'{"messages": [{"role": "user", "content": "x"}], "temperature": NaN}', None),
    ("a surrogate in a FIM suffix", b'{"prompt": "x", "suffix": "\\udfff"}', "suffix"),
]


@pytest.mark.parametrize(("body", "param"), [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_malformed_bodies_get_400_not_500(server: Served, body: bytes, param: str | None) -> None:
    path = "/v1/completions" if b'"prompt"' in body else CHAT
    answer = post(server.url, path, body)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"] == param and "Traceback" not in answer.text


WRONG_TYPES = [
    ("draft 1.5", {"dcode": {"strategy": "verify", "draft": 1.5}}, "dcode.draft"),
    ("seed 1.5 at the top", {"dcode": {"ordering": "random"}, "seed": 1.5}, "seed"),
    ("seed 1.5 in dcode", {"dcode": {"seed": 1.5}}, "dcode.seed"),
    ("block 1.5", {"dcode": {"block": 1.5}}, "dcode.block"),
    ("steps true", {"dcode": {"steps": True}}, "dcode.steps"),
    ("temperature true", {"temperature": True}, "temperature"),
    ("cache 1", {"dcode": {"cache": 1}}, "dcode.cache"),
    ("strategy 3", {"dcode": {"strategy": 3}}, "dcode.strategy"),
    ("unknown option", {"dcode": {"treshold": 0.5}}, "dcode.treshold"),
    ("unknown role", {"messages": [{"role": "user", "content": "hi"}, {"role": "wizard", "content": "x"}]}, None),
]


@pytest.mark.parametrize(("extra", "param"), [w[1:] for w in WRONG_TYPES], ids=[w[0] for w in WRONG_TYPES])
def test_values_of_the_wrong_type_get_400_naming_the_field(server: Served, extra: dict[str, Any], param: str) -> None:
    before = server.engine.batcher.calls
    answer = post(server.url, CHAT, {"messages": OK_MESSAGES, "max_tokens": 8, **extra})
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == (param or "messages[1].role")
    assert error["param"].split(".")[-1].split("[")[0] in error["message"]
    assert server.engine.batcher.calls == before


def test_a_client_that_leaves_mid_upload_leaves_no_traceback(server: Served, caplog: pytest.LogCaptureFixture) -> None:
    port = int(server.url.rsplit(":", 1)[1])
    with caplog.at_level(logging.INFO):
        for _ in range(3):
            with socket.create_connection(("127.0.0.1", port)) as sock:
                head = f"POST {CHAT} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
                sock.sendall(f"{head}Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n".encode())
                sock.sendall(b'{"messages": [{"role": "us')
        time.sleep(0.5)
    records = [r for r in caplog.records if r.name.startswith(("uvicorn", "dcode", "starlette", "asyncio"))]
    assert all(r.exc_info is None for r in records)
    assert not any("ClientDisconnect" in r.getMessage() or r.levelno >= logging.ERROR for r in records)
    assert httpx2.get(server.url + "/health").json()["status"] == "ok"


def test_a_prompt_of_megabytes_neither_freezes_the_server_nor_reaches_the_tokenizer(server: Served) -> None:
    """3.9 MB (under the body limit) cannot fit 2,048 tokens: refused at once, /health answers meanwhile."""
    huge = {"messages": [{"role": "user", "content": "x = 1 " * 650_000}], "max_tokens": 8}
    result: list[httpx2.Response] = []
    sender = threading.Thread(target=lambda: result.append(post(server.url, CHAT, huge)))
    sender.start()
    slowest = 0.0
    while sender.is_alive():
        began = time.perf_counter()
        httpx2.get(server.url + "/health", timeout=10)
        slowest = max(slowest, time.perf_counter() - began)
        time.sleep(0.02)
    sender.join()
    assert result[0].status_code == 400 and result[0].json()["error"]["code"] == "context_length_exceeded"
    assert slowest < 1.0


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded"])
def test_a_post_body_must_say_it_is_json(server: Served, content_type: str | None) -> None:
    """A web page may POST text/plain to a local server without a CORS preflight; not JSON."""
    headers = {"Authorization": f"Bearer {KEY}", **({"Content-Type": content_type} if content_type else {})}
    body = json.dumps({"messages": OK_MESSAGES, "max_tokens": 8}).encode()
    before = server.engine.batcher.calls
    answer = httpx2.post(server.url + CHAT, content=body, headers=headers, timeout=30)
    assert answer.status_code == 415 and answer.json()["error"]["type"] == "invalid_request_error"
    assert server.engine.batcher.calls == before


def test_no_redirect_is_built_from_the_clients_host(server: Served) -> None:
    headers = {"Host": "evil.example", "Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    answer = httpx2.post(server.url + CHAT + "/", content=b"{}", headers=headers, follow_redirects=False)
    assert answer.status_code == 404 and "location" not in answer.headers


def test_405_says_which_methods_are_allowed(server: Served) -> None:
    answer = httpx2.get(server.url + CHAT, headers={"Authorization": f"Bearer {KEY}"})
    assert answer.status_code == 405 and answer.headers["allow"] == "POST"
    assert answer.json()["error"]["message"]


# ---------------------------------------------------------------------------------------------
# Stopping with requests running


def test_sigterm_lets_short_requests_finish_and_cuts_the_rest_with_an_error(tmp_path: Path) -> None:
    """Two long streams, long non-stream requests (a completion and a chat) and a short stream when
    SIGTERM comes: the short one finishes within --graceful-timeout; the others end with
    `server_shutdown` (the streams before [DONE], the plain requests as a 503, never a 200 with the
    partial canvas). Before: [DONE] after a partial answer. The server
    takes its key from DCODE_SERVE_API_KEY_FILE, not from DCODE_API_KEY (the key a client sends)."""
    key_file = tmp_path / "key"
    key_file.write_text("file-key\n")
    env = {"DCODE_SERVE_API_KEY_FILE": str(key_file), "DCODE_API_KEY": "the-clients-key"}
    proc, port = start_cli("--graceful-timeout", "3", env=env)
    url = f"http://127.0.0.1:{port}/v1/completions"
    for key, status in ((None, 401), ("the-clients-key", 401), ("file-key", 200)):
        given = {"Authorization": f"Bearer {key}"} if key else {}
        assert httpx2.get(f"http://127.0.0.1:{port}/v1/models", headers=given).status_code == status
    hot = {"max_tokens": 1500, "dcode": {"temperature": 3.0}}  # dcode's own range: past OpenAI's 2, a long answer
    long = {"prompt": "def f(x):\n", "suffix": "\n", "stream": True, **hot}
    chat = {"messages": [{"role": "user", "content": "a long function"}], "ignore_eos": True, **hot}
    short = {"prompt": "def add(a, b):\n", "suffix": "\n\nprint(add(1, 2))\n", "max_tokens": 16, "stream": True}
    headers = {"Content-Type": "application/json", "Authorization": "Bearer file-key"}
    client = httpx2.Client(timeout=60, headers=headers)
    results: dict[str, Any] = {}

    def plain() -> None:
        results["plain"] = client.post(url, json={**long, "stream": False})

    def plain_chat() -> None:
        results["chat"] = client.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=chat)

    try:
        streams = {
            name: client.send(client.build_request("POST", url, json=body), stream=True)
            for name, body in (("long1", long), ("long2", long), ("short", short))
        }
        waiting = [threading.Thread(target=plain), threading.Thread(target=plain_chat)]
        for thread in waiting:
            thread.start()
        read = {name: r.iter_lines() for name, r in streams.items()}
        assert all(next(lines).startswith("data: ") for lines in read.values())
        deadline = time.monotonic() + 30
        while httpx2.get(f"http://127.0.0.1:{port}/health").json()["running"] < 5 and time.monotonic() < deadline:
            time.sleep(0.05)  # the plain requests are running too
        proc.send_signal(signal.SIGTERM)
        lines = {name: [line for line in read[name] if line] for name in streams}
        for thread in waiting:
            thread.join(timeout=30)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0 and "Traceback" not in err and "file-key" not in err
    events = {name: [json.loads(x[6:]) for x in got if x.startswith("data: {")] for name, got in lines.items()}
    for name, got in lines.items():
        assert got[-1] == "data: [DONE]", name
    assert events["short"][-1]["choices"][0]["finish_reason"] == "stop"
    assert not any("error" in e for e in events["short"])
    for name in ("long1", "long2"):
        assert events[name][-1]["error"]["code"] == "server_shutdown"
    for name in ("plain", "chat"):
        assert results[name].status_code == 503, results[name].text
        assert results[name].json()["error"]["code"] == "server_shutdown"
    assert err.count('"POST /v1/completions"') == 4  # one access-log line per request
    assert err.count('"POST /v1/chat/completions" 503') == 1
