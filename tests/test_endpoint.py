"""`--endpoint`: dcode new, edit and repair against served models, offline.

ReplayServer is a test fake, named as one: a real HTTP server (http.server in a thread) on a free
loopback port that answers each request the way a real server streams (Mercury 2's whole-text
chunks, SGLang's block deltas, vLLM refusing `suffix`, a dcode server's frames) or fails (401, 404,
429, 503, a malformed stream, an empty answer, silence). Commands run through Typer's CliRunner,
with exact stderr lines and exit codes; start-up checks run in fresh interpreters.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from dcode import flows
from dcode.cli import app
from dcode.events import Drawn, Finished, Repaired
from dcode.remote import Endpoint, RemoteError, fill, sse, streams
from dcode.remote.filler import EndpointFiller
from dcode.remote.streams import Answer
from dcode.render import MASK, Describer, render_status

KEY = "sk-test-5ecret-never-shown"
ROOT = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------------------------------------
# The replay server (a test fake)


@dataclass
class Reply:
    status: int = 200
    chunks: list[str] = field(default_factory=list)  # SSE text pieces, sent one by one
    headers: dict[str, str] = field(default_factory=dict)
    body: str = ""  # a whole body (an error, a JSON answer)
    delay: float = 0.0  # seconds before each chunk


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


class ReplayServer:
    """A test fake: a real HTTP server on a free loopback port; `script(seen)` says how to answer.
    Every request is recorded in `seen`."""

    def __init__(self, script: Callable[[Seen], Reply]) -> None:
        self.script, self.seen = script, []  # type: ignore[var-annotated]
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                self.answer({})

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length", 0)))
                self.answer(json.loads(raw) if raw else {})

            def answer(self, body: dict[str, Any]) -> None:
                seen = Seen(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                server.seen.append(seen)
                reply = server.script(seen)
                self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                if reply.chunks:
                    self.send_header("content-type", "text/event-stream")
                    self.send_header("connection", "close")
                    self.end_headers()
                    try:
                        for chunk in reply.chunks:
                            time.sleep(reply.delay)
                            self.wfile.write(chunk.encode())
                            self.wfile.flush()
                    except (BrokenPipeError, ConnectionResetError):
                        pass
                    self.close_connection = True
                    return
                data = reply.body.encode()
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    @property
    def posts(self) -> list[Seen]:
        return [s for s in self.seen if s.method == "POST"]


@pytest.fixture
def replay() -> Iterator[Callable[[Callable[[Seen], Reply]], ReplayServer]]:
    started: list[ReplayServer] = []

    def start(script: Callable[[Seen], Reply]) -> ReplayServer:
        started.append(ReplayServer(script))
        return started[-1]

    yield start
    for server in started:
        server.close()


def sse_chunks(objects: list[dict[str, Any]], done: bool = True, crlf: bool = False) -> list[str]:
    end = "\r\n" if crlf else "\n"
    out = [f"data: {json.dumps(o)}{end}{end}" for o in objects]
    return out + ([f"data: [DONE]{end}{end}"] if done else [])


def chat_chunk(content: str | None, **extra: Any) -> dict[str, Any]:
    delta = {} if content is None else {"content": content}
    return {"id": "c1", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}], **extra}


def text_chunk(text: str) -> dict[str, Any]:
    return {"id": "t1", "object": "text_completion", "choices": [{"index": 0, "text": text, "logprobs": None}]}


def error(status: int, message: str, code: str | None = None, **headers: str) -> Reply:
    body = {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}}
    return Reply(status, body=json.dumps(body), headers=headers)


# Mercury 2 with "diffusing": true: each chunk is the whole current text (with comments, extra
# fields and CRLF, as real servers send).
MERCURY_TEXTS = ["def add(a, b):\n    return a\n", "def add(a, b):\n    return a + b\n"]


def mercury(seen: Seen) -> Reply:
    objects = [chat_chunk(t, diffusing=True, system_fingerprint="fp") for t in MERCURY_TEXTS]
    return Reply(chunks=[": keep-alive\r\n\r\n", *sse_chunks(objects, crlf=True)])


# SGLang: each finished block as an appended delta, no [DONE], a usage chunk.
SGLANG_BLOCKS = ["def add(a, b):\n", "    return a + b\n"]


def sglang(seen: Seen) -> Reply:
    usage = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "choices": [],
        "usage": {"prompt_tokens": 9, "completion_tokens": 12},
    }
    return Reply(chunks=sse_chunks([chat_chunk(None), *[chat_chunk(b) for b in SGLANG_BLOCKS], usage], done=False))


def wire_frame(pieces: list[str | None], committed: list[int], forward: int) -> dict[str, Any]:
    return {
        "pieces": pieces, "committed": committed, "remasked": [], "forward": forward,
        "masked": sum(p is None for p in pieces), "filled": sum(p is not None for p in pieces),
        "elapsed": 0.01 * forward, "settled": False, "repair_round": 0, "language": "python",
        "model": "dcode-tiny", "device": "cuda",
    }  # fmt: skip


DCODE_FRAMES = [
    wire_frame(["def", None, None, None], [0], 1),
    wire_frame(["def", " f", "():", None], [1, 2], 2),
    wire_frame(["def", " f", "():", " pass\n"], [3], 3),
]


def dcode_server(seen: Seen) -> Reply:
    objects = [
        chat_chunk("".join(p or MASK for p in f["pieces"]), dcode={"event": "frame", "frame": f}) for f in DCODE_FRAMES
    ]
    metadata = {"tokens": 4, "forward_passes": 3, "prompt_tokens": 7}
    objects.append(
        chat_chunk("def f(): pass\n", dcode={"event": "finished", "code": "def f(): pass\n", "metadata": metadata})
    )
    return Reply(chunks=sse_chunks(objects))


def dcode(*args: str, env: dict[str, str] | None = None, input: str | None = None) -> Any:  # click.testing.Result
    base = {"DCODE_ENDPOINT_KEY": "", "OPENAI_API_KEY": "", "INCEPTION_API_KEY": "", "NO_COLOR": "1"}
    return CliRunner().invoke(app, list(args), env={**base, **(env or {})}, input=input, prog_name="dcode")


# ---------------------------------------------------------------------------------------------
# The SSE reader


def test_sse_reader_tolerates_what_real_servers_send() -> None:
    lines = [
        ": ping\r\n",
        "event: message\r\n",
        "id: 7\r\n",
        'data: {"a":\r\n',
        "data: 1}\r\n",
        "\r\n",
        "retry: 5",
        "",
        "data: 2",
    ]
    assert [e.data for e in sse.events(lines)] == ['{"a":\n1}', "2"]
    assert list(sse.chunks(['data: {"x": 1}', "", "data: [DONE]", "", 'data: {"after": 1}', ""])) == [{"x": 1}]
    with pytest.raises(sse.MalformedStream, match="not JSON"):
        list(sse.chunks(["data: {oops", ""]))


# ---------------------------------------------------------------------------------------------
# Stream kinds and the frames the live view draws


def answer_of(events: list[Any]) -> Any:
    return events[-1]


def served_new(endpoint: Endpoint, request: str = "add", length: int = 64, rounds: int = 0) -> list[Any]:
    """dcode.flows.new through the endpoint, as `dcode new --endpoint` runs it."""
    return list(flows.new(EndpointFiller(endpoint, fill.Sampling(0)), request, "python", length, rounds))


def test_mercury_whole_texts_become_passes_with_the_change_highlighted(replay: Any) -> None:
    server = replay(mercury)
    endpoint = Endpoint.parse(server.url, model="mercury-2")
    events = served_new(endpoint, "add two numbers")
    frames = [e.frame for e in events if isinstance(e, Drawn)]
    assert [f.code for f in frames] == MERCURY_TEXTS
    assert frames[0].committed == frozenset(range(len(frames[0].pieces)))  # all new
    changed = {frames[1].pieces[i] for i in frames[1].committed}
    assert changed == {" ", "+", "b"}  # only what the second pass changed
    assert [f.forward for f in frames] == [1, 2] and frames[1].device == "127.0.0.1" and frames[1].model == "mercury-2"
    done = answer_of(events)
    assert done.code == MERCURY_TEXTS[-1] and done.extra["stream"] == "replace" and done.unit == "chunk"
    body = server.posts[0].body
    assert body["diffusing"] is True and body["stream"] is True and body["model"] == "mercury-2"


def test_sglang_blocks_land_appended_without_done(replay: Any) -> None:
    server = replay(sglang)
    events = served_new(Endpoint.parse(server.url, model="llada2"))
    frames = [e.frame for e in events if isinstance(e, Drawn)]
    assert [f.code for f in frames] == ["def add(a, b):\n", "".join(SGLANG_BLOCKS)]
    assert "".join(frames[1].pieces[i] or "" for i in sorted(frames[1].committed)) == SGLANG_BLOCKS[1]
    done = answer_of(events)
    assert done.extra["stream"] == "append" and done.tokens == 12 and done.prompt_tokens == 9


def test_dcode_frames_are_drawn_exactly_as_sent(replay: Any) -> None:
    server = replay(dcode_server)
    events = served_new(Endpoint.parse(server.url, model="dcode-tiny"), "f", 8)
    frames = [e.frame for e in events if isinstance(e, Drawn)]
    assert [f.pieces for f in frames] == [tuple(f["pieces"]) for f in DCODE_FRAMES]
    assert [f.committed for f in frames] == [frozenset(f["committed"]) for f in DCODE_FRAMES]
    assert [(f.forward, f.masked, f.device, f.elapsed) for f in frames] == [
        (1, 3, "cuda", 0.01),
        (2, 1, "cuda", 0.02),
        (3, 0, "cuda", 0.03),
    ]
    done = answer_of(events)
    assert (
        done.code == "def f(): pass\n" and done.extra["stream"] == "dcode" and (done.forward, done.unit) == (3, "pass")
    )


def test_stream_mode_forces_the_reading(replay: Any) -> None:
    server = replay(mercury)
    done = dcode("new", "add", "--endpoint", server.url, "--model", "m", "--stream-mode", "append", "--no-repair", "-q")
    assert done.exit_code == 0 and done.stdout == "".join(MERCURY_TEXTS)  # whole texts read as deltas
    assert "diffusing" not in server.posts[0].body  # append asks for nothing extra
    done = dcode(
        "new", "add", "--endpoint", server.url, "--model", "m", "--stream-mode", "replace", "--no-repair", "-q"
    )
    assert done.exit_code == 0 and done.stdout == MERCURY_TEXTS[-1]


def test_new_through_the_endpoint_prints_the_code_and_one_summary_line(replay: Any, tmp_path: Path) -> None:
    server = replay(sglang)
    out = tmp_path / "add.py"
    done = dcode("new", "add two numbers", "--endpoint", server.url, "--model", "llada2", "-o", str(out))
    assert done.exit_code == 0, done.stderr
    assert out.read_text() == "".join(SGLANG_BLOCKS) and done.stdout == ""
    assert done.stderr == "dcode: 12 tokens in 2 chunks (6.0 tok/chunk), " + done.stderr.split("), ", 1)[1]
    assert done.stderr.endswith(" tok/s, llada2 at 127.0.0.1\n") and done.stderr.count("\n") == 1
    assert server.posts[0].path == "/v1/chat/completions"


def test_json_has_the_local_keys_and_never_the_key(replay: Any) -> None:
    server = replay(sglang)
    done = dcode("new", "add", "--endpoint", server.url, "--model", "llada2", "--json", env={"DCODE_ENDPOINT_KEY": KEY})
    assert done.exit_code == 0, done.stderr
    report = json.loads(done.stdout)
    assert {"code", "model", "language", "path", "tokens", "forward_passes", "seconds", "tokens_per_second"} <= set(
        report
    )
    assert report["repair"]["issues_after"] == 0 and report["endpoint"] == server.url
    assert KEY not in done.stdout + done.stderr
    assert server.posts[0].headers["authorization"] == f"Bearer {KEY}"


def test_the_model_defaults_to_the_first_one_the_server_lists(replay: Any) -> None:
    def script(seen: Seen) -> Reply:
        if seen.method == "GET":
            return Reply(body=json.dumps({"object": "list", "data": [{"id": "sdar-8b", "object": "model"}]}))
        return sglang(seen)

    server = replay(script)
    done = dcode("new", "add", "--endpoint", server.url, "--no-repair", "-q")
    assert done.exit_code == 0 and server.seen[0].path == "/v1/models" and server.posts[0].body["model"] == "sdar-8b"


# ---------------------------------------------------------------------------------------------
# Repair and edit: fill in the middle, and the chat fallback; bytes outside the span identical

BROKEN = "import os\n\ndef area(w, h):\n    return w * h +\n\nprint(area(2, 3))\n"
BROKEN_LINE = "    return w * h +"


def fim_server(fill_text: str) -> Callable[[Seen], Reply]:
    def script(seen: Seen) -> Reply:
        assert seen.path == "/v1/completions"
        return Reply(chunks=sse_chunks([text_chunk(fill_text[:5]), text_chunk(fill_text[5:])]))

    return script


def vllm_server(fill_text: str) -> Callable[[Seen], Reply]:
    """Refuses `suffix` with 400, as vLLM does; answers chat with a fenced block."""

    def script(seen: Seen) -> Reply:
        if seen.path == "/v1/completions":
            return error(400, "suffix is not currently supported")
        return Reply(chunks=sse_chunks([chat_chunk("Here it is:\n```python\n"), chat_chunk(fill_text + "\n```\n")]))

    return script


@pytest.mark.parametrize("kind", ["fim", "chat"])
def test_repair_fills_only_the_broken_line(replay: Any, tmp_path: Path, kind: str) -> None:
    fix = "    return w * h + 1"
    server = replay(fim_server(fix) if kind == "fim" else vllm_server(fix))
    path = tmp_path / "area.py"
    path.write_bytes(BROKEN.encode())
    done = dcode("repair", str(path), "--endpoint", server.url, "--model", "m")
    assert done.exit_code == 0, done.stderr
    assert path.read_text() == BROKEN.replace(BROKEN_LINE, fix)
    assert done.stderr == f"dcode: {path}: 1 -> 0 syntax issue(s) in 1 round(s)\n"
    start = BROKEN.index(BROKEN_LINE)
    if kind == "fim":
        (request,) = server.posts
        assert request.body["prompt"] == BROKEN[:start] and request.body["suffix"] == BROKEN[start + len(BROKEN_LINE) :]
    else:
        fim, chat = server.posts
        assert fim.body["suffix"] and chat.path == "/v1/chat/completions"
        asked = chat.body["messages"][-1]["content"]
        assert f"{fill.BEGIN}\n{BROKEN_LINE}\n{fill.END}" in asked


def test_repair_and_edit_to_stdout_leave_the_file_alone(replay: Any, tmp_path: Path) -> None:
    """`-o -` through an endpoint prints the result, as a local repair or edit does."""
    fix = "    return w * h + 1"
    path = tmp_path / "area.py"
    path.write_bytes(BROKEN.encode())
    done = dcode("repair", str(path), "-o", "-", "--endpoint", replay(fim_server(fix)).url, "--model", "m")
    assert done.exit_code == 0, done.stderr
    assert done.stdout == BROKEN.replace(BROKEN_LINE, fix) and path.read_text() == BROKEN
    line = str(BROKEN.count("\n", 0, BROKEN.index(BROKEN_LINE)) + 1)
    server = replay(fim_server(fix))
    edit = ["edit", str(path), "--lines", line, "--instruct", "add one", "-o", "-", "--no-repair"]
    done = dcode(*edit, "--endpoint", server.url, "--model", "m")
    assert done.exit_code == 0, done.stderr
    assert done.stdout == BROKEN.replace(BROKEN_LINE, fix) and path.read_text() == BROKEN
    assert not Path(f"{path}.orig").exists()


def test_edit_through_fim_keeps_every_byte_outside_the_region(replay: Any, tmp_path: Path) -> None:
    source = "def a():\n    return 1\n\n\ndef b():\n    return 2\n\n\ndef c():\n    return 3\n"
    server = replay(fim_server("def b():\n    return 20\n\n\n"))
    path = tmp_path / "m.py"
    path.write_text(source)
    done = dcode(
        "edit",
        str(path),
        "--lines",
        "5-6",
        "--instruct",
        "return twenty",
        "--endpoint",
        server.url,
        "--model",
        "m",
        "--no-repair",
    )
    assert done.exit_code == 0, done.stderr
    assert path.read_text() == source.replace("return 2\n", "return 20\n")
    assert Path(f"{path}.orig").read_text() == source
    prompt = server.posts[0].body["prompt"]
    assert prompt == "def a():\n    return 1\n\n\n# return twenty\n"  # the instruction as a comment above the region
    assert server.posts[0].body["suffix"] == "\n\ndef c():\n    return 3\n"


def test_edit_through_the_chat_fallback_with_a_diff(replay: Any, tmp_path: Path) -> None:
    source = "x = 1\ny = 2\nz = 3\n"
    server = replay(vllm_server("y = 22"))
    path = tmp_path / "v.py"
    path.write_text(source)
    done = dcode(
        "edit",
        str(path),
        "--lines",
        "2",
        "--instruct",
        "make y 22",
        "--endpoint",
        server.url,
        "--model",
        "m",
        "--diff",
        "-q",
    )
    assert done.exit_code == 0, done.stderr
    assert path.read_text() == source  # --diff writes nothing
    assert done.stdout.endswith("-y = 2\n+y = 22\n z = 3\n")


# ---------------------------------------------------------------------------------------------
# Failures: one line, the right exit code, no traceback, no file touched


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_refused_port(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    done = dcode("new", "x", "--endpoint", url, "--model", "m", "-o", str(tmp_path / "o.py"))
    assert (done.exit_code, done.stderr) == (1, f"dcode: error: cannot connect to {url}: connection refused\n")
    assert not (tmp_path / "o.py").exists()


def test_unresolvable_host() -> None:
    done = dcode("new", "x", "--endpoint", "http://nonexistent.invalid", "--model", "m")
    expected = "dcode: error: cannot resolve the host 'nonexistent.invalid' of http://nonexistent.invalid/v1\n"
    assert (done.exit_code, done.stderr) == (1, expected)


def test_tls_to_a_plain_http_port(replay: Any) -> None:
    server = replay(sglang)
    url = server.url.replace("http://", "https://")
    done = dcode("new", "x", "--endpoint", url, "--model", "m", "--timeout", "5")
    assert done.exit_code == 1 and done.stderr.startswith(f"dcode: error: TLS failure talking to {url}: ")
    assert done.stderr.count("\n") == 1 and server.posts == []


def test_silence_between_chunks_times_out(replay: Any) -> None:
    server = replay(lambda seen: Reply(chunks=sse_chunks([chat_chunk("a"), chat_chunk("b")]), delay=2.0))
    began = time.perf_counter()
    done = dcode("new", "x", "--endpoint", server.url, "--model", "m", "--timeout", "0.3")
    assert (done.exit_code, done.stderr) == (1, f"dcode: error: {server.url} sent nothing for 0.3 s (--timeout)\n")
    assert time.perf_counter() - began < 1.5


@pytest.mark.parametrize(
    ("reply", "code", "line"),
    [
        (
            error(401, f"Incorrect API key provided: {KEY}", "invalid_api_key"),
            2,
            "{url} refused the API key (401): Incorrect API key provided: ***",
        ),
        (
            error(404, "The model `nope` does not exist.", "model_not_found"),
            2,
            "model 'nope' not found at {url} (404): The model `nope` does not exist.",
        ),
        (
            Reply(chunks=["data: {not json\n\n"]),
            1,
            "malformed stream from {url}: a chunk is not JSON "
            "(Expecting property name enclosed in double quotes at 1): '{not json'",
        ),
        (Reply(chunks=sse_chunks([chat_chunk(""), chat_chunk(None)])), 1, "the server returned an empty answer"),
        (
            Reply(chunks=sse_chunks([{"error": {"message": "CUDA out of memory"}}])),
            1,
            "{url} failed mid-answer: CUDA out of memory",
        ),
        (error(500, "engine crashed"), 1, "{url} refused the request (500): engine crashed"),
    ],
    ids=["401", "404-model", "malformed", "empty", "mid-stream-error", "500"],
)
def test_failures_are_one_line(replay: Any, tmp_path: Path, reply: Reply, code: int, line: str) -> None:
    server = replay(lambda seen: reply)
    out = tmp_path / "o.py"
    done = dcode(
        "new", "x", "--endpoint", server.url, "--model", "nope", "-o", str(out), env={"DCODE_ENDPOINT_KEY": KEY}
    )
    assert (done.exit_code, done.stderr) == (code, f"dcode: error: {line.replace('{url}', server.url)}\n")
    assert not out.exists() and KEY not in done.stdout


def test_429_is_retried_after_retry_after(replay: Any) -> None:
    answers = iter([error(429, "slow down", **{"Retry-After": "1"}), sglang(None)])  # type: ignore[arg-type]
    server = replay(lambda seen: next(answers))
    began = time.perf_counter()
    done = dcode("new", "x", "--endpoint", server.url, "--model", "m", "--no-repair", "-q")
    assert done.exit_code == 0 and done.stdout == "".join(SGLANG_BLOCKS)
    assert len(server.posts) == 2 and time.perf_counter() - began >= 1.0


def test_503_again_and_again_is_an_error(replay: Any) -> None:
    server = replay(lambda seen: error(503, "engine overloaded", **{"Retry-After": "0"}))
    done = dcode("new", "x", "--endpoint", server.url, "--model", "m")
    assert (done.exit_code, done.stderr) == (
        1,
        f"dcode: error: {server.url} is busy (503) after 4 tries: engine overloaded\n",
    )
    assert len(server.posts) == 4


def test_a_failed_edit_touches_no_file(replay: Any, tmp_path: Path) -> None:
    server = replay(lambda seen: error(503, "engine overloaded", **{"Retry-After": "0"}))
    path = tmp_path / "m.py"
    path.write_text("x = 1\n")
    done = dcode("edit", str(path), "--instruct", "y", "--endpoint", server.url, "--model", "m")
    assert (
        done.exit_code == 1 and path.read_text() == "x = 1\n" and sorted(p.name for p in tmp_path.iterdir()) == ["m.py"]
    )


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--endpoint", "gpu-box:8000"], "--endpoint 'gpu-box:8000' is not an http:// or https:// URL"),
        (
            ["--endpoint", "http://h/v1", "--stream-mode", "both"],
            "unknown --stream-mode 'both' (choose from auto, replace, append, dcode)",
        ),
        (["--endpoint", "http://h/v1", "--timeout", "0"], "--timeout must be more than 0 seconds"),
    ],
)
def test_bad_options_are_usage_errors(args: list[str], line: str) -> None:
    done = dcode("new", "x", "--model", "m", *args)
    assert (done.exit_code, done.stderr) == (2, f"dcode: error: {line}\n")


@pytest.mark.parametrize(
    ("env", "line"),
    [
        ({"DCODE_LENGTH": "0"}, "DCODE_LENGTH must be at least 1 token"),
        ({"DCODE_TIMEOUT": "0"}, "DCODE_TIMEOUT must be more than 0 seconds"),
        ({"DCODE_STREAM_MODE": "both"}, "unknown DCODE_STREAM_MODE 'both' (choose from auto, replace, append, dcode)"),
    ],
)
def test_a_bad_value_from_a_variable_names_the_variable(env: dict[str, str], line: str) -> None:
    done = dcode("new", "x", "--model", "m", "--endpoint", "http://127.0.0.1:9/v1", env=env)
    assert (done.exit_code, done.stderr) == (2, f"dcode: error: {line}\n")


# ---------------------------------------------------------------------------------------------
# Keys, and nothing sent unless --endpoint is given


def test_key_resolution(replay: Any) -> None:
    server = replay(sglang)
    args = ("new", "x", "--endpoint", server.url, "--model", "m", "--no-repair", "-q")
    dcode(*args, env={"OPENAI_API_KEY": "sk-openai"})
    dcode(*args, env={"OPENAI_API_KEY": "sk-openai", "DCODE_ENDPOINT_KEY": "sk-dcode"})
    dcode(*args, env={"INCEPTION_API_KEY": "sk-inception"})  # only for Inception's host
    assert [p.headers.get("authorization") for p in server.posts] == ["Bearer sk-openai", "Bearer sk-dcode", None]
    endpoint = Endpoint.parse("https://api.inceptionlabs.ai/v1", key=KEY)
    assert endpoint.inception and KEY not in repr(endpoint) and fill.model_of(endpoint) == "mercury-2"


def test_a_key_the_server_wants_but_was_not_given(replay: Any) -> None:
    server = replay(lambda seen: error(401, "missing key"))
    done = dcode("new", "x", "--endpoint", server.url, "--model", "m")
    assert (done.exit_code, done.stderr) == (
        2,
        f"dcode: error: {server.url} wants an API key (401): pass --endpoint-key or set DCODE_ENDPOINT_KEY\n",
    )


def probe(argv: list[str], env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """Run dcode in a fresh interpreter; report which of torch, transformers, httpx2 it imported."""
    code = (
        "import atexit, json, sys\n"
        "atexit.register(lambda: sys.__stderr__.write('LOADED:' + json.dumps(sorted(m for m in sys.modules "
        "if m in ('torch', 'transformers', 'httpx2'))) + '\\n'))\n"
        f"sys.argv = {['dcode', *argv]!r}\nfrom dcode.cli import main\nmain()\n"
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DCODE_", "OPENAI_"))}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT,
        env={**clean, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "NO_COLOR": "1", **env},
    )  # fmt: skip
    loaded = [line for line in done.stderr.splitlines() if line.startswith("LOADED:")]
    assert len(loaded) == 1, done.stderr
    return done, json.loads(loaded[0][len("LOADED:") :])


def test_with_an_endpoint_no_local_model_loads(replay: Any) -> None:
    server = replay(sglang)
    done, loaded = probe(["new", "add", "--endpoint", server.url, "--model", "m", "-q"], {})
    assert done.returncode == 0 and done.stdout == "".join(SGLANG_BLOCKS), done.stderr
    assert "torch" not in loaded and "transformers" not in loaded and "httpx2" in loaded


def test_openai_base_url_alone_sends_nothing(replay: Any) -> None:
    server = replay(sglang)
    argv = ["new", "add", "--length", "8", "--no-repair", "-q"]
    done, loaded = probe(argv, {"OPENAI_BASE_URL": server.url, "OPENAI_API_KEY": KEY, "HF_HUB_OFFLINE": "1"})
    assert done.returncode in (0, 3), done.stderr  # 3: eight tokens of dcode-tiny may not parse
    assert "torch" in loaded  # the probe works: the local model ran
    assert server.seen == [] and "httpx2" not in loaded  # the local model answered; no client was loaded


def test_a_remote_error_is_never_a_traceback() -> None:
    with pytest.raises(RemoteError, match="empty answer"):
        list(streams.read(iter([]), "auto", model="m", device="d", language="python"))
    answer = list(streams.read(iter([]), "auto", model="m", device="d", language="python", empty_ok=True))[-1]
    assert isinstance(answer, Answer) and answer.text == ""


def test_no_connection_within_the_timeout() -> None:
    """A listening socket whose backlog is full never completes the handshake: a connect timeout."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        fillers = [socket.socket() for _ in range(3)]
        for filler in fillers:
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", port))
        url = f"http://127.0.0.1:{port}/v1"
        done = dcode("new", "x", "--endpoint", url, "--model", "m", "--timeout", "0.3")
        for filler in fillers:
            filler.close()
    assert (done.exit_code, done.stderr) == (1, f"dcode: error: no connection to {url} within 0.3 s (--timeout)\n")


