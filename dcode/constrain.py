"""Grammars an answer must follow (JSON Schema, any JSON object, a regular expression, a Lark
grammar) and the constraint that enforces one in the sampler, over llguidance (the engine of
llama.cpp, vLLM and SGLang: token masks from a left-to-right prefix; docs/benchmarks/structured/
says why it was chosen).

Owns: Grammar (what a caller asks for, checked without a tokenizer), validate() (does a finished
text parse and validate: jsonschema for schemas), and GrammarConstraint, the tokenizer-side object
dcode.constrained's protocol names: the mask of the tokens allowed next, how many of a run of
proposed tokens the grammar accepts, whether it is finished. Imports no torch at module level and
llguidance only inside functions (dcode --help stays fast). Knows nothing about the sampler's
blocks, argv or the terminal.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import torch
    from llguidance import LLMatcher, LLParserLimits, LLTokenizer

GrammarKind = Literal["json_schema", "json_object", "regex", "lark"]

MAX_SOURCE = 1_000_000  # characters of a grammar's text: a larger one is refused before compiling
MAX_DEPTH = 64  # nesting of a JSON Schema's objects and arrays: deeper is refused before compiling
# llguidance's own budgets, tighter than its defaults so a grammar that would take seconds per
# token is refused at once (GrammarError) rather than slowing every pass
GRAMMAR_SIZE, LEXER_FUEL, STEP_FUEL = 200_000, 1_000_000, 200_000
# Closing: once the room left in the answer is barely what closing what is open takes (to_close:
# forced tokens, and at each step the first closing token the grammar allows: an end, then `"`,
# `]`, `}`, then `,`), the frontier prefers those tokens, so a weak model's endless string still
# ends in a document that parses (measured on dcode-tiny: docs/benchmarks/structured/)
CLOSE_WATCH = 96  # room left from which to_close is measured, each pass (a mask per token it counts)
CLOSE_MARGIN = 4  # tokens kept spare: the model's closing tokens may be other than to_close's
CLOSERS = (b'"]}', b'"]},')  # the bytes of a closing token, by preference (whitespace aside)


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

        return jsonschema.validators.validator_for(json.loads(grammar.source))(json.loads(grammar.source)).is_valid(
            value
        )
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


# ---------------------------------------------------------------------------------------------
# The tokenizer side: llguidance's view of a model's vocabulary, cached per tokenizer


_TOKENIZERS: dict[int, tuple[Any, LLTokenizer]] = {}


def byte_tokenizer() -> LLTokenizer:
    """A tokenizer of one token per byte (ids 0-255; 256 ends), for checking a finished text."""
    from llguidance import LLTokenizer, TokenizerWrapper

    class Bytes:
        eos_token_id = 256
        bos_token_id = None
        tokens = [bytes([b]) for b in range(256)] + [b"<end>"]
        special_token_ids = [256]

        def __call__(self, text: bytes | str) -> list[int]:
            return list(text.encode() if isinstance(text, str) else text)

    key = -1
    if key not in _TOKENIZERS:
        _TOKENIZERS[key] = (None, LLTokenizer(TokenizerWrapper(Bytes()), slices=[]))
    return _TOKENIZERS[key][1]


def engine_tokenizer(tokenizer: Any, vocab: int, ends: list[int]) -> LLTokenizer:
    """llguidance's tokenizer for a model's: from the tokenizers-library JSON that a transformers
    fast tokenizer (backend_tokenizer) or dcode's PlainTokenizer (backend) holds, with the model's
    vocabulary size (its logits may be wider than the tokenizer) and end ids. Cached: building one
    takes about a second for a 150k vocabulary."""
    from llguidance import LLTokenizer

    key = id(tokenizer)
    cached = _TOKENIZERS.get(key)
    if cached is not None and cached[0] is tokenizer:
        return cached[1]
    backend = getattr(tokenizer, "backend_tokenizer", None) or getattr(tokenizer, "backend", None)
    if backend is None or not hasattr(backend, "to_str"):
        raise GrammarError(f"a grammar needs a tokenizers-library tokenizer; this model has {type(tokenizer).__name__}")
    from copy import copy

    backend = copy(backend)
    backend.no_padding()
    backend.no_truncation()
    size = max(vocab, backend.get_vocab_size(with_added_tokens=True))
    engine = LLTokenizer(backend.to_str(), n_vocab=size, eos_token=list(ends))
    _TOKENIZERS[key] = (tokenizer, engine)
    return engine


def bitmask(matcher: LLMatcher, vocab: int) -> torch.Tensor:
    """(V,) bool: llguidance's mask of the tokens allowed next, unpacked from its 32-bit words."""
    import torch

    words = torch.frombuffer(bytearray(matcher.compute_bitmask()), dtype=torch.int32)  # (ceil(V/32),)
    bits = (words[:, None] >> torch.arange(32, dtype=torch.int32)) & 1  # (ceil(V/32), 32)
    return bits.flatten()[:vocab].bool()


_CLASSES: dict[tuple[int, int], list[torch.Tensor]] = {}


