"""The local filler: a diffusion model and the one sampler (dcode.sampler.denoise) filling masks on
a token canvas, for the flows of dcode.flows (new, edit, repair, complete). A caller runs a flow
with it: `flows.new(LocalFiller(model, config), request, language, length)`.

Owns: turning a request into a canvas (prompt template, chat template, masks, and the text after
them when a server's completion has a suffix), an edit's canvas (the region's masks between the
context a window keeps), a repair round's re-masked canvases (dcode.repair), decoding what the
sampler wrote, and the counters a report needs. Every canvas's room is checked by
dcode.flows.check_room. Knows nothing about argv, the environment or the terminal.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from typing import TYPE_CHECKING

import torch

from dcode.config import SamplerConfig
from dcode.events import Event, Span, Started, Step, Unit
from dcode.filler import Draft, Fills, Identity, Plan, Reading, Region
from dcode.flows import InputError, check_room
from dcode.merge import TooLong, regions
from dcode.models import chat
from dcode.models.base import Denoiser, ModelFacts
from dcode.repair import Refill, culprits, fill, refills, replays, retry, snap, tokenize
from dcode.sampler import denoise, trim_answer
from dcode.spans import Origin
from dcode.syntax import Issue, normalize_language
from dcode.window import Window, choose, narrower

if TYPE_CHECKING:
    from dcode.constrain import Grammar
    from dcode.grammar_tokens import GrammarConstraint


def template(name: str) -> str:
    """A prompt template shipped in dcode/prompts (the repo's top-level prompts/ folder, which an
    installed package maps there; a checkout run without installing, as on a lent GPU machine, reads
    the folder itself)."""
    try:
        folder = resources.files("dcode.prompts")
    except ModuleNotFoundError:
        folder = resources.files("dcode").joinpath("..", "prompts")
    return folder.joinpath(f"{name}.txt").read_text(encoding="utf-8")


def request_text(model: Denoiser, request: str, language: str) -> str:
    """The request in the model's prompt template (dcode/prompts)."""
    return template(model.facts.prompt).format(request=request.strip(), language=language).strip()


def prompt_ids(model: Denoiser, request: str, language: str) -> list[int]:
    """The request in the model's prompt template and chat template, as token ids."""
    text = request_text(model, request, language)
    tokenizer = model.tokenizer
    if getattr(tokenizer, "chat_template", None):
        text = chat.render(model, [{"role": "user", "content": text}])
    return list(tokenizer.encode(text, add_special_tokens=False))


def decode(model: Denoiser, ids: list[int]) -> str:
    return str(model.tokenizer.decode(ids, skip_special_tokens=False))


def answer_ids(facts: ModelFacts, ids: list[int], middle: bool) -> list[int]:
    """The answer's token ids of a canvas's answer region `ids`: a middle's (text follows it on
    the canvas) without end, pad or mask tokens; a whole answer's up to its first end token,
    without pad or mask ones (sampler.trim_answer)."""
    drop = frozenset({facts.pad_id, facts.mask_id})
    if middle:
        return [t for t in ids if t not in drop | facts.eos_ids]
    return trim_answer(torch.tensor(ids, dtype=torch.long), facts.eos_ids, drop)


def answer_text(model: Denoiser, canvas: torch.Tensor, start: int) -> tuple[str, int]:
    """Decoded answer and its token count: up to the first end token, pads and masks dropped."""
    ids = answer_ids(model.facts, canvas[start:].tolist(), middle=False)
    return decode(model, ids), len(ids)


