"""`dcode serve` end to end: real uvicorn on a loopback port, dcode-tiny, the official openai client.

One in-process server (started once for the module) answers the client tests, the frame test,
the concurrency test and the bad-request battery; a second server in a subprocess, with one slot
and one queue place, shows the 503, the freed slot and a clean SIGTERM. References are computed
locally with the same sampler settings and must be equal, token for token.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import torch

openai = pytest.importorskip("openai")
uvicorn = pytest.importorskip("uvicorn")

from dcode import flows, localfill  # noqa: E402
from dcode.config import SamplerConfig, merge_family_defaults  # noqa: E402
from dcode.events import Finished, Step, drain  # noqa: E402
from dcode.localfill import LocalFiller  # noqa: E402
from dcode.models import load  # noqa: E402
from dcode.render import Describer, Frame  # noqa: E402
from dcode.sampler import denoise  # noqa: E402
from dcode.serve import jobs, wire  # noqa: E402
from dcode.serve.app import create_app  # noqa: E402
from dcode.serve.batching import BatchingDenoiser, RequestCancelled  # noqa: E402
from dcode.serve.engine import Engine  # noqa: E402

KEY = "test-key"
ROOT = Path(__file__).resolve().parents[1]


@dataclasses.dataclass
class Served:
    url: str  # http://127.0.0.1:PORT
    engine: Engine

    def client(self, key: str = KEY) -> Any:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=key, max_retries=0, timeout=60)


def free_socket() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    return sock


@pytest.fixture(scope="module")
def server() -> Iterator[Served]:
    model = load(None)
    config = merge_family_defaults(SamplerConfig(), set(), model.facts.defaults)  # what `dcode serve` runs by default
    engine = Engine(model, config, length=48, max_batch=8, max_queue=8, busy_draft=0)  # under load: one row a pass
    sock = free_socket()
    instance = uvicorn.Server(uvicorn.Config(create_app(engine, api_key=KEY), log_level="warning", lifespan="off"))
    thread = threading.Thread(target=instance.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    for _ in range(100):
        if instance.started:
            break
        time.sleep(0.05)
    yield Served(url, engine)
    engine.cancel_all()
    instance.should_exit = True
    thread.join(timeout=10)


def local_new(engine: Engine, request: str, length: int = 48) -> Finished:
    """What `dcode new --no-repair --length N` writes for the request, with the server's settings."""
    *_, done = flows.new(LocalFiller(engine.model, engine.config), request, "python", length, 0)
    assert isinstance(done, Finished)
    return done


def post(url: str, path: str, body: Any, key: str | None = KEY, **kwargs: Any) -> httpx2.Response:
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key is not None else {})}
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx2.post(url + path, content=content, headers=headers, timeout=60, **kwargs)


def sse_data(lines: Iterator[str]) -> Iterator[Any]:
    for line in lines:
        if line.startswith("data: ") and line != "data: [DONE]":
            yield json.loads(line[len("data: ") :])


# ---------------------------------------------------------------------------------------------
# The official client


def test_openai_client_chat_streamed_and_not(server: Served) -> None:
    request = "a function that adds two numbers"
    local = local_new(server.engine, request, 32)
    expected = local.code
    client = server.client()
    messages = [{"role": "user", "content": request}]
    answer = client.chat.completions.create(model="dcode-tiny", messages=messages, max_tokens=32)
    assert answer.choices[0].message.content == expected
    assert answer.usage.completion_tokens == local.tokens
    chunks = list(
        client.chat.completions.create(
            model="dcode-tiny", messages=messages, max_tokens=32, stream=True, stream_options={"include_usage": True}
        )
    )
    texts = [c.choices[0].delta.content or "" for c in chunks if c.choices]
    assert "".join(texts) == expected
    assert len([t for t in texts if t]) > 1  # streamed as it settled, not in one piece
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens == answer.usage.total_tokens
    assert [m.id for m in client.models.list()] == ["dcode-tiny"]


