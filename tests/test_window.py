"""Editing and repairing files larger than the model's context: the region always fits, the
context around it is a window of whole lines (dcode.window), and every byte outside the region
stays as it was. With a scripted model (exact canvases) and with the embedded dcode-tiny on a
generated file ten times its context and on real standard-library files."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
from conftest import TINY_MASK as MASK
from conftest import ScriptedDenoiser
from typer.testing import CliRunner

from dcode import flows, localfill
from dcode.cli import app
from dcode.config import SamplerConfig
from dcode.edit import find_symbol
from dcode.localfill import LocalFiller

STDLIB = Path(os.__file__).parent


def big_file(functions: int) -> str:
    """A Python file of `functions` small functions after a few imports."""
    body = "".join(
        f"def f{i}(x, y):\n    total = x * {i} + y\n    return total - {i % 7}\n\n\n" for i in range(functions)
    )
    return "import math\nimport os.path\nfrom typing import Any\n\n\n" + body


def encode(tokenizer, data: bytes) -> list[int]:
    return list(tokenizer.encode(data.decode(), add_special_tokens=False)) if data else []


# ---------------------------------------------------------------------------------------------
# Choosing the window (pure)


def test_the_whole_file_when_it_fits() -> None:
    from dcode.window import Window, choose

    data = b"a\nb\nc\nd\n"
    starts = [0, 2, 4, 6]  # one token a line
    assert choose(data, (4, 6), starts, room=3, both_sides=True) == Window((0, 4), (6, 8))
    assert choose(data, (4, 6), starts, room=3, both_sides=False) == Window((0, 4), (6, 8))


def test_nearest_whole_lines_both_sides_or_before_only() -> None:
    from dcode.window import Window, choose, count, line_cuts

    data = b"a\nb\nc\nd\ne\nf\n"
    starts = [0, 2, 4, 6, 8, 10]
    region = (4, 6)  # "c\n"
    assert choose(data, region, starts, room=2, both_sides=True) == Window((2, 4), (6, 8), whole=False)
    assert choose(data, region, starts, room=2, both_sides=False) == Window((0, 4), (6, 6), whole=False)
    assert choose(data, region, starts, room=0, both_sides=True) == Window((4, 4), (6, 6), whole=False)
    assert line_cuts(data) == [0, 2, 4, 6, 8, 10, 12]
    assert count(starts, 2, 6) == 2


def test_imports_come_along_when_they_take_at_most_half_the_room() -> None:
    from dcode.window import Window, choose, import_lines

    data = b"import os\nx = 1\ny = 2\nz = 3\nw = 4\n"
    starts = [0, 7, 10, 16, 22, 28]  # "import", " os", then one token a line
    assert import_lines(data, "python", len(data)) == [(0, 10)]
    window = choose(data, (28, 34), starts, room=4, both_sides=False, language="python")
    assert window == Window((16, 28), (34, 34), ((0, 10),), whole=False)
    assert window.metadata(data, 4)["import_lines"] == [1]
    window = choose(data, (28, 34), starts, room=3, both_sides=False, language="python")
    assert window.imports == ()  # two tokens of imports would take more than half of 3


# ---------------------------------------------------------------------------------------------
# flows.edit with a scripted model: the exact canvas


SUM = "def f40(x, y):\n    return x + y"


@pytest.mark.parametrize("block", [None, 16])
def test_a_big_file_is_edited_in_a_window(tokenizer, block: int | None) -> None:
    source = big_file(80)
    model = ScriptedDenoiser(tokenizer, SUM, max_length=200)
    model.facts = dataclasses.replace(model.facts, block=block)
    region = find_symbol(source, "python", "f40")
    done = list(flows.edit(LocalFiller(model, SamplerConfig()), source, region, "add", "python"))[-1]
    data, code = source.encode(), done.code.encode()
    assert done.code == source.replace("def f40(x, y):\n    total = x * 40 + y\n    return total - 5\n", SUM + "\n")
    assert code[: region[0]] == data[: region[0]] and code[done.new_region[1] :] == data[region[1] :]
    window = localfill.edit_layout(model, data, region, [0] * done.prompt_tokens, None, "python", "x").window
    assert not window.whole
    (lo, a), (b, hi) = window.before, window.after
    assert (a, b) == region and data[lo - 1 : lo] == b"\n" and (hi == b or data[hi - 1 : hi] == b"\n")
    assert (hi > b) == (block is None)  # both sides for full attention, before only for block-causal
    assert window.imports == ((0, 12), (12, 27), (27, 50))  # the file's imports first
    imports = b"".join(data[s:e] for s, e in window.imports)
    prompt = localfill.prompt_ids(model, "add", "python")
    head, tail = encode(tokenizer, imports) + encode(tokenizer, data[lo:a]), encode(tokenizer, data[b:hi])
    assert model.seen[0] == prompt + head + [MASK] * done.masks + tail
    assert len(model.seen[0]) <= 200
    assert done.context_tokens == len(head) + len(tail)
    reported = done.metadata()["window"]
    assert reported == window.metadata(data, done.context_tokens) == done.extra["window"]
    assert reported["before"] == {"start_byte": lo, "end_byte": a, "lines": [data.count(b"\n", 0, lo) + 1, 205]}
    assert reported["tokens"] == done.context_tokens and reported["whole_file"] is False


# ---------------------------------------------------------------------------------------------
# The command with the embedded model (context 2,048 tokens)


def edit(args: list[str]):
    return CliRunner().invoke(app, ["edit", *args, "--length", "24", "--no-repair", "-q"], prog_name="dcode")


def test_edit_a_symbol_of_a_file_ten_times_the_context(tmp_path: Path, tokenizer) -> None:
    source = big_file(1000)
    assert len(tokenizer.encode(source, add_special_tokens=False)) > 10 * 2048
    (tmp_path / "big.py").write_text(source)
    result = edit([str(tmp_path / "big.py"), "--symbol", "f500", "--instruct", "return the sum", "--json"])
    assert result.exit_code in (0, 3), result.stderr
    report = json.loads(result.stdout)
    window = report["window"]
    assert not window["whole_file"] and window["before"]["end_byte"] == report["region"]["start_byte"]
    assert report["prompt_tokens"] + window["tokens"] + report["canvas"] <= 2048
    new = (tmp_path / "big.py").read_bytes() if report["written"] else b""
    data = source.encode()
    a, b = report["region"]["start_byte"], report["region"]["end_byte"]
    if report["written"]:
        assert new[:a] == data[:a] and new[report["new_region"]["end_byte"] :] == data[b:]
        assert (tmp_path / "big.py.orig").read_bytes() == data


@pytest.mark.parametrize(("name", "symbol"), [("graphlib.py", "TopologicalSorter.done"), ("heapq.py", "nsmallest")])
def test_edit_a_symbol_of_a_standard_library_file(tmp_path: Path, tokenizer, name: str, symbol: str) -> None:
    source = (STDLIB / name).read_text(encoding="utf-8")
    assert len(tokenizer.encode(source, add_special_tokens=False)) > 2048  # more than dcode-tiny's context
    (tmp_path / name).write_text(source)
    result = edit([str(tmp_path / name), "--symbol", symbol, "--instruct", "add a docstring", "--diff", "--json"])
    assert result.exit_code in (0, 3), result.stderr
    report = json.loads(result.stdout)
    assert report["written"] is False and not report["window"]["whole_file"]
    assert (tmp_path / name).read_text(encoding="utf-8") == source
    a, b = report["region"]["start_byte"], report["region"]["end_byte"]
    lines = source.encode()[a:b].decode()
    assert lines.lstrip().startswith(("def ", "@")) and symbol.split(".")[-1] in lines.splitlines()[0]


def test_a_region_that_does_not_fit_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "big.py").write_text(big_file(400))
    result = CliRunner().invoke(app, ["edit", str(tmp_path / "big.py"), "--lines", "1-1500", "--instruct", "x"])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith("dcode: error: the region (lines 1-1500 of ")
    assert "exceeds the model's context of 2048 tokens by" in result.stderr and result.stderr.count("\n") == 1


# ---------------------------------------------------------------------------------------------
# Repair: each broken span in its own window


@pytest.mark.parametrize("block", [None, 16])
def test_a_big_file_is_repaired_span_by_span(tokenizer, block: int | None) -> None:
    from dcode.events import Repaired, drain

    source = big_file(80)
    broken = source.replace("    total = x * 60 + y\n", "    total = x * 60 +\n")
    model = ScriptedDenoiser(tokenizer, "    total = x * 60 + y", max_length=120)
    model.facts = dataclasses.replace(model.facts, block=block)
    done = drain(
        flows.repair(LocalFiller(model, SamplerConfig(), [5, 6, 7]), broken, "python", "", 1, 1), result=Repaired
    )
    assert done.issues_before >= 1 and (done.issues_after, done.code) == (0, source)
    assert len(tokenizer.encode(broken, add_special_tokens=False)) > 10 * 120
    canvas = model.seen[0]
    assert len(canvas) <= 120 and canvas[:3] == [5, 6, 7]
    context = tokenizer.decode(canvas[3 : canvas.index(MASK)])
    assert context.endswith("def f60(x, y):\n") and broken.count(context) == 1  # whole lines before the span
    after = tokenizer.decode([t for t in canvas[canvas.index(MASK) :] if t != MASK])
    assert (after != "") == (block is None)  # and after it, for full attention


def test_dcode_repair_on_a_file_longer_than_the_context(tmp_path: Path) -> None:
    source = big_file(400).replace("    total = x * 200 + y\n", "    total = x * 200 +\n")
    (tmp_path / "big.py").write_text(source)
    args = ["repair", str(tmp_path / "big.py"), "--diff", "--json", "--repair-tries", "1", "--repair-rounds", "1"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code in (0, 3), result.stderr
    report = json.loads(result.stdout.splitlines()[-1])
    assert report["issues_before"] >= 1 and "needs more than" not in report.get("note", "")
    assert (tmp_path / "big.py").read_text() == source  # --diff writes nothing


def test_window_imports_nothing_of_dcode() -> None:
    import ast

    import dcode.window

    tree = ast.parse(Path(dcode.window.__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert not {m for m in imported if m.startswith("dcode")}
