"""The live view driven with App.run_test() and Pilot over a fake event source: a Started,
hand-made Steps (torch tensors) and a final Finished, counting how many events the worker pulled."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from io import StringIO

import pytest
from rich.console import Console
from test_render import ANSWER, EOS, MASK, PAD, Tokenizer, draft_started, step
from textual.widgets import Static

from dcode import tui
from dcode.events import Finished, Started
from dcode.render import COMMITTED_STYLE, MASK_STYLE, Describer, Frame
from dcode.tui import live_frame, run_live, run_rich
from dcode.tui_app import FRAME_SECONDS, REPLAY_FRAMES, CanvasView, LiveApp, LiveResult, pace

CODE = "def add(a, b):\n    return a + b\n"
FINISHED = Finished(code=CODE, prompt_tokens=2, tokens=9, masks=len(ANSWER), forward=5, seconds=0.1)


def refinement() -> list:
    """Five passes that fill ANSWER: the end first, then "def add(a, b):", then the body."""
    order = [[9, 10], [0, 1, 2], [3, 4], [5, 6], [7, 8]]
    canvas, steps = [MASK] * len(ANSWER), []
    for forward, positions in enumerate(order, 1):
        for i in positions:
            canvas[i] = ANSWER[i]
        steps.append(step(list(canvas), positions, forward))
    return steps


STEPS = refinement()


class Source:
    """The fake pipeline: `started`, then `steps` then FINISHED (or `fail` raised), `delay` seconds
    before each; `gate`, when given, is waited on before each event after the first two. `pulled`
    counts the steps and FINISHED."""

    def __init__(
        self,
        steps: list,
        *,
        delay: float = 0.0,
        fail: Exception | None = None,
        gate: threading.Event | None = None,
        started: Started | None = None,
    ) -> None:
        self.steps, self.delay, self.fail, self.gate = steps, delay, fail, gate
        self.started = started or draft_started()
        self.pulled = 0
        self.closed = False

    def __call__(self):
        try:
            yield self.started
            for i, s in enumerate([*self.steps, FINISHED]):
                if self.gate is not None and i > 1:
                    self.gate.wait(timeout=5)
                time.sleep(self.delay)
                if self.fail is not None and i == len(self.steps):
                    raise self.fail
                self.pulled += 1
                yield s
        finally:
            self.closed = True


def describer() -> Describer:
    return Describer(Tokenizer(), MASK, model="fake", device="cpu", hidden={EOS, PAD})


def canvas_text(app: LiveApp) -> str:
    return app.query_one("#canvas", CanvasView).text.plain


def status_text(app: LiveApp) -> str:
    return str(app.query_one("#status", Static).content)


def settled(app: LiveApp) -> bool:
    """Whether the final frame is on screen."""
    return app.frame is not None and app.frame.settled


async def until(pilot, condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await pilot.pause(0.02)


def drive(app: LiveApp, script) -> LiveResult | None:
    """Run `script(pilot)` against the app in headless mode; the app's return value."""

    async def main() -> None:
        async with app.run_test(size=(60, 12)) as pilot:
            await script(pilot)

    asyncio.run(main())  # also joins the worker thread
    return app.return_value


def drive_to_the_end(app: LiveApp) -> LiveResult | None:
    """Run until the stream is over and the settled code is on screen, close with a key."""

    async def script(pilot):
        await until(pilot, lambda: app.ended is not None)
        await until(pilot, lambda: settled(app))  # after the frames the view was behind
        assert canvas_text(app) == CODE
        await pilot.press("enter")

    return drive(app, script)