def test_the_rich_live_view_draws_a_served_model(replay: Any) -> None:
    """The fallback view draws each pass and returns the final record; the last frame is settled."""
    from io import StringIO

    from rich.console import Console

    from dcode import tui

    server = replay(mercury)
    endpoint = Endpoint.parse(server.url, model="mercury-2")
    console = Console(file=StringIO(), force_terminal=True, color_system=None, width=60, height=20)
    describe = Describer(None, -1, model="mercury-2", device=endpoint.host, language="python")
    done = tui.run_rich(lambda: iter(served_new(endpoint)), describe, console)
    assert isinstance(done, Finished) and done.code == MERCURY_TEXTS[-1]
    drawn = console.file.getvalue()  # type: ignore[attr-defined]
    assert "mercury-2 · 127.0.0.1 · chunk 2" in drawn
    settled = describe(done, 1.0)
    assert settled is not None and settled.settled and settled.code == MERCURY_TEXTS[-1] and settled.forward == 2


def test_repair_of_a_new_draft_goes_through_fim(replay: Any) -> None:
    """A served draft that does not parse is mended span by span, like a local draft."""
    broken, fixed_line = "def f(x):\n    return x +\n", "    return x + 1"

    def script(seen: Seen) -> Reply:
        if seen.path == "/v1/chat/completions":
            return Reply(chunks=sse_chunks([chat_chunk(broken)]))
        return Reply(chunks=sse_chunks([text_chunk(fixed_line)]))

    server = replay(script)
    done = dcode("new", "f", "--endpoint", server.url, "--model", "m", "--json")
    assert done.exit_code == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["code"] == "def f(x):\n    return x + 1\n"
    assert (report["repair"]["issues_before"], report["repair"]["issues_after"], report["repair"]["rounds"]) == (
        1,
        0,
        1,
    )
    assert server.posts[1].body["prompt"] == "def f(x):\n" and server.posts[1].body["suffix"] == "\n"


