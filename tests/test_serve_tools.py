"""`response_format` and OpenAI tools on `dcode serve`, over real loopback sockets with dcode-tiny
and the clients people use: openai's `chat.completions.parse`, LangChain's `with_structured_output`
and a `bind_tools` loop, and an openai-agents agent finishing a two-tool task. dcode-tiny is a weak
model that writes code whatever it is asked: every answer parses and validates all the same,
because the sampler commits only what the grammar allows. Also the grammars themselves (checked
with llguidance), the prompt a template without tools gets, and the 400s for bad input.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import pathlib
import shlex
import subprocess
import sys
from types import SimpleNamespace
from typing import Any, Literal

import jsonschema
import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("uvicorn")

import test_serve  # noqa: E402
from pydantic import BaseModel, Field  # noqa: E402
from test_serve import CHAT, KEY, ROOT, Served, post, sse_data  # noqa: E402

from dcode.constrain import Grammar, validate  # noqa: E402
from dcode.serve import calls, conversation, jobs, shaping, toolchat  # noqa: E402
from dcode.serve.engine import Engine  # noqa: E402
from dcode.serve.jobs import BadRequest  # noqa: E402

server = test_serve.server  # the module's in-process server (its own instance here)
CITIES = ("Paris", "London", "Rome")
TEMPERATURE = {
    "type": "function",
    "function": {
        "name": "city_temperature",
        "description": "The temperature in a city, in degrees Celsius.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"enum": list(CITIES)}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
FAHRENHEIT = {
    "type": "function",
    "function": {
        "name": "celsius_to_fahrenheit",
        "description": "Degrees Celsius in Fahrenheit.",
        "parameters": {
            "type": "object",
            "properties": {"celsius": {"type": "integer", "minimum": -100, "maximum": 100}},
            "required": ["celsius"],
            "additionalProperties": False,
        },
    },
}
TOOLS = [TEMPERATURE, FAHRENHEIT]
ASK = [{"role": "user", "content": "How warm is it in Rome, in Fahrenheit?"}]


class Weather(BaseModel):
    city: Literal["Paris", "London", "Rome"]
    celsius: int = Field(ge=-50, le=50)
    raining: bool


def schema_of(name: str) -> dict[str, Any]:
    return next(t["function"]["parameters"] for t in TOOLS if t["function"]["name"] == name)


def assert_valid_calls(tool_calls: list[Any]) -> None:
    """Every call names a tool and its arguments (a JSON string) validate against its schema."""
    assert tool_calls
    for call in tool_calls:
        assert call.id.startswith("call_") and call.type == "function"
        jsonschema.validate(json.loads(call.function.arguments), schema_of(call.function.name))


# ---------------------------------------------------------------------------------------------
# The grammar of a tool-calling answer, checked with llguidance on finished texts


def shape_of(**body: Any) -> shaping.Shape:
    return shaping.shaped("chat", {"tools": TOOLS, **body})


CALL_T = shaping.call_text("city_temperature", {"city": "Rome"})
CALL_F = shaping.call_text("celsius_to_fahrenheit", {"celsius": 25})


@pytest.mark.parametrize(
    ("body", "text", "ok"),
    [
        ({}, CALL_T, True),
        ({}, f"{CALL_T}\n{CALL_F}", True),
        ({}, "It is warm in Rome.", True),  # auto: text is an answer too
        ({}, shaping.call_text("city_temperature", {"city": "Oslo"}), False),  # not in the enum
        ({}, shaping.call_text("weather", {"city": "Rome"}), False),  # no such tool
        ({}, '<tool_call>\n{"name": "city_temperature", "arguments": {"city": "Rome"}}', False),  # not closed
        ({"tool_choice": "required"}, "It is warm in Rome.", False),
        ({"tool_choice": "required"}, CALL_F, True),
        ({"tool_choice": {"type": "function", "function": {"name": "celsius_to_fahrenheit"}}}, CALL_T, False),
        ({"tool_choice": {"type": "function", "function": {"name": "celsius_to_fahrenheit"}}}, CALL_F, True),
        ({"parallel_tool_calls": False}, f"{CALL_T}\n{CALL_F}", False),
        ({"parallel_tool_calls": False}, CALL_T, True),
        ({"response_format": {"type": "json_object"}}, '{"a":1}', True),  # auto with JSON content, compact
        ({"response_format": {"type": "json_object"}}, "It is warm.", False),
    ],
)
def test_the_tool_grammar_takes_calls_its_choice_allows_and_nothing_else(
    body: dict[str, Any], text: str, ok: bool
) -> None:
    grammar = shape_of(**body).grammar
    assert grammar is not None and grammar.kind == "lark"
    assert validate(grammar, text) is ok


def test_objects_that_say_nothing_of_other_keys_are_closed_to_them() -> None:
    """LangChain's bind_tools sends no additionalProperties: dcode-tiny then wrote invented keys
    ("model": "model", ...) until it ran out of room. Closed, the call ends after its keys."""
    open_tool = {
        "type": "function",
        "function": {"name": "f", "parameters": {"properties": {"a": {"type": "integer"}}}},
    }
    grammar = shaping.shaped("chat", {"tools": [open_tool], "tool_choice": "required"}).grammar
    assert grammar is not None
    assert validate(grammar, shaping.call_text("f", {"a": 1}))
    assert not validate(grammar, shaping.call_text("f", {"a": 1, "model": "x"}))
    given = {
        "properties": {"x": {"type": "object", "properties": {}}},
        "allOf": [{"properties": {"y": {}}}],
        "$defs": {"d": {"properties": {}, "additionalProperties": True}},
    }
    combined = {"properties": {"a": {}}, "anyOf": [{"properties": {"b": {}}, "required": ["b"]}]}
    assert shaping.closed(combined) == combined  # {"a": 1, "b": 2} is valid: closing either part would refuse it
    choices = {"anyOf": [{"properties": {"b": {}}}]}  # alternatives alone: each closed
    assert shaping.closed(choices) == {"anyOf": [{"properties": {"b": {}}, "additionalProperties": False}]}
    assert shaping.closed(given) == {
        "properties": {"x": {"type": "object", "properties": {}, "additionalProperties": False}},
        "allOf": [{"properties": {"y": {}}}],  # a member of allOf stays open: closing it refuses the others' keys
        "$defs": {"d": {"properties": {}, "additionalProperties": True}},  # said: kept
    }  # and the object itself stays open: its allOf may add "y"


class Point(BaseModel):
    x: int


class Path(BaseModel):
    points: list[Point]


def test_a_tools_nested_models_are_enforced_through_their_refs() -> None:
    """pydantic's schema of a nested model refers to "#/$defs/Point": inside the call's JSON the
    definitions move to its root, where the refs point (before: an unresolvable ref, a 400)."""
    body = function(name="draw", parameters=Path.model_json_schema())
    grammar = shaping.shaped("chat", {**body, "tool_choice": "required"}).grammar
    assert grammar is not None
    assert validate(grammar, shaping.call_text("draw", {"points": [{"x": 1}, {"x": 2}]}))
    assert not validate(grammar, shaping.call_text("draw", {"points": [{"y": 1}]}))


def test_tool_choice_none_and_no_tools_have_no_tool_grammar() -> None:
    assert shape_of(tool_choice="none").grammar is None
    assert shaping.shaped("chat", {}).grammar is None
    json_only = shaping.shaped("chat", {"response_format": {"type": "json_object"}}).grammar
    assert json_only == Grammar.json_object()


def test_calls_are_read_from_a_settled_prefix_and_streamed_as_openai_deltas() -> None:
    text = f"{CALL_T}\n{CALL_F}"
    stream = calls.CallStream()
    deltas = [d for end in range(len(text) + 1) for d in stream.deltas(text[:end])]
    starts = [d for d in deltas if "id" in d]
    assert [(d["index"], d["type"], d["function"]) for d in starts] == [
        (0, "function", {"name": "city_temperature", "arguments": ""}),
        (1, "function", {"name": "celsius_to_fahrenheit", "arguments": ""}),
    ]
    pieces = ["".join(d["function"]["arguments"] for d in deltas if d["index"] == i) for i in (0, 1)]
    assert pieces == ['{"city": "Rome"}', '{"celsius": 25}']
    whole = calls.tool_calls(text, stream.ids)
    assert [c["id"] for c in whole] == stream.ids  # a call keeps the id its stream gave it
    assert calls.scan("It is warm") == [] and not calls.is_calls("It is warm") and calls.is_calls("<tool")


# ---------------------------------------------------------------------------------------------
# The prompt: the model's template where it has tools, dcode's fallback prompt where not

QWEN_LIKE = (  # a test fake of Qwen2.5's template: tools in the system turn, results as <tool_response>
    "{% if tools %}<|im_start|>system\n# Tools\n<tools>\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}"
    "</tools>\nReturn calls within <tool_call></tool_call> tags.<|im_end|>\n{% endif %}"
    "{% for m in messages %}{% if m.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m.content }}"
    "\n</tool_response><|im_end|>\n{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
LOOP = [
    *ASK,
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "city_temperature", "arguments": '{"city": "Rome"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "25"},
]


def faked(server: Served, template: str) -> Any:
    tokenizer = copy.copy(server.engine.model.tokenizer)
    tokenizer.chat_template = template
    return SimpleNamespace(tokenizer=tokenizer, facts=server.engine.model.facts)


def test_a_template_with_tools_renders_them_and_the_calls_made(server: Served) -> None:
    model = faked(server, QWEN_LIKE)
    job = jobs.parse("chat", {"messages": LOOP, "tools": TOOLS}, "dcode-tiny")
    assert toolchat.native_tools(model)
    text = conversation.rendered(model, job.messages, "python", job.shape)
    assert json.dumps(TEMPERATURE) in text  # through the template's own tools section
    assert "You can call tools" not in text  # not dcode's fallback prompt
    assert f"<|im_start|>assistant\n{CALL_T}<|im_end|>" in text  # as Qwen's template writes a past call
    assert "<tool_response>\n25\n</tool_response>" in text and text.endswith("<|im_start|>assistant\n")


def test_a_template_without_tools_gets_the_fallback_prompt_and_every_turn(server: Served) -> None:
    model = server.engine.model  # dcode-tiny: its template reads the last message only
    job = jobs.parse("chat", {"messages": LOOP, "tools": TOOLS, "tool_choice": "required"}, "dcode-tiny")
    assert not toolchat.native_tools(model)
    text = conversation.rendered(model, job.messages, "python", job.shape)
    fallback = toolchat.template("tools").split("{tools}")[0]
    assert text.startswith("<|prompt|>" + fallback.strip())
    assert json.dumps(FAHRENHEIT) in text and ASK[0]["content"] in text
    assert f"{CALL_T}\n\n<tool_response>\n25\n</tool_response><|code|>" in text


def test_a_template_that_refuses_what_a_shape_adds_is_a_400_naming_the_field(server: Served) -> None:
    refusing = "{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}x"
    for shaped, param in [({"tools": TOOLS}, "tools"), ({RF: {"type": "json_object"}}, RF)]:
        job = jobs.parse("chat", {"messages": ASK, **shaped}, "dcode-tiny")
        with pytest.raises(BadRequest) as refused:
            conversation.prompt_ids(faked(server, refusing), job.messages, "python", 32, job.shape)
        assert refused.value.param == param and "System role not supported" in refused.value.message


def test_a_tokenizer_the_grammar_engine_cannot_read_is_a_400(server: Served) -> None:
    class NoBackend:  # a test fake: a tokenizer with no tokenizers-library JSON behind it
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def __getattr__(self, name: str) -> Any:
            if name == "backend":
                raise AttributeError(name)
            return getattr(self.inner, name)

    model = copy.copy(server.engine.model)
    model.tokenizer = NoBackend(model.tokenizer)
    engine = Engine(model, server.engine.config)
    body = {"messages": ASK, "response_format": {"type": "json_object"}}
    with pytest.raises(BadRequest) as refused:
        engine.prepare(jobs.parse("chat", body, "dcode-tiny"))
    assert refused.value.param == "response_format" and "tokenizer" in refused.value.message


# ---------------------------------------------------------------------------------------------
# Bad input: a 400 in OpenAI's shape naming the field, before the model

DEEP: dict[str, Any] = {"type": "object"}
for _ in range(80):
    DEEP = {"type": "object", "properties": {"a": DEEP}}
RF, RS = "response_format", "response_format.json_schema.schema"


def asking(schema: Any) -> dict[str, Any]:
    return {"response_format": {"type": "json_schema", "json_schema": {"name": "w", "schema": schema}}}


def function(**fields: Any) -> dict[str, Any]:
    return {"tools": [{"type": "function", "function": fields}]}


BAD = [
    ({RF: "json"}, RF),
    ({RF: {"type": "yaml"}}, "response_format.type"),
    ({RF: {"type": "json_schema"}}, "response_format.json_schema"),
    ({RF: {"type": "json_schema", "json_schema": {"schema": {}}}}, "response_format.json_schema.name"),
    (
        {RF: {"type": "json_schema", "json_schema": {"name": "w", "strict": "yes"}}},
        "response_format.json_schema.strict",
    ),
    (asking({"type": "objectt"}), RS),  # not JSON Schema
    (asking({"type": "string", "pattern": "(?=a)b"}), RS),  # a lookahead: llguidance cannot enforce it
    (asking(DEEP), RS),  # nested 80 deep
    ({"tools": {"name": "f"}}, "tools"),
    ({"tools": [{"type": "retrieval"}]}, "tools[0].type"),
    ({"tools": [{"type": "function"}]}, "tools[0].function"),
    (function(name="a b"), "tools[0].function.name"),
    ({"tools": [TEMPERATURE, TEMPERATURE]}, "tools[1].function.name"),
    (function(name="f", parameters={"type": 5}), "tools[0].function.parameters"),
    ({"tools": TOOLS, "tool_choice": "always"}, "tool_choice"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "x"}}}, "tool_choice.function.name"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": TOOLS, "parallel_tool_calls": "no"}, "parallel_tool_calls"),
    ({"messages": [*LOOP[:1], {"role": "assistant", "tool_calls": {"id": 1}}]}, "messages[1].tool_calls"),
    ({"messages": [*LOOP[:2], {"role": "tool", "tool_call_id": 7, "content": "25"}]}, "messages[2].tool_call_id"),
]


@pytest.mark.parametrize(("extra", "param"), BAD, ids=[p for _, p in BAD])
def test_bad_shapes_are_400s_naming_the_field(server: Served, extra: dict[str, Any], param: str) -> None:
    answer = post(server.url, CHAT, {"messages": ASK, "max_tokens": 8, **extra})
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param, error


def test_completions_take_response_format_but_not_tools_nor_a_suffix_with_it(server: Served) -> None:
    fim = {"prompt": "x = ", "suffix": "\n", "max_tokens": 8, "response_format": {"type": "json_object"}}
    for extra, param in [({"tools": TOOLS}, "tools"), ({}, "response_format")]:
        answer = post(server.url, "/v1/completions", {**fim, **extra})
        assert answer.status_code == 400 and answer.json()["error"]["param"] == param, answer.text
    answer = post(
        server.url,
        "/v1/completions",
        {"prompt": "config = ", "max_tokens": 24, "response_format": {"type": "json_object"}},
    )
    assert answer.status_code == 200, answer.text
    assert isinstance(json.loads(answer.json()["choices"][0]["text"]), dict)


def test_a_huge_schema_is_refused(server: Served) -> None:
    properties = {f"field_{i}": {"type": "string", "description": "x" * 64} for i in range(12_000)}
    schema = {"type": "object", "properties": properties}
    body = {"messages": ASK, "response_format": {"type": "json_schema", "json_schema": {"name": "w", "schema": schema}}}
    answer = post(server.url, CHAT, body)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"] == "response_format.json_schema.schema"


# ---------------------------------------------------------------------------------------------
# Real clients, dcode-tiny answering


def test_openai_parse_returns_a_validated_pydantic_object(server: Served) -> None:
    client = server.client()
    messages = [{"role": "user", "content": "The weather in Paris, as JSON"}]
    answer = client.chat.completions.parse(
        model="dcode-tiny", messages=messages, response_format=Weather, max_tokens=48
    )
    choice = answer.choices[0]
    assert choice.finish_reason == "stop" and isinstance(choice.message.parsed, Weather)
    assert Weather.model_validate_json(choice.message.content) == choice.message.parsed
    assert "repair" not in answer.model_extra["dcode"]  # parsed by construction: not repaired


def test_an_answer_that_runs_out_of_room_says_length(server: Served) -> None:
    class Note(BaseModel):
        text: str  # no bound: dcode-tiny writes on

    client = server.client()
    with pytest.raises(openai.LengthFinishReasonError):
        client.chat.completions.parse(model="dcode-tiny", messages=ASK, response_format=Note, max_tokens=6)


def test_tool_calls_whole_and_streamed_are_the_same_valid_calls(server: Served) -> None:
    client = server.client()
    body: dict[str, Any] = {"model": "dcode-tiny", "messages": ASK, "tools": TOOLS, "max_tokens": 48}
    body |= {"tool_choice": "required", "parallel_tool_calls": False}
    answer = client.chat.completions.create(**body)
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    assert_valid_calls(choice.message.tool_calls)
    chunks = list(client.chat.completions.create(**body, stream=True))
    deltas = [d for c in chunks if c.choices for d in c.choices[0].delta.tool_calls or []]
    first = deltas[0]
    assert first.index == 0 and first.id.startswith("call_") and first.type == "function"
    assert first.function.name == choice.message.tool_calls[0].function.name and first.function.arguments == ""
    streamed = "".join(d.function.arguments or "" for d in deltas)
    assert streamed == choice.message.tool_calls[0].function.arguments
    assert len(deltas) > 2  # the arguments came in pieces as they settled
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
    assert all(not (c.choices and c.choices[0].delta.content) for c in chunks)


class CityTemperature(BaseModel):
    city: Literal["Paris", "London", "Rome"]


def test_openais_stream_helper_assembles_and_parses_a_streamed_call(server: Served) -> None:
    tools = [openai.pydantic_function_tool(CityTemperature)]  # strict: the arguments parse into the model
    with server.client().chat.completions.stream(
        model="dcode-tiny", messages=ASK, tools=tools, tool_choice="required", parallel_tool_calls=False, max_tokens=48
    ) as stream:
        kinds = {event.type for event in stream}
        final = stream.get_final_completion()
    assert "tool_calls.function.arguments.delta" in kinds and "tool_calls.function.arguments.done" in kinds
    (call,) = final.choices[0].message.tool_calls
    assert final.choices[0].finish_reason == "tool_calls"
    assert isinstance(call.function.parsed_arguments, CityTemperature)


def test_calls_on_and_on_until_out_of_room_keep_those_completed(server: Served) -> None:
    """Free to call in parallel, dcode-tiny calls again and again until max_tokens runs out. The
    answer says "length" and keeps the calls it completed (before: none, and the calls as text)."""
    body = {"model": "dcode-tiny", "messages": ASK, "tools": [TEMPERATURE], "tool_choice": "required"}
    answer = server.client().chat.completions.create(**body, max_tokens=48)
    choice = answer.choices[0]
    assert choice.finish_reason == "length" and not choice.message.content
    assert_valid_calls(choice.message.tool_calls)


def test_a_diffusing_stream_ends_with_the_calls(server: Served) -> None:
    """Mercury's whole-canvas stream: the frames, then the calls whole in the last chunk, each
    with its index (before: no index, which OpenAI's stream deltas always carry)."""
    body = {"messages": ASK, "tools": [FAHRENHEIT], "tool_choice": "required", "parallel_tool_calls": False}
    body |= {"max_tokens": 48, "stream": True}
    chunks = list(sse_data(post(server.url, CHAT, {**body, "diffusing": True}).iter_lines()))
    last = chunks[-1]["choices"][0]
    assert last["finish_reason"] == "tool_calls" and chunks[-1]["dcode"]["event"] == "finished"
    (call,) = last["delta"]["tool_calls"]
    assert call["index"] == 0 and call["id"].startswith("call_") and call["function"]["name"] == "celsius_to_fahrenheit"
    jsonschema.validate(json.loads(call["function"]["arguments"]), schema_of("celsius_to_fahrenheit"))


def test_langchain_structured_output_and_a_bind_tools_loop(server: Served) -> None:
    langchain_openai = pytest.importorskip("langchain_openai")
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_core.tools import tool

    llm = langchain_openai.ChatOpenAI(
        base_url=f"{server.url}/v1", api_key=KEY, model="dcode-tiny", max_tokens=48, max_retries=0
    )
    weather = llm.with_structured_output(Weather).invoke("The weather in Paris")
    assert isinstance(weather, Weather)

    @tool
    def city_temperature(city: Literal["Paris", "London", "Rome"]) -> int:
        """The temperature in a city, in degrees Celsius."""
        return {"Paris": 18, "London": 12, "Rome": 25}[city]

    messages: list[Any] = [HumanMessage(ASK[0]["content"])]
    bound = llm.bind_tools([city_temperature], tool_choice="required", parallel_tool_calls=False)
    asked = bound.invoke(messages)
    assert asked.response_metadata["finish_reason"] == "tool_calls" and len(asked.tool_calls) == 1
    call = asked.tool_calls[0]
    assert call["name"] == "city_temperature" and call["args"]["city"] in CITIES
    messages += [asked, ToolMessage(str(city_temperature.invoke(call["args"])), tool_call_id=call["id"])]
    final = llm.bind_tools([city_temperature], tool_choice="none").invoke(messages)  # the result sent back
    assert final.response_metadata["finish_reason"] in ("stop", "length") and not final.tool_calls
    assert isinstance(final.content, str) and final.content


def test_an_openai_agents_agent_finishes_a_two_tool_task(server: Served) -> None:
    agents = pytest.importorskip("agents")
    agents.set_tracing_disabled(True)
    made: list[tuple[str, Any]] = []

    @agents.function_tool
    def city_temperature(city: Literal["Paris", "London", "Rome"]) -> int:
        """The temperature in a city, in degrees Celsius."""
        made.append(("city_temperature", city))
        return {"Paris": 18, "London": 12, "Rome": 25}[city]

    @agents.function_tool
    def celsius_to_fahrenheit(celsius: int) -> float:
        """Degrees Celsius in Fahrenheit."""
        made.append(("celsius_to_fahrenheit", celsius))
        return celsius * 9 / 5 + 32

    class Plan(agents.RunHooks):  # dcode-tiny cannot plan: the workflow names the next tool
        async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: Any) -> None:
            agent.model_settings = dataclasses.replace(agent.model_settings, tool_choice="celsius_to_fahrenheit")

    client = openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key=KEY, max_retries=0)
    agent = agents.Agent(
        name="weather",
        instructions="Answer with the tools.",
        model=agents.OpenAIChatCompletionsModel(model="dcode-tiny", openai_client=client),
        tools=[city_temperature, celsius_to_fahrenheit],
        model_settings=agents.ModelSettings(tool_choice="city_temperature", parallel_tool_calls=False, max_tokens=48),
        tool_use_behavior=agents.StopAtTools(stop_at_tool_names=["celsius_to_fahrenheit"]),
        reset_tool_choice=False,
    )
    result = agents.Runner.run_sync(agent, ASK[0]["content"], max_turns=4, hooks=Plan())
    assert [name for name, _ in made] == ["city_temperature", "celsius_to_fahrenheit"]
    (_, city), (_, celsius) = made
    assert city in CITIES and -100 <= celsius <= 100  # each call's arguments held to its schema
    assert float(result.final_output) == celsius * 9 / 5 + 32


