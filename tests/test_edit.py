"""`dcode edit`: regions (--lines, --symbol in several languages), diffs, backups and in-place
writes as pure functions; flows.edit over the real sampler with a scripted model and with the
embedded dcode-tiny; the command through Typer's CliRunner (those tests run once `edit` is
registered in dcode.cli).

The scripted model writes a known text into the masks, so results are asserted exactly. dcode-tiny
is used as shipped: its weights change, so only what must hold for any output is asserted.
"""

from __future__ import annotations

import ast
import os
import re
import stat
from pathlib import Path

import pytest
from conftest import ScriptedDenoiser
from typer.testing import CliRunner

import dcode
from dcode import flows, localfill, spans
from dcode.cli import app
from dcode.config import SamplerConfig
from dcode.edit import (
    RegionError,
    backup_path,
    describe,
    find_symbol,
    find_symbols,
    parse_lines,
    select,
    symbols,
    unified_diff,
    write_backup,
    write_in_place,
)
from dcode.events import Edited, Started, Step
from dcode.localfill import LocalFiller
from dcode.syntax import find_issues

PAD, EOS, MASK = 0, 1, 2  # dcode-tiny's special tokens

SOURCE = '''import math


def area(radius):
    """Area of a circle (café ✓)."""
    return math.pi * radius * radius


def add(a, b):
    return a - b


class Stack:
    def __init__(self):
        self.items = []

    @property
    def size(self):
        return len(self.items)

    def push(self, item):
        self.items.append(item)
'''
ADD = "def add(a, b):\n    return a - b\n"  # lines 9-10
SUM = "def add(a, b):\n    return a + b"
SUM3 = "def add(a, b, c=0):\n    total = a + b\n    return total + c"  # 24 tokens: fits 14 + 16 masks


def run_edit(model, source: str, region: tuple[int, int], instruction: str = "fix add", **kwargs) -> list:
    language = kwargs.pop("language", "python")
    return list(flows.edit(LocalFiller(model, SamplerConfig()), source, region, instruction, language, **kwargs))


def assert_outside_identical(old: str, new: str, region: tuple[int, int], new_region: tuple[int, int]) -> None:
    a, b = region
    old_bytes, new_bytes = old.encode(), new.encode()
    assert new_region[0] == a
    assert new_bytes[:a] == old_bytes[:a]
    assert new_bytes[new_region[1] :] == old_bytes[b:]


# ---------------------------------------------------------------------------------------------
# --lines


def test_lines_are_whole_lines_with_their_endings() -> None:
    text = "a\nbb\nccc\nd"
    assert parse_lines("2-3", text) == (2, 9)
    assert parse_lines("2", text) == (2, 5)
    assert parse_lines(" 1 - 4 ", text) == (0, len(text))  # the last line has no ending: up to the end
    assert parse_lines("1-2", "x\r\ny\r\n") == (0, 6)


def test_lines_count_bytes_not_characters() -> None:
    start, end = parse_lines("5", SOURCE)
    assert SOURCE.encode()[start:end].decode() == '    """Area of a circle (café ✓)."""\n'
    start, end = parse_lines("9-10", SOURCE)
    assert SOURCE.encode()[start:end].decode() == ADD
    assert describe(SOURCE, (start, end)) == "lines 9-10"


@pytest.mark.parametrize(
    ("spec", "source", "message"),
    [
        ("40-50", "x = 1\n" * 12, "--lines 40-50 is outside the file (it has 12 lines)"),
        ("12-13", "x = 1\n" * 12, "--lines 12-13 is outside the file (it has 12 lines)"),
        ("2", "x = 1", "--lines 2 is outside the file (it has 1 line)"),
        ("1", "", "--lines 1 is outside the file (it has 0 lines)"),
        ("3-x", "a\n", "--lines takes A-B or A (1-based line numbers), got '3-x'"),
        ("", "a\n", "--lines takes A-B or A (1-based line numbers), got ''"),
        ("-2", "a\n", "--lines takes A-B or A (1-based line numbers), got '-2'"),
        ("0-2", "a\nb\n", "--lines 0-2: lines are counted from 1"),
        ("5-3", "a\n" * 9, "--lines 5-3 ends before it starts"),
    ],
)
def test_bad_lines_are_one_line_errors(spec: str, source: str, message: str) -> None:
    with pytest.raises(RegionError) as caught:
        parse_lines(spec, source)
    assert str(caught.value) == message
    assert isinstance(caught.value, ValueError)


# ---------------------------------------------------------------------------------------------
# --symbol


def region_text(source: str, span: tuple[int, int]) -> str:
    return source.encode()[span[0] : span[1]].decode()


def test_python_symbols_with_dotted_names_and_decorators() -> None:
    assert symbols(SOURCE, "python") == ["area", "add", "Stack", "Stack.__init__", "Stack.size", "Stack.push"]
    assert region_text(SOURCE, find_symbol(SOURCE, "python", "add")) == ADD
    assert region_text(SOURCE, find_symbol(SOURCE, "python", "Stack.size")) == (
        "    @property\n    def size(self):\n        return len(self.items)\n"
    )
    assert find_symbol(SOURCE, "python", "size") == find_symbol(SOURCE, "python", "Stack.size")
    assert region_text(SOURCE, find_symbol(SOURCE, "python", "Stack")).startswith("class Stack:\n")
    assert region_text(SOURCE, find_symbol(SOURCE, "python", "Stack")).endswith("self.items.append(item)\n")