def test_a_server_refusing_the_extension_fields_is_asked_plainly(replay: Any) -> None:
    def script(seen: Seen) -> Reply:
        if "diffusing" in seen.body:
            return error(400, "Unrecognized request argument supplied: diffusing")
        return sglang(seen)

    server = replay(script)
    done = dcode("new", "add", "--endpoint", server.url, "--model", "m", "--no-repair", "-q")
    assert done.exit_code == 0 and done.stdout == "".join(SGLANG_BLOCKS)
    first, second = (p.body for p in server.posts)
    assert first["dcode"] == {"language": "python", "repair": False} and first["stream_options"]["include_usage"]
    assert not {"diffusing", "dcode", "stream_options"} & set(second) and second["messages"] == first["messages"]


def test_edit_json_has_the_local_keys_and_never_the_key(replay: Any, tmp_path: Path) -> None:
    server = replay(fim_server("y = 22\n"))
    path = tmp_path / "v.py"
    path.write_text("x = 1\ny = 2\n")
    args = ("edit", str(path), "--lines", "2", "--instruct", "y is 22", "--endpoint", server.url, "--model", "m")
    done = dcode(*args, "--json", env={"DCODE_ENDPOINT_KEY": KEY})
    assert done.exit_code == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["written"], report["changed"], report["selection"], report["errors_after"]) == (
        True,
        True,
        "line 2",
        0,
    )
    assert report["region"] == {"start_byte": 6, "end_byte": 12} and report["backup"] == f"{path}.orig"
    assert path.read_text() == "x = 1\ny = 22\n" and KEY not in done.stdout + done.stderr


