"""`new`, `edit`, `repair_file` and `complete`, one flow each, over a filler (dcode.filler: the local sampler or
an endpoint), as streams of dcode.events: Started, the filler's Steps or Drawn frames, the repair
pass's rounds, then a Finished, Edited or Repaired record.

Owns: what each command asks its filler for, fitting an edit's text to its region, the syntax
check, the repair pass (each round widens the spans around the issues with dcode.spans, the filler
fills them, dcode.fixes judges the result) and the counters a report needs. Every byte outside a
rewritten span is the input's. Imports no torch (an endpoint's run loads none); knows nothing
about argv, the environment or the terminal. `edit` is the one way to regenerate a region of a
file with an instruction, whichever filler does it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass

from dcode.config import REPAIR_TRIES
from dcode.events import Edited, Event, Finished, Repaired, RepairRound, Unit, relayed
from dcode.filler import Draft, Filler, FillError, Plan
from dcode.fixes import judge
from dcode.linediff import newline_of
from dcode.spans import Origin, fit_region, unechoed, widen
from dcode.syntax import Issue, UnknownLanguage, compile_issue, find_issues, language_of, normalize_language


class InputError(ValueError):
    """A request the filler cannot serve (too long, empty): a usage error, reported in one line."""


def check_room(prompt_tokens: int, length: int, limit: int, name: str = "--length") -> None:
    """InputError unless `length` (at least 1) plus the prompt fits in `limit` tokens; `name` names
    the length in the message (a server's max_tokens)."""
    if length < 1:
        raise InputError(f"{name} must be at least 1 token")
    if prompt_tokens + length > limit:
        raise InputError(
            f"{name} {length} plus the {prompt_tokens}-token prompt exceeds the model's "
            f"context of {limit} tokens (at most {max(0, limit - prompt_tokens)} fit)"
        )


# ---------------------------------------------------------------------------------------------
# new: a whole file from a request


def new(
    filler: Filler,
    request: str,
    language: str,
    length: int,
    repair_rounds: int = 3,
    repair_tries: int = REPAIR_TRIES,
) -> Iterator[Event]:
    """Generate a whole file for `request`: the draft's events, the repair pass's tries (syntax is
    checked even with 0 rounds), then Finished."""
    if not request.strip():
        raise InputError("the prompt is empty")
    draft = yield from filler.draft(request, language, length, repair_rounds > 0)
    code = draft.text.strip("\n") + "\n" if draft.text.strip() else ""
    rounds = 0 if draft.checked else repair_rounds
    repaired = yield from relayed(repair(filler, code, language, request, rounds, repair_tries, "draft"), Repaired)
    final = repaired.code
    if final.strip() and not final.endswith("\n"):
        final += "\n"  # a new file ends with a line break, whatever the repair spliced at its end
    yield finished(draft, final, None if repaired.note.startswith("not checked") else repaired, code)


def finished(draft: Draft, code: str, repaired: Repaired | None = None, sampled: str = "") -> Finished:
    """The Finished record of a draft whose final text is `code` (`sampled`: the text before repair)."""
    return Finished(
        code=code,
        prompt_tokens=draft.prompt_tokens,
        tokens=draft.tokens,
        masks=draft.masks,
        forward=draft.forward,
        seconds=draft.seconds,
        repair=repaired,
        draft=sampled,
        unit=draft.unit,
        extra=draft.extra,
    )


def complete(filler: Filler, length: int) -> Iterator[Event]:
    """A plain completion (a server's /v1/completions): the filler's draft of its own prompt (and
    suffix), as written - no template, no check, no repair - then Finished."""
    draft = yield from filler.draft("", "", length, False)
    yield finished(draft, draft.text)


def repair_file(
    filler: Filler, source: str, language: str, name: str, rounds: int, tries: int = REPAIR_TRIES
) -> Iterator[Event]:
    """Repair a user's file: the request names the file; the repair pass's tries, then Repaired."""
    yield from repair(filler, source, language, f"the {language} file {name}", rounds, tries, "file")


# ---------------------------------------------------------------------------------------------
# edit: regenerate one region of an existing file, conditioned on an instruction and the code
# around it. Every byte outside the region is copied as is.


def edit(
    filler: Filler,
    source: str,
    region: tuple[int, int],
    instruction: str,
    language: str,
    length: int | None = None,
    repair_rounds: int = 3,
    name: str = "the file",
    repair_tries: int = REPAIR_TRIES,
) -> Iterator[Event]:
    """Rewrite the byte span `region` of source (whole lines) as `instruction` asks: regenerate this
    region of this file with this instruction, with either filler. Yields the fill's events, the
    repair pass's tries when the edit broke the syntax, then Edited.

    The filler sees the code on both sides of the region; `length` bounds the new text (default:
    the region's tokens plus room to grow). The result is spliced on bytes: every byte outside the
    region is the source's, and a repair is kept only if it leaves them so too. A fill that ends
    with the text after the region (a server echoing `suffix`) loses that echo; one that repeats it
    elsewhere is a FillError. `name` names the file in messages.
    """
    if not instruction.strip():
        raise InputError("the instruction is empty")
    data = source.encode()
    a, b = region
    if not 0 <= a <= b <= len(data):
        raise ValueError(f"region {region} is outside the {len(data)}-byte source")
    try:
        before, old, after = data[:a].decode(), data[a:b].decode(), data[b:].decode()
    except UnicodeDecodeError:
        raise ValueError(f"region {region} splits a UTF-8 character") from None
    draft = yield from filler.region(source, region, instruction, language, length, name)
    written = unechoed(draft.text, after)
    if written is None:
        raise FillError(f"the new text for {name} repeats the code after the region; nothing written")
    text = fit_region(written, old, newline_of(source))
    original = check_span(source, language, region)
    checked = yield from repair_edit(
        filler, instruction, source, before + text + after, (a, a + len(text.encode())), language, original,
        repair_rounds, repair_tries,
    )  # fmt: skip
    yield Edited(
        code=checked.code,
        region=(a, b),
        new_region=checked.new_region,
        prompt_tokens=draft.prompt_tokens,
        context_tokens=draft.context_tokens,
        region_tokens=draft.region_tokens,
        tokens=draft.tokens,
        masks=draft.masks,
        forward=draft.forward,
        seconds=draft.seconds,
        original_errors=None if original is None else original[0],
        errors_after=None if checked.found is None else checked.found[0],
        repair=checked.repaired,
        repair_used=checked.used,
        unit=draft.unit,
        extra=draft.extra,
    )


def check_span(code: str, language: str, span: tuple[int, int]) -> tuple[int, bool] | None:
    """(syntax issues in code, whether one touches the byte span), or None for a language dcode
    cannot check."""
    try:
        found = find_issues(code, language)
    except (UnknownLanguage, ImportError):
        return None
    return len(found), any(i.start_byte <= span[1] and i.end_byte >= span[0] for i in found)


@dataclass(frozen=True)
class Checked:
    """An edit's result after the check and, where it broke something, the repair pass."""

    code: str
    new_region: tuple[int, int]
    found: tuple[int, bool] | None  # as check_span() says of code
    repaired: Repaired | None
    used: bool


def repair_edit(
    filler: Filler,
    instruction: str,
    source: str,
    code: str,
    new_region: tuple[int, int],
    language: str,
    original: tuple[int, bool] | None,
    rounds: int,
    tries: int,
) -> Generator[Event, None, Checked]:
    """Check an edit's code; when the edit broke something, repair it and keep the repair only if
    every byte outside the region is intact. Yields the repair's events; returns the Checked result."""
    a = new_region[0]
    data, suffix = source.encode(), code.encode()[new_region[1] :]
    found = check_span(code, language, new_region)
    repaired: Repaired | None = None
    used = False
    if found is not None and found[0] and rounds > 0 and (found[1] or found[0] > (original or (0,))[0]):
        repaired = yield from relayed(repair(filler, code, language, instruction, rounds, tries, "edit"), Repaired)
        fixed = repaired.code.encode()
        intact = fixed[:a] == data[:a] and fixed.endswith(suffix) and len(fixed) - len(suffix) >= a
        if repaired.code != code and intact:
            code, used = repaired.code, True
            new_region = (a, len(fixed) - len(suffix))
            found = check_span(code, language, new_region)
    return Checked(code, new_region, found, repaired, used)


# ---------------------------------------------------------------------------------------------
# The repair pass


def repair(
    filler: Filler,
    code: str,
    language: str,
    request: str,
    rounds: int = 3,
    tries: int = REPAIR_TRIES,
    origin: Origin = "file",
) -> Iterator[Event]:
    """Rewrite the spans around code's syntax issues with the filler, widening them each round;
    each round fills its spans up to `tries` times until a result is kept. `origin` says who wrote
    code (see Origin): it decides what a round may change; `request` is what code was written for.
    Yields every try's events and a RepairRound after each try, then Repaired.

    Text outside the rewritten spans is copied byte for byte (new lines take the text's line
    ending); a round's result is kept only if dcode.fixes.judge keeps it. An unknown language (or
    a grammar that will not load) returns code untouched with a note; a FillError (a server that
    failed) stops the pass with the best text so far.
    """
    began = time.perf_counter()
    try:
        issues = find_issues(code, language)
        name = normalize_language(language)
    except (UnknownLanguage, ImportError) as exc:
        yield Repaired(code, 0, 0, (), 0, 0, 0, 0, 0, time.perf_counter() - began, note=f"not checked: {exc}")
        return
    from tree_sitter import Parser

    best, best_issues = code, issues
    history: list[RepairRound] = []
    note = ""
    for number in range(1, rounds + 1):
        if not best_issues:
            break
        # 1) what to rewrite: each issue widened for this round; the filler makes the spans ready
        data = best.encode()
        root = Parser(language_of(name)).parse(data).root_node
        hint = compile_issue(best, data) if name == "python" else None
        wanted = [widen(data, root, issue, number, hint, origin == "draft") for issue in best_issues]
        plan = filler.plan(best, wanted, request, language, [hint] if hint is not None else best_issues)
        if isinstance(plan, str):
            note = plan
            break
        # 2) fill, splice, check and judge, try after try, until one is kept
        tried = round_tries(filler, plan, number, tries, best, best_issues, language, origin, hint)
        records, kept, note = yield from tried
        history += records
        if kept is not None:
            best, best_issues = kept
        if note:
            break
    yield summed(issues, best, best_issues, history, time.perf_counter() - began, note, filler.unit)


def round_tries(
    filler: Filler,
    plan: Plan,
    number: int,
    tries: int,
    best: str,
    best_issues: list[Issue],
    language: str,
    origin: Origin,
    hint: Issue | None,
) -> Generator[Event, None, tuple[list[RepairRound], tuple[str, list[Issue]] | None, str]]:
    """Round `number`'s tries: the filler fills the plan's spans, the fills are spliced into best,
    checked and judged, until one is kept. Yields each try's events and its RepairRound; returns
    the tries' records, the kept (code, issues) or None, and a note when a FillError stopped it."""
    tried: list[RepairRound] = []
    for attempt in range(1, tries + 1):
        try:
            fills = yield from filler.fill(plan, (number, attempt), origin)
        except FillError as error:
            return tried, None, f"stopped: {error}"
        texts = [in_line_endings(t, newline_of(best)) for t in fills.texts]
        where = [(s.start_byte, s.end_byte) for s in plan.spans]
        candidate, found, kept, restored = judge(best, best_issues, where, texts, language, origin, hint)
        tried.append(
            RepairRound(
                number,
                attempt,
                tuple(best_issues),
                plan.spans,
                fills.tokens,
                fills.masks,
                fills.forward,
                len(found),
                kept,
                restored,
            )  # fmt: skip
        )
        yield tried[-1]
        if kept:
            return tried, (candidate, found), ""
    return tried, None, ""


def summed(
    issues: list[Issue],
    best: str,
    best_issues: list[Issue],
    history: list[RepairRound],
    seconds: float,
    note: str,
    unit: Unit,
) -> Repaired:
    """The repair pass's record: the best text and its issues, and the tries' counters summed."""
    return Repaired(
        code=best,
        issues_before=len(issues),
        issues_after=len(best_issues),
        issues=tuple(best_issues),
        rounds=len({r.round for r in history}),
        attempts=len(history),
        spans=sum(len(r.spans) for r in history),
        tokens=sum(r.tokens for r in history),
        forward=sum(r.forward for r in history),
        seconds=seconds,
        note=note,
        unit=unit,
    )


def in_line_endings(text: str, newline: str) -> str:
    """text with its bare line feeds as `newline` (a fill in a CRLF file gets CRLF lines)."""
    return text if newline == "\n" else re.sub(r"(?<!\r)\n", newline, text)