def test_a_completion_beyond_the_context_is_refused_by_the_flows_room_check(server: Served) -> None:
    """The server's refusal is flows.check_room's, the length named as the request names it."""
    engine = server.engine
    body = {"prompt": "def f(x):\n", "suffix": "\n", "max_tokens": 5000}
    with pytest.raises(jobs.BadRequest) as refused:
        engine.prepare(jobs.parse("text", body, engine.served))
    prompt = len(engine.model.tokenizer.encode("def f(x):\n", add_special_tokens=False)) + 1
    assert (refused.value.param, refused.value.code) == ("max_tokens", "context_length_exceeded")
    assert refused.value.message == (
        f"max_tokens 5000 plus the {prompt}-token prompt exceeds the model's context of 2048 tokens "
        f"(at most {2048 - prompt} fit)"
    )


def test_completions_with_suffix_fill_the_middle(server: Served) -> None:
    engine = server.engine
    prefix, suffix = "def add(a, b):\n", "\n\nprint(add(1, 2))\n"
    encode = engine.model.tokenizer.encode
    ids = encode(prefix, add_special_tokens=False), encode(suffix, add_special_tokens=False)
    *_, done = flows.complete(LocalFiller(engine.model, engine.config, *ids), 12)
    assert isinstance(done, Finished) and done.code.strip()
    client = server.client()
    answer = client.completions.create(model="dcode-tiny", prompt=prefix, suffix=suffix, max_tokens=12)
    assert answer.choices[0].text == done.code
    streamed = client.completions.create(model="dcode-tiny", prompt=prefix, suffix=suffix, max_tokens=12, stream=True)
    assert "".join(c.choices[0].text for c in streamed) == done.code
    fim = post(
        server.url, "/v1/fim/completions", {"model": "dcode-tiny", "prompt": prefix, "suffix": suffix, "max_tokens": 12}
    )
    assert fim.status_code == 200 and fim.json()["choices"][0]["text"] == done.code


def test_diffusing_stream_frames_equal_the_local_view(server: Served) -> None:
    request = "a class for a stack"
    engine = server.engine
    facts = engine.model.facts
    describer = Describer(
        engine.model.tokenizer,
        facts.mask_id,
        model=facts.name,
        device="cpu",
        hidden=facts.eos_ids | {facts.pad_id},
    )
    events = list(flows.new(LocalFiller(engine.model, engine.config), request, "python", 40, 0))
    local = [frame for e in events if (frame := describer(e, 0.0)) is not None and isinstance(e, Step)]
    body = {"messages": [{"role": "user", "content": request}], "max_tokens": 40, "stream": True, "diffusing": True}
    with httpx2.stream(
        "POST", server.url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {KEY}"}
    ) as r:
        chunks = list(sse_data(r.iter_lines()))
    frames = [c for c in chunks if c["dcode"]["event"] == "frame"]
    remote = [dataclasses.replace(wire.frame_from_json(c["dcode"]["frame"]), elapsed=0.0) for c in frames]
    assert remote == local and len(local) > 2
    for c, frame in zip(frames, remote, strict=True):
        assert c["choices"][0]["delta"]["content"] == wire.canvas_text(frame)  # Mercury's whole-text meaning
    last = chunks[-1]
    assert last["dcode"]["event"] == "finished" and last["choices"][0]["finish_reason"] == "stop"
    assert last["dcode"]["code"] == last["choices"][0]["delta"]["content"] == events[-1].code


def test_frames_round_trip_through_json() -> None:
    frame = Frame(("a", None, " b"), frozenset({0}), frozenset({1}), "m", "cpu", 3, 1, 2, 0.5, "rust", False, 1)
    assert wire.frame_from_json(json.loads(json.dumps(wire.frame_json(frame)))) == frame


# ---------------------------------------------------------------------------------------------
# Several requests at once


@pytest.mark.parametrize("draft", [None, 0], ids=["drafts", "draft-0"])
def test_batched_forwards_equal_unbatched(server: Served, draft: int | None) -> None:
    """Threads sampling through one BatchingDenoiser get the canvases each gets alone, in fewer
    forwards and output heads: the verify rule's passes packed (PackedRows), the workers' packed
    calls of one length run as one forward and their head calls as one head."""
    model, config = server.engine.model, server.engine.config
    assert config.rule == "verify" and config.draft > 0 and model.model.lm_head.weight.dtype == torch.float32
    config = config if draft is None else dataclasses.replace(config, draft=draft)
    prompts = ["fizzbuzz", "binary search", "fizzbuzz", "binary search"]
    canvases = []
    for p in prompts:
        ids = localfill.prompt_ids(model, p, "python")
        canvases.append((torch.tensor(ids + [facts_mask(model)] * 24), len(ids)))
    alone = [drain(denoise(model, c, s, config)) for c, s in canvases]
    batcher = BatchingDenoiser(model, wait=2.0)  # a long wait: every worker's call joins the round
    together: list[Any] = [None] * len(prompts)

    def work(i: int) -> None:
        with batcher.worker(threading.Event()):
            together[i] = drain(denoise(batcher, canvases[i][0], canvases[i][1], config))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(torch.equal(a.canvas, b.canvas) for a, b in zip(alone, together, strict=True))
    assert batcher.forwards < batcher.calls
    assert 0 < batcher.heads < batcher.head_calls