def test_new_through_dcode_serve_writes_what_a_local_run_writes(tmp_path: Path) -> None:
    """Against the real server (dcode-tiny behind `dcode serve`, a subprocess on a loopback port):
    the same code as a local `dcode new` with the same greedy settings, read from dcode frames."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DCODE_", "OPENAI_"))}
    env |= {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "dcode.cli", "serve", "--port", str(port), "--device", "cpu"]
    served = subprocess.Popen(command, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{port}/v1"
        for _ in range(240):
            with socket.socket() as probe_socket:
                if probe_socket.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert served.poll() is None, served.stderr.read() if served.stderr else ""
            time.sleep(0.25)
        args = ("new", "a function that adds two numbers", "--length", "32", "--no-repair", "--json")
        remote = dcode(*args, "--endpoint", url)
        local = dcode(*args, "--device", "cpu")
        # --effort travels as reasoning_effort, and the server runs the family's decoding at that level
        remote_low = dcode(*args, "--endpoint", url, "--effort", "low")
        local_low = dcode(*args, "--device", "cpu", "--effort", "low")
    finally:
        served.terminate()
        served.wait(timeout=30)
    assert remote.exit_code == 0 and local.exit_code == 0, remote.stderr + local.stderr
    there, here = json.loads(remote.stdout), json.loads(local.stdout)
    assert there["stream"] == "dcode" and there["model"] == "dcode-tiny"
    assert there["code"] == here["code"] and there["forward_passes"] == here["forward_passes"]
    assert remote_low.exit_code == local_low.exit_code in (0, 3), remote_low.stderr + local_low.stderr  # 3: no parse
    there, here = json.loads(remote_low.stdout), json.loads(local_low.stdout)
    assert there["code"] == here["code"] and there["forward_passes"] == here["forward_passes"]
    assert here["forward_passes"] != json.loads(local.stdout)["forward_passes"]  # low is another decoding


def test_ctrl_c_mid_stream_exits_130_and_writes_nothing(replay: Any, tmp_path: Path) -> None:
    import signal

    server = replay(lambda seen: Reply(chunks=sse_chunks([chat_chunk("a")] * 50), delay=0.2))
    out = tmp_path / "o.py"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DCODE_", "OPENAI_"))}
    command = [sys.executable, "-m", "dcode.cli", "new", "x", "--endpoint", server.url, "--model", "m", "-o", str(out)]
    running = subprocess.Popen(
        command, env={**env, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 60
    while not server.posts and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    running.send_signal(signal.SIGINT)
    _, stderr = running.communicate(timeout=30)
    assert (running.returncode, stderr) == (130, "dcode: interrupted\n")
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_a_chat_answers_fence_is_cut_but_a_files_own_fence_is_code() -> None:
    assert fill.unfence("Sure, here it is:\n```python\nx = 1\n```\nIt sets x.") == "x = 1\n"
    source = 'import re\n\n\ndef f():\n    """Example:\n\n```python\nf()\n```\n"""\n'
    assert fill.unfence(source) == source


def test_inception_is_asked_for_whole_texts_without_dcode_fields(replay: Any, monkeypatch: Any) -> None:
    """Inception's host (here the replay server, standing in for it) streams whole texts when
    asked: they are read as replacements without a marker in the chunks; the model defaults to
    mercury-2, the dcode extension is never sent, and fills go to /v1/fim/completions."""
    from dcode.remote import client

    def script(seen: Seen) -> Reply:
        if seen.path == "/v1/fim/completions":
            return Reply(chunks=sse_chunks([text_chunk("    return w * h + 1")]))
        return Reply(chunks=sse_chunks([chat_chunk(t) for t in MERCURY_TEXTS]))

    server = replay(script)
    monkeypatch.setattr(client, "INCEPTION_HOST", "127.0.0.1")
    endpoint = Endpoint.parse(server.url)
    assert endpoint.inception and fill.model_of(endpoint) == "mercury-2"
    events = served_new(endpoint)
    assert events[-1].code == MERCURY_TEXTS[-1] and events[-1].extra["stream"] == "replace"
    body = server.posts[0].body
    assert body["diffusing"] is True and "dcode" not in body and body["model"] == "mercury-2"
    fixed = list(flows.repair(EndpointFiller(endpoint, fill.Sampling(32)), BROKEN, "python", "area"))[-1]
    assert isinstance(fixed, Repaired)
    assert fixed.code == BROKEN.replace(BROKEN_LINE, "    return w * h + 1")
    assert server.posts[-1].path == "/v1/fim/completions" and server.posts[-1].body["model"] == "mercury-2"


def test_appended_deltas_split_mid_word_give_the_pieces_of_the_whole_text() -> None:
    deltas = ["def ad", "d(a, b", "):\n    re", "turn a + b\n"]
    chunks = [chat_chunk(d) for d in deltas]
    frames = [
        e.frame
        for e in streams.read(chunks, "append", model="m", device="d", language="python")
        if isinstance(e, Drawn)
    ]
    for k, frame in enumerate(frames, 1):
        assert list(frame.pieces) == streams.pieces("".join(deltas[:k]))
    assert "".join(frames[1].pieces[i] or "" for i in sorted(frames[1].committed)) == "add(a, b"  # "ad" went on
    last = frames[3]
    assert "".join(last.pieces[i] or "" for i in sorted(last.committed)) == "return a + b\n"  # "re" grew into "return"


def test_the_kind_is_read_from_content_not_from_a_role_chunk() -> None:
    """A role-only first chunk (as OpenAI-style servers send) does not fix the kind as appended;
    the whole texts after it, marked `diffusing`, are read as replacements."""
    chunks = [chat_chunk(None), *[chat_chunk(t, diffusing=True) for t in MERCURY_TEXTS]]
    *_, answer = streams.read(chunks, "auto", model="m", device="d", language="python")
    assert isinstance(answer, Answer) and (answer.kind, answer.text, answer.chunks) == ("replace", MERCURY_TEXTS[-1], 2)


def test_sampler_options_the_user_set_travel_to_a_dcode_server(replay: Any) -> None:
    server = replay(dcode_server)
    args = ("new", "f", "--endpoint", server.url, "--model", "m", "--no-repair", "-q", "--strategy", "schedule")
    done = dcode(*args, "--steps", "8", "--temperature", "0.5", env={"DCODE_BLOCK": "16"})
    assert done.exit_code == 0, done.stderr
    body = server.posts[0].body
    assert body["dcode"] == {"rule": "schedule", "steps": 8, "block": 16, "language": "python", "repair": False}
    assert body["temperature"] == 0.5 and body["max_tokens"] == 256
    assert "seed" not in body and "top_p" not in body  # not set: the server's own settings


# ---------------------------------------------------------------------------------------------
# Interop with third-party servers (issue 26): each test failed before its fix


STANDARD = {"model", "messages", "prompt", "suffix", "max_tokens", "stream", "temperature", "seed"}


def strict_server(seen: Seen) -> Reply:
    """A test fake of a strict server (a LLaDA server on PyPI): 422 in FastAPI's shape for a field
    it does not know, and 400 in OpenAI's shape for `top_p`, which it does not take."""
    extra = sorted(set(seen.body) - STANDARD - {"top_p"})
    if extra:
        detail = [
            {"type": "extra_forbidden", "loc": ["body", k], "msg": "Extra inputs are not permitted"} for k in extra
        ]
        return Reply(422, body=json.dumps({"detail": detail}))
    if "top_p" in seen.body:
        return error(400, "top_p is not supported by this server")
    return sglang(seen)


