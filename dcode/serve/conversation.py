"""A chat request's whole conversation -> the prompt's token ids, cut from its oldest turns to fit.

Owns: the messages through the model's prompt template (the last user message is the request, as
in `dcode new`) and its chat template (every turn: system, user, assistant, tool); the bound on
characters that refuses a text no cut could make fit before any of it is tokenized; and the cut:
whole turns (a user message and the replies after it), oldest first, never a system message nor
the last user turn, until the prompt leaves room for the answer. A chat template with no place for
earlier turns (dcode-tiny's reads the last message only) gets the earlier user, assistant and tool
messages as context before the request; its prompt template stands in for a system message.
Knows nothing about HTTP or the sampler; runs off the event loop (tokenizing takes a while).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dcode.localfill import request_text
from dcode.models.base import Denoiser
from dcode.models.chat import render
from dcode.serve import toolchat
from dcode.serve.jobs import BadRequest
from dcode.serve.shaping import Shape

Message = tuple[str, str]  # (role, text)
# A normaliser may compose characters (NFC: "e" + U+0301 -> "é"), so a text can hold up to this many
# times the characters its tokens spell out; the character bound allows for it.
COMPOSED = 2


@dataclass(frozen=True)
class Prompt:
    ids: list[int]  # the prompt's token ids, templated
    dropped: int  # messages of earlier turns left out to fit the context
    dropped_tokens: int  # tokens those took (0 when cut by characters before tokenizing)

    def warning(self, context: int) -> str | None:
        """What the response says when the oldest turns were cut to fit `context` tokens."""
        if not self.dropped:
            return None
        tokens = f" ({self.dropped_tokens} tokens)" if self.dropped_tokens else ""
        return (
            f"the conversation did not fit the model's context of {context} tokens: "
            f"its {self.dropped} oldest messages{tokens} were left out"
        )


def longest_token(tokenizer: Any) -> int | None:
    """Characters of the tokenizer's longest token (a bound on what one token spells), or None
    when it lists no vocabulary."""
    cached = getattr(tokenizer, "_dcode_longest_token", None)
    if cached is None:
        try:
            cached = max((len(token) for token in tokenizer.get_vocab()), default=0) or None
        except (AttributeError, NotImplementedError):
            return None
        tokenizer._dcode_longest_token = cached
    return int(cached) if cached else None


def character_bound(model: Denoiser) -> int | None:
    """The most characters a prompt that fits the context can hold (None: no bound known)."""
    longest = longest_token(model.tokenizer)
    return None if longest is None else model.facts.max_length * longest * COMPOSED


def refuse_too_long(chars: int, bound: int | None, context: int, param: str) -> None:
    if bound is not None and chars > bound:
        raise BadRequest(
            f"the prompt's {chars} characters cannot fit the model's context of {context} tokens "
            f"(at most {bound} characters could)",
            param,
            code="context_length_exceeded",
        )


def last_user(messages: Sequence[Message]) -> int:
    """Where the last user message is (the request)."""
    return max(i for i, (role, _) in enumerate(messages) if role == "user")


def turns(messages: Sequence[Message]) -> tuple[list[Message], list[list[Message]], list[Message]]:
    """(leading system messages, the earlier turns, the last turn: the last user message and what
    follows it). A turn is a user message and the messages after it up to the next user message."""
    last = last_user(messages)
    head = 0
    while messages[head][0] == "system" and head < last:
        head += 1
    earlier: list[list[Message]] = []
    for message in messages[head:last]:
        if message[0] == "user" or not earlier:
            earlier.append([])
        earlier[-1].append(message)
    return list(messages[:head]), earlier, list(messages[last:])


def rendered(model: Denoiser, messages: Sequence[Message], language: str, shape: Shape | None = None) -> str:
    """The conversation as the model reads it: the last user message in the prompt template, every
    message in the chat template; when the template has no place for the earlier ones (or there is
    no chat template), the texts of the earlier non-system messages as context before the request.
    A shaped request (response_format, tools) is rendered as written, with its tools: dcode.serve.toolchat."""
    if shape is not None and shape.structured:
        return toolchat.rendered(model, messages, shape)
    last = last_user(messages)
    chat = [{"role": role, "content": text} for role, text in messages]
    chat[last]["content"] = request_text(model, messages[last][1], language)
    tokenizer = model.tokenizer
    context = "\n\n".join(m["content"] for m in chat[:last] if m["content"].strip() and m["role"] != "system")
    request = f"{context}\n\n{chat[last]['content']}" if context else chat[last]["content"]
    if not getattr(tokenizer, "chat_template", None):
        return "\n\n".join([request, *(m["content"] for m in chat[last + 1 :] if m["content"].strip())])
    whole, alone = render(model, chat), render(model, chat[last:])
    if whole != alone or last == 0:
        return whole
    return render(model, [{"role": "user", "content": request}, *chat[last + 1 :]])


def encoded(model: Denoiser, messages: Sequence[Message], language: str, shape: Shape | None = None) -> list[int]:
    try:
        text = rendered(model, messages, language, shape)
    except Exception as error:  # a chat template's own refusal (jinja2's errors, raise_exception)
        # a shaped request's template refused what dcode adds for its shape (a system message) or its tools
        param = "messages" if shape is None or not shape.structured else "tools" if shape.tools else "response_format"
        raise BadRequest(f"the model's chat template refused the messages: {error}", param) from None
    return list(model.tokenizer.encode(text, add_special_tokens=False))


def flat(system: list[Message], earlier: list[list[Message]], last: list[Message]) -> list[Message]:
    return [*system, *(m for turn in earlier for m in turn), *last]


def prompt_ids(
    model: Denoiser, messages: Sequence[Message], language: str, answer: int, shape: Shape | None = None
) -> Prompt:
    """The prompt for the conversation, leaving `answer` positions free in the model's context:
    the oldest turns cut first (by characters before tokenizing, then by tokens; fewest cut, found
    by bisection). A prompt that does not fit even then is returned whole: the caller refuses it."""
    system, earlier, last = turns(messages)
    context, bound = model.facts.max_length, character_bound(model)
    size = [sum(len(text) for _, text in turn) for turn in earlier]
    fixed = sum(len(text) for _, text in system + last)
    refuse_too_long(fixed, bound, context, "messages")
    cut = 0
    while bound is not None and cut < len(earlier) and fixed + sum(size[cut:]) > bound:
        cut += 1  # the characters alone say these cannot fit
    ids = encoded(model, flat(system, earlier[cut:], last), language, shape)
    if len(ids) + answer <= context or cut == len(earlier):
        return Prompt(ids, sum(len(t) for t in earlier[:cut]), 0)
    low, high = cut + 1, len(earlier)  # the fewest turns to cut is in [low, high]
    fitting: list[int] | None = None
    best = len(earlier)
    while low <= high:
        middle = (low + high) // 2
        trial = encoded(model, flat(system, earlier[middle:], last), language, shape)
        if len(trial) + answer <= context:
            high, fitting, best = middle - 1, trial, middle
        else:
            low = middle + 1
    if fitting is None:
        fitting = encoded(model, flat(system, [], last), language, shape)
    return Prompt(fitting, sum(len(t) for t in earlier[:best]), len(ids) - len(fitting))
