"""A grammar over a model's tokens, for one denoise() call: GrammarConstraint, the tokenizer side
of dcode.constrained's Constraint protocol, over llguidance (dcode.constrain says why that engine).

Owns: llguidance's view of a model's vocabulary (from the tokenizers-library JSON, cached per
tokenizer), the mask of the tokens allowed next as a (V,) bool tensor, how many of a run of
proposed tokens the grammar accepts, the tokens it forces, and closing when the answer is short of
room. Knows nothing about the sampler's blocks, argv or the terminal.
"""

from __future__ import annotations

from copy import copy
from typing import TYPE_CHECKING, Any

import torch

from dcode.constrain import Grammar, GrammarError, clean, limits

if TYPE_CHECKING:
    from llguidance import LLMatcher, LLTokenizer

# Closing: once the room left in the answer is barely what closing what is open takes (to_close:
# forced tokens, and at each step the first closing token the grammar allows), the frontier prefers
# closing tokens: an end; then in free text (a string: most tokens allowed) a `"` that closes it,
# elsewhere a `]` or `}`; then `,`. So a weak model's endless string still ends in a document that
# parses (measured on dcode-tiny: docs/benchmarks/structured/)
CLOSE_WATCH = 96  # room left from which to_close is measured, each pass (a mask per token it counts)
CLOSE_MARGIN = 4  # tokens kept spare: the model's closing tokens may be other than to_close's
FREE_TEXT = 64  # more tokens allowed than this: inside a string (structural places allow a handful)
_ENGINES: dict[int, tuple[Any, LLTokenizer]] = {}  # id(model tokenizer) -> (it, llguidance's)


def engine_tokenizer(tokenizer: Any, vocab: int, ends: list[int]) -> LLTokenizer:
    """llguidance's tokenizer for a model's: from the tokenizers-library JSON that a transformers
    fast tokenizer (backend_tokenizer) or dcode's PlainTokenizer (backend) holds, with the model's
    vocabulary size (its logits may be wider than the tokenizer) and end ids. Cached: building one
    takes about a second for a 150k vocabulary."""
    from llguidance import LLTokenizer

    key = id(tokenizer)
    cached = _ENGINES.get(key)
    if cached is not None and cached[0] is tokenizer:
        return cached[1]
    backend = getattr(tokenizer, "backend_tokenizer", None) or getattr(tokenizer, "backend", None)
    if backend is None or not hasattr(backend, "to_str"):
        raise GrammarError(f"a grammar needs a tokenizers-library tokenizer; this model has {type(tokenizer).__name__}")
    backend = copy(backend)
    backend.no_padding()
    backend.no_truncation()
    size = max(vocab, backend.get_vocab_size(with_added_tokens=True))
    engine = LLTokenizer(backend.to_str(), n_vocab=size, eos_token=list(ends))
    _ENGINES[key] = (tokenizer, engine)
    return engine


def bitmask(matcher: LLMatcher, vocab: int) -> torch.Tensor:
    """(V,) bool: llguidance's mask of the tokens allowed next, unpacked from its 32-bit words."""
    words = torch.frombuffer(bytearray(matcher.compute_bitmask()), dtype=torch.int32)  # (ceil(V/32),)
    bits = (words[:, None] >> torch.arange(32, dtype=torch.int32)) & 1  # (ceil(V/32), 32)
    return bits.flatten()[:vocab].bool()


_CLASSES: dict[tuple[int, int], dict[str, torch.Tensor]] = {}


CLASSES = {  # the closing classes: which bytes a token is made of (whitespace aside)
    "end": None,  # the end ids
    "quote": lambda text: text.startswith(b'"') and not text.strip(b'"]}'),  # `"`, `"}`, `"]}`
    "bracket": lambda text: not text.strip(b"]}"),
    "closer": lambda text: not text.strip(b'"]}'),
    "comma": lambda text: not text.strip(b'"]},'),
}
ORDERS = {"free": ("end", "quote", "bracket", "comma"), "structure": ("end", "bracket", "closer", "comma")}


