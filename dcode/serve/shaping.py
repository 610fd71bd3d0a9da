"""What a request asks of its answer's form: `response_format`, `tools`, `tool_choice` and
`parallel_tool_calls` (OpenAI's fields) -> a Shape, and a Shape -> the Grammar the sampler enforces.

Owns: those fields' JSON shapes and every refusal of them (a 400 naming the field: a schema that is
not JSON Schema or that llguidance cannot enforce, a tool name given twice, `tool_choice` naming no
tool, a malformed tool), and the Lark grammar of a tool-calling answer. Every tool call is written
as Qwen2.5/Qwen3 write them (the `<tool_call>` JSON of their chat templates, which dcode's fallback
prompt teaches a model whose template has no tools):

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

each call's arguments held to its tool's parameter schema (llguidance's `%json{...}`). `auto` lets
the answer be text (not starting with "<") or calls; `required` and a named function must be
calls; `none` is text. Pure Python: dcode.constrain imports llguidance only when a grammar is checked.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from dcode.constrain import MAX_SOURCE, Grammar, GrammarError
from dcode.serve.settings import SettingError, json_type

Format = Literal["text", "json_object", "json_schema"]
NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")  # OpenAI's rule for function and schema names
CALL_OPEN, CALL_CLOSE = "<tool_call>\n", "\n</tool_call>"
# a call's JSON as Qwen's templates write it: keys in this order, ", " and ": " between items
CALL_STYLE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
NO_ARGUMENTS: dict[str, Any] = {"type": "object", "properties": {}}  # OpenAI's default `parameters`


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]  # the JSON Schema of its arguments

    def openai(self) -> dict[str, Any]:
        """The tool as OpenAI and transformers' apply_chat_template(tools=...) take it."""
        function = {"name": self.name, "description": self.description, "parameters": self.parameters}
        return {"type": "function", "function": function}


@dataclass(frozen=True)
class Shape:
    """An answer's form. The default is free text, as a request with none of the fields asks."""

    format: Format = "text"
    schema: dict[str, Any] | None = None  # json_schema's schema
    tools: tuple[Tool, ...] = ()
    choice: str = "auto"  # auto | none | required | the name of the one function to call
    parallel: bool = True  # more than one call in an answer
    grammar: Grammar | None = field(default=None, compare=False)  # built and checked by shaped()

    @property
    def calls(self) -> bool:
        """The answer may hold tool calls."""
        return bool(self.tools) and self.choice != "none"

    @property
    def structured(self) -> bool:
        """Anything but free text, or a conversation with tools: rendered as written (no code prompt)."""
        return self.format != "text" or bool(self.tools)

    @property
    def must_call(self) -> bool:
        return self.calls and self.choice != "auto"


def bad(param: str, what: str) -> SettingError:
    """The refusal of a field. Example: bad("tools", "must be a list") says "'tools' must be a list"."""
    return SettingError(f"'{param}' {what}", param)


def _object(value: Any, param: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise bad(param, f"must be an object, got {json_type(value)}")
    return value


def _name(value: Any, param: str) -> str:
    if not isinstance(value, str) or not NAME.fullmatch(value):
        raise bad(param, f"must be 1-64 letters, digits, '_' or '-', got {value!r:.80}")
    return value


# keywords whose value is a schema, a list of schemas, or a map of names to schemas
ONE_SCHEMA = ("items", "additionalItems", "contains", "not", "if", "then", "else", "additionalProperties")
ITEM_LISTS = ("prefixItems", "items")
CHOICES = ("anyOf", "oneOf")
SCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas")
OPEN_ENDED = ("additionalProperties", "patternProperties", "unevaluatedProperties")
# beside `properties`, these may let in keys of their own: such an object, and their members, stay open
COMBINED = ("allOf", "anyOf", "oneOf", "$ref", "if", "then", "else", "dependentSchemas", "dependencies")


def closed(schema: Any, member: bool = False) -> Any:
    """The schema with every object that lists its `properties` and says nothing of others closed
    to them (`additionalProperties: false`), as xgrammar's strict mode does under vLLM: a weak model
    cannot wander into invented keys until it runs out of room, and an answer valid under the
    closed schema is valid under the original. An object combined with other schemas beside its
    properties (COMBINED: `allOf` members always) stays open, and so do those schemas (`member`):
    closing one would refuse the others' keys.
    Example: closed({"properties": {}}) -> {"properties": {}, "additionalProperties": False}."""
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    combined = "properties" in out and any(key in out for key in COMBINED)
    for key, value in schema.items():
        if key in SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: closed(s) for name, s in value.items()}
        elif key == "allOf" and isinstance(value, list):
            out[key] = [closed(s, member=True) for s in value]
        elif key in CHOICES and isinstance(value, list):
            out[key] = [closed(s, member=combined) for s in value]
        elif key in ITEM_LISTS and isinstance(value, list):
            out[key] = [closed(s) for s in value]
        elif key in ONE_SCHEMA and isinstance(value, dict):
            out[key] = closed(value, member=combined and key in ("then", "else"))
    said = any(key in out for key in OPEN_ENDED)  # the schema says what other keys may be
    if isinstance(out.get("properties"), dict) and not (member or combined or said):
        out["additionalProperties"] = False
    return out