def test_unknown_symbol_lists_the_symbols() -> None:
    source = "def a():\n    pass\n\n\ndef b():\n    pass\n\n\nclass C:\n    def m(self):\n        pass\n"
    with pytest.raises(RegionError) as caught:
        find_symbol(source, "python", "foo", "app.py")
    assert str(caught.value) == "no symbol 'foo' in app.py; symbols: a, b, C, C.m"
    with pytest.raises(RegionError) as caught:
        find_symbol("x = 1\n", "python", "foo", "app.py")
    assert str(caught.value) == "no symbol 'foo' in app.py; it defines no functions or classes"


def test_a_bare_name_must_be_unique() -> None:
    source = "class A:\n    def m(self):\n        pass\n\n\nclass B:\n    def m(self):\n        pass\n"
    with pytest.raises(RegionError) as caught:
        find_symbol(source, "python", "m", "two.py")
    assert str(caught.value) == (
        "--symbol 'm' is ambiguous in two.py: A.m (line 2), B.m (line 7); use a dotted name or --lines"
    )
    assert region_text(source, find_symbol(source, "python", "B.m")) == "    def m(self):\n        pass\n"


def test_symbol_needs_a_language_with_definitions() -> None:
    with pytest.raises(RegionError, match=r"^--symbol is not supported for json files \(use --lines\)$"):
        find_symbol('{"a": 1}\n', "json", "a")


JS = """class Cart {
  add(item) {
    this.items.push(item);
  }
}

function total(cart) {
  return cart.items.length;
}

const double = (x) => x * 2;
"""
TS = """export function f(a: number): number {
  return a;
}

interface Point {
  x: number;
}

class C {
  m(): void {}
}
"""
RUST = """#[derive(Debug)]
struct Foo {
    x: i32,
}

impl Foo {
    fn new() -> Self {
        Foo { x: 1 }
    }
}

impl std::fmt::Display for Foo {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "{}", self.x)
    }
}

fn main() {}
"""
GO = """package main

type Stack struct {
	items []int
}

func (s *Stack) Push(x int) {
	s.items = append(s.items, x)
}

func main() {}
"""
C = """struct point { int x; };

static char *name(void) {
    return "c";
}

int main(void) {
    return 0;
}
"""
CPP = """template <typename T>
T biggest(T a, T b) {
    return a > b ? a : b;
}

class Shape {
 public:
  int sides() const { return 0; }
};

int Shape::area(int x) {
    return x;
}
"""
JAVA = """class Box {
    Box() {}

    @Override
    public String toString() {
        return "box";
    }

    int add(int a) { return a; }
    int add(String a) { return 1; }
}
"""


@pytest.mark.parametrize(
    ("language", "source", "names", "symbol", "text"),
    [
        ("javascript", JS, ["Cart", "Cart.add", "total", "double"], "add",
         "  add(item) {\n    this.items.push(item);\n  }\n"),
        ("javascript", JS, None, "double", "const double = (x) => x * 2;\n"),
        ("typescript", TS, ["f", "Point", "C", "C.m"], "f", "export function f(a: number): number {\n  return a;\n}\n"),
        ("rust", RUST, ["Foo", "impl Foo", "Foo.new", "impl std::fmt::Display for Foo", "Foo.fmt", "main"], "Foo",
         "#[derive(Debug)]\nstruct Foo {\n    x: i32,\n}\n"),
        ("rust", RUST, None, "Foo::new", "    fn new() -> Self {\n        Foo { x: 1 }\n    }\n"),
        ("go", GO, ["Stack", "Stack.Push", "main"], "Push",
         "func (s *Stack) Push(x int) {\n\ts.items = append(s.items, x)\n}\n"),
        ("go", GO, None, "Stack", "type Stack struct {\n\titems []int\n}\n"),
        ("c", C, ["point", "name", "main"], "name", 'static char *name(void) {\n    return "c";\n}\n'),
        ("cpp", CPP, ["biggest", "Shape", "Shape.sides", "Shape.area"], "biggest",
         "template <typename T>\nT biggest(T a, T b) {\n    return a > b ? a : b;\n}\n"),
        ("cpp", CPP, None, "Shape::area", "int Shape::area(int x) {\n    return x;\n}\n"),
        ("java", JAVA, ["Box", "Box.Box", "Box.toString", "Box.add"], "toString",
         '    @Override\n    public String toString() {\n        return "box";\n    }\n'),
    ],
)  # fmt: skip
def test_symbols_in_other_languages(language, source, names, symbol, text) -> None:
    if names is not None:
        assert symbols(source, language) == names
    span = find_symbol(source, language, symbol)
    assert region_text(source, span) == text


def test_overloads_are_ambiguous() -> None:
    with pytest.raises(RegionError, match=r"^--symbol 'add' is ambiguous in Box.java: Box.add \(line 9\), Box.add"):
        find_symbol(JAVA, "java", "add", "Box.java")


