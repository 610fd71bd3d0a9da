"""The Textual app of the live view: the pipeline runs in a thread worker, widgets only draw
Frames. Owns the pace frames are drawn at (pace(): every pass, a person can follow, ~1 s added at
most), keys (q / ctrl+c cancel, p pauses) and the final frame; dcode.tui.run_live starts it.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from rich.text import Text
from textual import events as textual_events
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets import Footer, Static

from dcode.events import Event, drain
from dcode.render import DescribeEvent, EventSource, Frame, active_line, render_canvas, render_status

# The pace: each frame stays at least FRAME_SECONDS on screen, so a person can follow the
# refinement even when the sampler is faster (dcode-tiny on a CPU: 8 passes in 0.6 s). Frames the
# view has not drawn when the stream ends are drawn then, at most REPLAY_FRAMES of them (spread
# evenly by pace()), and with exit_when_done the final frame gets a tick on screen before the view
# closes: at most about 1 s added to a run. A run without the app (piped, --no-live) has no pace.
FRAME_SECONDS = 0.1
REPLAY_FRAMES = 9  # 9 frames and the closing tick: 1 s
# While the sampler runs, the view draws a frame only while its thread has used at most this share
# of one core since the sampler started. Measured on 2 cores: a frame takes ~10-20 ms of the UI
# thread, and the sampler loses ~1.5x the UI thread's CPU time (its torch threads wait for the core
# the view takes), so a fixed 4 frames/s cost short requests ~20%. The budget adapts the frame rate
# to the machine; what it holds back is drawn once the sampler is done.
VIEW_CPU_SHARE = 0.05


def pace(waiting: int, room: int) -> list[int]:
    """Which of `waiting` frames (oldest first) to draw when there is room for `room`: all when they
    fit, else `room` of them spread evenly, the newest always among them.
    Example: pace(3, 9) -> [0, 1, 2]; pace(10, 4) -> [1, 4, 6, 9]."""
    room = max(1, room)
    if waiting <= room:
        return list(range(waiting))
    return [(k + 1) * waiting // room - 1 for k in range(room)]


@dataclass(frozen=True)
class LiveResult:
    """What LiveApp.run() returns."""

    result: Event | None = None  # the stream's last event (its result record); None if it yielded none
    cancelled: bool = False  # q or ctrl+c before the stream ended
    error: Exception | None = None  # what the event source raised


class UserCancelled(Exception):
    """Raised in the worker between events to stop the stream when the user presses q or ctrl+c."""


class StreamOver(Message):
    def __init__(self, ended: LiveResult) -> None:
        super().__init__()
        self.ended = ended


class CanvasView(ScrollView):
    """The canvas, drawn with Textual's line API: a frame costs the lines on screen (rendered once
    each, then cached), not the whole file, and needs no layout pass. Long lines scroll sideways."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.text = Text()  # what is shown, for tests and the final frame
        self.lines: list[Text] = []
        # A line's text and spans -> its rendered strip, kept across frames: a pass changes a few
        # lines, so most of a frame's lines are drawn from here.
        self.strips: dict[tuple[str, tuple[object, ...]], Strip] = {}

    def show(self, text: Text) -> None:
        self.text = text
        self.lines = list(text.split("\n", allow_blank=True))
        if len(self.strips) > 4096:
            self.strips = {}
        size = Size(max((line.cell_len for line in self.lines), default=0), len(self.lines))
        if size != self.virtual_size:
            self.virtual_size = size
        self.refresh()

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        index = y + scroll_y
        width = self.scrollable_content_region.width
        if index >= len(self.lines):
            return Strip.blank(width, self.rich_style)
        line = self.lines[index]
        key = (line.plain, tuple(line.spans))
        strip = self.strips.get(key)
        if strip is None:
            strip = self.strips[key] = Strip(list(line.render(self.app.console, end="")), line.cell_len)
        return strip.crop_extend(scroll_x, scroll_x + width, self.rich_style)