def test_a_cancelled_request_stops_at_its_next_packed_or_head_call(server: Served) -> None:
    model, config = server.engine.model, server.engine.config
    batcher = BatchingDenoiser(model)
    ids = localfill.prompt_ids(model, "fizzbuzz", "python")
    cancelled = threading.Event()
    with batcher.worker(cancelled):
        steps = denoise(batcher, torch.tensor(ids + [facts_mask(model)] * 24), len(ids), config)
        next(steps)  # one pass: a packed forward and its heads
        ran = batcher.calls, batcher.head_calls
        assert ran[0] == 1 and ran[1] > 0
        cancelled.set()
        with pytest.raises(RequestCancelled):
            next(steps)
        assert batcher.logits is not None
        with pytest.raises(RequestCancelled):
            batcher.logits(torch.zeros(1, model.model.shape.hidden))
    assert (batcher.calls, batcher.head_calls) == ran  # neither reached the model


def facts_mask(model: Any) -> int:
    return int(model.facts.mask_id)


def test_under_load_the_verify_rule_drafts_less_unless_the_request_chose(server: Served) -> None:
    engine = server.engine
    assert engine.config.rule == "verify" and engine.config.draft > 0
    plain = engine.prepare(jobs.parse("chat", {"messages": [{"role": "user", "content": "f"}]}, "dcode-tiny"))
    assert engine.under_load(plain).config.draft == 0
    body = {"messages": [{"role": "user", "content": "f"}], "dcode": {"draft": 4}}
    chosen = engine.prepare(jobs.parse("chat", body, "dcode-tiny"))
    assert engine.under_load(chosen).config.draft == 4


def test_eight_clients_at_once_get_their_own_answers(server: Served) -> None:
    requests = [
        "fizzbuzz",
        "a stack class",
        "binary search",
        "fizzbuzz",
        "read a file",
        "quick sort",
        "hello world",
        "a stack class",
    ]
    expected = {r: local_new(server.engine, r, 16).code for r in set(requests)}
    got: list[str | None] = [None] * len(requests)
    client = server.client()
    calls, forwards = server.engine.batcher.calls, server.engine.batcher.forwards

    def ask(i: int) -> None:
        messages = [{"role": "user", "content": requests[i]}]
        got[i] = (
            client.chat.completions.create(model="dcode-tiny", messages=messages, max_tokens=16)
            .choices[0]
            .message.content
        )

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(requests))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == [expected[r] for r in requests]  # drafted alone, one token a pass under load: same answers
    assert server.engine.batcher.forwards - forwards < server.engine.batcher.calls - calls  # passes were shared


# ---------------------------------------------------------------------------------------------
# Refusals: each the right status in OpenAI's shape, and the server answers afterwards

