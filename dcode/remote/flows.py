"""dcode new, edit and repair through an endpoint, each as one stream of events: Updates (the live
view's frames), then a final record (Generated, Changed, Repaired) whose `code` is the answer.

Owns: what a served model is asked for each command, the repair loop over fills (the span rules of
dcode.spans, judged by dcode.fixes like a local repair), and the records' metadata in the
keys `--json` prints locally. Every byte outside a rewritten span is the input's (dcode.spans.splice).
Knows nothing about argv, the environment or the terminal.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from dcode.events import Repaired, rates, regions
from dcode.fixes import judge
from dcode.remote import fill
from dcode.remote.client import Endpoint
from dcode.remote.fill import Sampling
from dcode.remote.streams import Answer, Mode, Update, pieces
from dcode.render import Frame
from dcode.spans import Origin, fit_line_span, fit_region, merge, widen
from dcode.syntax import UnknownLanguage, compile_issue, find_issues, language_of, normalize_language

R = TypeVar("R")
RETRY_TEMPERATURE = 0.8  # a round's later tries sample: a greedy fill of the same span repeats itself


def counts(answer: Answer) -> dict[str, object]:
    """The counters of `dcode new --json` for a served answer; a pass is a streamed chunk."""
    return {
        "prompt_tokens": answer.prompt_tokens,
        "tokens": answer.tokens,
        **rates(answer.tokens, answer.chunks, answer.seconds),
        "stream": answer.kind,
        "first_frame_seconds": None if answer.first_frame is None else round(answer.first_frame, 3),
    }


@dataclass(frozen=True)
class Generated:
    """dcode new through an endpoint."""

    code: str
    draft: str  # the answer as served, before a client-side repair
    answer: Answer
    fixed: Repaired | None = None

    @property
    def syntax_errors(self) -> int | None:
        if self.fixed is not None:
            return self.fixed.issues_after
        served = self.answer.metadata.get("repair")  # a dcode server that repaired itself
        return int(served["issues_after"]) if isinstance(served, dict) and "issues_after" in served else None

    def metadata(self) -> dict[str, object]:
        out = counts(self.answer)
        repaired = self.fixed.metadata() if self.fixed is not None else self.answer.metadata.get("repair")
        return out | ({"repair": repaired} if repaired is not None else {})


@dataclass(frozen=True)
class Changed:
    """dcode edit through an endpoint (the fields of dcode.pipeline.Edited that apply)."""

    code: str
    region: tuple[int, int]
    new_region: tuple[int, int]
    answer: Answer
    original_errors: int | None
    errors_after: int | None
    fixed: Repaired | None = None
    fixed_used: bool = False

    @property
    def broke(self) -> bool:
        return self.original_errors == 0 and bool(self.errors_after)

    def metadata(self) -> dict[str, object]:
        out: dict[str, object] = {
            **regions(self.region, self.new_region),
            **counts(self.answer),
            "original_errors": self.original_errors,
            "errors_after": self.errors_after,
        }
        if self.fixed is not None:
            out["repair"] = {**self.fixed.metadata(), "used": self.fixed_used}
        return out


@dataclass
class Clock:
    """The run's counters, so the frames of several requests read as one run (pass n, tok/s)."""

    began: float = field(default_factory=time.perf_counter)
    forward: int = 0
    filled: int = 0
    round: int = 0

    def around(self, frame: Frame, before: list[str | None], after: list[str | None]) -> Frame:
        """A fill's frame shown in its file: before + the fill + after, counters over the run."""
        shift = len(before)
        return replace(
            frame,
            pieces=(*before, *frame.pieces, *after),
            committed=frozenset(i + shift for i in frame.committed),
            forward=self.forward + frame.forward,
            filled=self.filled + frame.filled,
            elapsed=time.perf_counter() - self.began,
            repair_round=self.round,
        )

    def masked(
        self, model: str, device: str, language: str, before: list[str | None], old: str, after: list[str | None]
    ) -> Frame:
        """The file with a span masked again, before its fill arrives."""
        holes = len(pieces(old))
        return Frame(
            (*before, *([None] * holes), *after),
            frozenset(),
            frozenset(range(len(before), len(before) + holes)),
            model,
            device,
            self.forward,
            holes,
            self.filled,
            time.perf_counter() - self.began,
            language,
            repair_round=self.round,
        )