def test_steps_render_then_the_final_frame_stays_until_a_key():
    gate = threading.Event()
    source = Source(STEPS[:3] + STEPS[4:], gate=gate)
    app = LiveApp(source, describer(), cpu_share=1.0)

    async def script(pilot):
        # the second pass is drawn while the source is held back: its tokens highlighted
        await until(pilot, lambda: canvas_text(app) == "def add(a, b):······")
        assert status_text(app).startswith("fake · cpu · pass 2 · 6 masked · 2.5 tok/pass")
        spans = app.query_one("#canvas", CanvasView).text.spans
        # "def add(a, b):", the second pass's three tokens, as one highlighted run; then the masks
        assert [(s.start, s.end, s.style) for s in spans] == [(0, 14, COMMITTED_STYLE), (14, 20, MASK_STYLE)]
        gate.set()
        await until(pilot, lambda: app.ended is not None)
        await until(pilot, lambda: settled(app))  # after the passes the view was behind
        assert canvas_text(app) == CODE
        # settled: the result's numbers, as the summary line prints them (FINISHED says 5 passes)
        assert status_text(app).startswith(" any key closes  fake · cpu · pass 5 · done")
        spans = app.query_one("#canvas", CanvasView).text.spans
        assert any(s.start == 0 and s.end == 3 for s in spans)  # "def" highlighted as a keyword
        await pilot.pause(0.2)
        assert app.is_running  # still showing the final frame
        await pilot.press("x")

    ended = drive(app, script)
    assert ended == LiveResult(result=FINISHED)
    assert source.pulled == len(STEPS)


def test_q_cancels_without_draining_the_source():
    source = Source(STEPS * 60, delay=0.02)
    app = LiveApp(source, describer(), cpu_share=1.0)

    async def script(pilot):
        await until(pilot, lambda: source.pulled >= 3)
        await pilot.press("q")

    assert drive(app, script) == LiveResult(cancelled=True)
    assert source.pulled < len(STEPS) * 60
    assert source.closed  # the worker closed the generator in its own thread


def test_p_pauses_consumption_and_resumes():
    source = Source(STEPS * 60, delay=0.01)
    app = LiveApp(source, describer(), cpu_share=1.0)

    async def script(pilot):
        await until(pilot, lambda: source.pulled >= 3)
        await pilot.press("p")
        await pilot.pause(0.1)  # an event being pulled when p was pressed may still arrive
        held = source.pulled
        await pilot.pause(0.4)
        assert source.pulled == held
        assert status_text(app).startswith(" paused  fake · cpu")
        await pilot.press("p")
        await until(pilot, lambda: source.pulled > held + 2)
        assert "paused" not in status_text(app)
        await pilot.press("ctrl+c")

    assert drive(app, script) == LiveResult(cancelled=True)


