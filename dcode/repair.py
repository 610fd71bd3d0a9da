"""The repair pass: syntax issues -> token positions to re-mask -> the same sampler, round by round.

Owns: mapping tokens to byte spans of the text, widening an issue's span per round (its focus
line, the enclosing statement and the line before, the enclosing block, or for a draft the rest of
it), building the re-masked canvas, trying a round again with sampled seeds, and splicing the
regenerated spans back into the text. Checking is dcode.syntax's job, judging a fill (deleted code,
unblamed lines, lines the fix did not need) dcode.fixes', and sampling dcode.sampler's; this module
only decides which positions to re-mask and consumes denoise(). Knows nothing about prompt
templates, files or the terminal."""

from __future__ import annotations

import re
import time
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass, replace
from itertools import accumulate
from typing import TYPE_CHECKING, Any, Literal

import torch

from dcode.config import REPAIR_TRIES, SamplerConfig
from dcode.events import Repaired, RepairRound, Span, Started, Step
from dcode.fixes import confined, deleted, narrowest, progress, resembles
from dcode.linediff import newline_of
from dcode.models.base import Denoiser, ModelFacts
from dcode.sampler import denoise
from dcode.syntax import (
    BLOCK_TYPES,
    STATEMENT_TYPES,
    Issue,
    UnknownLanguage,
    compile_issue,
    find_issues,
    language_of,
    line_span,
    line_start,
    normalize_language,
)

if TYPE_CHECKING:
    from tree_sitter import Node


# Definitions of functions and types: round 2 never widens to one (a whole function re-masked is
# a rewrite, not a repair); round 3's block is the most it gets.
DEFINITIONS = re.compile(r"(function|class|method|struct|impl|trait|interface|enum|module)")
# Rounds 2 and 3 on -> (node types they widen to, lines of context added when no such node encloses the span).
_ROUNDS: tuple[tuple[re.Pattern[str], int], ...] = ((STATEMENT_TYPES, 1), (BLOCK_TYPES, 2))
# A round's later tries sample at this temperature (its first try uses the configured sampler,
# greedy by default): the same masks refilled greedily would only give the same text again. They
# may not write the tokens the checker blamed either (culprits()).
# Measured (benchmarks/repair.py): 0.8 suited session 5's dcode-tiny; the certainty-forced weights
# of session 6 are so sure of their own text that 0.8 refills much of it unchanged (76% -> 92%
# valid, +88% time) where 1.2 gives 76% -> 100% at +51%.
RETRY_TEMPERATURE = 1.2
# ...except left to right (the verify rule), where every position of the span is sampled in turn
# and 1.2 derails it. Measured (benchmarks/repair.py --seeds 8, the round-3 weights): 76% -> 96.5%
# valid at +236% time at 1.2, 76% -> 100% at +70% at 0.8.
LEFT_TO_RIGHT_RETRY_TEMPERATURE = 0.8


# Who wrote the text being repaired. "draft": the model, the whole answer (dcode new): a fix may
# redraft it from the broken statement on and rename what it defines. "edit": the model, a region
# of a user's file. "file": the user (dcode repair): a fix may change only the blamed lines (see
# blamed_lines; lines may be inserted), a partial fix must not add an issue, and greedy refills come first.
Origin = Literal["draft", "edit", "file"]


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
# Widening, narrowest first: round 1 the issue's focus line, round 2 the enclosing statement and
# the line before it, round 3 the enclosing block. A fix found in an early round leaves every
# other line as it was.


def covering_lines(data: bytes, start: int, end: int) -> tuple[int, int]:
    """The lines holding [start, end), without the last line's ending (unlike dcode.edit.whole_lines)."""
    return line_span(data, start)[0], line_span(data, max(start, end - 1))[1]


def with_context(data: bytes, span: tuple[int, int], lines: int, after: bool = True) -> tuple[int, int]:
    """span plus `lines` whole lines before it (and after it, unless after=False)."""
    start, end = span
    for _ in range(lines):
        start = line_span(data, start - 1)[0] if start > 0 else 0
        nl = data.find(b"\n", end)
        if after:
            end = line_span(data, nl + 1)[1] if nl >= 0 else len(data)
    return start, end


def enclosing(
    node: Node | None, kinds: re.Pattern[str], data: bytes, span: tuple[int, int], stop: re.Pattern[str] | None = None
) -> Node | None:
    """The smallest node from `node` up (the file itself excluded) of a type matching kinds whose
    lines strictly contain span; None past a node whose type matches `stop`."""
    while node is not None and node.parent is not None:
        if stop is not None and stop.search(node.type):
            return None
        lines = covering_lines(data, node.start_byte, node.end_byte)
        if kinds.search(node.type) and lines[0] <= span[0] and lines[1] >= span[1] and lines != span:
            return node
        node = node.parent
    return None


