"""Pure Rich renderables for the live refinement view: a step becomes a Frame, a Frame becomes Text.

Owns what a frame of the live view shows (`step_frame`, `Describer`, which reads the typed events of
dcode.events, Frame among them) and how it looks (`render_canvas`, `render_status`, `export_svg`).
Knows nothing about Textual, threads, models or the terminal, and does not import torch: tensors
are read through `.tolist()`. The Textual app (dcode.tui) and the plain Rich Live fallback both
draw with these functions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from io import StringIO
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.style import Style
from rich.syntax import Syntax
from rich.text import Text

from dcode.events import Drawn, Edited, Event, Finished, Frame, Repaired, Started, Step

MASK = "·"  # one placeholder character per masked token
MASK_STYLE = Style(dim=True)
REMASK_STYLE = Style(color="magenta", bold=True)  # masked again by the repair pass
COMMITTED_STYLE = Style(color="green", bold=True, reverse=True)  # filled by the latest pass
NOTE_STYLE = Style(bold=True, reverse=True)  # "paused", "any key closes" at the head of the status
THEME = "ansi_dark"  # the terminal's own 16 colours, so the final frame suits any background
# Control characters other than tab and newline are drawn as their Unicode pictures (ESC as ␛):
# generated text must never reach the terminal as escape sequences.
VISIBLE = {c: 0x2400 + c for c in range(32) if c not in (9, 10)} | {0x7F: 0x2421}


def _ints(values: Any) -> list[int]:
    """A sequence of ints, or a tensor (read with .tolist(), so this module needs no torch), as a list of ints."""
    if not isinstance(values, Sequence | int):
        values = values.tolist()
    if isinstance(values, int):
        return [values]
    return [int(v) for v in values]


def token_pieces(
    tokenizer: Any,
    ids: Sequence[int] | Any,
    mask_id: int,
    *,
    hidden: frozenset[int] = frozenset(),
    cache: dict[int, str] | None = None,
) -> list[str | None]:
    """The text of each token, None for the mask and "" for `hidden` ids (end, pad).

    Tokens are decoded one at a time with convert_tokens_to_string, so layout (spaces, newlines)
    survives; a character split across byte-level tokens shows as U+FFFD until settled. Pass the
    same `cache` dict across calls to decode each id once.
    Example: token_pieces(tok, [324, 2, 292], mask_id=2) -> ["def", None, " f"].
    """
    cache = {} if cache is None else cache
    out: list[str | None] = []
    for token in _ints(ids):
        if token == mask_id:
            out.append(None)
        elif token in hidden:
            out.append("")
        else:
            if token not in cache:
                piece = tokenizer.convert_tokens_to_string(tokenizer.convert_ids_to_tokens([token]))
                cache[token] = piece.translate(VISIBLE)
            out.append(cache[token])
    return out


def step_frame(
    step: Step,
    pieces: Sequence[str | None],
    start: int,
    *,
    model: str,
    device: str,
    elapsed: float,
    remasked: frozenset[int] = frozenset(),
    settled: bool = False,
    language: str = "python",
    forward: int | None = None,
    filled: int | None = None,
    repair_round: int = 0,
) -> Frame:
    """The Frame for a sampler Step. `pieces` covers the answer region step.canvas[start:]
    (see token_pieces); `remasked` holds canvas positions, like step.committed. `forward` and
    `filled` default to the step's pass count and the visible tokens; a caller following a whole
    run (draft, then repair rounds) passes its own totals."""
    committed = frozenset(p - start for p in _ints(step.committed) if p >= start)
    return Frame(
        pieces=tuple(pieces),
        committed=frozenset() if settled else committed,
        remasked=frozenset(p - start for p in remasked if p >= start),
        model=model,
        device=device,
        forward=int(step.forward) if forward is None else forward,
        masked=int(step.masked),
        filled=sum(1 for piece in pieces if piece) if filled is None else filled,
        elapsed=elapsed,
        language=language,
        settled=settled,
        repair_round=repair_round,
    )


class Describer:
    """`step_frame` for one run's stream of events: `describer(event, elapsed) -> Frame | None`.

    Decodes each token id once. A Started event says where the answer region begins on the canvas
    and, for a repair try, which positions it masked again (drawn apart while they stay masked);
    a Step gives a frame, counting passes and committed tokens over the whole run (draft, then
    repair tries); a Drawn event (an endpoint's chunk) is its own frame; a result (Finished,
    Edited, Repaired) gives a settled frame showing exactly its code and the numbers the summary
    line prints (its tokens, passes and seconds); a RepairRound gives None. Without a tokenizer
    (an endpoint's run) only Drawn events and results give frames.
    """

    def __init__(
        self,
        tokenizer: Any,
        mask_id: int,
        *,
        model: str,
        device: str,
        language: str = "python",
        hidden: Iterable[int] = (),
    ) -> None:
        self.tokenizer, self.mask_id = tokenizer, mask_id
        self.model, self.device, self.language = model, device, language
        self.hidden = frozenset(hidden)
        self.start = 0  # canvas position where the answer region begins (from Started)
        self._cache: dict[int, str] = {}
        self._remasked: set[int] = set()  # canvas positions a repair try masked again, still masked
        self._passes = self._committed = self._round = 0
        self._last: Frame | None = None

    def __call__(self, event: Event, elapsed: float) -> Frame | None:
        match event:
            case Started(span=(start, _), regions=regions, repair_round=round_):
                self.start = start
                if round_:
                    self._round += 1
                    self._remasked = {p for a, b in regions for p in range(a, b)}
                return None
            case Step():
                return self._step(event, elapsed)
            case Drawn(frame=frame):
                self._last = frame
                return frame
            case Finished() | Edited() | Repaired():
                return self._settled(event)
            case _:
                return None

    def _settled(self, result: Finished | Edited | Repaired) -> Frame:
        """The result's code, with the numbers of its summary line: one set of numbers on screen."""
        base = self._last or Frame((), frozenset(), frozenset(), self.model, self.device, 0, 0, 0, 0.0)
        return replace(
            base,
            pieces=(result.code,),
            committed=frozenset(),
            remasked=frozenset(),
            masked=0,
            forward=result.forward,
            filled=result.tokens,
            elapsed=result.seconds,
            language=self.language,
            settled=True,
            unit=result.unit,
        )

    def _step(self, step: Step, elapsed: float) -> Frame:
        ids = _ints(step.canvas)
        start = self.start
        pieces = token_pieces(self.tokenizer, ids[start:], self.mask_id, hidden=self.hidden, cache=self._cache)
        self._remasked &= {start + i for i, piece in enumerate(pieces) if piece is None}
        self._passes += 1
        self._committed += len(_ints(step.committed))
        self._last = step_frame(
            step,
            pieces,
            start,
            model=self.model,
            device=self.device,
            elapsed=elapsed,
            remasked=frozenset(self._remasked),
            language=self.language,
            forward=self._passes,
            filled=self._committed,
            repair_round=self._round,
        )
        return self._last


# What the live views take: a callable that starts the stream, and one that turns an event into
# a frame (a Describer).
EventSource = Callable[[], Iterator[Event]]
DescribeEvent = Callable[[Event, float], Frame | None]


def highlight(code: str, language: str) -> Text:
    """Code as syntax-highlighted Text (plain Text when Pygments does not know the language)."""
    return Syntax("", language, theme=THEME, background_color="default").highlight(code.translate(VISIBLE))


def render_canvas(frame: Frame) -> Text:
    """The canvas as code in its layout: masks as dim `·`, the latest pass in reverse green,
    re-masked repair positions in magenta; once settled, syntax-highlighted code."""
    if frame.settled:
        return highlight(frame.code, frame.language)
    text = Text(no_wrap=False)
    run: list[str] = []  # consecutive pieces of one style, appended as one span (a frame's cost is per span)
    style: Style | None = None
    for i, piece in enumerate(frame.pieces):
        wanted: Style | None
        if piece is None:
            wanted, piece = REMASK_STYLE if i in frame.remasked else MASK_STYLE, MASK
        else:
            wanted = COMMITTED_STYLE if i in frame.committed else None
        if wanted != style and run:
            text.append("".join(run), style)
            run = []
        style = wanted
        run.append(piece)
    if run:
        text.append("".join(run), style)
    return text


def active_line(frame: Frame) -> int | None:
    """The line (0-based, before wrapping) of the first position the latest pass filled."""
    if not frame.committed:
        return None
    first = min(frame.committed)
    return sum((piece or "").count("\n") for piece in frame.pieces[:first])


def render_status(frame: Frame, note: str = "") -> Text:
    """One line: `dcode-tiny · cpu · pass 12 · 40 masked · 3.1 tok/pass · 210 tok/s · 1.4 s` (a
    plain server's: `chunk 12`, `tok/chunk`). A `note` ("paused") leads the line in reverse, so a
    narrow terminal crops the numbers instead."""
    parts = [
        f"{frame.unit} {frame.forward}",
        *([f"repair fill {frame.repair_round}"] if frame.repair_round else []),
        "done" if frame.settled else f"{frame.masked} masked",
        f"{frame.tokens_per_pass:.1f} tok/{frame.unit}",
        f"{frame.tokens_per_second:.0f} tok/s",
        f"{frame.elapsed:.1f} s",
    ]
    text = Text(no_wrap=True, overflow="ellipsis")
    if note:
        text.append(f" {note} ", NOTE_STYLE)
        text.append(" ")
    text.append(frame.model, "bold")
    text.append(" · ", "dim")
    text.append(frame.device)
    for part in parts:
        text.append(" · ", "dim")
        text.append(part)
    return text


def render_frame(frame: Frame, note: str = "") -> Group:
    """Canvas above status: what the Rich Live fallback and the SVG export show."""
    return Group(render_canvas(frame), render_status(frame, note))


def export_svg(frame: Frame, path: str | Path, *, width: int = 80, title: str = "dcode new") -> str:
    """Write the frame (canvas + status) as an SVG terminal picture, e.g. for the README."""
    console = Console(record=True, file=StringIO(), width=width, force_terminal=True, color_system="truecolor")
    console.print(render_frame(frame))
    svg = console.export_svg(title=title)
    Path(path).write_text(svg, encoding="utf-8")
    return svg