def checked(grammar: Grammar, param: str) -> Grammar:
    """The grammar, or a 400 naming `param` when the engine cannot enforce it."""
    try:
        grammar.check()
    except GrammarError as error:
        raise bad(param, f"cannot be used: {error}") from None
    return grammar


def schema_grammar(schema: Any, param: str) -> Grammar:
    """The grammar of a JSON Schema a request gives, enforced closed(); one too large for the
    engine is refused before the (slower) meta-schema check."""
    size = len(json.dumps(schema))
    if size > MAX_SOURCE:
        raise bad(param, f"cannot be used: the schema is {size} characters (at most {MAX_SOURCE})")
    try:
        return checked(Grammar.json_schema(closed(schema)), param)
    except GrammarError as error:  # Grammar.json_schema's own refusal (not JSON Schema, too deep)
        raise bad(param, f"cannot be used: {error}") from None


def response_format(body: dict[str, Any]) -> tuple[Format, dict[str, Any] | None]:
    """`response_format`: {"type": "text"}, {"type": "json_object"} or {"type": "json_schema",
    "json_schema": {"name", "schema", "strict", "description"}}."""
    given = body.get("response_format")
    if given is None:
        return "text", None
    kind = _object(given, "response_format").get("type")
    if kind in ("text", "json_object"):
        return kind, None
    if kind != "json_schema":
        raise bad("response_format.type", f"must be text, json_object or json_schema, got {kind!r:.80}")
    spec = _object(given.get("json_schema"), "response_format.json_schema")
    _name(spec.get("name"), "response_format.json_schema.name")
    strict = spec.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise bad("response_format.json_schema.strict", "must be true or false")
    schema = spec.get("schema", {})  # OpenAI: without a schema, any JSON
    return "json_schema", _object(schema, "response_format.json_schema.schema")


def tools_of(body: dict[str, Any]) -> tuple[Tool, ...]:
    """`tools`: function tools, each name once, each `parameters` a JSON Schema the engine enforces."""
    given = body.get("tools")
    if given is None:
        return ()
    if not isinstance(given, list):
        raise bad("tools", f"must be a list, got {json_type(given)}")
    out: list[Tool] = []
    for i, tool in enumerate(given):
        where = f"tools[{i}]"
        if _object(tool, where).get("type") != "function":
            raise bad(f"{where}.type", f"must be 'function', got {tool.get('type')!r:.80}")
        function = _object(tool.get("function"), f"{where}.function")
        name = _name(function.get("name"), f"{where}.function.name")
        if any(t.name == name for t in out):
            raise bad(f"{where}.function.name", f"names {name!r}, which an earlier tool has: a tool name is given once")
        description = function.get("description") or ""
        if not isinstance(description, str):
            raise bad(f"{where}.function.description", "must be a string")
        parameters = function.get("parameters")
        parameters = NO_ARGUMENTS if parameters is None else _object(parameters, f"{where}.function.parameters")
        schema_grammar(parameters, f"{where}.function.parameters")
        out.append(Tool(name, description, parameters))
    return tuple(out)


def tool_choice(body: dict[str, Any], tools: Sequence[Tool]) -> str:
    """`tool_choice`: auto, none, required, or {"type": "function", "function": {"name": ...}} for a
    tool that is in `tools`. Without tools, only auto and none."""
    given = body.get("tool_choice")
    if given is None:
        return "auto"
    if isinstance(given, str):
        if given not in ("auto", "none", "required"):
            raise bad("tool_choice", f"must be auto, none, required or a function, got {given!r:.80}")
        choice = given
    else:
        if _object(given, "tool_choice").get("type") != "function":
            raise bad("tool_choice.type", "must be 'function'")
        choice = _name(_object(given.get("function"), "tool_choice.function").get("name"), "tool_choice.function.name")
        if not any(t.name == choice for t in tools):
            named = ", ".join(t.name for t in tools) or "none"
            raise bad("tool_choice.function.name", f"is {choice!r}, which is not in 'tools' ({named})")
    if choice == "required" and not tools:
        raise bad("tool_choice", "is required, but the request has no 'tools'")
    return choice


