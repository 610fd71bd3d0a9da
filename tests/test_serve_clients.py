"""`dcode serve` as third-party clients use it, over real loopback sockets: Continue's autocomplete
(many stop strings), aider's whole conversation, openai's `models.retrieve`, request settings
merged as the command line merges them, and the key the server requires.
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx2
import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("uvicorn")

import test_serve  # noqa: E402
from test_serve import CHAT, KEY, Served, post  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from dcode import flows, localfill  # noqa: E402
from dcode.cli import app  # noqa: E402
from dcode.cli.serving import required_key  # noqa: E402
from dcode.config import merge_family_defaults  # noqa: E402
from dcode.events import Finished  # noqa: E402
from dcode.localfill import LocalFiller  # noqa: E402
from dcode.options import sampler_settings  # noqa: E402
from dcode.serve import conversation, jobs  # noqa: E402
from dcode.serve.replies import cut_at_stop  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
server = test_serve.server  # the module's in-process server (its own instance here)
PREFIX, SUFFIX = "def add(a, b):\n", "\n\nprint(add(1, 2))\n"
# Continue's autocomplete stops (its default template's, for Python), and a few more
CONTINUE_STOPS = ["\n\n\n", "\ndef", "\nclass", "/src/", "#- coding: utf-8", "```", "\nif __name__", "\n@", "\n#"]


def fim(server: Served, **body: Any) -> dict[str, Any]:
    answer = post(server.url, "/v1/completions", {"prompt": PREFIX, "suffix": SUFFIX, **body})
    assert answer.status_code == 200, answer.text
    return answer.json()  # type: ignore[no-any-return]


# ---------------------------------------------------------------------------------------------
# Continue: fill in the middle with many stop strings


def test_a_fill_in_the_middle_ends_when_its_middle_has_ended(server: Served) -> None:
    """A short middle under max_tokens 64 takes the passes its tokens need (before: 60 passes
    for a 9-token middle, every one of the 64 positions filled)."""
    answer = fim(server, max_tokens=64)
    meta = answer["dcode"]
    assert answer["choices"][0]["text"].strip()
    assert meta["tokens"] < 20 and meta["forward_passes"] <= meta["tokens"] + 2


def test_continue_autocomplete_with_nine_stops_is_answered_and_cut_at_the_first(server: Served) -> None:
    whole = fim(server, max_tokens=32)["choices"][0]["text"]
    word = whole.strip().split()[-1][:3]  # a stop that the answer holds
    stops = [*CONTINUE_STOPS[:8], word]
    expected, found = cut_at_stop(whole, tuple(stops))
    assert found
    answer = fim(server, max_tokens=32, stop=stops)
    assert answer["choices"][0]["text"] == expected
    assert answer["choices"][0]["finish_reason"] == "stop"
    client = server.client()
    streamed = client.completions.create(
        model="dcode-tiny", prompt=PREFIX, suffix=SUFFIX, max_tokens=32, stop=stops, stream=True
    )
    assert "".join(c.choices[0].text for c in streamed) == expected


def test_a_chat_answer_ends_before_its_first_stop_streamed_or_not(server: Served) -> None:
    messages = [{"role": "user", "content": "a function that adds two numbers"}]
    client = server.client()
    whole = client.chat.completions.create(model="dcode-tiny", messages=messages, max_tokens=32)
    text = whole.choices[0].message.content
    stops = ["\n\n\n\n", text.split()[1][:2]]  # the second word's start: held by the answer
    expected, found = cut_at_stop(text, tuple(stops))
    assert found
    cut = client.chat.completions.create(model="dcode-tiny", messages=messages, max_tokens=32, stop=stops)
    assert cut.choices[0].message.content == expected and cut.choices[0].finish_reason == "stop"
    chunks = client.chat.completions.create(
        model="dcode-tiny", messages=messages, max_tokens=32, stop=stops, stream=True
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == expected


# ---------------------------------------------------------------------------------------------
# aider, llm -c, Continue's chat: the whole conversation

FILE = "import sys\n\n\ndef main():\n    print('hello')\n\n\nif __name__ == '__main__':\n    main()\n"
AIDER = [
    {"role": "system", "content": "Act as an expert software developer. Always use best practices."},
    {"role": "user", "content": "Change the greeting to 'hi'."},
    {"role": "assistant", "content": "app.py\n```\nprint('hi')\n```"},
    {"role": "user", "content": f"I have *added these files to the chat*:\n\napp.py\n```\n{FILE}```"},
    {"role": "assistant", "content": "Ok, any changes I propose will be to those files."},
    {"role": "user", "content": "add a --verbose flag to main"},
]


def test_an_aider_conversation_is_answered_from_all_its_turns(server: Served) -> None:
    engine = server.engine
    messages = tuple((m["role"], m["content"]) for m in AIDER)
    whole = conversation.prompt_ids(engine.model, messages, "python", 48)
    assert whole.dropped == 0
    text = localfill.decode(engine.model, whole.ids)
    assert all(m["content"].strip() in text for m in AIDER[1:])  # the file, the history, the request
    assert AIDER[0]["content"] not in text  # dcode-tiny's template has no place for it: its prompt stands in
    alone = localfill.prompt_ids(engine.model, AIDER[-1]["content"], "python")
    assert len(whole.ids) > len(alone) + 50
    answer = post(server.url, CHAT, {"model": "dcode-tiny", "messages": AIDER, "max_tokens": 48})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["usage"]["prompt_tokens"] == len(whole.ids) and "warning" not in body
    *_, local = flows.new(LocalFiller(engine.model, engine.config, whole.ids), AIDER[-1]["content"], "python", 48, 0)
    assert isinstance(local, Finished) and body["choices"][0]["message"]["content"] == local.code


def test_a_conversation_over_the_context_loses_its_oldest_turns_and_says_so(server: Served) -> None:
    history = []
    for i in range(40):  # ~40 turns of ~80 tokens each: more than dcode-tiny's 2,048
        history += [
            {"role": "user", "content": f"question {i}: " + "def f(x): return x + 1\n" * 8},
            {"role": "assistant", "content": f"answer {i}"},
        ]
    messages = [AIDER[0], *history, {"role": "user", "content": "the last request"}]
    answer = post(server.url, CHAT, {"messages": messages, "max_tokens": 64})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert "oldest messages" in body["warning"] and answer.headers["x-dcode-warning"] == body["warning"]
    assert body["usage"]["prompt_tokens"] + 64 <= 2048
    kept = conversation.prompt_ids(server.engine.model, jobs.conversation({"messages": messages}), "python", 64)
    text = localfill.decode(server.engine.model, kept.ids)
    assert "the last request" in text and "answer 39" in text
    assert "question 0:" not in text and kept.dropped % 2 == 0  # whole turns, oldest first
    assert body["usage"]["prompt_tokens"] == len(kept.ids)
    stream = server.client().chat.completions.create(model="dcode-tiny", messages=messages, max_tokens=64, stream=True)
    first = next(iter(stream))
    assert first.model_extra["warning"] == body["warning"]


MULTI_TURN = (  # a test fake's chat template that renders every turn, as Qwen's and Llama's do
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def test_a_chat_template_with_room_for_every_turn_gets_them_as_turns(server: Served) -> None:
    tokenizer = copy.copy(server.engine.model.tokenizer)
    tokenizer.chat_template = MULTI_TURN
    model = SimpleNamespace(tokenizer=tokenizer, facts=server.engine.model.facts)
    messages = tuple((m["role"], m["content"]) for m in AIDER)
    text = conversation.rendered(model, messages, "python")  # type: ignore[arg-type]
    roles = [line.split("|>")[0] for line in text.split("<|")[1:]]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user", "assistant"]
    assert FILE in text and text.endswith("<|assistant|>")


# ---------------------------------------------------------------------------------------------
# Conventions: models.retrieve, created, the context length


def test_models_retrieve_and_the_context_length(server: Served) -> None:
    client = server.client()
    listed = client.models.list().data[0]
    got = client.models.retrieve("dcode-tiny")
    assert got.id == "dcode-tiny" and got.model_extra["max_model_len"] == 2048
    time.sleep(1.1)
    assert client.models.retrieve("dcode-tiny").created == listed.created == got.created  # per model, stable
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-9")


def test_created_is_one_value_through_a_stream(server: Served) -> None:
    body = {"messages": [{"role": "user", "content": "a stack class"}], "max_tokens": 48, "stream": True}
    body |= {"diffusing": True, "stream_options": {"include_usage": True}}
    with httpx2.stream(
        "POST", server.url + CHAT, json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=60
    ) as response:
        chunks = [json.loads(x[6:]) for x in response.iter_lines() if x.startswith("data: {")]
    assert len(chunks) > 3 and len({c["created"] for c in chunks}) == 1


# ---------------------------------------------------------------------------------------------
# Settings: the command line's rule, from the options' declarations


def test_a_requests_threshold_switches_the_rule_as_the_flag_does(server: Served) -> None:
    engine = server.engine
    assert engine.config.rule == "verify"  # dcode-tiny's family default
    prepared = engine.prepare(
        jobs.parse("chat", {"messages": [{"role": "user", "content": "f"}], "dcode": {"threshold": 0.5}}, "dcode-tiny")
    )
    flag = merge_family_defaults(sampler_settings({"threshold": 0.5}), {"threshold"}, engine.model.facts.defaults)
    assert prepared.config == flag and prepared.config.rule == "threshold" and prepared.config.threshold == 0.5
    chosen = engine.prepare(
        jobs.parse(
            "chat",
            {"messages": [{"role": "user", "content": "f"}], "dcode": {"threshold": 0.5, "strategy": "verify"}},
            "dcode-tiny",
        )
    )
    assert chosen.config.rule == "verify"  # a strategy given keeps its rule, as --strategy does
    hot = engine.prepare(
        jobs.parse(
            "chat", {"messages": [{"role": "user", "content": "f"}], "dcode": {"temperature": 3.5}}, "dcode-tiny"
        )
    )
    assert hot.config.temperature == 3.5  # dcode's own option: SamplerConfig's range, not OpenAI's 0-2


def test_the_required_key_comes_from_a_file_or_the_command_line_not_both(tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text("file-key\n")
    runner = CliRunner()
    both = runner.invoke(app, ["serve", "--api-key", "x", "--api-key-file", str(key_file)])
    assert both.exit_code == 2 and "not both" in both.output
    (tmp_path / "empty").write_text("")
    empty = runner.invoke(app, ["serve", "--api-key-file", str(tmp_path / "empty")])
    assert empty.exit_code == 2 and "empty" in empty.output
    assert required_key(None, key_file) == "file-key"  # (a server that reads it: test_serve_hostile.py)


# ---------------------------------------------------------------------------------------------
# Load tests and benchmarks: ignore_eos and min_tokens (vLLM, SGLang, llama.cpp)

STRATEGIES = ["schedule", "threshold", "verify"]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_ignore_eos_fills_max_tokens_and_min_tokens_keeps_the_end_away(server: Served, strategy: str) -> None:
    """Issue 37: both fields were accepted and ignored (ignore_eos with max_tokens 40 answered 9
    tokens). ignore_eos fills max_tokens; min_tokens keeps an end token out of the first ones."""
    body = {"prompt": PREFIX, "max_tokens": 40, "dcode": {"strategy": strategy}}

    def used(**extra: Any) -> tuple[int, str]:
        answer = post(server.url, "/v1/completions", {**body, **extra})
        assert answer.status_code == 200, answer.text
        got = answer.json()
        return got["usage"]["completion_tokens"], got["choices"][0]["finish_reason"]

    assert used()[0] < 30  # precondition: the model ends this answer early
    assert used(ignore_eos=True) == (40, "length")
    assert used(min_tokens=30)[0] >= 30
    assert used(ignore_eos=False, min_tokens=0) == used()


def test_a_chat_answer_with_ignore_eos_fills_max_tokens_streamed_or_not(server: Served) -> None:
    body = {"messages": [{"role": "user", "content": "add two numbers"}], "max_tokens": 40, "ignore_eos": True}
    plain = post(server.url, CHAT, body).json()
    assert plain["usage"]["completion_tokens"] == 40 and plain["choices"][0]["finish_reason"] == "length"
    streamed = post(server.url, CHAT, {**body, "stream": True, "stream_options": {"include_usage": True}})
    chunks = [json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: {")]
    assert chunks[-1]["usage"]["completion_tokens"] == 40
    assert (
        "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[:-1])
        == plain["choices"][0]["message"]["content"]
    )
