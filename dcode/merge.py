"""An update snippet merged into a file by the edit flow: the one code behind `dcode serve`'s
/v1/apply/completions and a local `dcode edit --instruct SNIPPET`.

Owns: turning the parts dcode.snippets places into regions sized for the model (a Sizer: its
tokens and context), regenerating each region with dcode.flows.edit (the part as the instruction),
last first so the regions before it keep their offsets, and the one Edited record of them all.
`edit` is `dcode edit`'s flow: a snippet that the filler places (the local model) goes part by part;
one it takes whole (a server's apply path places it) and a prose instruction go to flows.edit as
they are. Every byte outside the placed regions is the source's. Imports no torch.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Sequence
from typing import Protocol

from dcode.config import REPAIR_TRIES
from dcode.events import Edited, Event, relayed
from dcode.filler import Filler, Region
from dcode.flows import InputError, check_span
from dcode.flows import edit as edit_region
from dcode.snippets import is_snippet, place


class TooLong(InputError):
    """A placed region (or the whole code) that does not fit the model's context with room to rewrite it."""


class Sizer(Protocol):
    """Masks for a region of a file on one model (dcode.localfill.Sizer)."""

    def region(self, source: str, start: int, end: int, instruction: str, new: str = "") -> Region | None:
        """The region with its masks, or None when it and the instruction do not fit the context."""
        ...

    def too_long(self, what: str) -> TooLong:
        """The refusal of a region, `what` naming it, that does not fit."""
        ...


def regions(source: str, span: tuple[int, int], snippet: str, sizer: Sizer, name: str) -> tuple[Region, ...]:
    """Each part of the snippet placed in the byte span `span` of source (dcode.snippets.place: a
    part already there is left out; a part that cannot be placed makes the whole span the one
    region, with the whole snippet), sized by `sizer`; TooLong for one that does not fit."""
    data = source.encode()
    a, b = span
    out = []
    for part in place(data[a:b].decode(), snippet):
        start, end = a + part.start, a + part.end
        region = sizer.region(source, start, end, part.part, part.part)
        if region is None:
            raise sizer.too_long(name if (start, end) == (0, len(data)) else f"the region at byte {start} of {name}")
        out.append(region)
    return tuple(out)


def edits(
    filler: Filler,
    source: str,
    placed: Sequence[Region],
    language: str,
    repair_rounds: int = 3,
    name: str = "the file",
    repair_tries: int = REPAIR_TRIES,
) -> Iterator[Event]:
    """Regenerate each region of source with its instruction (dcode.flows.edit, its masks, last
    first): every edit's events but its Edited, then one Edited for them all (combined)."""
    code, done = source, []
    for region in reversed(placed):
        span = (region.start, region.end)
        steps = edit_region(
            filler, code, span, region.instruction, language, region.length, repair_rounds, name, repair_tries
        )
        done.append((yield from relayed(steps, Edited)))
        code = done[-1].code
    yield combined(filler, source, placed, done[::-1], language)


def combined(filler: Filler, source: str, placed: Sequence[Region], done: Sequence[Edited], language: str) -> Edited:
    """One Edited for the edits of the placed regions (in file order): the span from the first
    region's start to the last one's end, the counters summed, the repair the last one kept;
    the source as it is (checked, no pass) when nothing was placed."""
    if not done:
        found = check_span(source, language, (0, 0))
        errors = None if found is None else found[0]
        nothing: dict[str, object] = {"snippet_regions": []}
        return Edited(
            source, (0, 0), (0, 0), 0, None, None, 0, 0, 0, 0.0, errors, errors, unit=filler.unit, extra=nothing
        )
    code, last = done[0].code, max(region.end for region in placed)  # done[0]: the edit that ran last
    first = min(region.start for region in placed)
    repairs = [e for e in done if e.repair is not None]

    def total(values: list[int | None]) -> int | None:
        return None if all(v is None for v in values) else sum(v or 0 for v in values)

    return Edited(
        code=code,
        region=(first, last),
        new_region=(first, len(code.encode()) - (len(source.encode()) - last)),
        prompt_tokens=sum(e.prompt_tokens for e in done),
        context_tokens=total([e.context_tokens for e in done]),
        region_tokens=total([e.region_tokens for e in done]),
        tokens=sum(e.tokens for e in done),
        masks=sum(e.masks for e in done),
        forward=sum(e.forward for e in done),
        seconds=sum(e.seconds for e in done),
        original_errors=done[-1].original_errors,  # the last region's edit ran first, on the source
        errors_after=done[0].errors_after,  # the first region's ran last, on the final code
        repair=repairs[0].repair if repairs else None,
        repair_used=any(e.repair_used for e in done),
        unit=done[0].unit,
        extra={**done[0].extra, "snippet_regions": [[r.start, r.end] for r in placed]},
    )


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
) -> Generator[Event, None, None]:
    """`dcode edit`'s flow: an update snippet the filler places is regenerated part by part
    (regions, then edits: what `dcode serve`'s apply path runs); anything else is flows.edit's."""
    placed = None
    if is_snippet(instruction):
        placed = filler.placed(source, region, instruction, language, length, name)
    if placed is None:
        yield from edit_region(filler, source, region, instruction, language, length, repair_rounds, name, repair_tries)
        return
    yield from edits(filler, source, placed, language, repair_rounds, name, repair_tries)