def test_sampling_fields_the_user_did_not_set_are_not_sent(replay: Any) -> None:
    """Issue 37: top_p and seed went in every request, and a strict server refused top_p; only the
    user's own settings travel now, beside temperature (dcode's greedy default, which every server takes)."""
    server = replay(strict_server)
    done = dcode("new", "add", "--endpoint", server.url, "--model", "m", "-q")
    assert (done.exit_code, done.stdout) == (0, "".join(SGLANG_BLOCKS)), done.stderr
    assert not any({"top_p", "seed"} & set(p.body) for p in server.posts)
    assert all(p.body["temperature"] == 0.0 for p in server.posts)
    assert done.stderr == ""


def test_effort_travels_as_reasoning_effort_only_when_set(replay: Any) -> None:
    """--effort is Mercury's reasoning_effort (and dcode serve's): sent when the user set it; a
    strict server that refuses it by name gets the request again without it, said in one line."""
    taking = replay(sglang)
    done = dcode("new", "add", "--endpoint", taking.url, "--model", "m", "-q", "--effort", "low")
    assert (done.exit_code, done.stdout, done.stderr) == (0, "".join(SGLANG_BLOCKS), "")
    assert taking.posts and all(p.body["reasoning_effort"] == "low" for p in taking.posts)
    server = replay(strict_server)
    done = dcode("new", "add", "--endpoint", server.url, "--model", "m", "-q", "--effort", "low")
    assert (done.exit_code, done.stdout) == (0, "".join(SGLANG_BLOCKS)), done.stderr
    assert done.stderr.count("\n") == 1 and "refused reasoning_effort (422)" in done.stderr, done.stderr
    assert [("reasoning_effort" in p.body) for p in server.posts][:2] == [True, False]
    plain = replay(strict_server)
    assert dcode("new", "add", "--endpoint", plain.url, "--model", "m", "-q").exit_code == 0
    assert not any("reasoning_effort" in p.body for p in plain.posts)