def focus_line(data: bytes, issue: Issue, hint: Issue | None) -> tuple[int, int]:
    """The one line round 1 re-masks: the line compile() blames (`hint`, Python) when it lies in
    the issue's span, else the issue's own line. A tree-sitter ERROR can cover a whole function;
    the broken line inside it is usually one."""
    if hint is not None:
        first, last = covering_lines(data, issue.start_byte, issue.end_byte)
        if first <= hint.start_byte <= last:
            return line_span(data, hint.start_byte)
    return line_span(data, line_start(data, issue.line))


def blamed_lines(data: bytes, issues: Sequence[Issue], hint: Issue | None) -> set[int]:
    """The 0-based lines a fix in a user's file may change: the line compile() blames where Python
    has one (the grammar's other errors follow from it), else every issue's focus line."""
    if hint is not None:
        return {data.count(b"\n", 0, hint.start_byte)}
    return {data.count(b"\n", 0, focus_line(data, issue, None)[0]) for issue in issues}


def widen(
    data: bytes, root: Node, issue: Issue, round: int, hint: Issue | None = None, draft: bool = False
) -> tuple[int, int, str]:
    """Byte span to re-mask for issue in this round (1, 2, 3...) and why. Round 1: the focus line;
    round 2: the statement enclosing it (never a whole function or type definition) and the line
    before; round 3 on: the enclosing block, or for a draft (text the model wrote, left to right)
    everything from round 2's span to the end. Where no statement/block encloses the
    span, a line or two of context stand in. Spans stop before the last line's ending, so the
    line breaks around them are kept as they are."""
    span = focus_line(data, issue, hint)
    scope = "its line"
    anchor = root.descendant_for_byte_range(*span)
    for step in range(2, round + 1):
        if draft and step >= 3:
            # What a draft wrote after a broken line was conditioned on it: redraft the rest.
            span, scope = (span[0], len(data)), "to the end of the draft"
            break
        kinds, context = _ROUNDS[min(step, 3) - 2]
        found = enclosing(anchor, kinds, data, span, DEFINITIONS if step == 2 else None)
        if found is not None:
            anchor, scope = found, f"enclosing {found.type}"
            span = covering_lines(data, found.start_byte, found.end_byte)
            if step == 2:  # a broken line often shows as an error on the next one
                span = (with_context(data, span, 1, after=False)[0], span[1])
                scope += " and the line before"
        else:
            span, scope = with_context(data, span, context), f"{context} line(s) of context"
    first, last = (data.count(b"\n", 0, i) + 1 for i in (span[0], max(span[0], span[1] - 1)))
    where = f"line {first}" if first == last else f"lines {first}-{last}"
    return span[0], span[1], f"{issue.message} (line {issue.line}): {where}, {scope}"


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
# Canvas and splice


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


def splice(data: bytes, spans: Sequence[Span], texts: Sequence[str]) -> str:
    """data with each span's bytes replaced by its new text; every other byte copied as is."""
    out, at = [], 0
    for span, text in zip(spans, texts, strict=True):
        out += [data[at : span.start_byte], text.encode()]
        at = span.end_byte
    out.append(data[at:])
    return b"".join(out).decode()


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
            candidate, found, kept, restored = judge(best, best_issues, spans, texts, language, origin, hint)
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


def judge(
    best: str,
    best_issues: list[Issue],
    spans: Sequence[Span],
    texts: Sequence[str],
    language: str,
    origin: Origin,
    hint: Issue | None,
) -> tuple[str, list[Issue], bool, int]:
    """A try's result: the spliced text, its issues, whether it is kept and how many lines were put
    back. Kept: it deletes no code, has fewer issues than the best so far and, in a user's file,
    changes only the blamed lines, each still mostly itself, breaking no line that was fine."""
    data = best.encode()
    candidate = splice(data, spans, texts)
    found = find_issues(candidate, language)
    erased = any(
        deleted(data[s.start_byte : s.end_byte].decode(), t, names=origin != "draft")
        for s, t in zip(spans, texts, strict=True)
    )
    kept = not erased and len(found) < len(best_issues)
    restored = 0
    if kept:
        candidate, found, restored = narrowest(best, candidate, language, found)
        kept = origin != "file" or (
            confined(best, candidate, blamed_lines(data, best_issues, hint))
            and progress(best, best_issues, candidate, found)
            and resembles(best, candidate)
        )
    return candidate, found, kept, restored


def in_line_endings(text: str, newline: str) -> str:
    """text with its bare line feeds as `newline` (a fill in a CRLF file gets CRLF lines)."""
    return text if newline == "\n" else re.sub(r"(?<!\r)\n", newline, text)


def culprits(data: bytes, ids: Sequence[int], offsets: Sequence[tuple[int, int]], issues: Sequence[Issue]) -> list[int]:
    """Ids of the tokens at the points the checker blames (an issue's line and column), leaving out
    whitespace. A round's later tries may not write them: confident weights otherwise sample the
    same wrong token again at any temperature, as the threshold rule commits only what they are
    sure of (measured, benchmarks/repair.py over 8 seeds: drafts of 200 left broken by session 7's
    second distillation round 6 -> 3, by session 6's weights 5 -> 0).
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