@pytest.mark.parametrize(("language", "source"), [("python", SOURCE), ("rust", RUST), ("cpp", CPP), ("java", JAVA)])
def test_every_symbol_is_a_span_of_whole_lines(language: str, source: str) -> None:
    data = source.encode()
    for symbol in find_symbols(source, language):
        assert symbol.start_byte == 0 or data[symbol.start_byte - 1 : symbol.start_byte] == b"\n"
        assert symbol.end_byte == len(data) or data[symbol.end_byte - 1 : symbol.end_byte] == b"\n"
        assert data.count(b"\n", 0, symbol.start_byte) + 1 == symbol.line


def test_select_picks_the_target() -> None:
    assert select(SOURCE, "python") == (0, len(SOURCE.encode()))
    assert select(SOURCE, "python", lines="9-10") == select(SOURCE, "python", symbol="add")
    with pytest.raises(RegionError, match=r"^--lines and --symbol cannot be used together$"):
        select(SOURCE, "python", lines="1", symbol="add")


# ---------------------------------------------------------------------------------------------
# Diffs, backups, writes


def test_unified_diff() -> None:
    assert unified_diff(SOURCE, SOURCE, "app.py") == ""
    new = SOURCE.replace("a - b", "a + b")
    assert unified_diff(SOURCE, new, "app.py") == (
        "--- a/app.py\n+++ b/app.py\n@@ -7,7 +7,7 @@\n \n \n def add(a, b):\n"
        "-    return a - b\n+    return a + b\n \n \n class Stack:\n"
    )
    assert unified_diff("x = 1\n", "x = 2", "f.py") == (
        "--- a/f.py\n+++ b/f.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n\\ No newline at end of file\n"
    )


def test_backup_names(tmp_path: Path) -> None:
    path = tmp_path / "app.py"
    path.write_text(SOURCE)
    assert backup_path(path) == tmp_path / "app.py.orig"
    (tmp_path / "app.py.orig").write_text("older")
    assert backup_path(path) == tmp_path / "app.py.orig.1"
    (tmp_path / "app.py.orig.1").write_text("old")
    (tmp_path / "app.py.orig.2").symlink_to(tmp_path / "nowhere")  # a dangling link takes the name too
    assert backup_path(path) == tmp_path / "app.py.orig.3"


def test_write_in_place_keeps_a_byte_identical_backup_and_the_mode(tmp_path: Path) -> None:
    path = tmp_path / "app.py"
    path.write_bytes(SOURCE.encode())
    path.chmod(0o640)
    backup = write_in_place(path, "x = 1\n")
    assert backup == tmp_path / "app.py.orig"
    assert backup.read_bytes() == SOURCE.encode()
    assert path.read_text() == "x = 1\n"
    assert stat.S_IMODE(path.stat().st_mode) == stat.S_IMODE(backup.stat().st_mode) == 0o640
    assert write_in_place(path, "x = 2\n") == tmp_path / "app.py.orig.1"
    assert (tmp_path / "app.py.orig.1").read_text() == "x = 1\n"
    assert (tmp_path / "app.py.orig").read_bytes() == SOURCE.encode()  # never overwritten
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.py", "app.py.orig", "app.py.orig.1"]


def test_write_in_place_writes_through_a_symlink(tmp_path: Path) -> None:
    real = tmp_path / "real.py"
    real.write_text(SOURCE)
    link = tmp_path / "link.py"
    link.symlink_to(real)
    backup = write_in_place(link, "x = 1\n")
    assert link.is_symlink() and real.read_text() == "x = 1\n"
    assert backup == tmp_path / "link.py.orig" and backup.read_text() == SOURCE and not backup.is_symlink()