class Recording(LiveApp):
    """A LiveApp that notes each frame it draws (and when), when the stream ended and when it exits."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.drawn: list[tuple[float, Frame]] = []
        self.over_at = self.exit_at = 0.0
        self.on_screen_at_exit: Frame | None = None

    def draw(self, frame):
        if frame is not None:
            self.drawn.append((time.monotonic(), frame))
        super().draw(frame)

    def on_stream_over(self, message):
        self.over_at = time.monotonic()
        super().on_stream_over(message)

    def exit(self, *args, **kwargs):
        if not self.exit_at:
            self.exit_at, self.on_screen_at_exit = time.monotonic(), self.frame
        super().exit(*args, **kwargs)


def passes(count: int) -> list:
    """`count` passes (2 to 10) over ANSWER: the end first, then one position a pass, the rest last."""
    groups = [[9, 10], *[[i] for i in range(count - 2)]]
    groups.append([i for i in range(len(ANSWER)) if not any(i in g for g in groups)])
    canvas, steps = [MASK] * len(ANSWER), []
    for forward, positions in enumerate(groups, 1):
        for i in positions:
            canvas[i] = ANSWER[i]
        steps.append(step(list(canvas), positions, forward))
    return steps


@pytest.mark.parametrize(("waiting", "room"), [(0, 9), (3, 9), (9, 9), (10, 9), (10, 4), (101, 9), (500, 7), (5, 0)])
def test_pace_draws_all_that_fit_else_an_even_spread_ending_with_the_newest(waiting: int, room: int) -> None:
    picked = pace(waiting, room)
    assert len(picked) == min(waiting, max(1, room))
    if waiting <= max(1, room):
        assert picked == list(range(waiting))
    else:
        gaps = [b - a for a, b in zip([-1, *picked], picked, strict=False)]
        assert picked[-1] == waiting - 1 and max(gaps) - min(gaps) <= 1  # even: gaps differ by one at most
    assert pace(10, 4) == [1, 4, 6, 9]


def test_every_pass_of_a_short_fast_run_is_drawn_in_order_at_a_pace():
    """8 passes with no time between them (dcode-tiny's 8 take 0.6 s on a CPU), the default CPU
    budget: the view draws each pass, in order, a tick apart, then the settled frame."""
    app = Recording(Source(passes(8)), describer(), exit_when_done=True)
    assert app.run(headless=True, size=(60, 12)) == LiveResult(result=FINISHED)
    assert [frame.forward for _, frame in app.drawn if not frame.settled] == list(range(1, 9))  # each once, in order
    assert app.drawn[-1][1].settled and app.on_screen_at_exit is app.drawn[-1][1]
    times = [at for at, _ in app.drawn]
    assert min(b - a for a, b in zip(times, times[1:], strict=False)) >= 0.5 * FRAME_SECONDS
    assert app.exit_at - app.over_at <= (REPLAY_FRAMES + 1) * FRAME_SECONDS + 1.0  # about 1 s added, at most


def test_exit_when_done_shows_the_final_frame_for_a_tick_first():
    app = Recording(Source(STEPS), describer(), exit_when_done=True, cpu_share=1.0)
    assert app.run(headless=True, size=(60, 12)) == LiveResult(result=FINISHED)
    shown_at, final = app.drawn[-1]
    assert final.settled and app.on_screen_at_exit is final
    assert app.exit_at - shown_at >= 0.5 * FRAME_SECONDS  # on screen for a tick, not closed in the same breath


def test_a_long_fast_run_drops_frames_evenly_and_adds_at_most_the_replay():
    """With no CPU budget nothing is drawn while the sampler runs (it is never slowed); after it,
    REPLAY_FRAMES frames spread evenly over what it outran, the settled one last."""
    steps = [step(ANSWER, [0], forward) for forward in range(1, 101)]
    app = Recording(Source(steps), describer(), exit_when_done=True, cpu_share=0.0)
    assert app.run(headless=True, size=(60, 12)) == LiveResult(result=FINISHED)
    assert all(at >= app.over_at for at, _ in app.drawn)
    waiting = [*range(1, 101), "settled"]
    expected = [waiting[i] for i in pace(len(waiting), REPLAY_FRAMES)]
    assert [("settled" if f.settled else f.forward) for _, f in app.drawn] == expected
    assert app.exit_at - app.over_at <= (REPLAY_FRAMES + 1) * FRAME_SECONDS + 1.0


def test_frames_are_dropped_but_the_last_is_drawn():
    source = Source(STEPS * 100)
    app = Recording(source, describer(), cpu_share=1.0)
    assert drive_to_the_end(app) == LiveResult(result=FINISHED)
    assert source.pulled == len(STEPS) * 100 + 1
    assert 1 <= len(app.drawn) < 100 and app.drawn[-1][1].settled


def test_the_view_follows_the_active_line_then_shows_the_top():
    answer = [3, 6] * 30  # "def\n" thirty times: taller than the screen
    steps = [step([*answer[:56], MASK, MASK, MASK, MASK], list(range(56)), 1), step(answer, [56, 57, 58, 59], 2)]
    gate = threading.Event()
    source = Source(steps, gate=gate, started=draft_started(len(answer)))
    long = Describer(Tokenizer(), MASK, model="fake", device="cpu")
    app = LiveApp(source, long, cpu_share=1.0)

    async def script(pilot):
        await until(pilot, lambda: "pass 2" in status_text(app))
        scroll = app.query_one("#canvas", CanvasView)
        await until(pilot, lambda: scroll.scroll_y > 15)  # line 28 written last, kept in view
        gate.set()
        await until(pilot, lambda: app.ended is not None)
        await until(pilot, lambda: scroll.scroll_y == 0)
        await pilot.press("x")

    assert drive(app, script) == LiveResult(result=FINISHED)


def test_exit_when_done_exits_by_itself():
    source = Source(STEPS)
    ended = LiveApp(source, describer(), exit_when_done=True, cpu_share=1.0).run(headless=True, size=(60, 12))
    assert ended == LiveResult(result=FINISHED)


def test_an_exception_in_the_source_is_returned():
    error = RuntimeError("CUDA out of memory")
    source = Source(STEPS[:2], fail=error)
    ended = LiveApp(source, describer(), cpu_share=1.0).run(
        headless=True, size=(60, 12)
    )  # exits even without exit_when_done
    assert ended is not None and ended.error is error and not ended.cancelled


# -- run_live: what the CLI calls -------------------------------------------------------------------


@pytest.fixture
def headless(monkeypatch):
    """LiveApp.run without a terminal, so run_live's textual path runs under pytest."""
    run = LiveApp.run
    monkeypatch.setattr(LiveApp, "run", lambda self, **kw: run(self, headless=True, size=(60, 12)))


def test_run_live_textual_returns_the_finished_record(headless):
    assert run_live(Source(STEPS), describer(), view="textual", exit_when_done=True) is FINISHED


def test_run_live_raises_the_source_error_in_the_caller(headless):
    error = ValueError("the prompt is empty")
    with pytest.raises(ValueError) as raised:
        run_live(Source([], fail=error), describer(), view="textual", exit_when_done=True)
    assert raised.value is error


def test_run_live_cancel_is_a_keyboard_interrupt(monkeypatch):
    monkeypatch.setattr(LiveApp, "run", lambda self, **kw: LiveResult(cancelled=True))
    with pytest.raises(KeyboardInterrupt):
        run_live(Source(STEPS), describer(), view="textual")


def test_run_live_without_a_view_drains_the_source():
    source = Source(STEPS)
    assert run_live(source, describer(), view="none") is FINISHED
    assert source.pulled == len(STEPS) + 1


def test_no_view_and_the_rich_fallback_keep_no_pace():
    """A run without the app (--no-live, a piped stdin) is never held back to show its passes."""
    began = time.monotonic()
    assert run_live(Source(passes(8)), describer(), view="none") is FINISHED
    console = Console(file=StringIO(), width=40, height=10, force_terminal=True, color_system=None)
    assert run_rich(Source(passes(8)), describer(), console=console) is FINISHED
    assert time.monotonic() - began < 8 * FRAME_SECONDS  # what the app's pace would take for the two


def test_rich_fallback_draws_the_same_canvas_on_its_console():
    out = StringIO()
    console = Console(file=out, width=40, height=10, force_terminal=True, color_system=None)
    assert run_rich(Source(STEPS), describer(), console=console) is FINISHED
    assert "return" in out.getvalue() and "pass 5" in out.getvalue()


@pytest.mark.parametrize(("committed", "shown"), [(17, range(15, 19)), (1, range(0, 4)), (None, range(0, 4))])
def test_rich_fallback_shows_the_lines_around_the_latest_pass(committed, shown):
    describe = describer()
    describe(draft_started(), 0.0)
    base = describe(step(ANSWER, [0], 1), 0.5)
    assert base is not None
    pieces = tuple(f"line{i}\n" for i in range(20))
    frame = replace(base, pieces=pieces, committed=frozenset() if committed is None else frozenset({committed}))
    console = Console(file=StringIO(), width=40, height=6, color_system=None)
    console.print(live_frame(frame, console))
    lines = console.file.getvalue().splitlines()  # type: ignore[attr-defined]
    assert lines[:4] == [f"line{i}" for i in shown]
    assert lines[4].startswith("fake · cpu · pass 1") and len(lines) == 5


class Stream(StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


@pytest.mark.parametrize(
    ("platform", "stdin", "stdout", "stderr", "view"),
    [
        ("linux", True, False, True, "textual"),  # stdout redirected: Textual draws on stderr
        ("linux", False, True, True, "rich"),  # piped prompt: no keys
        ("win32", True, False, True, "rich"),  # Textual's Windows driver draws on stdout
        ("win32", True, True, True, "textual"),
    ],
)
def test_pick_view(monkeypatch, platform, stdin, stdout, stderr, view):
    monkeypatch.setattr(tui.sys, "platform", platform)
    for name, tty in (("__stdin__", stdin), ("__stdout__", stdout), ("__stderr__", stderr)):
        monkeypatch.setattr(tui.sys, name, Stream(tty))
    assert tui.pick_view() == view