CHAT = "/v1/chat/completions"
OK_MESSAGES = [{"role": "user", "content": "add two numbers"}]
BAD = [
    ("malformed JSON", CHAT, b'{"messages": [', 400, None),
    ("not an object", CHAT, b"[1, 2]", 400, None),
    ("messages not a list", CHAT, {"messages": "hi"}, 400, "messages"),
    ("no user message", CHAT, {"messages": [{"role": "system", "content": "x"}]}, 400, "messages"),
    ("empty prompt", CHAT, {"messages": [{"role": "user", "content": "  "}]}, 400, "messages"),
    ("empty completion prompt", "/v1/completions", {"prompt": ""}, 400, "prompt"),
    ("prompt not a string", "/v1/completions", {"prompt": 7}, 400, "prompt"),
    ("max_tokens a string", CHAT, {"messages": OK_MESSAGES, "max_tokens": "10"}, 400, "max_tokens"),
    ("max_tokens zero", CHAT, {"messages": OK_MESSAGES, "max_tokens": 0}, 400, "max_tokens"),
    ("beyond the context", CHAT, {"messages": OK_MESSAGES, "max_tokens": 5000}, 400, "max_tokens"),
    ("temperature negative", CHAT, {"messages": OK_MESSAGES, "temperature": -1}, 400, "temperature"),
    ("top_p zero", CHAT, {"messages": OK_MESSAGES, "top_p": 0}, 400, "top_p"),
    # issue 37: OpenAI's ranges, refused before a stream starts
    ("temperature 100", CHAT, {"messages": OK_MESSAGES, "temperature": 100}, 400, "temperature"),
    (
        "temperature 2.5 streamed",
        CHAT,
        {"messages": OK_MESSAGES, "temperature": 2.5, "stream": True},
        400,
        "temperature",
    ),
    ("top_p above 1", CHAT, {"messages": OK_MESSAGES, "top_p": 1.5}, 400, "top_p"),
    ("frequency_penalty 3", CHAT, {"messages": OK_MESSAGES, "frequency_penalty": 3}, 400, "frequency_penalty"),
    ("presence_penalty -2.5", CHAT, {"messages": OK_MESSAGES, "presence_penalty": -2.5}, 400, "presence_penalty"),
    ("ignore_eos not a bool", CHAT, {"messages": OK_MESSAGES, "ignore_eos": "yes"}, 400, "ignore_eos"),
    ("min_tokens negative", CHAT, {"messages": OK_MESSAGES, "min_tokens": -1}, 400, "min_tokens"),
    (
        "min_tokens over max_tokens",
        CHAT,
        {"messages": OK_MESSAGES, "max_tokens": 8, "min_tokens": 9},
        400,
        "min_tokens",
    ),
    ("seed negative", CHAT, {"messages": OK_MESSAGES, "seed": -1}, 400, "seed"),
    ("n of 2", CHAT, {"messages": OK_MESSAGES, "n": 2}, 400, "n"),
    ("stream not a bool", CHAT, {"messages": OK_MESSAGES, "stream": "yes"}, 400, "stream"),
    ("stop not strings", CHAT, {"messages": OK_MESSAGES, "stop": [1]}, 400, "stop"),
    ("bad sampler option", CHAT, {"messages": OK_MESSAGES, "dcode": {"threshold": 5}}, 400, "dcode.threshold"),
    ("unknown model", CHAT, {"model": "gpt-9", "messages": OK_MESSAGES}, 404, "model"),
    ("unknown path", "/v1/embeddings", {"input": "x"}, 404, None),
    ("oversized body", CHAT, b'{"messages": "' + b"x" * (5 * 2**20) + b'"}', 413, None),
]