@pytest.mark.parametrize("where", ["dcode.edit.atomic_write", "shutil.copy2"])
def test_an_interrupted_write_leaves_the_original_and_nothing_else(
    where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "app.py"
    path.write_bytes(SOURCE.encode())

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(where, interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_in_place(path, "x = 1\n")
    assert path.read_bytes() == SOURCE.encode()
    assert [p.name for p in tmp_path.iterdir()] == ["app.py"]  # no backup, no temporary file


def test_write_backup_never_overwrites(tmp_path: Path) -> None:
    path = tmp_path / "a.py"
    path.write_text("one\n")
    first = write_backup(path)
    path.write_text("two\n")
    second = write_backup(path)
    assert (first.name, first.read_text(), second.name, second.read_text()) == (
        "a.py.orig",
        "one\n",
        "a.py.orig.1",
        "two\n",
    )


def test_edit_module_stays_light() -> None:
    tree = ast.parse(Path(dcode.__file__).with_name("edit.py").read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert {m for m in imported if m.startswith("dcode")} <= {"dcode.files", "dcode.syntax"}
    assert not imported & {"torch", "transformers", "typer", "click"}


# ---------------------------------------------------------------------------------------------
# flows.edit with a scripted model


def test_a_symbol_is_rewritten_and_every_other_byte_kept(tokenizer) -> None:
    model = ScriptedDenoiser(tokenizer, SUM)
    region = find_symbol(SOURCE, "python", "add")
    events = run_edit(model, SOURCE, region)
    done = events[-1]
    assert isinstance(done, Edited)
    assert [type(e) for e in events[:-1]] == [Started, Step]  # one pass, no repair
    assert done.code == SOURCE.replace(ADD, SUM + "\n")
    assert_outside_identical(SOURCE, done.code, region, done.new_region)
    assert region_text(done.code, done.new_region) == SUM + "\n"
    assert (done.original_errors, done.errors_after, done.repair, done.forward) == (0, 0, None, 1)
    region_tokens = len(tokenizer.encode(ADD, add_special_tokens=False))
    assert done.region_tokens == region_tokens
    assert done.masks == localfill.edit_budget(region_tokens) == region_tokens + 16
    assert done.tokens == len(tokenizer.encode(SUM, add_special_tokens=False))


def test_the_canvas_is_prompt_text_before_masks_text_after(tokenizer) -> None:
    model = ScriptedDenoiser(tokenizer, SUM)
    region = find_symbol(SOURCE, "python", "add")
    done = run_edit(model, SOURCE, region, "make add add")[-1]
    encode = lambda text: tokenizer.encode(text, add_special_tokens=False)  # noqa: E731
    data = SOURCE.encode()
    prompt = localfill.prompt_ids(model, "make add add", "python")
    before, after = encode(data[: region[0]].decode()), encode(data[region[1] :].decode())
    assert model.seen[0] == prompt + before + [MASK] * done.masks + after
    assert (done.prompt_tokens, done.context_tokens) == (len(prompt), len(before) + len(after))
    assert "make add add" in tokenizer.decode(prompt)


def test_lines_grow(tokenizer) -> None:
    model = ScriptedDenoiser(tokenizer, SUM3)
    region = parse_lines("9-10", SOURCE)
    done = run_edit(model, SOURCE, region)[-1]
    assert done.code == SOURCE.replace(ADD, SUM3 + "\n")
    assert describe(done.code, done.new_region) == "lines 9-11"
    assert_outside_identical(SOURCE, done.code, region, done.new_region)
    assert done.errors_after == 0


def test_a_region_shrinks_and_can_vanish(tokenizer) -> None:
    region = find_symbol(SOURCE, "python", "Stack.size")
    short = "    size = property(lambda self: len(self.items))"
    done = run_edit(ScriptedDenoiser(tokenizer, short), SOURCE, region)[-1]
    assert region_text(done.code, done.new_region) == short + "\n"
    assert_outside_identical(SOURCE, done.code, region, done.new_region)
    assert done.tokens < done.region_tokens
    gone = run_edit(ScriptedDenoiser(tokenizer, [PAD]), SOURCE, region)[-1]  # nothing but padding
    assert gone.new_region == (region[0], region[0]) and gone.tokens == 0
    assert gone.code.encode() == SOURCE.encode()[: region[0]] + SOURCE.encode()[region[1] :]


def test_end_and_pad_tokens_are_dropped_anywhere(tokenizer) -> None:
    ids = tokenizer.encode(SUM, add_special_tokens=False)
    script = [PAD, *ids[:3], EOS, PAD, *ids[3:], EOS, EOS]
    done = run_edit(ScriptedDenoiser(tokenizer, script), SOURCE, parse_lines("9-10", SOURCE))[-1]
    assert done.code == SOURCE.replace(ADD, SUM + "\n")


def test_an_end_token_in_the_region_does_not_end_the_file(tokenizer, monkeypatch: pytest.MonkeyPatch) -> None:
    configs: list[SamplerConfig] = []
    real = localfill.denoise

    def spy(model, canvas, start, config, masks=None):
        configs.append(config)
        return real(model, canvas, start, config, masks=masks)

    monkeypatch.setattr(localfill, "denoise", spy)
    run_edit(ScriptedDenoiser(tokenizer, SUM), SOURCE, parse_lines("9-10", SOURCE))
    assert [c.stop_at_eos for c in configs] == [False]


def test_fit_region_makes_whole_lines() -> None:
    assert spans.fit_region("\n  x = 1  \n\n", "  x = 0\r\n") == "  x = 1\r\n"
    assert spans.fit_region("x = 1\n", "x = 0") == "x = 1"  # the old region ended the file unterminated
    assert spans.fit_region("\ny = 1\n", "\nx = 0\n") == "\ny = 1\n"  # it began with a blank line too
    assert spans.fit_region(" \n\n", "x = 0\n") == ""
    assert spans.fit_region("x = 1", "") == "x = 1\n"


def test_a_language_dcode_cannot_check_is_edited_unchecked(tokenizer) -> None:
    source = "IDENTIFICATION DIVISION.\nPROGRAM-ID. HELLO.\n"
    model = ScriptedDenoiser(tokenizer, "PROGRAM-ID. WORLD.")
    done = run_edit(model, source, parse_lines("2", source), language="cobol")[-1]
    assert done.code == "IDENTIFICATION DIVISION.\nPROGRAM-ID. WORLD.\n"
    assert (done.original_errors, done.errors_after, done.repair, done.broke) == (None, None, None, False)


def test_the_whole_file_and_an_explicit_length(tokenizer) -> None:
    new = "def add(a, b):\n    return a + b\n\n\nprint(add(1, 2))"
    done = run_edit(ScriptedDenoiser(tokenizer, new), SOURCE, (0, len(SOURCE.encode())), length=40)[-1]
    assert done.code == new + "\n" and done.masks == 40 and done.new_region == (0, len(done.code))
    cut = run_edit(ScriptedDenoiser(tokenizer, new), SOURCE, (0, len(SOURCE.encode())), length=5)[-1]
    first = tokenizer.decode(tokenizer.encode(new, add_special_tokens=False)[:5])
    assert cut.tokens == 5 and cut.code == first.rstrip() + "\n"  # the masks bound the edit


def test_crlf_files_keep_their_line_endings(tokenizer) -> None:
    source = SOURCE.replace("\n", "\r\n")
    region = find_symbol(source, "python", "add")
    done = run_edit(ScriptedDenoiser(tokenizer, SUM), source, region)[-1]
    assert done.code == source.replace(ADD.replace("\n", "\r\n"), SUM.replace("\n", "\r\n") + "\r\n")


def test_a_broken_edit_is_repaired_inside_the_region(tokenizer) -> None:
    # Pass 1 (the draft) leaves `return a +`; pass 2 (the first repair round) fills the re-masked line.
    model = ScriptedDenoiser(tokenizer, "def add(a, b):\n    return a +", "    return a + b")
    region = find_symbol(SOURCE, "python", "add")
    events = run_edit(model, SOURCE, region)
    done = events[-1]
    assert [type(e).__name__ for e in events] == ["Started", "Step", "Started", "Step", "RepairRound", "Edited"]
    assert done.code == SOURCE.replace(ADD, SUM + "\n")
    assert done.repair is not None and done.repair_used and done.repair.issues_before == 1
    assert (done.original_errors, done.errors_after) == (0, 0)
    assert_outside_identical(SOURCE, done.code, region, done.new_region)
    assert done.metadata()["repair"]["used"] is True
    assert not done.broke


def test_a_repair_that_touches_text_outside_the_region_is_not_used(tokenizer) -> None:
    # The file is already broken on line 6; the edit breaks `add` too. Repair re-masks both lines and
    # would rewrite line 6 as well: outside the region, so its result is dropped.
    source = SOURCE.replace("    return math.pi * radius * radius", "    return math.pi *")
    model = ScriptedDenoiser(tokenizer, "def add(a, b):\n    return a +", "    return a + b")
    region = find_symbol(source, "python", "add")
    done = run_edit(model, source, region)[-1]
    assert done.repair is not None and done.repair.rounds >= 1 and not done.repair_used
    assert done.code == source.replace(ADD, "def add(a, b):\n    return a +\n")
    assert_outside_identical(source, done.code, region, done.new_region)
    assert (done.original_errors, done.errors_after) == (1, 2)
    assert not done.broke  # it did not parse before either


def test_no_repair_when_rounds_are_zero_and_broke_is_reported(tokenizer) -> None:
    model = ScriptedDenoiser(tokenizer, "def add(a, b):\n    return a +")
    done = run_edit(model, SOURCE, find_symbol(SOURCE, "python", "add"), repair_rounds=0)[-1]
    assert done.repair is None and done.broke and (done.original_errors, done.errors_after) == (0, 1)
    assert len(model.seen) == 1


def test_inputs_the_model_cannot_serve(tokenizer) -> None:
    whole = (0, len(SOURCE.encode()))
    with pytest.raises(flows.InputError, match=r"^the instruction is empty$"):
        run_edit(ScriptedDenoiser(tokenizer, SUM), SOURCE, whole, " \n")
    small = ScriptedDenoiser(tokenizer, SUM, max_length=40)
    prompt = len(localfill.prompt_ids(small, "fix add", "python"))
    with pytest.raises(flows.InputError) as caught:  # a region that itself does not fit
        run_edit(small, SOURCE, find_symbol(SOURCE, "python", "Stack"), name="app.py")
    region_tokens = len(tokenizer.encode(SOURCE[SOURCE.index("class Stack") :], add_special_tokens=False))
    assert str(caught.value) == (
        f"the region (lines 13-22 of app.py) is {region_tokens} tokens; with the {prompt}-token prompt that "
        f"exceeds the model's context of 40 tokens by {prompt + region_tokens - 40} (select fewer lines)"
    )
    with pytest.raises(flows.InputError, match=r"^--length 9999 plus the"):
        run_edit(ScriptedDenoiser(tokenizer, SUM), SOURCE, whole, length=9999)
    assert small.seen == []


def test_the_region_keeps_its_room_and_the_context_gives_way(tokenizer) -> None:
    region = find_symbol(SOURCE, "python", "add")
    fixed = ScriptedDenoiser(tokenizer, SUM)
    needed = run_edit(fixed, SOURCE, region)[-1]
    limit = needed.prompt_tokens + needed.context_tokens + needed.region_tokens + 3  # room for 3 more
    done = run_edit(ScriptedDenoiser(tokenizer, SUM, max_length=limit), SOURCE, region)[-1]
    assert done.masks == localfill.edit_budget(needed.region_tokens)
    assert done.extra["window"]["whole_file"] is False
    assert done.prompt_tokens + done.context_tokens + done.masks <= limit
    assert done.code == needed.code  # the same edit, from less context


# ---------------------------------------------------------------------------------------------
# flows.edit with the embedded model


@pytest.fixture(scope="module")
def tiny():
    from dcode.models import load

    return load(None)


def test_embedded_model_edits_a_symbol_and_keeps_the_rest(tiny) -> None:
    region = find_symbol(SOURCE, "python", "Stack.push")
    events = run_edit(tiny, SOURCE, region, "push two items at once")
    done = events[-1]
    assert isinstance(done, Edited)
    draft = [e for e in events if isinstance(e, Step)][: done.forward]
    assert len(draft) == done.forward >= 1 and draft[-1].masked == 0
    assert_outside_identical(SOURCE, done.code, region, done.new_region)
    assert done.masks == localfill.edit_budget(done.region_tokens)
    assert done.original_errors == 0
    assert done.errors_after == len(find_issues(done.code, "python"))
    new = region_text(done.code, done.new_region)
    assert new == "" or new.endswith("\n")  # whole lines, or nothing
    again = run_edit(tiny, SOURCE, region, "push two items at once")[-1]
    assert again.code == done.code  # greedy: same input, same file


# ---------------------------------------------------------------------------------------------
# The command


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer's DCODE_* variables must not leak into these tests."""
    for name in list(os.environ):
        if name.startswith("DCODE_"):
            monkeypatch.delenv(name)


class TestCommand:
    @pytest.fixture(autouse=True)
    def workdir(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
        monkeypatch.chdir(tmp_path)
        (tmp_path / "app.py").write_bytes(SOURCE.encode())
        return tmp_path

    @staticmethod
    def edit(args: list[str], input: str | bytes | None = None, env: dict[str, str] | None = None):
        return CliRunner().invoke(app, ["edit", *args], input=input, env=env, prog_name="dcode")

    @staticmethod
    def files(folder: Path) -> list[str]:
        return sorted(p.name for p in folder.iterdir())

    def test_symbol_in_place_with_a_backup(self, workdir: Path, scripted) -> None:
        (workdir / "app.py").chmod(0o640)
        scripted(SUM)
        result = self.edit(["app.py", "--symbol", "add", "--instruct", "return the sum"])
        assert result.exit_code == 0, result.stderr
        assert result.stdout == ""
        assert (workdir / "app.py").read_text() == SOURCE.replace(ADD, SUM + "\n")
        assert (workdir / "app.py.orig").read_bytes() == SOURCE.encode()
        assert stat.S_IMODE((workdir / "app.py").stat().st_mode) == 0o640
        assert stat.S_IMODE((workdir / "app.py.orig").stat().st_mode) == 0o640
        assert "dcode: edited app.py (lines 9-10 -> lines 9-10); backup: app.py.orig\n" in result.stderr
        assert self.files(workdir) == ["app.py", "app.py.orig"]
        again = self.edit(["app.py", "--symbol", "add", "--instruct", "again", "-q"])
        assert again.exit_code == 0 and again.stderr == ""
        assert self.files(workdir) == ["app.py", "app.py.orig"]  # nothing changed: no second backup

    def test_lines_and_a_second_backup(self, workdir: Path, scripted) -> None:
        scripted(SUM3)
        result = self.edit(["app.py", "--lines", "9-10", "--instruct", "three numbers"])
        assert result.exit_code == 0, result.stderr
        assert (workdir / "app.py").read_text() == SOURCE.replace(ADD, SUM3 + "\n")
        assert "(lines 9-10 -> lines 9-11); backup: app.py.orig\n" in result.stderr
        scripted(SUM)
        assert self.edit(["app.py", "--lines", "9-11", "--instruct", "two"]).exit_code == 0
        assert (workdir / "app.py.orig.1").read_text() == SOURCE.replace(ADD, SUM3 + "\n")
        assert (workdir / "app.py.orig").read_bytes() == SOURCE.encode()
        assert (workdir / "app.py").read_text() == SOURCE.replace(ADD, SUM + "\n")

    def test_whole_file(self, workdir: Path, scripted) -> None:
        scripted("print('hello')")
        result = self.edit(["app.py", "--instruct", "say hello"])
        assert result.exit_code == 0, result.stderr
        assert (workdir / "app.py").read_text() == "print('hello')\n"
        assert "(the whole file -> line 1); backup: app.py.orig\n" in result.stderr

    def test_diff_writes_nothing(self, workdir: Path, scripted) -> None:
        scripted(SUM)
        result = self.edit(["app.py", "--symbol", "Stack.size", "--instruct", "x", "--diff", "-q"])
        assert result.exit_code == 0, result.stderr
        new = SOURCE.replace("    @property\n    def size(self):\n        return len(self.items)\n", SUM + "\n")
        assert result.stdout == unified_diff(SOURCE, new, "app.py")
        assert result.stdout.startswith("--- a/app.py\n+++ b/app.py\n@@ -14,9 +14,8 @@")
        assert result.stderr == ""
        assert (workdir / "app.py").read_bytes() == SOURCE.encode() and self.files(workdir) == ["app.py"]

    def test_dry_run_shows_the_diff_and_says_so(self, workdir: Path, scripted) -> None:
        scripted(SUM)
        result = self.edit(["app.py", "--lines", "9-10", "--instruct", "x", "--dry-run", "-q"])
        assert result.exit_code == 0, result.stderr
        assert result.stdout == unified_diff(SOURCE, SOURCE.replace(ADD, SUM + "\n"), "app.py")
        assert result.stderr == "dcode: dry run: nothing written\n"
        assert self.files(workdir) == ["app.py"] and (workdir / "app.py").read_bytes() == SOURCE.encode()

    def test_output_elsewhere_leaves_the_original(self, workdir: Path, scripted) -> None:
        scripted(SUM)
        result = self.edit(["app.py", "--symbol", "add", "--instruct", "x", "-o", "new.py", "-q"])
        assert result.exit_code == 0, result.stderr
        assert (result.stdout, result.stderr) == ("", "")
        assert (workdir / "new.py").read_text() == SOURCE.replace(ADD, SUM + "\n")
        assert (workdir / "app.py").read_bytes() == SOURCE.encode()
        assert self.files(workdir) == ["app.py", "new.py"]
        refused = self.edit(["app.py", "--symbol", "add", "--instruct", "x", "-o", "new.py"])
        assert (refused.exit_code, refused.stderr) == (2, "dcode: error: new.py exists (use --force to overwrite)\n")
        scripted(SUM3)
        forced = self.edit(["app.py", "--symbol", "add", "--instruct", "x", "-o", "new.py", "--force"])
        assert forced.exit_code == 0 and (workdir / "new.py").read_text() == SOURCE.replace(ADD, SUM3 + "\n")

    def test_instruction_from_stdin_dash_and_env(self, workdir: Path, scripted) -> None:
        args = ["app.py", "--symbol", "add", "--diff", "-q"]
        outputs = []
        for extra, stdin, env in [
            (["--instruct", "use plus"], None, None),
            (["--instruct", "-"], "use plus\n", None),
            ([], "use plus\n", None),
            ([], None, {"DCODE_INSTRUCT": "use plus"}),
        ]:
            made = scripted(SUM)
            result = self.edit([*args, *extra], input=stdin, env=env)
            assert result.exit_code == 0, result.stderr
            outputs.append(result.stdout)
            assert "use plus" in self.decode_prompt(made[-1])
        assert len(set(outputs)) == 1 and outputs[0].startswith("--- a/app.py")

    @staticmethod
    def decode_prompt(model: ScriptedDenoiser) -> str:
        first = model.seen[0]
        return model.tokenizer.decode(first[: first.index(MASK)])

    def test_json_report(self, workdir: Path, scripted) -> None:
        import json

        scripted(SUM)
        result = self.edit(["app.py", "--symbol", "add", "--instruct", "x", "--json", "-q"])
        assert result.exit_code == 0, result.stderr
        report = json.loads(result.stdout)
        assert report["backup"] == "app.py.orig" and report["written"] and report["changed"]
        assert report["diff"] == unified_diff(SOURCE, SOURCE.replace(ADD, SUM + "\n"), "app.py")
        assert report["original_errors"] == report["errors_after"] == 0
        assert report["region"] == dict(
            zip(("start_byte", "end_byte"), find_symbol(SOURCE, "python", "add"), strict=True)
        )

    def test_an_edit_that_breaks_a_parsing_file_is_not_written(self, workdir: Path, scripted) -> None:
        scripted("def add(a, b):\n    return a +")
        for extra in ([], ["-o", "new.py"]):
            result = self.edit(["app.py", "--symbol", "add", "--instruct", "x", "--no-repair", *extra])
            assert result.exit_code == 3, result.stderr
            assert result.stdout == ""
            broken = SOURCE.replace(ADD, "def add(a, b):\n    return a +\n")
            assert result.stderr.startswith(unified_diff(SOURCE, broken, "app.py"))
            assert result.stderr.endswith(
                "dcode: error: the edit leaves 1 syntax error(s) in app.py, which parsed before; "
                "nothing written (the diff is above)\n"
            )
            assert self.files(workdir) == ["app.py"] and (workdir / "app.py").read_bytes() == SOURCE.encode()

    def test_a_file_that_did_not_parse_is_still_edited(self, workdir: Path, scripted) -> None:
        broken = SOURCE.replace("    return math.pi * radius * radius", "    return math.pi *")
        (workdir / "app.py").write_text(broken)
        scripted(SUM)
        result = self.edit(["app.py", "--symbol", "add", "--instruct", "x"])
        assert result.exit_code == 3, result.stderr
        assert (workdir / "app.py").read_text() == broken.replace(ADD, SUM + "\n")
        assert (workdir / "app.py.orig").read_text() == broken
        assert result.stderr.endswith("dcode: warning: app.py has 1 syntax error(s) (it had 1)\n")

    @pytest.mark.parametrize(
        ("args", "stdin", "message"),
        [
            (["gone.py", "--instruct", "x"], None, "gone.py: no such file"),
            (["folder", "--instruct", "x"], None, "folder is a directory"),
            (["blob.py", "--instruct", "x"], None, "blob.py looks binary (it holds NUL bytes)"),
            (["latin.py", "--instruct", "x"], None, "latin.py is not UTF-8 text (bad byte at offset 5)"),
            (["notes.txt", "--instruct", "x"], None, "notes.txt: unknown language (use --lang)"),
            (["app.py", "--instruct", "  "], None, "the instruction is empty"),
            (["app.py"], "", "the instruction is empty"),
            (["app.py", "--instruct", "-"], b"\xff", "stdin is not UTF-8 text (bad byte at offset 0)"),
            (["app.py", "--lines", "40-50", "--instruct", "x"], None,
             "--lines 40-50 is outside the file (it has 22 lines)"),
            (["app.py", "--lines", "4:6", "--instruct", "x"], None,
             "--lines takes A-B or A (1-based line numbers), got '4:6'"),
            (["app.py", "--symbol", "pop", "--instruct", "x"], None,
             "no symbol 'pop' in app.py; symbols: area, add, Stack, Stack.__init__, Stack.size, Stack.push"),
            (["app.py", "--lines", "1-2", "--symbol", "add", "--instruct", "x"], None,
             "--lines and --symbol cannot be used together"),
            (["app.py", "--instruct", "x", "--length", "0"], None, "--length must be at least 1 token"),
            (["app.py", "--instruct", "x", "-o", "new/"], None, "new/ names a folder; give a file name"),
        ],
    )  # fmt: skip
    def test_bad_input_is_one_line_and_touches_nothing(
        self, workdir: Path, scripted, args: list[str], stdin: str | bytes | None, message: str
    ) -> None:
        (workdir / "folder").mkdir()
        (workdir / "blob.py").write_bytes(b"x = 1\0\n")
        (workdir / "latin.py").write_bytes(b'x = "\xe9"\n')
        (workdir / "notes.txt").write_text("hello\n")
        before = {p.name: p.read_bytes() for p in workdir.iterdir() if p.is_file()}
        made = scripted(SUM)
        result = self.edit(args, input=stdin)
        assert (result.exit_code, result.stdout, result.stderr) == (2, "", f"dcode: error: {message}\n")
        assert {p.name: p.read_bytes() for p in workdir.iterdir() if p.is_file()} == before
        assert made == []  # bad input never costs a model load

    def test_a_region_too_long_for_the_model_says_by_how_much(self, workdir: Path, scripted, tokenizer) -> None:
        made = scripted(SUM, max_length=40)
        result = self.edit(["app.py", "--instruct", "x"])
        file_tokens = len(tokenizer.encode(SOURCE, add_special_tokens=False))
        prompt = len(localfill.prompt_ids(made[-1], "x", "python"))
        assert result.exit_code == 2 and result.stdout == ""
        assert result.stderr == (
            f"dcode: error: app.py is {file_tokens} tokens; with the {prompt}-token prompt that exceeds "
            f"the model's context of 40 tokens by {prompt + file_tokens - 40} (select fewer lines)\n"
        )
        assert self.files(workdir) == ["app.py"] and made[-1].seen == []

    def test_interrupted_while_sampling_leaves_the_file(self, workdir: Path, scripted) -> None:
        made = scripted(SUM, interrupt_at=3)
        # One token per pass under the schedule rule: the model is interrupted on its third pass.
        result = self.edit(["app.py", "--symbol", "add", "--instruct", "x", "--strategy", "schedule"])
        assert (result.exit_code, result.stdout, result.stderr) == (130, "", "dcode: interrupted\n")
        assert len(made[-1].seen) == 2
        assert self.files(workdir) == ["app.py"] and (workdir / "app.py").read_bytes() == SOURCE.encode()

    def test_interrupted_while_writing_leaves_the_file(
        self, workdir: Path, scripted, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        def interrupted(path: Path, text: str) -> None:
            raise KeyboardInterrupt

        monkeypatch.setattr("dcode.edit.atomic_write", interrupted)
        scripted(SUM)
        result = self.edit(["app.py", "--symbol", "add", "--instruct", "x", "-q"])
        assert (result.exit_code, result.stderr) == (130, "dcode: interrupted\n")
        assert self.files(workdir) == ["app.py"] and (workdir / "app.py").read_bytes() == SOURCE.encode()

    def test_embedded_model_end_to_end(self, workdir: Path) -> None:
        result = self.edit(["app.py", "--symbol", "Stack.push", "--instruct", "push two items", "--diff"])
        assert result.exit_code in (0, 3), result.stderr
        assert result.stdout == "" or result.stdout.startswith("--- a/app.py\n+++ b/app.py\n@@ -")
        assert re.search(r"tok/s, dcode-tiny in \w+(\n|; repair: )", result.stderr), result.stderr  # repair may run
        assert self.files(workdir) == ["app.py"] and (workdir / "app.py").read_bytes() == SOURCE.encode()


@pytest.mark.parametrize(
    ("fill", "after", "kept"),
    [
        ("    x = 2\nmain()\n", "main()\n", "    x = 2\n"),  # the echo at the end is cut
        ("    x = 2\n\n\nif a:\n    main()\n", "\n\nif a:\n    main()\n", "    x = 2\n\n\n"),  # all of it
        ("    x = 2\n\n\nif a:\n", "\n\nif a:\n    main()\n", "    x = 2\n\n\n"),  # its first lines
        ("    x = 2\n}\n", "}\n", "    x = 2\n"),  # a closing brace the region is followed by
        ("  return 1;\n}\n", "\nint g() {}\n", "  return 1;\n}\n"),  # nothing of `after`: kept as is
        ("if a:\n    main()\nx = 2\n", "if a:\n    main()\n", None),  # repeated, then more: refused
        ("print('the same long line')\nx = 1\n", "print('the same long line')\n", None),
        ("pass\nx = 1\n", "pass\n", "pass\nx = 1\n"),  # one short line is no evidence of a repeat
        ("anything\n", "", "anything\n"),  # a region at the end of the file
    ],
)
def test_an_echo_of_the_text_after_the_region(fill: str, after: str, kept: str | None) -> None:
    assert spans.unechoed(fill, after) == kept