def result_of(events: Iterable[Update | R], kind: type[R]) -> Generator[Update, None, R]:
    """Pass a stream's Updates on and return its record of `kind` (a fill's Answer, a repair's Repaired).
    Example: answer = yield from result_of(filled(...), Answer)."""
    found: R | None = None
    for event in events:
        if isinstance(event, kind):
            found = event
        elif isinstance(event, Update):
            yield event
    assert found is not None
    return found


def filled(
    endpoint: Endpoint, clock: Clock, data: bytes, span: tuple[int, int], language: str, sampling: Sampling, **ask: str
) -> Iterator[Update | Answer]:
    """One span of data filled through the endpoint, drawn in its file; ends with the fill's Answer."""
    a, b = span
    before, old, after = data[:a].decode(), data[a:b].decode(), data[b:].decode()
    head, tail = pieces(before), pieces(after)
    yield Update(clock.masked(endpoint.model or "", endpoint.host, language, head, old, tail))
    answer: Answer | None = None
    for event in fill.middle(endpoint, before, after, language, sampling, old=old, **ask):
        if isinstance(event, Update):
            yield Update(clock.around(event.frame, head, tail))
        else:
            answer = event
    assert answer is not None
    clock.forward += answer.chunks
    clock.filled += len(pieces(answer.text))
    yield answer


def fill_budget(old: str, room: int) -> int:
    """max_tokens for a span's fill: its tokens (a token is 2-4 bytes of code) plus room to grow,
    as a local repair (tokens + 25%) or edit (tokens + 50%, at least 16) gives its masks.
    Example: fill_budget("    return w * h +", 16) -> 25."""
    return len(old.encode()) // 2 + room


def mend(
    endpoint: Endpoint,
    code: str,
    language: str,
    sampling: Sampling,
    rounds: int = 3,
    tries: int = 2,
    origin: Origin = "file",
    name: str = "the file",
    clock: Clock | None = None,
) -> Iterator[Update | Repaired]:
    """dcode.repair.repair with fills from the endpoint instead of the sampler: each round widens
    the spans around the issues, fills each span (tries until one is kept), splices, checks, and
    keeps a result only if it has fewer issues (for a user's file: only its blamed lines changed,
    no new issue, each line mostly itself). Bytes outside the spans are copied as they are."""
    from tree_sitter import Parser

    clock = clock or Clock()
    began = time.perf_counter()
    try:
        issues = find_issues(code, language)
        grammar = language_of(normalize_language(language))
    except (UnknownLanguage, ImportError) as error:
        yield Repaired(code, 0, 0, (), 0, 0, 0, 0, 0, 0.0, note=f"not checked: {error}")
        return
    best, best_issues = code, issues
    rounds_run = attempts = regenerated = tokens = chunks = 0
    for number in range(1, rounds + 1):
        if not best_issues:
            break
        # 1) what to rewrite: each issue widened for this round, merged
        data = best.encode()
        root = Parser(grammar).parse(data).root_node
        hint = compile_issue(best, data) if normalize_language(language) == "python" else None
        where = merge([widen(data, root, issue, number, hint, origin == "draft")[:2] for issue in best_issues])
        rounds_run += 1
        for attempt in range(1, tries + 1):
            # 2) fill each span; a later try samples with its own seed
            clock.round += 1
            attempts += 1
            regenerated += len(where)
            run = (
                sampling
                if attempt == 1
                else replace(
                    sampling, temperature=max(sampling.temperature, RETRY_TEMPERATURE), seed=sampling.seed + attempt - 1
                )
            )
            texts = []
            for span in where:
                budget = replace(run, max_tokens=fill_budget(data[span[0] : span[1]].decode(), 16))
                answer = yield from result_of(filled(endpoint, clock, data, span, language, budget, name=name), Answer)
                texts.append(fit_line_span(answer.text, data[span[1] :]))
                tokens, chunks = tokens + answer.tokens, chunks + answer.chunks
            # 3) splice, check, judge as a local repair does
            candidate, found, kept, _ = judge(best, best_issues, where, texts, language, origin, hint)
            if kept:
                best, best_issues = candidate, found
                break
    yield Repaired(  # forward: the fills' streamed chunks, the passes of a remote repair
        best,
        len(issues),
        len(best_issues),
        tuple(best_issues),
        rounds_run,
        attempts,
        regenerated,
        tokens,
        chunks,
        time.perf_counter() - began,
    )