def test_a_sampling_field_a_server_refuses_by_name_is_dropped_once_and_said(replay: Any) -> None:
    """Issue 37: the user's --top-p, refused by name (400), is left out of one more try, with one
    line on stderr; the temperature the user set still travels."""
    server = replay(strict_server)
    done = dcode("new", "add", "--endpoint", server.url, "--model", "m", "-q", "--top-p", "0.9", "--temperature", "0.2")
    assert (done.exit_code, done.stdout) == (0, "".join(SGLANG_BLOCKS)), done.stderr
    assert done.stderr.count("\n") == 1 and "refused top_p (400)" in done.stderr, done.stderr
    last = server.posts[-1].body
    assert "top_p" not in last and last["temperature"] == 0.2
    assert [p.body.get("top_p") for p in server.posts][0] == 0.9


def test_a_field_named_in_a_422_is_dropped_and_not_sent_again(replay: Any) -> None:
    """A FastAPI server names the field in `detail[].loc`; the endpoint remembers it for later requests."""

    def script(seen: Seen) -> Reply:
        if "seed" in seen.body:
            detail = [{"type": "extra_forbidden", "loc": ["body", "seed"], "msg": "Extra inputs are not permitted"}]
            return Reply(422, body=json.dumps({"detail": detail}))
        return Reply(chunks=sse_chunks([text_chunk("    return a + b\n")]))

    server = replay(script)
    told: list[str] = []
    endpoint = Endpoint.parse(server.url, model="m", tell=told.append)
    ask = fill.Sampling(16, seed=3, sent=frozenset({"seed"}))
    for _ in range(2):
        *_, answer = fill.middle(endpoint, "def add(a, b):\n", "\n", "python", ask)
        assert answer.text == "    return a + b\n"
    assert [("seed" in p.body) for p in server.posts] == [True, False, False]
    assert len(told) == 1 and "refused seed (422)" in told[0]