def shaped(kind: str, body: dict[str, Any]) -> Shape:
    """The Shape a request body asks for, its grammar checked; SettingError naming the field otherwise.
    `tools` are a chat's: a completion that sends them is refused, not answered without them."""
    form, schema = response_format(body)
    if kind != "chat" and any(body.get(name) is not None for name in ("tools", "tool_choice")):
        param = "tools" if body.get("tools") is not None else "tool_choice"
        raise bad(param, "is a chat field: send it to /v1/chat/completions")
    tools = tools_of(body)
    choice = tool_choice(body, tools)
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise bad("parallel_tool_calls", f"must be true or false, got {json_type(parallel)}")
    shape = Shape(form, schema, tools, choice, True if parallel is None else parallel)
    if shape.calls:
        grammar = checked(Grammar.lark(calls_lark(shape)), "tools")
    elif form == "json_schema":
        grammar = schema_grammar(schema, "response_format.json_schema.schema")
    elif form == "json_object":
        grammar = Grammar.json_object()
    else:
        grammar = None
    return replace(shape, grammar=grammar)


def call_schema(tool: Tool) -> dict[str, Any]:
    """One call's JSON: {"name": the tool's, "arguments": its parameters' schema}, in Qwen's layout.
    The parameters' definitions move up to the call's root, where their "#/$defs/..." refs
    (pydantic's, for nested models) now point."""
    arguments = closed(tool.parameters)
    defined = {key: arguments.pop(key) for key in ("$defs", "definitions") if key in arguments}
    return {
        "type": "object",
        "properties": {"name": {"const": tool.name}, "arguments": arguments},
        "required": ["name", "arguments"],
        "additionalProperties": False,
        "x-guidance": CALL_STYLE,
        **defined,
    }


def content_rule(shape: Shape) -> str:
    """What a text answer (tool_choice auto) may be: the response_format's JSON, or any text that
    does not open with "<" (so the first character tells text from a call)."""
    compact = {"x-guidance": {"whitespace_flexible": False}}  # as dcode.constrain writes JSON
    if shape.format == "json_schema":
        return f"content: %json {json.dumps({**closed(shape.schema), **compact})}"
    if shape.format == "json_object":
        return f"content: %json {json.dumps({'type': 'object', **compact})}"
    return "content: TEXT\nTEXT: /[^<](.|\\n)*/"


def calls_lark(shape: Shape) -> str:
    """The Lark grammar (llguidance's dialect) of an answer that may or must call `shape`'s tools."""
    tools = [t for t in shape.tools if shape.choice in ("auto", "required") or t.name == shape.choice]
    calls = 'calls: call ("\\n" call)*' if shape.parallel else "calls: call"
    lines = [
        "start: calls" if shape.must_call else "start: calls | content",
        calls,
        f"call: {json.dumps(CALL_OPEN)} ({' | '.join(f'fn{i}' for i in range(len(tools)))}) {json.dumps(CALL_CLOSE)}",
        *(f"fn{i}: %json {json.dumps(call_schema(tool))}" for i, tool in enumerate(tools)),
    ]
    if not shape.must_call:
        lines.append(content_rule(shape))
    return "\n".join(lines) + "\n"


def call_text(name: str, arguments: Any) -> str:
    """One call as the answer writes it.
    Example: call_text("f", {}) -> '<tool_call>\\n{"name": "f", "arguments": {}}\\n</tool_call>'."""
    body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"{CALL_OPEN}{body}{CALL_CLOSE}"


def history_calls(content: str, calls: Any, param: str) -> str:
    """An assistant message's `tool_calls` (OpenAI's: arguments as a JSON string) as the text the
    model would have written for them, after its content: how the conversation shows past calls."""
    if not isinstance(calls, list):
        raise bad(param, f"must be a list, got {json_type(calls)}")
    texts = [content] if content.strip() else []
    for i, call in enumerate(calls):
        function = _object(_object(call, f"{param}[{i}]").get("function"), f"{param}[{i}].function")
        name = function.get("name")
        if not isinstance(name, str) or not name:
            raise bad(f"{param}[{i}].function.name", "must be a non-empty string")
        arguments = function.get("arguments", "{}")
        if not isinstance(arguments, str):
            raise bad(f"{param}[{i}].function.arguments", "must be a string")
        try:
            parsed: Any = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            parsed = arguments  # as OpenAI takes it: the text the model wrote, even when not JSON
        texts.append(call_text(name, parsed))
    return "\n".join(texts)