def masked(before: list[int], length: int, after: list[int], mask_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The canvas every local fill samples on: `before`, `length` masks, `after` (L,), and which
    positions the sampler fills (L,) bool: the masks, marked explicitly (a uniform-noise model's
    placeholder is a real token). Example: masked([7], 2, [9], 0) -> [7, 0, 0, 9], [F, T, T, F]."""
    canvas = torch.tensor(before + [mask_id] * length + after, dtype=torch.long)
    masks = torch.zeros(len(canvas), dtype=torch.bool)
    masks[len(before) : len(before) + length] = True
    return canvas, masks


def check_length(model: Denoiser, prompt_tokens: int, length: int) -> None:
    """InputError unless `length` masks fit beside the prompt in the model's context."""
    check_room(prompt_tokens, length, model.facts.max_length)


def edit_budget(region_tokens: int) -> int:
    """Masks for a region of n tokens: n plus max(16, 50%) of room, so an edit may add lines.
    Example: edit_budget(10) -> 26; edit_budget(100) -> 150."""
    return region_tokens + max(16, -(-region_tokens // 2))


class Sizer:
    """dcode.merge.Sizer on a model: a region's masks for its text or the new text, whichever is
    longer, plus room to grow (edit_budget), within the context beside the instruction's prompt and
    at most `max_tokens` (a server's max_tokens, `dcode edit --length`)."""

    def __init__(self, model: Denoiser, language: str, max_tokens: int | None) -> None:
        self.model, self.language, self.max_tokens = model, language, max_tokens
        self.limit = model.facts.max_length

    def tokens(self, text: str) -> int:
        return len(self.model.tokenizer.encode(text, add_special_tokens=False)) if text else 0

    def region(self, source: str, start: int, end: int, instruction: str, new: str = "") -> Region | None:
        need = max(self.tokens(source.encode()[start:end].decode()), self.tokens(new), 1)
        prompt = len(prompt_ids(self.model, instruction, self.language))
        length = min(edit_budget(need), self.limit - prompt)
        if self.max_tokens is not None:
            length = min(length, self.max_tokens)
        if length < min(need, self.max_tokens or need):
            return None
        return Region(start, end, instruction, length)

    def too_long(self, what: str) -> TooLong:
        return TooLong(f"{what} does not fit the model's context of {self.limit} tokens with room to rewrite it")


@dataclass(frozen=True)
class EditLayout:
    """An edit's canvas, laid out: prompt, the context the window keeps before the region, the
    region's masks, the context after it (masked() builds it)."""

    before: list[int]  # the prompt and the context before the region
    after: list[int]  # the context after the region
    budget: int  # masks: the region's room
    region_tokens: int  # tokens of the region before the edit
    context_tokens: int  # tokens of the file around the region on the canvas
    window: Window

    @property
    def start(self) -> int:
        """The first mask's position."""
        return len(self.before)


def region_budget(prompt: int, region: int, length: int | None, limit: int, where: str) -> int:
    """Masks for a region of `region` tokens: --length, else edit_budget() cut to what fits beside
    the prompt; InputError (naming the model's context) when the region itself cannot fit."""
    if length is not None:
        check_room(prompt, length, limit)
        return length
    budget = min(edit_budget(region), limit - prompt)  # less room rather than no edit
    if budget < max(1, region):
        raise InputError(
            f"{where} is {region} tokens; with the {prompt}-token prompt that exceeds the model's context "
            f"of {limit} tokens by {prompt + max(1, region) - limit} (select fewer lines)"
        )
    return budget


def edit_layout(
    model: Denoiser, data: bytes, region: tuple[int, int], ids: list[int], length: int | None, language: str, name: str
) -> EditLayout:
    """Lay out an edit's canvas. The whole file goes on it when it fits; otherwise a window of the
    nearest whole lines (dcode.window), so a file of any size can be edited a region at a time."""
    from dcode.edit import describe

    a, b = region
    facts = model.facts

    def encode(text: bytes) -> list[int]:
        return list(model.tokenizer.encode(text.decode(), add_special_tokens=False)) if text else []

    body = encode(data[a:b])
    where = f"the region ({describe(data.decode(), region)} of {name})" if (a, b) != (0, len(data)) else name
    budget = region_budget(len(ids), len(body), length, facts.max_length, where)
    room = facts.max_length - len(ids) - budget
    head, tail = encode(data[:a]), encode(data[b:])
    window = Window((0, a), (b, len(data)))
    if len(head) + len(tail) > room:
        starts = [start for start, _ in tokenize(model.tokenizer, data.decode())[1]]
        window = choose(data, region, starts, room, facts.block is None, normalize_language(language))
        while True:
            head = encode(b"".join(data[s:e] for s, e in window.imports)) + encode(data[slice(*window.before)])
            tail = encode(data[slice(*window.after)])
            if len(head) + len(tail) <= room:
                break
            narrowed = narrower(window, data)  # the estimate from the whole file's tokens was short
            assert narrowed is not None, "a window without context always fits"
            window = narrowed
    return EditLayout(ids + head, tail, budget, len(body), len(head) + len(tail), window)


# ---------------------------------------------------------------------------------------------
# The filler


@dataclass(frozen=True)
class TokenPlan:
    """A repair round's spans snapped to whole tokens, on the canvases the sampler fills."""

    spans: tuple[Span, ...]
    prompt: list[int]  # the request's token ids, at the head of every canvas
    refills: list[Refill]
    ban: list[int]  # token ids a later try may not write (dcode.repair.culprits)


@dataclass
class LocalFiller:
    """dcode.filler.Filler over a local model: every fill is the sampler on a canvas of tokens.
    `prompt` (token ids) replaces the request's template when given (a served conversation, tests,
    benchmarks); `suffix` (token ids) follows a draft's masks (a server's fill in the middle: the
    answer is a middle, end tokens dropped wherever they are); a draft's first `least` answer
    positions hold no end token (a server's min_tokens or ignore_eos); `grammar`: what a draft's
    answer follows (dcode.constrain: its commits are constrained, so it parses by construction and
    is not repaired; Draft.extra["grammar"] says whether it completed or ran out of room)."""

    denoiser: Denoiser
    config: SamplerConfig
    prompt: list[int] | None = None
    suffix: list[int] = field(default_factory=list)
    unit: Unit = "pass"
    least: int = 0
    grammar: Grammar | None = None
    _prompts: dict[tuple[str, str], list[int]] = field(default_factory=dict)

    @property
    def model(self) -> str:
        return self.denoiser.facts.name

    @property
    def device(self) -> str:
        return str(self.denoiser.device.type)

    def identity(self) -> Identity:
        from dcode.dtypes import running_dtype
        from dcode.models.quantize import describe

        return Identity(self.model, self.device, running_dtype(self.denoiser), quantize=describe(self.denoiser))

    def reading(self) -> Reading:
        facts = self.denoiser.facts
        return Reading(self.denoiser.tokenizer, facts.mask_id, frozenset(facts.eos_ids | {facts.pad_id}))

    def prompt_for(self, request: str, language: str) -> list[int]:
        if self.prompt is not None:
            return self.prompt
        if (request, language) not in self._prompts:
            self._prompts[request, language] = prompt_ids(self.denoiser, request, language)
        return self._prompts[request, language]

    def draft(self, request: str, language: str, length: int, repair: bool) -> Generator[Event, None, Draft]:
        model = self.denoiser
        ids = self.prompt_for(request, language)
        check_length(model, len(ids) + len(self.suffix), length)
        canvas, masks = masked(ids, length, self.suffix, model.facts.mask_id)
        constraint = self.constraint()
        yield Started((len(ids), len(canvas)), ((len(ids), len(ids) + length),))
        began = time.perf_counter()
        # with a suffix the masks are a middle whose length the model chooses: once it writes an end
        # token the positions after it are padding (config.stop_at_eos), so a short middle takes the
        # passes it needs, not those of `length`
        steps = denoise(model, canvas, len(ids), self.config, masks=masks, least=self.least, constraint=constraint)
        last = yield from sampled(steps)
        kept = answer_ids(model.facts, last.canvas[len(ids) : len(ids) + length].tolist(), middle=bool(self.suffix))
        seconds = time.perf_counter() - began
        extra: dict[str, object] = {"edits": last.edits}
        if constraint is not None:
            extra |= {"grammar": "complete" if constraint.complete else "incomplete", "grammar_kind": constraint.kind}
        return Draft(
            decode(model, kept), len(ids) + len(self.suffix), len(kept), length, last.forward, seconds,
            extra=extra, checked=constraint is not None,
        )  # fmt: skip

    def constraint(self) -> GrammarConstraint | None:
        """The draft's grammar over this model's tokens (none without a grammar); a grammar
        constrains a whole answer, so not a middle before a suffix."""
        if self.grammar is None:
            return None
        if self.suffix:
            raise InputError("a grammar constrains a whole answer, not a middle before a suffix")
        from dcode.grammar_tokens import GrammarConstraint

        facts = self.denoiser.facts
        return GrammarConstraint(self.grammar, self.denoiser.tokenizer, 0, sorted(facts.eos_ids | {facts.pad_id}))

    def region(
        self, source: str, region: tuple[int, int], instruction: str, language: str, length: int | None, name: str
    ) -> Generator[Event, None, Draft]:
        model, data = self.denoiser, source.encode()
        ids = self.prompt_for(instruction, language)
        layout = edit_layout(model, data, region, ids, length, language, name)
        canvas, masks = masked(layout.before, layout.budget, layout.after, model.facts.mask_id)
        # the view shows the whole file; a region in the middle of the file must not end it
        yield Started((len(ids), len(canvas)), ((layout.start, layout.start + layout.budget),))
        began = time.perf_counter()
        run = replace(self.config, stop_at_eos=False)
        last = yield from sampled(denoise(model, canvas, layout.start, run, masks=masks))
        kept = answer_ids(model.facts, last.canvas[layout.start : layout.start + layout.budget].tolist(), middle=True)
        window = layout.window.metadata(data, layout.context_tokens)
        return Draft(
            decode(model, kept), len(ids), len(kept), layout.budget, last.forward, time.perf_counter() - began,
            context_tokens=layout.context_tokens, region_tokens=layout.region_tokens,
            extra={"window": window, "edits": last.edits},
        )  # fmt: skip

    def placed(
        self, source: str, region: tuple[int, int], snippet: str, language: str, length: int | None, name: str
    ) -> tuple[Region, ...]:
        return regions(source, region, snippet, Sizer(self.denoiser, language, length), name)

    def plan(
        self, text: str, spans: Sequence[tuple[int, int, str]], request: str, language: str, blamed: Sequence[Issue]
    ) -> TokenPlan | str:
        facts = self.denoiser.facts
        prompt = self.prompt_for(request, language)
        data = text.encode()
        ids, offsets = tokenize(self.denoiser.tokenizer, text)
        snapped = snap(offsets, spans)
        planned = refills(prompt, ids, offsets, data, snapped, facts) if snapped else None
        if planned is None:
            return "nothing to re-mask" if not snapped else f"a span needs more than {facts.max_length} tokens"
        return TokenPlan(tuple(snapped), prompt, planned, culprits(data, ids, offsets, blamed))

    def fill(self, plan: Plan, round_attempt: tuple[int, int], origin: Origin) -> Generator[Event, None, Fills]:
        # A span in the middle of the file must not end it; and a fill should reuse the names around
        # it, which the repetition penalty (meant for runaway loops in a whole draft) would discourage.
        config = replace(self.config, stop_at_eos=False, repetition_penalty=1.0)
        assert isinstance(plan, TokenPlan)
        attempt = round_attempt[1]
        # a try that is not kept is tried again with the next seed, sampled, as greedy refills of
        # the same masks would repeat themselves; later tries may not write what the checker blamed
        run = config if attempt == 1 and not replays(self.denoiser.facts, origin) else retry(config, attempt)
        ban = plan.ban if attempt > 1 else ()
        texts, forward = yield from fill(self.denoiser, plan.prompt, plan.refills, run, ban, round_attempt)
        tokens = sum(b - a for a, b in (s.tokens for s in plan.spans))
        return Fills(texts, forward, tokens, sum(b - a for c in plan.refills for a, b in c.regions))


def sampled(steps: Iterator[Step]) -> Generator[Step, None, Step]:
    """Pass the sampler's steps on and return the last."""
    last: Step | None = None
    for last in steps:
        yield last
    assert last is not None
    return last
