"""The live refinement view: `run_live` picks the Textual app (dcode.tui_app), a Rich Live view
on stderr, or no view at all. Knows nothing about models or tokenizers: it gets a callable that
starts the event stream and a callable that turns an event into a render.Frame. Textual is
imported only when the app draws, so a run without a view (a pipe, -q, CI) does not load it.

Terminal streams: Textual's Linux/macOS driver (textual/drivers/linux_driver.py) writes to
`sys.__stderr__` and reads keys from `sys.__stdin__`, so stdout may be redirected
(`dcode new ... > f.py`) while the app draws; with a piped stdin it cannot read keys, and
`run_live` falls back to Rich Live on stderr (see pick_view).
"""

from __future__ import annotations

import sys
import time
from typing import Literal

from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from dcode.events import Event, drain
from dcode.render import DescribeEvent, EventSource, Frame, active_line, render_canvas, render_status

View = Literal["auto", "textual", "rich", "none"]


# -- what the CLI calls ----------------------------------------------------------------------------


def pick_view() -> Literal["textual", "rich"]:
    """Textual when it can read keys (stdin is a terminal) and draw on one; else Rich Live.

    Textual's Linux/macOS driver draws on sys.__stderr__, its Windows driver on sys.__stdout__,
    so on Windows a redirected stdout also means Rich Live (which draws on stderr)."""
    stdin, stderr, stdout = sys.__stdin__, sys.__stderr__, sys.__stdout__
    screen = stdout if sys.platform == "win32" else stderr
    if stdin is not None and screen is not None and stdin.isatty() and screen.isatty():
        return "textual"
    return "rich"


def run_live(
    events: EventSource, describe_event: DescribeEvent, *, view: View = "auto", exit_when_done: bool = False
) -> Event | None:
    """Run the event stream under a live view and return its last event (its result record).

    view: "textual" (the app on the terminal, via stderr), "rich" (Rich Live on stderr, no keys),
    "none" (just drain), "auto" (pick_view()). Cancelling (q, ctrl+c) raises KeyboardInterrupt;
    an exception from the stream is raised again here, in the caller's thread.
    """
    if view == "auto":
        view = pick_view()
    if view == "none":
        return drain(events())
    if view == "rich":
        return run_rich(events, describe_event)
    from dcode.tui_app import LiveApp

    ending = LiveApp(events, describe_event, exit_when_done=exit_when_done).run()
    if ending is None or ending.cancelled:
        raise KeyboardInterrupt
    if ending.error is not None:
        raise ending.error
    return ending.result


def run_rich(events: EventSource, describe_event: DescribeEvent, console: Console | None = None) -> Event | None:
    """The fallback: the same canvas and status in a transient Rich Live on stderr, on this
    thread (so ctrl+c raises KeyboardInterrupt here). Returns the stream's last event."""
    console = console or Console(stderr=True)
    began = time.perf_counter()

    def draw(event: Event) -> None:
        frame = describe_event(event, time.perf_counter() - began)
        if frame is not None:
            live.update(live_frame(frame, console))

    with Live(console=console, transient=True, refresh_per_second=15) as live:
        return drain(events(), draw)


def live_frame(frame: Frame, console: Console) -> Group:
    """Canvas and status for the fallback, the canvas cut to the lines that fit above the status,
    centred on the line the sampler just wrote (Live cannot scroll)."""
    keep = max(1, console.height - 2)
    logical = render_canvas(frame).split("\n", allow_blank=True)
    line = active_line(frame)
    first = 0 if line is None else max(0, min(line - keep // 2, len(logical) - keep))
    lines = Text("\n").join(logical[first:]).wrap(console, console.width)
    return Group(Text("\n").join(lines[:keep]), render_status(frame))
