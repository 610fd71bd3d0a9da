"""The repair pass on a local model: a round's byte spans -> token positions to re-mask -> the sampler.

Owns: mapping tokens to byte spans of the text, snapping each round's spans to tokens, building
the re-masked canvases (windows of a file longer than the context), the tokens a later try may not
write, and the sampler settings of a round's later tries. The loop itself (rounds, tries, judging,
the records) is dcode.flows.repair's, the same for every filler; which bytes a round re-masks and
how new text is spliced back is dcode.spans' job, and sampling dcode.sampler's.
dcode.localfill.LocalFiller calls these. Knows nothing about prompt templates, files or the terminal."""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass, replace
from itertools import accumulate
from typing import Any

import torch

from dcode.config import SamplerConfig, retried
from dcode.events import Span, Started, Step
from dcode.models.base import Denoiser, ModelFacts
from dcode.sampler import denoise
from dcode.spans import Origin
from dcode.syntax import Issue, line_span, line_start

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
# Canvases


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
class Refill:
    """What one sampler run of a repair try fills: a canvas (the prompt, code around some spans,
    their masks) and where its masks are."""

    ids: torch.Tensor  # (L,)
    regions: list[tuple[int, int]]  # canvas positions [start, end) of each span's masks
    spans: list[int]  # which of the round's spans, by index
    ends: list[bool]  # whether each span reaches the end of the text (a redrafted tail)


def refills(
    prompt_ids: Sequence[int],
    ids: Sequence[int],
    offsets: Sequence[tuple[int, int]],
    data: bytes,
    spans: Sequence[Span],
    facts: ModelFacts,
) -> list[Refill] | None:
    """What a round fills: one canvas holding the whole text when it fits the model's context;
    else one a span, each with a window of the nearest whole lines (dcode.window: before the span
    for a block-causal model, both sides otherwise). None when a span alone does not fit."""
    canvas, regions = remasked_canvas(prompt_ids, ids, spans, facts.mask_id)
    if len(canvas) <= facts.max_length:
        return [Refill(canvas, regions, list(range(len(spans))), [s.tokens[1] == len(ids) for s in spans])]
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
        out.append(Refill(canvas, regions, [k], [end == len(ids)]))
    return out


def fill(
    model: Denoiser,
    prompt_ids: Sequence[int],
    refills: Sequence[Refill],
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
    for refill in refills:
        masks = torch.zeros(len(refill.ids), dtype=torch.bool)  # explicit, as the placeholder may be a real token
        for a, b in refill.regions:
            masks[a:b] = True
        number, attempt = round_attempt
        yield Started((len(prompt_ids), len(refill.ids)), tuple(refill.regions), repair_round=number, attempt=attempt)
        last: Step | None = None
        for last in denoise(model, refill.ids, len(prompt_ids), run, masks=masks, ban=ban):
            yield last
        assert last is not None  # every span holds at least room(0) = 2 masks
        forward += last.forward
        for k, (a, b), end in zip(refill.spans, refill.regions, refill.ends, strict=True):
            texts[k] = fill_text(model, last.canvas[a:b].tolist(), drop, end)
    return [texts[k] for k in sorted(texts)], forward


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
    """The sampler for a round's later tries (config.retried): the verify rule writes left to right."""
    temperature, seed = retried(config.temperature, config.seed, attempt, config.rule == "verify")
    return replace(config, temperature=temperature, seed=seed)
