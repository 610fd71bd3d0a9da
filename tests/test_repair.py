"""dcode.repair: the loop over the real sampler with a scripted fake model and the real dcode-tiny
tokenizer; byte <-> token mapping on multi-byte UTF-8; widening from lines to statement to block."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from conftest import ScriptedDenoiser, benchmark_module

import dcode
from dcode import flows
from dcode.config import SamplerConfig
from dcode.events import Repaired, RepairRound, Started, Step, drain
from dcode.fixes import confined, deleted, narrowest, resembles
from dcode.linediff import hunks
from dcode.localfill import LocalFiller
from dcode.models.base import ModelFacts
from dcode.repair import (
    byte_offsets,
    culprits,
    room,
    tokenize,
    tokens_for_span,
)
from dcode.spans import widen
from dcode.syntax import compile_issue, find_issues, language_of

PAD, EOS, MASK = 0, 1, 2

BROKEN = (
    "import os\n\n# café ✓ 日本 🎉\n\ndef add(a, b):\n    return a +\n\n\n"
    "def sub(a, b):\n    return a - b  # naïve 🎉\n"
)
BROKEN_LINE = "    return a +"
FIXED = BROKEN.replace(BROKEN_LINE + "\n", "    return a + b\n")

NESTED = (
    "class Box:\n    def area(self):\n        total = 0\n        if self.w:\n"
    "            return self.w * (\n        return total\n\n    def name(self):\n        return 'box'\n"
)


def run(
    model: ScriptedDenoiser, code: str, language: str = "python", rounds: int = 3, tries: int = 1, origin="file"
) -> list:
    prompt = model.tokenizer.encode("# a helper module\n", add_special_tokens=False)
    filler = LocalFiller(model, SamplerConfig(), prompt)
    return list(flows.repair(filler, code, language, "", rounds=rounds, tries=tries, origin=origin))


def test_repair_fixes_the_span_and_copies_every_other_byte(tokenizer) -> None:
    model = ScriptedDenoiser(tokenizer, "    return a + b")
    events = run(model, BROKEN)
    done = events[-1]
    assert isinstance(done, Repaired)
    assert done.code == FIXED
    assert (done.issues_before, done.issues_after, done.issues, done.rounds) == (1, 0, (), 1)
    [round1] = [e for e in events if isinstance(e, RepairRound)]
    [span] = round1.spans
    data, fixed = BROKEN.encode(), done.code.encode()
    assert data[span.start_byte : span.end_byte] == BROKEN_LINE.encode()  # the issue's line, no more
    assert fixed[: span.start_byte] == data[: span.start_byte]
    assert fixed[len(fixed) - (len(data) - span.end_byte) :] == data[span.end_byte :]
    assert round1.kept and round1.issues_after == 0
    assert done.forward == model.forwards == 1  # one pass: the threshold rule commits every sure mask


def test_a_round_tries_again_with_the_next_seed_until_a_result_is_kept(tokenizer) -> None:
    # Pass 1 writes garbage, pass 2 the fix: one try per round never gets there in one round.
    events = run(ScriptedDenoiser(tokenizer, ")))", "    return a + b"), BROKEN, rounds=1, tries=3)
    done = events[-1]
    assert done.code == FIXED and (done.rounds, done.attempts, done.forward) == (1, 2, 2)
    tries = [e for e in events if isinstance(e, RepairRound)]
    assert [(r.round, r.attempt, r.kept) for r in tries] == [(1, 1, False), (1, 2, True)]
    assert tries[0].spans == tries[1].spans  # the same masks, filled again
    once = run(ScriptedDenoiser(tokenizer, ")))", "    return a + b"), BROKEN, rounds=1, tries=1)[-1]
    assert once.code == BROKEN and (once.rounds, once.attempts) == (1, 1)


def test_retries_sample_with_their_own_seed() -> None:
    from dcode.config import LEFT_TO_RIGHT_RETRY_TEMPERATURE, RETRY_TEMPERATURE
    from dcode.repair import retry

    greedy = SamplerConfig(seed=7)
    assert retry(greedy, 2) == SamplerConfig(seed=8, temperature=RETRY_TEMPERATURE)
    assert retry(SamplerConfig(temperature=1.5), 3).temperature == 1.5  # already hotter: kept
    left_to_right = SamplerConfig(rule="verify", seed=7)
    assert retry(left_to_right, 2) == replace(left_to_right, seed=8, temperature=LEFT_TO_RIGHT_RETRY_TEMPERATURE)


def test_narrowest_puts_back_the_lines_a_fix_does_not_need() -> None:
    old = "x = (1\ny = 2\nz = 3\n"
    assert narrowest(old, "x = (1)\ny = 5\nz = 3\n", "python", []) == ("x = (1)\ny = 2\nz = 3\n", [], 1)
    # A line the fix needs stays; an added line it does not need goes.
    assert narrowest(old, "x = (1)\nw = 0\ny = 2\nz = 3\n", "python", []) == (old.replace("(1", "(1)"), [], 1)
    # Putting back the only change would bring the issue back: nothing is put back.
    assert narrowest(old, old.replace("(1", "[1]"), "python", [])[2] == 0
    assert hunks(["a\n", "b\n"], ["A\n", "B\n"]) == [(0, 1, 0, 1), (1, 2, 1, 2)]  # line by line
    assert hunks(["x = (1\n"], ["x = (1)\n", "w = 0\n"]) == [(0, 1, 0, 1), (1, 1, 1, 2)]
    assert hunks(["f(\n"], ["g\n", "f()\n"]) == [(0, 0, 0, 1), (0, 1, 1, 2)]  # paired where most alike
    assert narrowest("f(\n", "g\nf()\n", "python", []) == ("f()\n", [], 1)


def test_a_fix_in_a_users_file_changes_only_the_lines_its_issues_blame(tokenizer) -> None:
    # compile() blames line 1 (the "(" never closed); the second round's fill closes it on line 2.
    broken = "print(1,\n      2\nbar = 3\n"
    script = [*tokenizer.encode("print(1,\n      2)", add_special_tokens=False), EOS]
    for origin, expected in (("file", broken), ("draft", broken.replace("2\n", "2)\n"))):
        events = run(ScriptedDenoiser(tokenizer, script), broken, rounds=2, origin=origin)
        assert events[-1].code == expected
        assert [(r.round, r.issues_after) for r in events if isinstance(r, RepairRound)] == [(1, 1), (2, 0)]
    assert confined("a(\nb\n", "a()\nb\n", {0}) and confined("a(\nb\n", "a()\nc = 0\nb\n", {0})
    assert not confined("a(\nb\n", "a()\nc\n", {0})


def test_a_partial_fix_must_not_break_a_line_that_was_fine() -> None:
    from dcode.fixes import progress

    old = "print(a b)\nprint(c d)\nprint(e f)\n"
    before = find_issues(old, "python")
    assert [i.line for i in before] == [1, 2, 3]
    moved = "print(a)\nprint(c)\nprint(e)\ny 2\n"  # all three fixed, but a new line is broken
    partial = "print(a)\nprint(c)\nprint(e f)\n"
    assert progress(old, before, partial, find_issues(partial, "python"))
    assert not progress(old, before, moved, find_issues(moved, "python"))


def test_a_draft_is_redrafted_from_the_broken_statement_to_its_end(tokenizer) -> None:
    from tree_sitter import Parser

    draft = "def f(x):\n    y = (x\n    z = 1\n    return z\n"
    data = draft.encode()
    root = Parser(language_of("python")).parse(data).root_node
    [issue] = find_issues(draft, "python")
    start, end, why = widen(data, root, issue, 3, draft=True)
    assert (start, end) == (data.index(b"def"), len(data)) and why.endswith("to the end of the draft")
    # The redrafted tail ends at the model's first end token, like a draft.
    fill = [*tokenizer.encode("def f(x):\n    y = x\n    return y", add_special_tokens=False), EOS, 40, 41]
    events = run(ScriptedDenoiser(tokenizer, "    y = ((", "    y = ((", fill), draft, rounds=3, origin="draft")
    from dcode.repair import fill_text

    model, drop = ScriptedDenoiser(tokenizer, "x"), {EOS, PAD, MASK}
    assert fill_text(model, fill, drop, last=True) == "def f(x):\n    y = x\n    return y"
    assert fill_text(model, fill, drop, last=False).startswith("def f(x):\n    y = x\n    return y")
    assert fill_text(model, fill, drop, last=False) != fill_text(model, fill, drop, last=True)
    # the lines the fix did not need are put back ("z = 1" paired
    # with "y = x" and "return z" with "return y", the broken line is deleted)
    assert events[-1].code == "def f(x):\n    z = 1\n    return z\n"
    assert [(r.round, r.kept) for r in events if isinstance(r, RepairRound)] == [(1, False), (2, False), (3, True)]


def test_a_block_causal_model_samples_every_refill_of_its_own_text() -> None:
    from dataclasses import replace

    from dcode.repair import replays

    full = ModelFacts("m", "f", 2, frozenset({1}), 0, False, None, 64, 10)
    blocks = replace(full, block=8)
    assert replays(blocks, "draft") and replays(blocks, "edit")
    assert not replays(blocks, "file") and not replays(full, "draft")


def test_a_fix_may_grow_by_the_room_and_no_further(tokenizer) -> None:
    # The broken line is 4 tokens, so the span gets 4 + room(4) = 6 masks.
    assert len(tokenizer.encode(BROKEN_LINE, add_special_tokens=False)) == 4 and room(4) == 2
    fits, too_long = "    return a + b;", "    return (a + b)"
    assert [len(tokenizer.encode(t, add_special_tokens=False)) for t in (fits, too_long)] == [6, 7]
    done = run(ScriptedDenoiser(tokenizer, fits), BROKEN, rounds=1)[-1]
    assert done.code == BROKEN.replace(BROKEN_LINE, fits) and done.issues_after == 0
    events = run(ScriptedDenoiser(tokenizer, too_long), BROKEN, rounds=1)
    [round1] = [e for e in events if isinstance(e, RepairRound)]
    assert round1.masks == 6 and not round1.kept  # "    return (a + b" is cut short and still broken
    assert events[-1].code == BROKEN


@pytest.mark.parametrize(
    ("language", "code", "fix", "fixed"),
    [
        ("javascript", "function f() {\n  return 1 +;\n}\n", "  return 1 + 2;", "function f() {\n  return 1 + 2;\n}\n"),
        ("rust", 'fn main() {\n    let x = 1\n    println!("{}", x);\n}\n', "    let x = 1;", None),
    ],
)
def test_repair_in_other_languages(tokenizer, language: str, code: str, fix: str, fixed: str | None) -> None:
    done = run(ScriptedDenoiser(tokenizer, fix), code, language)[-1]
    assert done.issues_after == 0 and done.issues_before == 1
    assert done.code == (fixed or code.replace("    let x = 1\n", fix + "\n"))


def test_valid_code_is_returned_unchanged_without_a_pass(tokenizer) -> None:
    model = ScriptedDenoiser(tokenizer, "garbage")
    events = run(model, FIXED)
    assert len(events) == 1
    done = events[0]
    assert done.code == FIXED
    assert (done.issues_before, done.issues_after, done.rounds, done.forward, done.tokens) == (0, 0, 0, 0, 0)
    assert model.forwards == 0


def test_garbage_never_makes_it_worse_and_spans_widen_each_round(tokenizer) -> None:
    model = ScriptedDenoiser(tokenizer, "))) ((( :")
    events = run(model, NESTED)
    done = events[-1]
    assert done.code == NESTED  # nothing better was found: the input comes back
    assert done.issues_after <= done.issues_before == 1
    rounds = [e for e in events if isinstance(e, RepairRound)]
    assert [r.round for r in rounds] == [1, 2, 3] and not any(r.kept for r in rounds)
    assert all(r.issues_after >= 1 for r in rounds)
    # The text stays the same, so each round's span must strictly hold the last one.
    spans = [(r.spans[0].start_byte, r.spans[0].end_byte) for r in rounds]
    for (a0, b0), (a1, b1) in zip(spans, spans[1:], strict=False):
        assert a1 <= a0 and b1 >= b0 and (a1, b1) != (a0, b0)
    data = NESTED.encode()
    # line; if statement and the line before; body
    assert [data[a:b].count(b"\n") + 1 for a, b in spans] == [1, 3, 4]


def test_widening_rounds_for_a_nested_python_example() -> None:
    from tree_sitter import Parser

    data = NESTED.encode()
    root = Parser(language_of("python")).parse(data).root_node
    [issue] = find_issues(NESTED, "python")
    spans = [widen(data, root, issue, r) for r in (1, 2, 3)]
    texts = [data[a:b].decode() for a, b, _ in spans]
    assert texts[0] == "            return self.w * ("
    assert texts[1] == "        total = 0\n        if self.w:\n" + texts[0]
    assert texts[2] == texts[1] + "\n        return total"
    assert [why.split(": ", 1)[1] for _, _, why in spans] == [
        "line 5, its line",
        "lines 3-5, enclosing if_statement and the line before",
        "lines 3-6, enclosing block",
    ]


def test_round_one_takes_the_line_compile_blames_inside_a_wide_error() -> None:
    """tree-sitter's ERROR can cover a whole function; compile() names the broken line, and
    the first round re-masks that line alone, so a fix there leaves every other line as it was."""
    from tree_sitter import Parser

    from dcode.syntax import compile_issue

    # a corruption from the repair benchmark: "def wrapper(*args" lost "apper(*args"
    code = (
        "def outer(fxn):\n    @functools.wraps(fxn)\n    def wr, **kwargs):\n"
        "        return fxn(*args, **kwargs)\n    return wr\n"
    )
    data = code.encode()
    root = Parser(language_of("python")).parse(data).root_node
    [issue] = find_issues(code, "python")
    hint = compile_issue(code)
    assert (issue.start_byte, issue.line) == (0, 1)  # the ERROR holds the whole function
    assert hint is not None and hint.line == 3
    start, end, why = widen(data, root, issue, 1, hint)
    assert data[start:end] == b"    def wr, **kwargs):" and why.endswith("line 3, its line")
    assert data[slice(*widen(data, root, issue, 1)[:2])] == b"def outer(fxn):"  # without the hint: line 1


@pytest.mark.parametrize(
    ("old", "new", "lost"),
    [
        ("    return a + b", "", True),  # blank where there was code
        ("    return a + b", "    # type: ignore", True),  # a comment is not code
        ("    lst ]", "  // the list", True),
        ("    # the total\n    return a +", "    # the total\n    return a + b", False),
        ("    return a + b", "    return a - b", False),
        ("a = 1\nb = 2\nc = 3\nd = 4\ne = 5", "def stub():\n    pass", True),  # five lines summarised into two
        ("a = 1\nb = 2\nc = 3", "a = 1\nc = 3", False),  # two of three kept: still a repair
        ("", "x = 1", False),
        ("def add(a, b):\n    return a +", "def get(self):\n    return 1", True),  # add is gone: a rewrite
        ("def add(a, b):\n    return a +", "def add(a, b):\n    return a + b", False),
    ],
)
def test_a_result_that_drops_code_is_not_a_repair(old: str, new: str, lost: bool) -> None:
    assert deleted(old, new) is lost


def test_round_two_never_widens_to_a_whole_function() -> None:
    """A broken line directly in a function's body: the second round takes a line of context around
    it, not the function_definition (re-masking a whole function is a rewrite); the third takes the body."""
    from tree_sitter import Parser

    code = "def f(a):\n    x = a\n    retur x\n    y = 2\n    return y\n"
    data = code.encode()
    root = Parser(language_of("python")).parse(data).root_node
    [issue] = find_issues(code, "python")
    _, _, why2 = widen(data, root, issue, 2)
    start, end, why3 = widen(data, root, issue, 3)
    assert "function_definition" not in why2 and "line(s) of context" in why2
    assert not data[start:end].startswith(b"def f") and "block" in why3


def test_widening_without_an_enclosing_node_adds_context_lines() -> None:
    from tree_sitter import Parser

    code = "a = 1\nb = 2\nc = (\nd = 4\ne = 5\nf = 6\n"
    data = code.encode()
    root = Parser(language_of("python")).parse(data).root_node
    issue = find_issues(code, "python")[0]
    r1, r2, r3 = (widen(data, root, issue, r) for r in (1, 2, 3))
    assert data[r1[0] : r1[1]] == b"c = ("  # the issue's own line
    assert r2[0] <= r1[0] and r2[1] >= r1[1] and r2[:2] != r1[:2]
    assert r3[0] <= r2[0] and r3[1] >= r2[1] and r3[:2] != r2[:2]


def test_round_events_carry_the_right_counts(tokenizer) -> None:
    two = BROKEN.replace("    return a - b", "    return a -")  # two broken functions, two issues
    model = ScriptedDenoiser(tokenizer, ")(")
    events = run(model, two, rounds=2)
    done = events[-1]
    assert isinstance(done, Repaired)
    assert all(isinstance(e, Started | Step | RepairRound) for e in events[:-1])
    rounds: list[RepairRound] = []
    steps_since = 0
    started: Started | None = None
    for event in events[:-1]:
        if isinstance(event, Started):
            assert steps_since == 0  # each try starts with its Started, before its first Step
            started = event
            continue
        if isinstance(event, Step):
            steps_since += 1
            continue
        assert started is not None and (started.repair_round, started.attempt) == (event.round, event.attempt)
        assert sum(b - a for a, b in started.regions) == event.masks  # the Started names every mask
        rounds.append(event)
        assert event.forward == steps_since  # one Step per forward pass, all re-yielded
        steps_since = 0
        sizes = [b - a for a, b in (s.tokens for s in event.spans)]
        assert event.tokens == sum(sizes)
        assert event.masks == sum(n + room(n) for n in sizes)
    assert steps_since == 0  # the last Step belongs to the last round
    # The first round works on the input: two issues far apart give two spans, each exactly its tokens.
    first = rounds[0]
    assert [(i.kind, i.line) for i in first.issues] == [("error", 6), ("error", 10)]
    _, offsets = tokenize(tokenizer, two)
    data = two.encode()
    assert [data[s.start_byte : s.end_byte] for s in first.spans] == [
        BROKEN_LINE.encode(),
        "    return a -  # naïve 🎉".encode(),
    ]
    for span in first.spans:
        assert list(range(*span.tokens)) == tokens_for_span(offsets, span.start_byte, span.end_byte)
    # The record adds the rounds up, and never ends worse than it started.
    assert [r.round for r in rounds] == [1, 2] and done.rounds == 2
    assert done.forward == sum(r.forward for r in rounds) == model.forwards
    assert done.tokens == sum(r.tokens for r in rounds)
    assert done.spans == sum(len(r.spans) for r in rounds)
    assert done.issues_before == 2
    assert done.issues_after == min([2] + [r.issues_after for r in rounds if r.kept]) == len(done.issues)
    assert (done.code == two) == (not any(r.kept for r in rounds))


def test_unknown_language_returns_the_input_untouched(tokenizer) -> None:
    model = ScriptedDenoiser(tokenizer, "x")
    events = run(model, "IDENTIFICATION DIVISION.\n", language="cobol")
    assert len(events) == 1
    done = events[0]
    assert done.code == "IDENTIFICATION DIVISION.\n" and done.rounds == 0 and model.forwards == 0
    assert "unknown language" in done.note
    assert drain(iter(events)) is done


def test_byte_offsets_of_multibyte_characters() -> None:
    assert byte_offsets("é!", [(0, 1), (1, 2)]) == [(0, 2), (2, 3)]
    assert byte_offsets("a日本🎉b", [(0, 1), (1, 3), (3, 4), (4, 5)]) == [(0, 1), (1, 7), (7, 11), (11, 12)]
    assert byte_offsets("ab", [(0, 2)]) == [(0, 2)]


@pytest.mark.parametrize("text", ["s = 'é日本🎉'\n# naïve — ok ✓\n", "x = 1\n", "🎉🎉 é\n\n日本語のテキスト\n"])
def test_token_byte_spans_round_trip(tokenizer, text: str) -> None:
    data = text.encode()
    ids, offsets = tokenize(tokenizer, text)
    assert len(ids) == len(offsets)
    assert offsets[0][0] == 0 and offsets[-1][1] == len(data)
    assert all(a <= b and a0 <= a for (a0, _), (a, b) in zip(offsets, offsets[1:], strict=False))
    # Every character's byte span maps to tokens that decode to exactly the bytes they cover.
    at = 0
    for char in text:
        end = at + len(char.encode())
        hit = tokens_for_span(offsets, at, end)
        assert hit == list(range(hit[0], hit[-1] + 1))
        first, last = offsets[hit[0]][0], offsets[hit[-1]][1]
        assert first <= at and last >= end
        assert tokenizer.decode([ids[i] for i in hit]) == data[first:last].decode()
        at = end
    assert tokens_for_span(offsets, 0, len(data)) == list(range(len(ids)))


def test_repair_imports_only_what_sits_below_it() -> None:
    import ast

    tree = ast.parse(Path(dcode.__file__).with_name("repair.py").read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    ours = {m for m in imported if m.split(".")[0] == "dcode"}
    assert ours <= {
        "dcode.events",
        "dcode.sampler",
        "dcode.syntax",
        "dcode.config",
        "dcode.models.base",
        "dcode.fixes",
        "dcode.spans",
        "dcode.linediff",
        "dcode.window",
    }


def test_repair_benchmark_counts_bytes_left_in_place() -> None:
    bench = benchmark_module("repair.py")
    assert bench.untouched(b"abcXdef", b"abcYYdef", 3, 3) == 6  # only the damaged byte changed
    assert bench.untouched(b"abcXdef", b"abQYdef", 3, 3) == 5  # one byte before it too
    assert bench.untouched(b"abcXdef", b"abcdef", 3, 3) == 6
    assert bench.untouched(b"abcX", b"abc", 3, 0) == 3 and bench.untouched(b"ab", b"", 1, 1) == 0


def test_later_tries_may_not_write_the_token_the_checker_blames(tokenizer) -> None:
    # The scripted model writes the same broken line on every pass; from try 2 on the '2' that
    # compile() blames is banned, the fill writes something else there, and the line parses.
    broken = "def f():\n    return 2x\n"
    events = run(ScriptedDenoiser(tokenizer, "    return 2x"), broken, rounds=1, tries=2, origin="draft")
    tries = [e for e in events if isinstance(e, RepairRound)]
    assert [(r.attempt, r.kept) for r in tries] == [(1, False), (2, True)]
    done = events[-1]
    assert done.issues_after == 0 and done.code.startswith("def f():\n    return ") and "2" not in done.code


def test_culprits_are_the_blamed_tokens_without_whitespace(tokenizer) -> None:
    code = "class 2D(object):\n    pass\n"
    ids, offsets = tokenize(tokenizer, code)
    [issue] = find_issues(code, "python")
    hint = compile_issue(code)
    assert hint is not None and hint.column == 7
    assert [tokenizer.decode([t]) for t in culprits(code.encode(), ids, offsets, [hint])] == ["2"]
    # a point on whitespace blames nothing
    blank = replace(hint, column=6)
    assert culprits(code.encode(), ids, offsets, [blank]) == []


def test_a_users_line_is_repaired_not_swapped_for_another_statement(tokenizer) -> None:
    broken = "def f(a):\n    return a +\n"
    for origin, kept in (("file", False), ("draft", True)):
        done = run(ScriptedDenoiser(tokenizer, "    pass"), broken, rounds=1, origin=origin)[-1]
        assert (done.code != broken) is kept
    done = run(ScriptedDenoiser(tokenizer, "    return a + 1"), broken, rounds=1)[-1]
    assert done.code == "def f(a):\n    return a + 1\n"
    assert resembles("            els\n", "            else:\n")
    assert not resembles("    return func(*args, **kw)\n", "    found.append()  # type: ignore[union\n")
    assert resembles("a(\n", "b = 1\na()\n")  # an inserted line passes