def new(
    endpoint: Endpoint,
    request: str,
    language: str,
    sampling: Sampling,
    mode: Mode,
    rounds: int = 3,
    tries: int = 2,
    settings: dict[str, Any] | None = None,
) -> Iterator[Update | Generated]:
    """A whole file from a request; checked and, where it does not parse, repaired span by span
    (unless a dcode server already repaired it, as its metadata says). `settings`: sampler
    options for a dcode server (its `dcode` request field)."""
    clock = Clock()
    answer = yield from result_of(
        fill.new(endpoint, request, language, sampling, mode, rounds > 0, settings or {}), Answer
    )
    code = answer.text if answer.kind == "dcode" or language == "markdown" else fill.unfence(answer.text)
    fixed = None
    if rounds > 0 and not isinstance(answer.metadata.get("repair"), dict):
        clock.forward, clock.filled = answer.chunks, len(pieces(code))
        fixed = yield from result_of(
            mend(endpoint, code, language, sampling, rounds, tries, "draft", "the answer", clock), Repaired
        )
    yield Generated(fixed.code if fixed is not None else code, code, answer, fixed)


def check(code: str, language: str, span: tuple[int, int]) -> tuple[int, bool] | None:
    """(issues in code, whether one touches span), or None for a language dcode cannot check."""
    try:
        found = find_issues(code, language)
    except (UnknownLanguage, ImportError):
        return None
    return len(found), any(i.start_byte <= span[1] and i.end_byte >= span[0] for i in found)


def edit(
    endpoint: Endpoint,
    source: str,
    region: tuple[int, int],
    instruction: str,
    language: str,
    sampling: Sampling,
    rounds: int = 3,
    tries: int = 2,
    name: str = "the file",
) -> Iterator[Update | Changed]:
    """Rewrite the byte span `region` of source (whole lines) as instruction asks, as one fill;
    repaired when the edit broke the syntax, the repair kept only if every byte outside the
    region is still the source's (as dcode.pipeline.edit)."""
    clock = Clock()
    data = source.encode()
    a, b = region
    old, after = data[a:b].decode(), data[b:].decode()
    ask = {"instruction": instruction, "name": name}
    answer = yield from result_of(filled(endpoint, clock, data, region, language, sampling, **ask), Answer)
    text = fit_region(answer.text, old)
    code = data[:a].decode() + text + after
    new_region = (a, a + len(text.encode()))
    original, found = check(source, language, region), check(code, language, new_region)
    fixed, used = None, False
    if found is not None and found[0] and rounds > 0 and (found[1] or found[0] > (original or (0,))[0]):
        fixed = yield from result_of(
            mend(endpoint, code, language, sampling, rounds, tries, "edit", name, clock), Repaired
        )
        fixed_data, suffix = fixed.code.encode(), after.encode()
        intact = fixed_data[:a] == data[:a] and fixed_data.endswith(suffix) and len(fixed_data) - len(suffix) >= a
        if fixed.code != code and intact:
            code, used = fixed.code, True
            new_region = (a, len(fixed_data) - len(suffix))
            found = check(code, language, new_region)
    yield Changed(
        code,
        region,
        new_region,
        answer,
        None if original is None else original[0],
        None if found is None else found[0],
        fixed,
        used,
    )


def describer(model: str, device: str, language: str) -> Callable[[object, float], Frame | None]:
    """The live view's describe callable: an Update's frame; a final record's code, settled."""
    last: list[Frame] = []

    def describe(event: object, elapsed: float) -> Frame | None:
        if isinstance(event, Update):
            last[:] = [event.frame]
            return event.frame
        code = getattr(event, "code", None)
        if not isinstance(code, str):
            return None
        base = last[0] if last else Frame((), frozenset(), frozenset(), model, device, 0, 0, 0, elapsed)
        return replace(
            base, pieces=(code,), committed=frozenset(), remasked=frozenset(), masked=0, language=language, settled=True
        )

    return describe