def closing_classes(engine: LLTokenizer, vocab: int, ends: list[int]) -> dict[str, torch.Tensor]:
    """(V,) bool masks of CLASSES's tokens (special tokens in none but the ends). Cached per tokenizer."""
    key = (id(engine), vocab)
    if key not in _CLASSES:
        classes = {name: torch.zeros(vocab, dtype=torch.bool) for name in CLASSES}
        classes["end"][ends] = True
        for token in range(engine.vocab_size):
            text = engine.decode_bytes([token]).strip()
            if text and not engine.is_special_token(token):
                for name, test in CLASSES.items():
                    classes[name][token] = test is not None and test(text)
        _CLASSES[key] = classes
    return _CLASSES[key]


def closers(allowed: torch.Tensor, classes: dict[str, torch.Tensor]) -> torch.Tensor:
    """The allowed tokens (V,) of the first closing class, in the order for where the grammar is
    (free text or structure), that it allows; all of `allowed` when it allows none."""
    for name in ORDERS["free" if int(allowed.sum()) > FREE_TEXT else "structure"]:
        narrowed = allowed & classes[name]
        if bool(narrowed.any()):
            return narrowed
    return allowed


class GrammarConstraint:
    """A grammar over a model's tokens, for one denoise() call (dcode.constrained.Constraint): the
    answer's committed prefix, fed left to right. vocab: at least this many ids (the model's
    logits may be wider than its tokenizer; dcode.constrained.mask_logits fits the mask to them);
    ends: the ids that end the answer (EOS and padding), allowed where the grammar may stop."""

    def __init__(self, grammar: Grammar, tokenizer: Any, vocab: int, ends: list[int]) -> None:
        from llguidance import LLMatcher

        self.grammar = grammar
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

    def begin(self, room: int) -> None:
        self.closed = False

    def closing(self, room: int) -> bool:
        """Whether the answer, with `room` positions left, is short of room: the frontier then
        closes (for good: the answer is being finished). Decided at each position from the
        grammar's state there (a fork, a verify row's, decides its own), so the verify rule closes
        where a one-token-per-pass loop would, however many tokens its passes commit."""
        if not self.closed and not self.ended and room <= CLOSE_WATCH:
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
            allowed[self.ends] = False
            if not bool(allowed.any()):
                break
            fork.consume_token(int(closers(allowed, self.classes).nonzero()[0]))
            steps += 1
        return steps + 1 + (0 if fork.is_accepting() else limit)  # and the end token

    def allowed(self, room: int | None = None) -> torch.Tensor:
        """(V,) bool: the tokens the grammar allows next (the end ids where it may stop); with
        `room` positions left and closing(room), only those of the first closing class it allows."""
        out = self.grammar_mask()
        return closers(out, self.classes) if room is not None and self.closing(room) else out

    def grammar_mask(self) -> torch.Tensor:
        """(V,) bool: the grammar's own mask, the end ids allowed only where it may stop."""
        self.masks += 1
        if self.matcher.is_error():  # a bug, not a bad answer: said, never a pass that commits nothing
            raise RuntimeError(f"the grammar engine failed: {clean(self.matcher.get_error())}")
        if self.ended:
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
            elif not 0 <= token < self.vocab or not self.matcher.try_consume_tokens([token]):
                break  # (an id past the tokenizer's, from a wider output head, would be an engine error)
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
        return twin

    @property
    def kind(self) -> str:
        return self.grammar.kind

    @property
    def finished(self) -> bool:
        """Nothing more may be written but an end: the grammar accepts and stops, or an end was written."""
        return self.ended or (self.matcher.is_accepting() and self.matcher.is_stopped())

    @property
    def complete(self) -> bool:
        """The committed text is a whole sentence of the grammar (the answer may end here)."""
        return self.ended or self.matcher.is_accepting()