class LiveApp(App[LiveResult]):
    """Draws the canvas as the sampler refines it, one frame a tick at most (FRAME_SECONDS), the
    frames it could not draw while the sampler ran after it (pace()). q / ctrl+c cancel, p pauses;
    once done the settled frame stays until any key (or, with exit_when_done, for one tick)."""

    CSS = """
    #canvas { height: 1fr; }
    #status { height: 1; background: $panel; }
    """
    BINDINGS = [
        Binding("q", "cancel", "quit", priority=True),
        Binding("ctrl+c", "cancel", "quit", show=False, priority=True),
        Binding("p", "pause", "pause / resume", priority=True),
    ]

    def __init__(
        self,
        events: EventSource,
        describe_event: DescribeEvent,
        *,
        exit_when_done: bool = False,
        cpu_share: float = VIEW_CPU_SHARE,
    ) -> None:
        super().__init__()
        self.cpu_share = cpu_share  # see VIEW_CPU_SHARE; 1.0 draws a frame every tick
        self.events = events
        self.describe_event = describe_event
        self.exit_when_done = exit_when_done
        self.cancelled = threading.Event()  # checked by the worker between steps
        self.running = threading.Event()  # cleared while paused: the worker pulls no event
        self.running.set()
        self.ended: LiveResult | None = None  # set once the stream is over
        self.frame: Frame | None = None  # the frame on screen, redrawn with a note
        self.waiting: list[Frame] = []  # frames described and not drawn yet, oldest first
        self.lock = threading.Lock()  # guards waiting: the worker appends, the UI thread takes
        self.cpu_at_start = self.wall_at_start = 0.0  # UI thread CPU time and clock when the sampler started

    def compose(self) -> ComposeResult:
        yield CanvasView(id="canvas")
        yield Static(id="status")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#status", Static).update("starting…")
        self.set_interval(FRAME_SECONDS, self.tick)
        # The sampler starts once the first screen is painted, so that it does not compete for
        # the GIL with the app's start-up (layout, styles, the driver), which costs it ~20%.
        self.call_after_refresh(self.start)

    def start(self) -> None:
        self.cpu_at_start, self.wall_at_start = time.thread_time(), time.perf_counter()
        self.consume()

    def within_budget(self) -> bool:
        """Whether the UI thread may draw now: its CPU time since the sampler started is within
        cpu_share of the wall time (called on the UI thread)."""
        used = time.thread_time() - self.cpu_at_start
        return used <= self.cpu_share * (time.perf_counter() - self.wall_at_start)

    # -- the worker thread: pulls events, describes them, hands frames to the UI thread -----------

    @work(thread=True, exit_on_error=False)
    def consume(self) -> None:
        began = time.perf_counter()
        paused = 0.0  # seconds spent paused, left out of elapsed

        def show(event: Event) -> None:
            """Describe one event for the view, then hold the stream while paused; between events
            is where a cancel stops it."""
            nonlocal paused
            frame = self.describe_event(event, time.perf_counter() - began - paused)
            if frame is not None:
                with self.lock:
                    self.waiting.append(frame)
            if not self.running.is_set():
                waited = time.perf_counter()
                self.running.wait()
                paused += time.perf_counter() - waited
            if self.cancelled.is_set():
                raise UserCancelled

        try:
            result = drain(self.events(), show)  # closes the stream here, in its own thread
        except UserCancelled:
            return
        except Exception as error:  # handed to the caller, who reports it
            self.post_message(StreamOver(LiveResult(error=error)))
            return
        self.post_message(StreamOver(LiveResult(result=result)))

    # -- the UI thread: draws frames at the pace, handles keys --------------------------------------

    def tick(self) -> None:
        """Every FRAME_SECONDS: draw the next frame due (while the sampler runs, if the CPU budget
        allows it); once the stream is over and its frames are drawn, close if asked to."""
        if self.ended is None and not self.within_budget():
            return
        with self.lock:
            due = pace(len(self.waiting), REPLAY_FRAMES)
            frame = self.waiting[due[0]] if due else None
            del self.waiting[: due[0] + 1 if due else 0]
        if frame is not None:
            self.draw(frame)
        elif self.ended is not None and self.exit_when_done:
            self.exit(self.ended)  # the final frame has been on screen for a tick

    def draw(self, frame: Frame | None) -> None:
        if frame is not None:
            self.frame = frame
            self.query_one("#canvas", CanvasView).show(render_canvas(frame))
            self.follow(frame)
        if self.frame is None:
            return
        note = ""
        if self.ended is not None and not self.waiting:  # the final frame is on screen
            note = "" if self.exit_when_done else "any key closes"
        elif not self.running.is_set():
            note = "paused"
        self.query_one("#status", Static).update(render_status(self.frame, note), layout=False)  # height 1

    def follow(self, frame: Frame) -> None:
        """Keep the line the sampler just wrote in view; show the top once settled."""
        scroll = self.query_one("#canvas", CanvasView)
        line = 0 if frame.settled else active_line(frame)
        if line is not None:
            scroll.scroll_to(y=max(0, line - scroll.size.height // 2), animate=False, immediate=True)

    def on_stream_over(self, message: StreamOver) -> None:
        if self.cancelled.is_set():
            return
        self.ended = message.ended
        if message.ended.error is not None:
            self.exit(message.ended)
            return
        with self.lock:  # what the sampler outran: at most REPLAY_FRAMES, spread evenly, the last kept
            self.waiting = [self.waiting[i] for i in pace(len(self.waiting), REPLAY_FRAMES)]
        self.draw(None)

    def action_cancel(self) -> None:
        if self.ended is not None:
            self.exit(self.ended)
            return
        self.cancelled.set()
        self.running.set()  # a paused worker wakes up, sees the flag and stops
        self.exit(LiveResult(cancelled=True))

    def action_pause(self) -> None:
        if self.ended is not None:
            self.exit(self.ended)
            return
        if self.running.is_set():
            self.running.clear()
        else:
            self.running.set()
        self.draw(None)

    def on_key(self, event: textual_events.Key) -> None:
        if self.ended is not None:
            self.exit(self.ended)
