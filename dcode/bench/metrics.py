"""The one set of answer metrics every benchmark reports, pure and torch-free.

- real code: Python of at least two non-blank lines that compile() accepts (dcode.syntax.is_real_code;
  an empty answer compiles but is no answer);
- key words: the request's content words (3+ letters, not STOP_WORDS) found in the answer's words
  (identifiers split at underscores and camelCase humps, comments, docstrings), matched on their
  first five letters; an answer "has the key words" when at least half of them are there;
- tokens per forward pass, rows per pass (the canvases one pass feeds side by side: the verify
  rule's drafts), tok/s over the sampling time.

Tally adds up answers and gives every benchmark's row the same keys. Knows nothing about models.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dcode.syntax import is_real_code

__all__ = ["STOP_WORDS", "Tally", "has_key_words", "is_real_code", "key_word_share", "words"]

# Words of a request that say nothing about what to write.
STOP_WORDS = frozenset(
    {"a", "an", "the", "that", "this", "these", "with", "without", "and", "or", "of", "to", "in", "into"}
    | {"for", "from", "on", "by", "as", "is", "are", "be", "it", "its", "one", "two", "each", "every", "all"}
    | {"any", "function", "class", "method", "which", "when", "where", "while", "than", "then", "returns"}
    | {"return", "given", "using", "use", "python"}
)
KEY_WORDS_NEEDED = 0.5  # share of the request's content words an answer must mention


def words(text: str) -> set[str]:
    """Lower-case words of text, identifiers split at underscores and camelCase humps.
    Example: words("mergeSorted_lists") == {"merge", "sorted", "lists"}."""
    return {w.lower() for w in re.findall(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])", text)}


def key_word_share(prompt: str, code: str) -> float:
    """Share of the prompt's content words found in the code's words, matching on the first five
    letters (sort ~ sorted); 1.0 for a prompt without content words.
    Example: key_word_share("merge two sorted lists", "def merge_sorted(a): ...") -> 2/3."""
    wanted = {w for w in words(prompt) if len(w) >= 3 and w not in STOP_WORDS}
    if not wanted:
        return 1.0
    have = {w[:5] for w in words(code)}
    return sum(w[:5] in have for w in wanted) / len(wanted)


def has_key_words(prompt: str, code: str) -> bool:
    """Whether the answer mentions at least half of the request's content words."""
    return key_word_share(prompt, code) >= KEY_WORDS_NEEDED


@dataclass
class Tally:
    """Answers added up: counts while adding, rates in summary()."""

    prompts: int = 0
    forward_passes: int = 0
    rows: int = 0  # canvases fed, summed over the passes (one per pass but for verify)
    tokens: int = 0  # answer tokens (up to the first end token)
    seconds: float = 0.0  # sampling time
    real_code: int = 0
    key_words: int = 0
    edits: int = 0  # tokens token editing rewrote (SamplerConfig.edit_threshold)

    def add(
        self, prompt: str, code: str, forward: int, tokens: int, seconds: float, rows: int | None = None, edits: int = 0
    ) -> None:
        """One answer: `code` for `prompt`, written in `forward` passes feeding `rows` canvases,
        `edits` of its tokens rewritten."""
        self.prompts += 1
        self.edits += edits
        self.forward_passes += forward
        self.rows += forward if rows is None else rows
        self.tokens += tokens
        self.seconds += seconds
        self.real_code += is_real_code(code)
        self.key_words += has_key_words(prompt, code)

    def summary(self) -> dict[str, float]:
        """The row every benchmark reports: totals over the prompts, rates per prompt."""
        n = max(1, self.prompts)
        return {
            "prompts": self.prompts,
            "forward_passes": self.forward_passes,
            "rows_per_pass": self.rows / max(1, self.forward_passes),
            "tokens": self.tokens,
            "tokens_per_forward": self.tokens / max(1, self.forward_passes),
            "tokens_per_second": self.tokens / self.seconds if self.seconds else 0.0,
            "wall_seconds": self.seconds,
            "real_code_rate": self.real_code / n,
            "key_words_rate": self.key_words / n,
            "edits": self.edits,
        }
