"""The repair pass: syntax issues -> token positions to re-mask -> the same sampler, round by round.

Owns: mapping tokens to byte spans of the text, snapping each round's spans to tokens, building
the re-masked canvas and trying a round again with sampled seeds. Which bytes a round re-masks
and how new text is spliced back is dcode.spans' job, checking dcode.syntax's, judging a fill
(deleted code, unblamed lines, lines the fix did not need) dcode.fixes', and sampling
dcode.sampler's; this module only decides which positions to re-mask and consumes denoise().
Knows nothing about prompt templates, files or the terminal."""

from __future__ import annotations

import re
import time
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass, replace
from itertools import accumulate
from typing import Any

import torch

from dcode.config import REPAIR_TRIES, SamplerConfig
from dcode.events import Repaired, RepairRound, Span, Started, Step
from dcode.fixes import judge
from dcode.linediff import newline_of
from dcode.models.base import Denoiser, ModelFacts
from dcode.sampler import denoise
from dcode.spans import Origin, widen
from dcode.syntax import (
    Issue,
    UnknownLanguage,
    compile_issue,
    find_issues,
    language_of,
    line_span,
    line_start,
    normalize_language,
)

# A round's later tries sample at this temperature (its first try uses the configured sampler,
# greedy by default): the same masks refilled greedily would only give the same text again. They
# may not write the tokens the checker blamed either (culprits()).
# Measured (benchmarks/repair.py): certainty-forced dcode-tiny weights are so sure of their own
# text that 0.8 refills much of it unchanged (76% -> 92% valid, +88% time) where 1.2 gives
# 76% -> 100% at +51%.
RETRY_TEMPERATURE = 1.2
# ...except left to right (the verify rule), where every position of the span is sampled in turn
# and 1.2 derails it. Measured (benchmarks/repair.py --seeds 8, distilled dcode-tiny weights): 76% -> 96.5%
# valid at +236% time at 1.2, 76% -> 100% at +70% at 0.8.
LEFT_TO_RIGHT_RETRY_TEMPERATURE = 0.8


# ---------------------------------------------------------------------------------------------
# Tokens <-> bytes


def byte_offsets(text: str, char_offsets: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Character offsets (as fast tokenizers report them) -> byte offsets into text.encode().
    Example: byte_offsets("é!", [(0, 1), (1, 2)]) -> [(0, 2), (2, 3)]."""
    if text.isascii():
        return [(a, b) for a, b in char_offsets]
    at = [0, *accumulate(len(c.encode()) for c in text)]  # at[i] = byte offset of character i
    return [(at[a], at[b]) for a, b in char_offsets]


def tokenize(tokenizer: Any, text: str) -> tuple[list[int], list[tuple[int, int]]]:
    """Token ids of text (no special tokens) and each token's byte span."""
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    return list(encoded["input_ids"]), byte_offsets(text, encoded["offset_mapping"])


def tokens_for_span(offsets: Sequence[tuple[int, int]], start_byte: int, end_byte: int) -> list[int]:
    """Indices of the tokens overlapping [start_byte, end_byte) (an empty span: the token holding it),
    closed over tokens that share a character: byte-level tokens that split one character all carry
    that character's span, so the hit tokens decode to exactly the bytes they cover together.
    Example: " ✓" as [(0, 4), (1, 4), (1, 4)] (space + first byte, then one byte each), span (0, 1) -> [0, 1, 2]."""
    lo, hi = start_byte, max(end_byte, start_byte + 1)
    hit = [i for i, (a, b) in enumerate(offsets) if a < hi and b > lo]
    if not hit:
        return []
    first, last = hit[0], hit[-1]
    lo, hi = min(lo, offsets[first][0]), max(hi, offsets[last][1])
    while first > 0 and offsets[first - 1][1] > lo:  # an earlier token holds part of the first character
        first -= 1
        lo = min(lo, offsets[first][0])
    while last + 1 < len(offsets) and offsets[last + 1][0] < hi:
        last += 1
        hi = max(hi, offsets[last][1])
    return list(range(first, last + 1))


# ---------------------------------------------------------------------------------------------
# Spans (widened by dcode.spans) -> tokens


def snap(offsets: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int, str]]) -> list[Span]:
    """Snap byte spans to whole tokens and merge those that overlap or touch, in text order."""
    ranges = []
    for start, end, reason in spans:
        hit = tokens_for_span(offsets, start, end)
        if hit:
            ranges.append((hit[0], hit[-1] + 1, reason))
    merged: list[tuple[int, int, list[str]]] = []
    for first, end, reason in sorted(ranges):
        if merged and first <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]), merged[-1][2] + [reason])
        else:
            merged.append((first, end, [reason]))
    # Token offsets run in text order, so a range's bytes run from its first start to its last end.
    return [Span(offsets[a][0], offsets[b - 1][1], (a, b), "; ".join(dict.fromkeys(why))) for a, b, why in merged]