def closing_classes(engine: LLTokenizer, vocab: int, ends: list[int]) -> list[torch.Tensor]:
    """(V,) bool masks of the tokens that close, by preference: the end ids, then the tokens made
    only of CLOSERS[0]'s bytes, then of CLOSERS[1]'s (whitespace aside). Cached per tokenizer."""
    import torch

    key = (id(engine), vocab)
    if key not in _CLASSES:
        classes = [torch.zeros(vocab, dtype=torch.bool) for _ in range(1 + len(CLOSERS))]
        classes[0][ends] = True
        for token in range(engine.vocab_size):
            text = engine.decode_bytes([token]).strip()
            if text and not engine.is_special_token(token):
                for rank, allowed in enumerate(CLOSERS, start=1):
                    if not text.strip(allowed):
                        classes[rank][token] = True
                        break
        _CLASSES[key] = classes
    return _CLASSES[key]


class GrammarConstraint:
    """A grammar over a model's tokens, for one denoise() call (dcode.constrained.Constraint): the
    answer's committed prefix, fed left to right. vocab: at least this many ids (the model's
    logits may be wider than its tokenizer; dcode.constrained.mask_logits fits the mask to them);
    ends: the ids that end the answer (EOS and padding), allowed where the grammar may stop."""

    def __init__(self, grammar: Grammar, tokenizer: Any, vocab: int, ends: list[int]) -> None:
        from llguidance import LLMatcher

        self.grammar = grammar
        self.kind = grammar.kind
        self.ends = sorted(set(ends))
        self.engine = engine_tokenizer(tokenizer, vocab, self.ends)
        self.vocab = self.engine.vocab_size
        self.matcher: LLMatcher = LLMatcher(self.engine, grammar.engine_text(), log_level=0, limits=limits())
        if self.matcher.is_error():
            raise GrammarError(f"the {grammar.named} cannot be enforced: {clean(self.matcher.get_error())}")
        self.ended = False  # an end token was committed
        self.masks = 0  # masks computed (the report's and the benchmark's counter)
        self.classes = closing_classes(self.engine, self.vocab, self.ends)
        self.closed = False  # short of room: from now on the frontier closes
        self.watching = True  # a fork (a verify row's) reads `closed`, measuring nothing

    def begin(self, room: int) -> None:
        self.closed = False

    def closing(self, room: int) -> bool:
        """Whether the answer, with `room` positions left, is short of room: the frontier then
        closes (for good: the answer is being finished)."""
        if self.watching and not self.closed and not self.ended and room <= CLOSE_WATCH:
            self.closed = self.to_close(room) + CLOSE_MARGIN >= room
        return self.closed

    def to_close(self, limit: int) -> int:
        """Tokens it takes to finish the answer from here (up to `limit`): the forced ones, and at
        each step the first token of the first closing class the grammar allows (else its first)."""

        fork, steps = self.matcher.deep_copy(), 0
        while steps < limit and not fork.is_accepting() and not fork.is_error():
            forced = fork.compute_ff_tokens()
            if forced:
                fork.consume_tokens(forced)
                steps += len(forced)
                continue
            allowed = bitmask(fork, self.vocab)
            token = next((int(hit[0]) for c in self.classes[1:] if len(hit := (allowed & c).nonzero())), None)
            fork.consume_token(token if token is not None else int(allowed.nonzero()[0]))
            steps += 1
        return steps + 1 + (0 if fork.is_accepting() else limit)  # and the end token

    def allowed(self, room: int | None = None) -> torch.Tensor:
        """(V,) bool: the tokens the grammar allows next (the end ids where it may stop); with
        `room` positions left and closing(room), only those of the first closing class it allows."""
        out = self.grammar_mask()
        if room is not None and self.closing(room):
            for members in self.classes:
                narrowed = out & members
                if bool(narrowed.any()):
                    return narrowed
        return out

    def grammar_mask(self) -> torch.Tensor:
        import torch

        self.masks += 1
        if self.ended or self.matcher.is_error():
            out = torch.zeros(self.vocab, dtype=torch.bool)
            out[self.ends] = True
            return out
        out = bitmask(self.matcher, self.vocab)
        if self.matcher.is_accepting():
            out[self.ends] = True
        else:
            out[self.ends] = False
        return out

    def accept(self, tokens: list[int]) -> int:
        """Consume the longest prefix of `tokens` the grammar allows in order; returns its length.
        An end token is allowed where the grammar may stop, and nothing after it."""
        taken = 0
        for token in tokens:
            if self.ended:
                break
            if token in self.ends:
                if not self.matcher.is_accepting():
                    break
                self.ended = True
            elif not self.matcher.try_consume_tokens([token]):
                break
            taken += 1
        return taken

    def forced(self) -> list[int]:
        """Tokens the grammar forces next, whatever the model says (a schema's fixed keys)."""
        return [] if self.ended else list(self.matcher.compute_ff_tokens())

    def fork(self) -> GrammarConstraint:
        """A copy at the same point, to try a run on without moving this one."""
        twin = object.__new__(GrammarConstraint)
        twin.__dict__.update(self.__dict__)
        twin.matcher = self.matcher.deep_copy()
        twin.watching = False
        return twin

    @property
    def finished(self) -> bool:
        """Nothing more may be written but an end: the grammar accepts and stops, or an end was written."""
        return self.ended or (self.matcher.is_accepting() and self.matcher.is_stopped())

    @property
    def complete(self) -> bool:
        """The committed text is a whole sentence of the grammar (the answer may end here)."""
        return self.ended or self.matcher.is_accepting()
