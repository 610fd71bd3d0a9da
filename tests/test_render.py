"""The live view's pure parts: a Step as a Frame (step_frame, and the Describer over the typed
events), rendered as Rich Text, checked as exact plain text, exact styles of chosen ranges, and
text rendered into a fixed-width StringIO Console."""

from __future__ import annotations

import sys
from dataclasses import replace
from io import StringIO
from pathlib import Path

import torch
from rich.console import Console
from rich.style import Style

from dcode.events import Finished, RepairRound, Started, Step
from dcode.render import (
    COMMITTED_STYLE,
    MASK_STYLE,
    NOTE_STYLE,
    REMASK_STYLE,
    Describer,
    Frame,
    active_line,
    export_svg,
    render_canvas,
    render_frame,
    render_status,
    step_frame,
    token_pieces,
)

PAD, EOS, MASK = 0, 1, 2
VOCAB = {
    12: "\x1b[2J\r",
    3: "def",
    4: " add",
    5: "(a, b):",
    6: "\n",
    7: "    return",
    8: " a",
    9: " +",
    10: " b",
    11: "#",
}
PROMPT = [11, 11]  # two prompt tokens, then the answer region
ANSWER = [3, 4, 5, 6, 7, 8, 9, 10, 6, EOS, PAD]  # "def add(a, b):\n    return a + b\n" <eos> <pad>


class Tokenizer:
    """The two tokenizer calls token_pieces makes, over VOCAB; counts them to check the cache."""

    def __init__(self) -> None:
        self.calls = 0

    def convert_ids_to_tokens(self, ids: list[int]) -> list[str]:
        self.calls += 1
        return [VOCAB.get(i, f"<{i}>") for i in ids]

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        return "".join(tokens)


def step(answer: list[int], committed: list[int], forward: int) -> Step:
    """A Step over PROMPT + answer; `committed` holds answer offsets."""
    canvas = torch.tensor(PROMPT + answer)
    return Step(
        canvas=canvas,
        committed=torch.tensor([len(PROMPT) + i for i in committed]),
        scores=torch.ones(len(committed)),
        block=(len(PROMPT), len(canvas)),
        forward=forward,
        input_tokens=len(canvas),
        masked=answer.count(MASK),
        done=MASK not in answer,
    )


# pass 3 of 4: "return" just committed, " a + b" still masked, the end already decided
MID = [3, 4, 5, 6, 7, MASK, MASK, MASK, 6, EOS, PAD]


def mid_frame(**kwargs) -> Frame:
    pieces = token_pieces(Tokenizer(), MID, MASK, hidden=frozenset({EOS, PAD}))
    s = step(MID, committed=[4, 8], forward=3)
    return step_frame(s, pieces, len(PROMPT), model="dcode-tiny", device="cpu", elapsed=0.5, **kwargs)


def plain(renderable, width: int = 40) -> str:
    console = Console(file=StringIO(), width=width, color_system=None, force_terminal=False)
    console.print(renderable)
    return console.file.getvalue()


def test_token_pieces_masks_hidden_and_cache():
    tokenizer = Tokenizer()
    cache: dict[int, str] = {}
    ids = torch.tensor([3, MASK, 4, 4, EOS, 6])
    assert token_pieces(tokenizer, ids, MASK, hidden=frozenset({EOS}), cache=cache) == [
        "def",
        None,
        " add",
        " add",
        "",
        "\n",
    ]
    assert tokenizer.calls == 3  # 3, 4 and 6 decoded once each
    token_pieces(tokenizer, [4, 6, 3], MASK, cache=cache)
    assert tokenizer.calls == 3


def test_control_characters_never_reach_the_terminal():
    assert token_pieces(Tokenizer(), [12, 6, 3], MASK) == ["␛[2J␍", "\n", "def"]
    frame = replace(mid_frame(), pieces=("x = '\x1b[2J' # \r\n",), settled=True)
    assert render_canvas(frame).plain == "x = '␛[2J' # ␍\n"


def test_token_pieces_real_tokenizer_keeps_layout():
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(Path(__file__).parents[1] / "dcode" / "assets" / "dcode-tiny")
    source = "def f(x):\n    return x + 1\n"
    ids = tokenizer.encode(source, add_special_tokens=False)
    pieces = token_pieces(tokenizer, ids + [tokenizer.mask_token_id], tokenizer.mask_token_id)
    assert pieces[-1] is None
    assert "".join(pieces[:-1]) == source


def test_step_frame_counts_and_positions():
    frame = mid_frame()
    assert frame.pieces == ("def", " add", "(a, b):", "\n", "    return", None, None, None, "\n", "", "")
    assert frame.committed == frozenset({4, 8})  # answer offsets, not canvas positions
    assert (frame.forward, frame.masked, frame.filled) == (3, 3, 6)
    assert frame.tokens_per_pass == 2.0
    assert frame.tokens_per_second == 12.0