@pytest.mark.parametrize(("path", "body", "status", "param"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_requests_get_4xx_in_openai_shape(
    server: Served, path: str, body: Any, status: int, param: str | None
) -> None:
    before = server.engine.batcher.calls
    answer = post(server.url, path, body)
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    assert error["param"] == param
    assert "Traceback" not in answer.text
    assert server.engine.batcher.calls == before  # it never reached the model


def test_unknown_fields_are_ignored_and_the_server_still_answers(server: Served) -> None:
    body = {"messages": OK_MESSAGES, "max_tokens": 16, "frequency_penalty": 0.5, "user": "x", "logit_bias": {}}
    answer = post(server.url, CHAT, body)
    assert answer.status_code == 200 and answer.json()["choices"][0]["message"]["content"] is not None
    assert httpx2.get(server.url + "/health").json()["status"] == "ok"


@pytest.mark.parametrize("key", [None, "wrong-key"])
def test_a_missing_or_wrong_key_gets_401(server: Served, key: str | None) -> None:
    answer = post(server.url, CHAT, {"messages": OK_MESSAGES}, key=key)
    assert answer.status_code == 401
    assert answer.json()["error"]["code"] == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        server.client("wrong-key").models.list()


# ---------------------------------------------------------------------------------------------
# A subprocess server with one slot and one queue place


def test_full_queue_503_disconnect_frees_the_slot_and_sigterm_cuts_with_an_error_and_exits_0() -> None:
    sock = free_socket()
    port = sock.getsockname()[1]
    sock.close()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    argv = [sys.executable, "-m", "dcode.cli", "serve", "--port", str(port), "--max-batch", "1", "--max-queue", "1"]
    argv += ["--graceful-timeout", "1"]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                if httpx2.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx2.TransportError:
                time.sleep(0.1)
        # a long fill-in-the-middle (sampled hot, no end token comes soon): it runs; a second waits; a third is refused
        long = {"prompt": "def f(x):\n", "suffix": "\n", "max_tokens": 1500, "dcode": {"temperature": 3.0}}
        long["stream"] = True
        long["diffusing"] = True
        client = httpx2.Client(timeout=60)
        first = client.send(client.build_request("POST", url + "/v1/completions", json=long), stream=True)
        first_lines = first.iter_lines()  # (kept: a dropped iterator would close the stream)
        assert next(first_lines).startswith("data: ")  # generating
        second = client.send(client.build_request("POST", url + "/v1/completions", json=long), stream=True)
        third = post(url, "/v1/completions", {**long, "stream": False}, key=None)
        assert third.status_code == 503 and third.headers["retry-after"] == "1"
        assert third.json()["error"]["code"] == "overloaded"
        assert httpx2.get(url + "/health").json() == {
            "status": "ok",
            "model": "dcode-tiny",
            "running": 1,
            "waiting": 1,
        }
        first.close()  # the client goes away: its generation stops, the waiting one takes the slot
        deadline = time.time() + 10
        while httpx2.get(url + "/health").json()["waiting"] and time.time() < deadline:
            time.sleep(0.1)
        assert httpx2.get(url + "/health").json()["waiting"] == 0
        second_lines = second.iter_lines()
        assert next(second_lines).startswith("data: ")
        proc.send_signal(signal.SIGTERM)  # with a stream still open: it gets the grace period, then is cut
        rest = [line for line in second_lines if line]
        assert rest[-1] == "data: [DONE]"
        cut = [json.loads(line[len("data: ") :]) for line in rest if line.startswith("data: {")][-1]
        assert cut["error"]["code"] == "server_shutdown"  # never a cut answer that looks whole
        _, err = proc.communicate(timeout=30)
        second.close()
        assert proc.returncode == 0, err
        assert "Traceback" not in err and err.strip().endswith("dcode: stopped")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_a_request_arriving_after_the_cut_is_refused_not_run(server: Served) -> None:
    """A request still being tokenized when the grace period ran out reaches submit() after
    cancel_all(): it gets the 503 of a cut request instead of running whole past the cut."""
    engine = Engine(server.engine.model, server.engine.config, length=8)
    prepared = engine.prepare(jobs.parse("text", {"prompt": "def f(x):\n", "max_tokens": 8}, engine.served))
    engine.cancel_all()
    emitted: list[str] = []
    with pytest.raises(jobs.BadRequest) as refused:
        engine.submit(prepared, lambda kind, item: emitted.append(kind))
    assert (refused.value.status, refused.value.code, emitted) == (503, "server_shutdown", [])


def test_one_forward_for_calls_at_different_cache_and_input_lengths(server: Served) -> None:
    """NativeDenoiser.batched's rows equal each call run alone: caches of 0, 16 and 40 positions, inputs of
    20, 16 and 8 tokens, 1, 3 and 2 rows (padding and the other rows are never seen)."""
    model = server.engine.model
    gen = torch.Generator().manual_seed(0)
    calls, alone = [], []
    for cached, width, rows in ((0, 20, 1), (16, 16, 3), (40, 8, 2)):
        cache, twin = model.new_cache(), model.new_cache()
        if cached:
            prefix = torch.randint(3, 8000, (1, cached), generator=gen)
            model(prefix, cache)
            model(prefix, twin)
        ids = torch.randint(3, 8000, (rows, width), generator=gen)
        alone.append((model(ids, twin), twin))
        calls.append((ids, cache))
    results = model.batched(calls)
    for (_, cache), result, (logits, twin) in zip(calls, results, alone, strict=True):
        assert torch.allclose(result, logits, atol=1e-4)
        assert cache.length == twin.length
        assert all(
            torch.allclose(a, b, atol=1e-5)
            for x, y in zip(cache.layers, twin.layers, strict=True)
            for a, b in zip(x, y, strict=True)
        )