def test_a_fastapi_server_refusing_the_extension_fields_with_422_is_asked_plainly(replay: Any) -> None:
    """transformers serve (FastAPI) says 422 to fields it does not know, not 400."""

    def script(seen: Seen) -> Reply:
        extra = {"dcode", "diffusing"} & set(seen.body)
        if extra:
            detail = [
                {"type": "extra_forbidden", "loc": ["body", k], "msg": "Extra inputs are not permitted"} for k in extra
            ]
            return Reply(422, body=json.dumps({"detail": detail}))
        return sglang(seen)

    server = replay(script)
    done = dcode("new", "add", "--endpoint", server.url, "--model", "m", "-q")
    assert (done.exit_code, done.stdout) == (0, "".join(SGLANG_BLOCKS)), done.stderr
    assert [("dcode" in p.body) for p in server.posts] == [True, False]


def draft_then(repairing: Callable[[Seen], Reply]) -> Callable[[Seen], Reply]:
    """A server whose first chat answer is a one-line draft that does not parse; `repairing` answers the rest."""

    def script(seen: Seen) -> Reply:
        if len([s for s in script.seen if s.method == "POST"]) == 0:  # type: ignore[attr-defined]
            script.seen.append(seen)  # type: ignore[attr-defined]
            return Reply(chunks=sse_chunks([chat_chunk("def add(a, b:\n")]))
        return repairing(seen)

    script.seen = []  # type: ignore[attr-defined]
    return script


def test_a_whole_file_repair_in_append_mode_carries_the_request(replay: Any) -> None:
    """The draft's only line is the whole file: fill in the middle would send an empty prompt and
    suffix, which says nothing of what the file is for. The chat request carries the request."""
    server = replay(draft_then(lambda seen: Reply(chunks=sse_chunks([chat_chunk("def add(a, b):\n    return a + b")]))))
    args = ("new", "a function that adds two numbers", "--endpoint", server.url, "--model", "m")
    done = dcode(*args, "--stream-mode", "append", "-q")
    assert (done.exit_code, done.stdout) == (0, "def add(a, b):\n    return a + b\n"), done.stderr
    repair = server.posts[1]
    assert repair.path == "/v1/chat/completions"
    assert "a function that adds two numbers" in repair.body["messages"][-1]["content"]