def test_render_canvas_plain_text_and_styles():
    text = render_canvas(mid_frame(remasked=frozenset({len(PROMPT) + 6})))
    assert text.plain == "def add(a, b):\n    return···\n"
    styles = {(span.start, span.end): span.style for span in text.spans}
    assert styles[(15, 25)] == COMMITTED_STYLE  # "    return", committed this pass
    assert text.plain[15:25] == "    return"
    assert styles[(25, 26)] == MASK_STYLE
    assert styles[(26, 27)] == REMASK_STYLE  # re-masked by the repair pass
    assert styles[(27, 28)] == MASK_STYLE
    assert styles[(28, 29)] == COMMITTED_STYLE  # the committed newline
    assert all(span.end <= 15 or span.start >= 15 for span in text.spans)  # "def add(a, b):\n" plain


def test_active_line_is_where_the_latest_pass_wrote():
    assert active_line(mid_frame()) == 1  # "    return" on the second line
    assert active_line(replace(mid_frame(), committed=frozenset())) is None


def test_render_canvas_wraps_masks_in_a_narrow_console():
    frame = replace(mid_frame(), pieces=("x = ", *([None] * 12), "\n"), committed=frozenset())
    # a run of masks wraps like a long word: moved to its own line, then folded at the width
    assert plain(render_canvas(frame), width=8) == "x = \n········\n····\n\n"


def test_render_status_exact_line_and_styles():
    frame = replace(mid_frame(), forward=12, masked=40, filled=37, elapsed=0.1762)
    status = render_status(frame)
    assert status.plain == "dcode-tiny · cpu · pass 12 · 40 masked · 3.1 tok/pass · 210 tok/s · 0.2 s"
    assert status.spans[0].style == "bold" and (status.spans[0].start, status.spans[0].end) == (0, 10)
    paused = render_status(frame, "paused")
    assert paused.plain == " paused  " + status.plain  # first, so a narrow terminal keeps it
    assert paused.spans[0].style == NOTE_STYLE and (paused.spans[0].start, paused.spans[0].end) == (0, 8)
    assert render_status(replace(frame, settled=True)).plain.split(" · ")[3] == "done"


def test_mid_refinement_snapshot():
    expected = (
        "def add(a, b):\n    return···\n\ndcode-tiny · cpu · pass 3 · 3 masked · 2.0 tok/pass · 12 tok/s · 0.5 s\n"
    )
    assert plain(render_frame(mid_frame()), width=80) == expected


def draft_started(answer: int = len(ANSWER)) -> Started:
    """The Started of a draft over PROMPT + `answer` positions, all of them to fill."""
    span = (len(PROMPT), len(PROMPT) + answer)
    return Started(span, (span,))


def test_describer_follows_a_repair_round_on_a_shorter_canvas():
    describer = Describer(Tokenizer(), MASK, model="m", device="cpu", hidden={EOS, PAD})
    assert describer(draft_started(), 0.0) is None
    draft = describer(step(ANSWER, committed=list(range(len(ANSWER))), forward=1), 0.1)
    assert draft is not None and draft.remasked == frozenset() and draft.repair_round == 0
    assert draft.code == "def add(a, b):\n    return a + b\n"
    # repair: the code's tokens without end/pad, " a + b" masked again plus one mask of room
    canvas = [3, 4, 5, 6, 7, MASK, MASK, MASK, MASK, 6]
    again = len(PROMPT) + 5, len(PROMPT) + 9
    answer = (len(PROMPT), len(PROMPT) + len(canvas))
    assert describer(Started(answer, (again,), repair_round=1, attempt=1), 0.15) is None
    first = describer(step([8 if i == 5 else t for i, t in enumerate(canvas)], committed=[5], forward=1), 0.2)
    assert first is not None and first.repair_round == 1
    assert first.committed == frozenset({5}) and first.remasked == frozenset({6, 7, 8})
    canvas = [3, 4, 5, 6, 7, 8, 9, 10, MASK, 6]
    second = describer(step(canvas, committed=[6, 7], forward=2), 0.3)
    assert second is not None and second.remasked == frozenset({8}) and second.repair_round == 1
    assert (second.forward, second.filled) == (3, 11 + 1 + 2)  # passes and commits over the run
    text = render_canvas(second)
    assert text.plain == "def add(a, b):\n    return a + b·\n"
    styles = {(span.start, span.end): span.style for span in text.spans}
    assert styles[(27, 31)] == COMMITTED_STYLE and styles[(31, 32)] == REMASK_STYLE  # one span per run
    assert render_status(second).plain.startswith("m · cpu · pass 3 · repair fill 1 · 1 masked · 4.7 tok/pass")
    # a round's second try counts as the next fill, and only its own Started re-marks positions
    describer(Started(answer, (again,), repair_round=1, attempt=2), 0.35)
    retry = describer(step([3, 4, 5, 6, 7, MASK, MASK, MASK, MASK, 6], committed=[], forward=1), 0.4)
    assert retry is not None and retry.repair_round == 2 and retry.remasked == frozenset({5, 6, 7, 8})