# ---------------------------------------------------------------------------------------------
# Canvas


def room(tokens: int) -> int:
    """Extra masks after a span, so a fix may be longer than what it replaces: max(2, 25%)."""
    return max(2, -(-tokens // 4))


def remasked_canvas(
    prompt_ids: Sequence[int], ids: Sequence[int], spans: Sequence[Span], mask_id: int
) -> tuple[torch.Tensor, list[tuple[int, int]]]:
    """prompt + code ids with each span's tokens replaced by masks (plus room). Returns the canvas
    (L,) and each span's [start, end) canvas positions."""
    answer: list[int] = []
    regions = []
    kept = 0
    for span in spans:
        first, end = span.tokens
        answer += ids[kept:first]
        at = len(prompt_ids) + len(answer)
        answer += [mask_id] * (end - first + room(end - first))
        regions.append((at, len(prompt_ids) + len(answer)))
        kept = end
    answer += ids[kept:]
    return torch.tensor([*prompt_ids, *answer], dtype=torch.long), regions


# ---------------------------------------------------------------------------------------------
# The loop


@dataclass(frozen=True)
class Canvas:
    """One canvas of a repair try: the prompt, code around some spans, their masks."""

    ids: torch.Tensor  # (L,)
    regions: list[tuple[int, int]]  # canvas positions [start, end) of each span's masks
    spans: list[int]  # which of the round's spans, by index
    ends: list[bool]  # whether each span reaches the end of the text (a redrafted tail)


def canvases(
    prompt_ids: Sequence[int],
    ids: Sequence[int],
    offsets: Sequence[tuple[int, int]],
    data: bytes,
    spans: Sequence[Span],
    facts: ModelFacts,
) -> list[Canvas] | None:
    """The canvases a round fills: one holding the whole text when it fits the model's context;
    else one a span, each with a window of the nearest whole lines (dcode.window: before the span
    for a block-causal model, both sides otherwise). None when a span alone does not fit."""
    canvas, regions = remasked_canvas(prompt_ids, ids, spans, facts.mask_id)
    if len(canvas) <= facts.max_length:
        return [Canvas(canvas, regions, list(range(len(spans))), [s.tokens[1] == len(ids) for s in spans])]
    from bisect import bisect_left

    from dcode.window import choose

    starts = [a for a, _ in offsets]
    out = []
    for k, span in enumerate(spans):
        first, end = span.tokens
        space = facts.max_length - len(prompt_ids) - (end - first + room(end - first))
        if space < 0:
            return None
        window = choose(data, (offsets[first][0], offsets[end - 1][1]), starts, space, facts.block is None)
        lo, hi = bisect_left(starts, window.before[0]), bisect_left(starts, max(window.after[1], offsets[end - 1][1]))
        hi = max(hi, end)
        local = replace(span, tokens=(first - lo, end - lo))
        canvas, regions = remasked_canvas(prompt_ids, ids[lo:hi], [local], facts.mask_id)
        out.append(Canvas(canvas, regions, [k], [end == len(ids)]))
    return out


def fill(
    model: Denoiser,
    prompt_ids: Sequence[int],
    plan: Sequence[Canvas],
    run: SamplerConfig,
    ban: Sequence[int],
    round_attempt: tuple[int, int],
) -> Generator[Started | Step, None, tuple[list[str], int]]:
    """One try (round, attempt): the same sampler fills every canvas's masks. Yields a Started and
    the steps per canvas; returns each span's new text (end, pad and mask tokens dropped) and the
    forward passes."""
    facts = model.facts
    drop = facts.eos_ids | {facts.pad_id, facts.mask_id}
    texts: dict[int, str] = {}
    forward = 0
    for canvas in plan:
        masks = torch.zeros(len(canvas.ids), dtype=torch.bool)  # explicit, as the placeholder may be a real token
        for a, b in canvas.regions:
            masks[a:b] = True
        number, attempt = round_attempt
        yield Started((len(prompt_ids), len(canvas.ids)), tuple(canvas.regions), repair_round=number, attempt=attempt)
        last: Step | None = None
        for last in denoise(model, canvas.ids, len(prompt_ids), run, fill=masks, ban=ban):
            yield last
        assert last is not None  # every span holds at least room(0) = 2 masks
        forward += last.forward
        for k, (a, b), end in zip(canvas.spans, canvas.regions, canvas.ends, strict=True):
            texts[k] = fill_text(model, last.canvas[a:b].tolist(), drop, end)
    return [texts[k] for k in sorted(texts)], forward


def repair(
    model: Denoiser,
    prompt_ids: Sequence[int],
    code: str,
    language: str,
    config: SamplerConfig,
    rounds: int = 3,
    tries: int = REPAIR_TRIES,
    origin: Origin = "file",
) -> Iterator[Started | Step | RepairRound | Repaired]:
    """Re-mask the spans around code's syntax issues and let the sampler fill them again, widening
    the spans each round; each round fills its masks up to `tries` times until a result is kept.
    `origin` says who wrote code (see Origin): it decides what a round may change. Yields every
    try's Started and sampler Steps, a RepairRound after each try, then Repaired.

    Text outside the re-masked spans is copied byte for byte (new lines take the text's line
    ending); a round's result is kept only if it has fewer issues than the best so far. A text
    longer than the model's context is repaired span by span, each in a window of the lines
    around it. An unknown language (or a grammar that will not load) returns code untouched
    with a note.
    """
    began = time.perf_counter()
    try:
        issues = find_issues(code, language)
        name = normalize_language(language)
    except (UnknownLanguage, ImportError) as exc:
        yield Repaired(code, 0, 0, (), 0, 0, 0, 0, 0, time.perf_counter() - began, note=f"not checked: {exc}")
        return
    from tree_sitter import Parser

    facts = model.facts
    # A span in the middle of the file must not end it; and a fill should reuse the names around
    # it, which the repetition penalty (meant for runaway loops in a whole draft) would discourage.
    config = replace(config, stop_at_eos=False, repetition_penalty=1.0)
    best, best_issues = code, issues
    history: list[RepairRound] = []
    note = ""
    for number in range(1, rounds + 1):
        if not best_issues:
            break
        # 1) what to re-mask: each issue widened for this round, snapped to tokens, merged
        data = best.encode()
        ids, offsets = tokenize(model.tokenizer, best)
        root = Parser(language_of(name)).parse(data).root_node
        hint = compile_issue(best, data) if name == "python" else None
        spans = snap(offsets, [widen(data, root, issue, number, hint, origin == "draft") for issue in best_issues])
        plan = canvases(prompt_ids, ids, offsets, data, spans, facts) if spans else None
        if plan is None:
            note = "nothing to re-mask" if not spans else f"round {number} needs more than {facts.max_length} tokens"
            break

        # 2) the same sampler fills the masks; a try that is not kept is tried again with the
        # next seed, sampled, as greedy refills of the same masks would repeat themselves
        # what the checker blames: later tries may not write those tokens again (see culprits)
        banned = culprits(data, ids, offsets, [hint] if hint is not None else best_issues)
        for attempt in range(1, tries + 1):
            run = config if attempt == 1 and not replays(facts, origin) else retry(config, attempt)
            ban = banned if attempt > 1 else ()
            texts, forward = yield from fill(model, prompt_ids, plan, run, ban, (number, attempt))
            texts = [in_line_endings(t, newline_of(best)) for t in texts]

            # 3) splice the new spans into the old text, check again, put back lines the fix did not need
            where = [(s.start_byte, s.end_byte) for s in spans]
            candidate, found, kept, restored = judge(best, best_issues, where, texts, language, origin, hint)
            history.append(
                RepairRound(
                    round=number,
                    attempt=attempt,
                    issues=tuple(best_issues),
                    spans=tuple(spans),
                    tokens=sum(b - a for a, b in (s.tokens for s in spans)),
                    masks=sum(b - a for c in plan for a, b in c.regions),
                    forward=forward,
                    issues_after=len(found),
                    kept=kept,
                    restored=restored,
                )
            )
            yield history[-1]
            if kept:
                best, best_issues = candidate, found
                break
    yield Repaired(
        code=best,
        issues_before=len(issues),
        issues_after=len(best_issues),
        issues=tuple(best_issues),
        rounds=len({r.round for r in history}),
        attempts=len(history),
        spans=sum(len(r.spans) for r in history),
        tokens=sum(r.tokens for r in history),
        forward=sum(r.forward for r in history),
        seconds=time.perf_counter() - began,
        note=note,
    )


def in_line_endings(text: str, newline: str) -> str:
    """text with its bare line feeds as `newline` (a fill in a CRLF file gets CRLF lines)."""
    return text if newline == "\n" else re.sub(r"(?<!\r)\n", newline, text)


def culprits(data: bytes, ids: Sequence[int], offsets: Sequence[tuple[int, int]], issues: Sequence[Issue]) -> list[int]:
    """Ids of the tokens at the points the checker blames (an issue's line and column), leaving out
    whitespace. A round's later tries may not write them: confident weights otherwise sample the
    same wrong token again at any temperature, as the threshold rule commits only what they are
    sure of (measured, benchmarks/repair.py over 8 seeds: drafts of 200 left broken went 6 -> 3
    and 5 -> 0 with two distilled dcode-tiny weights).
    Example: "class 2D(object):" blamed at column 7 ('2') -> the id of the token holding "2"."""
    found: set[int] = set()
    for issue in issues:
        first = line_start(data, issue.line)
        text = data[first : line_span(data, first)[1]].decode(errors="replace")
        point = first + len(text[: issue.column - 1].encode())
        found.update(ids[i] for i in tokens_for_span(offsets, point, point + 1) if data[slice(*offsets[i])].strip())
    return sorted(found)


def replays(facts: ModelFacts, origin: Origin) -> bool:
    """Whether a greedy fill would replay what the model wrote: a block-causal model fills a region
    of its own draft or edit from the blocks before it, the context it wrote it from, so it would
    write the same text again; its tries are all sampled. (A full-attention model reads both sides
    of a region, and a user's file was not written by the model: greedy first.)"""
    return facts.block is not None and origin != "file"


def fill_text(model: Denoiser, ids: list[int], drop: set[int] | frozenset[int], last: bool) -> str:
    """A region's new text: end, pad and mask tokens dropped; a region at the end of the canvas
    (a redrafted tail) ends at its first end token, like a draft."""
    if last:
        ends = [i for i, t in enumerate(ids) if t in model.facts.eos_ids]
        ids = ids[: ends[0]] if ends else ids
    return str(model.tokenizer.decode([t for t in ids if t not in drop]))


def retry(config: SamplerConfig, attempt: int) -> SamplerConfig:
    """The sampler for a round's later tries: sampled (at least RETRY_TEMPERATURE, or
    LEFT_TO_RIGHT_RETRY_TEMPERATURE for the verify rule), with its own seed."""
    least = LEFT_TO_RIGHT_RETRY_TEMPERATURE if config.rule == "verify" else RETRY_TEMPERATURE
    return replace(config, temperature=max(config.temperature, least), seed=config.seed + attempt - 1)