def test_a_failed_repair_delivers_the_answer_already_had(replay: Any, tmp_path: Path) -> None:
    server = replay(draft_then(lambda seen: error(500, "the model crashed")))
    out = tmp_path / "add.py"
    args = ("new", "add", "--endpoint", server.url, "--model", "m", "--stream-mode", "append", "-o", str(out))
    done = dcode(*args, "--json")
    assert done.exit_code == 3, done.stderr
    assert out.read_text() == "def add(a, b:\n"  # the draft, not nothing
    report = json.loads(done.stdout)
    assert report["repair"]["issues_after"] == 1 and "the model crashed" in report["repair"]["note"]
    assert done.stderr.endswith(f"dcode: warning: 1 syntax error(s) remain in {out}\n")


APP = 'import sys\n\n\ndef main():\n    print("hi")\n\n\nif __name__ == "__main__":\n    main()\n'
VERBOSE_MAIN = 'def main():\n    verbose = "--verbose" in sys.argv\n    print("hi" if not verbose else "hi!")\n'


@pytest.mark.parametrize("echo", ["\n\n" + APP.split("\n\n\n", 2)[2], APP.split("\n\n\n", 2)[2]])
def test_an_echoed_suffix_is_cut_from_the_fill(replay: Any, tmp_path: Path, echo: str) -> None:
    """A server that echoes `suffix` at the end of its middle: the echo is not written twice."""
    server = replay(fim_server(VERBOSE_MAIN + echo))
    path = tmp_path / "app.py"
    path.write_text(APP)
    args = ("edit", str(path), "--symbol", "main", "--instruct", "add a --verbose flag", "--endpoint", server.url)
    done = dcode(*args, "--model", "m", "-q")
    assert done.exit_code == 0, done.stderr
    assert path.read_text() == APP.replace('def main():\n    print("hi")\n', VERBOSE_MAIN)
    assert server.posts[0].body["suffix"] == "\n\n" + APP.split("\n\n\n", 2)[2]


def test_a_fill_that_repeats_the_code_after_it_is_refused(replay: Any, tmp_path: Path) -> None:
    tail = APP.split("\n\n\n", 2)[2]
    server = replay(fim_server(VERBOSE_MAIN + "\n\n" + tail + "\n\nprint('more')\n"))
    path = tmp_path / "app.py"
    path.write_text(APP)
    args = ("edit", str(path), "--symbol", "main", "--instruct", "add a --verbose flag", "--endpoint", server.url)
    done = dcode(*args, "--model", "m")
    assert (done.exit_code, done.stderr) == (
        1,
        f"dcode: error: the new text for {path} repeats the code after the region; nothing written\n",
    )
    assert path.read_text() == APP and sorted(p.name for p in tmp_path.iterdir()) == ["app.py"]


def test_whole_texts_show_one_set_of_numbers_in_the_view_and_the_summary(replay: Any) -> None:
    """`replace` mode: the settled status bar says what the summary line says, in chunks."""
    from dcode.cli.delivery import summary_line

    server = replay(mercury)
    endpoint = Endpoint.parse(server.url, model="mercury-2")
    describe = Describer(None, -1, model="mercury-2", device=endpoint.host, language="python")
    events = served_new(endpoint)
    frames = [describe(e, 0.1) for e in events]
    done, settled = events[-1], frames[-1]
    assert isinstance(done, Finished) and settled is not None and settled.settled
    metadata = done.metadata()
    line, status = summary_line(metadata, "mercury-2", done.unit), render_status(settled).plain
    assert f"{metadata['tokens']} tokens in 2 chunks ({metadata['tokens_per_forward']} tok/chunk)" in line
    assert f"chunk 2 · done · {metadata['tokens_per_forward']:.1f} tok/chunk" in status
    # the same rate, the bar rounding it to whole tokens (the summary's 180.5 can round either way)
    assert f"· {done.tokens / done.seconds:.0f} tok/s · {done.seconds:.1f} s" in status
    last = [f for f in frames if f is not None and not f.settled][-1]
    assert last.filled == len([p for p in last.pieces if p]) == metadata["tokens"]  # on screen: the text's pieces


def test_version_prints_the_name_and_the_version() -> None:
    from importlib.metadata import version

    done = dcode("--version")
    assert (done.exit_code, done.stdout) == (0, f"dcode {version('dcode')}\n")


def test_a_repair_try_through_an_endpoint_samples_as_a_local_left_to_right_try(replay: Any, tmp_path: Path) -> None:
    """The second try of a round is sampled (config.retried, left to right) with its own seed."""
    from dcode.config import LEFT_TO_RIGHT_RETRY_TEMPERATURE

    answers = iter(["    return w * h +", "    return w * h + 1"])
    server = replay(lambda seen: Reply(chunks=sse_chunks([text_chunk(next(answers))])))
    path = tmp_path / "area.py"
    path.write_text(BROKEN)
    args = (
        "repair",
        str(path),
        "--endpoint",
        server.url,
        "--model",
        "m",
        "--repair-rounds",
        "1",
        "--repair-tries",
        "2",
    )
    done = dcode(*args, "--seed", "5", "-q")
    assert done.exit_code == 0 and path.read_text() == BROKEN.replace(BROKEN_LINE, "    return w * h + 1"), done.stderr
    first, second = (p.body for p in server.posts)
    assert (first["temperature"], first["seed"]) == (0.0, 5)  # temperature always travels, the seed as set
    assert (second["temperature"], second["seed"]) == (LEFT_TO_RIGHT_RETRY_TEMPERATURE, 6)


def test_the_key_sent_is_not_the_key_a_server_requires(replay: Any) -> None:
    """`--endpoint-key` / DCODE_ENDPOINT_KEY is sent; `--api-key` (dcode serve's) is no option of new."""
    server = replay(sglang)
    done = dcode("new", "add", "--endpoint", server.url, "--model", "m", "--api-key", KEY)
    assert done.exit_code == 2 and "--api-key" in done.stderr and server.posts == []
    done = dcode("new", "add", "--endpoint", server.url, "--model", "m", "--endpoint-key", KEY, "-q")
    assert done.exit_code == 0 and server.posts[0].headers["authorization"] == f"Bearer {KEY}"
    done = dcode("new", "add", "--endpoint", server.url, "--model", "m", "-q", env={"DCODE_API_KEY": "sk-serve"})
    assert done.exit_code == 0 and "authorization" not in server.posts[1].headers
