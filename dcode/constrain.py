"""Grammars an answer must follow (JSON Schema, any JSON object, a regular expression, a Lark
grammar) and the constraint that enforces one in the sampler, over llguidance (the engine of
llama.cpp, vLLM and SGLang: token masks from a left-to-right prefix; docs/benchmarks/structured/
says why it was chosen).

Owns: Grammar (what a caller asks for, checked without a tokenizer), validate() (does a finished
text parse and validate: jsonschema for schemas), a schema file read and checked, and the request
told the schema. The constraint over a model's tokens (GrammarConstraint) is dcode.grammar_tokens'.
Imports no torch, even inside functions (the --endpoint path reaches it), and llguidance only
inside functions (dcode --help stays fast). Knows nothing about the sampler, argv or the terminal.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from llguidance import LLParserLimits, LLTokenizer

GrammarKind = Literal["json_schema", "json_object", "regex", "lark"]

MAX_SOURCE = 1_000_000  # characters of a grammar's text: a larger one is refused before compiling
MAX_DEPTH = 64  # nesting of a JSON Schema's objects and arrays: deeper is refused before compiling
# llguidance's own budgets, tighter than its defaults so a grammar that would take seconds per
# token is refused at once (GrammarError) rather than slowing every pass
GRAMMAR_SIZE, LEXER_FUEL, STEP_FUEL = 200_000, 1_000_000, 200_000


class GrammarError(ValueError):
    """A grammar the engine cannot enforce (not JSON Schema, unsupported keyword, too large/deep,
    bad regex/Lark): one line, naming what is wrong. The CLI says it and exits 2; the server
    answers a 400 naming the request field."""


def limits() -> LLParserLimits:
    from llguidance import LLParserLimits

    return LLParserLimits(
        max_grammar_size=GRAMMAR_SIZE, initial_lexer_fuel=LEXER_FUEL, step_lexer_fuel=STEP_FUEL, verbose_errors=False
    )


def depth(value: Any) -> int:
    """How deeply a JSON value nests. Example: depth({"a": [1]}) -> 2."""
    stack, deepest = [(value, 0)], 0
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level + 1)
            stack.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def first_line(message: str) -> str:
    return next((line.strip() for line in message.splitlines() if line.strip()), message).strip()


@dataclass(frozen=True)
class Grammar:
    """What an answer must follow. `source`: the JSON Schema as JSON text, "" for json_object, the
    regex, or the Lark text (llguidance's Lark, which may embed %json{...} schemas)."""

    kind: GrammarKind
    source: str

    @classmethod
    def json_schema(cls, schema: dict[str, Any]) -> Grammar:
        """GrammarError unless `schema` is a JSON Schema (jsonschema's meta-schema check) of sane size."""
        if not isinstance(schema, dict):
            raise GrammarError(f"a JSON Schema is an object, not {type(schema).__name__}")
        if depth(schema) > MAX_DEPTH:
            raise GrammarError(f"the schema nests deeper than {MAX_DEPTH} levels")
        import jsonschema

        try:
            jsonschema.validators.validator_for(schema).check_schema(schema)
        except jsonschema.SchemaError as error:
            where = "/".join(str(p) for p in error.path)
            at = f" (at {where})" if where else ""
            raise GrammarError(f"not a JSON Schema: {first_line(error.message)}{at}") from None
        return cls("json_schema", json.dumps(schema))

    @classmethod
    def json_object(cls) -> Grammar:
        return cls("json_object", "")

    @classmethod
    def regex(cls, pattern: str) -> Grammar:
        return cls("regex", pattern)

    @classmethod
    def lark(cls, text: str) -> Grammar:
        return cls("lark", text)

    def response_format(self) -> dict[str, Any] | None:
        """The grammar as OpenAI's `response_format` (None for a regex or Lark: it has no such field)."""
        if self.kind == "json_object":
            return {"type": "json_object"}
        if self.kind == "json_schema":
            return {
                "type": "json_schema",
                "json_schema": {"name": "answer", "schema": json.loads(self.source), "strict": True},
            }
        return None

    def engine_text(self) -> str:
        """The grammar as llguidance takes it (its JSON grammar form)."""
        from llguidance import LLMatcher

        if len(self.source) > MAX_SOURCE:
            raise GrammarError(f"the {self.kind} is {len(self.source)} characters (at most {MAX_SOURCE})")
        if self.kind == "regex":
            return str(LLMatcher.grammar_from_regex(self.source))
        if self.kind == "lark":
            return str(LLMatcher.grammar_from_lark(self.source))
        schema = json.loads(self.source) if self.kind == "json_schema" else {"type": "object"}
        try:
            return str(LLMatcher.grammar_from_json_schema(schema, defaults={"whitespace_flexible": False}))
        except ValueError as error:
            raise GrammarError(f"not a JSON Schema: {first_line(str(error))}") from None

    def check(self) -> None:
        """GrammarError unless llguidance compiles it (cheap; no tokenizer needed)."""
        from llguidance import LLMatcher

        text = self.engine_text()
        failed, messages = LLMatcher.validate_grammar_with_warnings(text, None, limits=limits())
        if failed:
            raise GrammarError(f"the {self.named} cannot be enforced: {clean(messages[0])}")

    @property
    def named(self) -> str:
        """How a message names it: "JSON Schema", "JSON object", "regex", "Lark grammar"."""
        return {"json_schema": "JSON Schema", "json_object": "JSON object", "regex": "regex", "lark": "Lark grammar"}[
            self.kind
        ]


def schema_file(path: str) -> Grammar:
    """The JSON Schema in the file at `path`, checked (Grammar.json_schema, then check()); a
    GrammarError says what is wrong with the file in one line."""
    from pathlib import Path

    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise GrammarError(f"cannot read it: {getattr(error, 'strerror', None) or error}") from None
    try:
        schema = json.loads(text)
    except ValueError as error:
        raise GrammarError(f"not JSON: {first_line(str(error))}") from None
    grammar = Grammar.json_schema(schema)
    grammar.check()
    return grammar


def ask_for(grammar: Grammar, request: str) -> str:
    """The request with what the answer must be, for the model to read (the grammar enforces it
    either way; a model that knows the schema fills it with sense)."""
    if grammar.kind == "json_schema":
        return f"{request.rstrip()}\n\nAnswer with JSON only, valid against this JSON Schema:\n{grammar.source}"
    if grammar.kind == "json_object":
        return f"{request.rstrip()}\n\nAnswer with one JSON object only."
    return request


def clean(message: str) -> str:
    """llguidance's error in one line: its `error:` line where it has one (a regex's), else its first.
    Example: 'regex parse error:\\n  (\\n  ^\\nerror: unclosed group' -> 'regex parse error: unclosed group'."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    reason = next((line[len("error:") :].strip() for line in lines if line.startswith("error:")), None)
    head = lines[0] if lines else message
    return f"{head.split(':', 1)[0] if ':' in head else head}: {reason}" if reason else head


def validate(grammar: Grammar, text: str) -> bool:
    """Does the finished text parse and validate: JSON (and the schema, by jsonschema) for the JSON
    kinds, a full match for a regex, llguidance's parser for Lark."""
    if grammar.kind in ("json_schema", "json_object"):
        try:
            value = json.loads(text)
        except ValueError:
            return False
        if grammar.kind == "json_object":
            return isinstance(value, dict)
        import jsonschema

        schema = json.loads(grammar.source)
        return jsonschema.validators.validator_for(schema)(schema).is_valid(value)
    if grammar.kind == "regex":
        try:
            return re.fullmatch(grammar.source, text) is not None
        except re.error:
            pass  # llguidance's regex syntax is wider than Python's: let its parser decide
    from llguidance import LLMatcher

    tokenizer = byte_tokenizer()
    matcher = LLMatcher(tokenizer, grammar.engine_text(), log_level=0, limits=limits())
    data = text.encode()
    return matcher.consume_tokens(list(data)) and matcher.is_accepting() and not matcher.is_error()


@functools.cache
def byte_tokenizer() -> LLTokenizer:
    """A tokenizer of one token per byte (ids 0-255; 256 ends), for checking a finished text. Built once."""
    from llguidance import LLTokenizer, TokenizerWrapper

    class Bytes:
        eos_token_id = 256
        bos_token_id = None
        tokens = [bytes([b]) for b in range(256)] + [b"<end>"]
        special_token_ids = [256]

        def __call__(self, text: bytes | str) -> list[int]:
            return list(text.encode() if isinstance(text, str) else text)

    return LLTokenizer(TokenizerWrapper(Bytes()), slices=[])