def test_auto_lets_the_model_answer_in_text_and_streams_it_as_content(server: Served) -> None:
    body = {"messages": ASK, "tools": TOOLS, "max_tokens": 16, "stream": True}
    chunks = list(sse_data(post(server.url, CHAT, body).iter_lines()))
    choices = [c["choices"][0] for c in chunks if c.get("choices")]
    text = "".join(c["delta"].get("content") or "" for c in choices)
    assert text and not text.startswith("<")  # dcode-tiny writes code, not calls
    assert choices[-1]["finish_reason"] in ("stop", "length") and all("tool_calls" not in c["delta"] for c in choices)


# ---------------------------------------------------------------------------------------------
# docs/serving.md's examples run as written (the address and key swapped for the test server's)


def doc_examples(language: str) -> list[str]:
    text = (ROOT / "docs" / "serving.md").read_text()
    section = text.split("### Structured output and tools")[1].split("\n### ")[0]
    return [block.split("\n", 1)[1] for block in section.split("```")[1::2] if block.startswith(language + "\n")]


def test_the_docs_examples_run_as_written(server: Served, tmp_path: pathlib.Path) -> None:
    swaps = {"http://127.0.0.1:8000": server.url, "unused-without---api-key": KEY}
    blocks = doc_examples("python")
    assert len(blocks) == 2
    printed = []
    for i, block in enumerate(blocks):
        for old, new in swaps.items():
            block = block.replace(old, new)
        script = tmp_path / f"example{i}.py"
        script.write_text(block)
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        printed.append(done.stdout.strip())
    weather, call = printed
    assert weather.startswith("city=") and call.split()[0] == "city_temperature" and call.split()[1] in CITIES
    (curl,) = doc_examples("sh")
    curl = curl.replace("\\\n", " ").replace("http://127.0.0.1:8000", server.url)
    done = subprocess.run(
        [*shlex.split(curl), "-H", f"Authorization: Bearer {KEY}"], capture_output=True, text=True, timeout=60
    )
    assert isinstance(json.loads(json.loads(done.stdout)["choices"][0]["text"]), dict), done.stdout


def test_stop_strings_end_a_text_answer_but_never_cut_a_call(server: Served) -> None:
    base = {"messages": ASK, "tools": [TEMPERATURE], "max_tokens": 48, "stop": ["\n"]}
    text = post(server.url, CHAT, base).json()["choices"][0]  # auto: dcode-tiny answers in code
    assert text["finish_reason"] == "stop" and "\n" not in text["message"]["content"]
    body = {**base, "tool_choice": "required", "parallel_tool_calls": False}
    called = post(server.url, CHAT, body).json()["choices"][0]  # every call holds "\n"
    assert called["finish_reason"] == "tool_calls"
    (call,) = called["message"]["tool_calls"]
    jsonschema.validate(json.loads(call["function"]["arguments"]), schema_of("city_temperature"))
