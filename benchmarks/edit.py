"""`dcode edit --symbol` on real Python files the embedded model never trained on.

    python benchmarks/edit.py --files 10

Takes the first N files of the standard library's test/ folder (held out from training) that fit
the model's context, picks one function in each (the first top-level or method symbol of 3-30
lines), asks for an edit of it through the same pipeline `dcode edit` uses, and reports: share
of results that parse, share of bytes outside the region left unchanged (must be 100%), and wall
time per edit.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import sysconfig
import time
from pathlib import Path

from dcode import flows
from dcode.bench import REGISTRY, provenance, with_family
from dcode.edit import find_symbol, find_symbols
from dcode.events import Edited, drain
from dcode.localfill import LocalFiller
from dcode.models import load, resolve
from dcode.syntax import find_issues

INSTRUCTION = "add a docstring and handle empty input"


def candidates(model, limit: int) -> list[tuple[Path, str, str]]:
    """(path, source, symbol) for held-out files that fit the context with room to spare."""
    folder = Path(sysconfig.get_paths()["stdlib"]) / "test"
    found = []
    for path in sorted(folder.glob("test_*.py")):
        try:
            source = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if find_issues(source, "python") or len(model.tokenizer.encode(source)) > model.facts.max_length // 2:
            continue
        for symbol in find_symbols(source, "python"):
            start, end = find_symbol(source, "python", symbol.name)
            if 3 <= source.encode()[start:end].count(b"\n") <= 30:
                found.append((path, source, symbol.name))
                break
        if len(found) == limit:
            break
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=None)
    parser.add_argument("--files", type=int, default=10)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    model = load(args.model)
    config = with_family(REGISTRY["model-defaults"], model.facts.defaults)  # what `dcode edit` runs without options
    rows = []
    for path, source, symbol in candidates(model, args.files):
        region = find_symbol(source, "python", symbol)
        began = time.perf_counter()
        events = flows.edit(LocalFiller(model, config), source, region, INSTRUCTION, "python", name=path.name)
        done = drain(events, result=Edited)
        seconds = time.perf_counter() - began
        old, new = source.encode(), done.code.encode()
        (a, b), (c, d) = done.region, done.new_region
        outside_same = old[:a] == new[:c] and old[b:] == new[d:] and a == c
        rows.append(
            {
                "file": path.name,
                "symbol": symbol,
                "parses": not find_issues(done.code, "python"),
                "outside_identical": outside_same,
                "seconds": round(seconds, 2),
                "region_tokens_before": done.region_tokens,
                "region_tokens_after": done.tokens,
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    n = max(1, len(rows))
    summary = {
        "provenance": provenance(shlex.join(["python", "benchmarks/edit.py", *sys.argv[1:]]), resolve(args.model)[0]),
        "model": model.facts.name,
        "edits": len(rows),
        "parse_rate": sum(r["parses"] for r in rows) / n,
        "outside_identical_rate": sum(r["outside_identical"] for r in rows) / n,
        "seconds_mean": sum(r["seconds"] for r in rows) / n,
    }
    print(json.dumps(summary, indent=2))
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "edits": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