def test_masks_that_reappear_without_a_started_are_not_a_repair_round():
    """The Describer reads rounds from Started events, never by watching masks come back."""
    describer = Describer(Tokenizer(), MASK, model="m", device="cpu", hidden={EOS, PAD})
    describer(draft_started(), 0.0)
    describer(step(ANSWER, committed=list(range(len(ANSWER))), forward=1), 0.1)
    frame = describer(step(MID, committed=[4], forward=2), 0.2)
    assert frame is not None and frame.repair_round == 0 and frame.remasked == frozenset()


def test_describer_takes_the_answer_start_from_started():
    describer = Describer(Tokenizer(), MASK, model="m", device="cpu")
    describer(draft_started(), 0.0)
    frame = describer(step(MID, committed=[4], forward=1), 0.1)
    assert frame is not None and frame.pieces[:2] == ("def", " add") and frame.committed == frozenset({4})


def test_describer_settles_on_the_finished_code():
    describer = Describer(Tokenizer(), MASK, model="m", device="cpu", language="python")
    describer(draft_started(), 0.0)
    describer(step(MID, committed=[4], forward=3), 0.4)
    code = "def add(a, b):\n    return a + b\n"
    settled = describer(Finished(code=code, prompt_tokens=2, tokens=9, masks=11, forward=4, seconds=0.5), 0.5)
    assert settled is not None and settled.settled and settled.masked == 0
    # the numbers of the summary line, not the view's running count (one pass seen here)
    assert (settled.forward, settled.filled, settled.elapsed) == (4, 9, 0.5)
    assert "pass 4 · done · 2.2 tok/pass · 18 tok/s · 0.5 s" in render_status(settled).plain
    text = render_canvas(settled)
    assert text.plain == code
    styles = {(span.start, span.end): span.style for span in text.spans}
    assert isinstance(styles[(0, 3)], Style) and styles[(0, 3)].color is not None  # "def" as a keyword
    round_ = RepairRound(1, 1, (), (), 0, 0, 0, 0, kept=False, restored=0)
    assert describer(round_, 0.6) is None


def test_export_svg(tmp_path):
    svg = export_svg(mid_frame(), tmp_path / "frame.svg")
    assert svg.startswith("<svg") and (tmp_path / "frame.svg").read_text(encoding="utf-8") == svg
    assert "return" in svg and "tok/pass" in svg


def readme_frame() -> Frame:
    """A mid-refinement frame over the real tokenizer, as dcode-tiny (blocks of 16) draws it:
    earlier blocks finished, the active block half filled, later blocks still masked."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(Path(__file__).parents[1] / "dcode" / "assets" / "dcode-tiny")
    code = (
        "def merge(a, b):\n"
        '    """Merge two sorted lists into one sorted list."""\n'
        "    out, i, j = [], 0, 0\n"
        "    while i < len(a) and j < len(b):\n"
        "        if a[i] <= b[j]:\n"
        "            out.append(a[i])\n"
        "            i += 1\n"
        "        else:\n"
        "            out.append(b[j])\n"
        "            j += 1\n"
        "    return out + a[i:] + b[j:]\n"
    )
    ids = tokenizer.encode(code, add_special_tokens=False) + [tokenizer.eos_token_id]
    ids += [tokenizer.pad_token_id] * (112 - len(ids))
    mask, block = tokenizer.mask_token_id, 16
    active = 4 * block  # the fifth block is being decoded
    canvas = [t if i < active or (i < active + block and (i * 7) % block < 9) else mask for i, t in enumerate(ids)]
    committed = [i for i in range(active, active + block) if (i * 7) % block in (6, 7, 8)]
    prompt = tokenizer.encode("<|prompt|>merge two sorted lists<|code|>", add_special_tokens=False)
    s = Step(
        canvas=torch.tensor(prompt + canvas),
        committed=torch.tensor([len(prompt) + i for i in committed]),
        scores=torch.ones(len(committed)),
        block=(len(prompt) + active, len(prompt) + active + block),
        forward=31,
        input_tokens=block,
        masked=canvas.count(mask),
        done=False,
    )
    hidden = frozenset({tokenizer.eos_token_id, tokenizer.pad_token_id})
    pieces = token_pieces(tokenizer, canvas, mask, hidden=hidden)
    return step_frame(s, pieces, len(prompt), model="dcode-tiny", device="cpu", elapsed=0.21)


def test_readme_frame_renders(tmp_path):
    frame = readme_frame()
    assert 0 < frame.masked < len(frame.pieces) and len(frame.committed) == 3
    svg = export_svg(frame, tmp_path / "live-view.svg")
    assert "def&#160;merge(a,&#160;b):" in svg and "pass&#160;31" in svg  # SVG spaces are &#160;


def test_render_imports_no_torch_or_textual():
    import subprocess

    code = "import sys, dcode.render; print('torch' in sys.modules, 'textual' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


if __name__ == "__main__":  # python tests/test_render.py: redraw the README's picture
    export_svg(readme_frame(), Path(__file__).parents[1] / "docs" / "live-view.svg")
