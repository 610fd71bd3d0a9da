"""Reports: a suite's result as JSON, a Markdown table (headed by how it was made), and for quality a
PNG plot; the answer metrics' table every script prints.

Pure functions from the result dict (what speed.run_speed / quality.run_quality return) to text,
plus the writing. matplotlib is imported only to draw, on the Agg canvas (no display, no pyplot
state). Knows nothing about models or the terminal.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dcode.bench import need

SPEED_COLUMNS = (
    ("setting", "setting", "{}"),
    ("forward_passes", "passes", "{:.1f}"),
    ("tokens", "tokens", "{:.1f}"),
    ("tokens_per_forward", "tok/pass", "{:.2f}"),
    ("ms_per_forward", "ms/pass", "{:.2f}"),
    ("tokens_per_second", "tok/s", "{:.1f}"),
    ("first_draft_seconds", "first draft s (tokens)", "{:.3f}"),
    ("wall_seconds", "wall s", "{:.3f}"),
    ("peak_memory_mb", "peak MiB", "{:.1f}"),
    ("vs_one_per_pass", "× one-per-pass", "{:.2f}×"),
    ("vs_autoregressive", "× autoregressive", "{:.2f}×"),
)


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def cell(value: object, form: str) -> str:
    return "–" if value is None else form.format(value)


def speed_markdown(result: dict[str, Any]) -> str:
    """The speed table: one row per setting, medians over repeats, per prompt where it is a count."""
    head = (
        f"Speed of {result['model']} on {result['device']} ({result['dtype']}, {result['threads']} threads, "
        f"torch {result['torch']}): {result['prompts']} prompts, {result['length']}-token answers, "
        f"median of {result['repeats']} repeats. Passes, tokens, first draft and wall are per prompt; "
        f"first draft is the time until the first B answer tokens hold no mask (B in brackets: the "
        f"decoding block, or the whole answer); "
        f"peak MiB is the extra memory at a run's peak over its start ({result['memory']}). "
        f"one-per-pass is the reference loop (one token per forward, no cache); "
        f"autoregressive is {result['autoregressive'] or 'not run'}.\n\n"
    )
    rows = []
    for row in result["settings"]:
        cells = [cell(row.get(key), form) for key, _, form in SPEED_COLUMNS]
        cells[6] += f" ({row['first_draft_tokens']:.0f})"
        rows.append(cells)
    return head + table([label for _, label, _ in SPEED_COLUMNS], rows)


def quality_markdown(result: dict[str, Any]) -> str:
    """The quality table: parse-valid rates, HumanEval pass@1, and the speed they came at."""
    head = (
        f"Quality of {result['model']} on {result['device']}: {result['prompts']} prompts (parse-valid "
        f"before / after {result['repair_rounds']} repair rounds; real code (python prompts) and key words "
        f"before repair), {result['problems']} HumanEval problems "
        f"(pass@1, one sample, sandbox {result['sandbox']['seconds']:g} s / {result['sandbox']['memory_mb']} MB), "
        f"{result['length']}-token answers.\n\n"
    )
    header = [
        "setting",
        "parse-valid",
        "after repair",
        "HumanEval pass@1",
        "real code",
        "key words",
        "tok/pass",
        "tok/s",
    ]
    rows = []
    for row in result["settings"]:
        parse, human = row["parse"] or {}, row["humaneval"] or {}
        rows.append(
            [
                row["setting"],
                cell(parse.get("valid_before_repair"), "{:.0%}"),
                cell(parse.get("valid_after_repair"), "{:.0%}"),
                cell(human.get("pass@1"), "{:.1%}") + (f" ({human['passed']}/{human['problems']})" if human else ""),
                cell(parse.get("real_code_rate"), "{:.0%}"),
                cell(parse.get("key_words_rate"), "{:.0%}"),
                cell(_speed(row, "tokens_per_forward"), "{:.2f}"),
                cell(_speed(row, "tokens_per_second"), "{:.1f}"),
            ]
        )
    return head + table(header, rows)


def _speed(row: dict[str, Any], key: str) -> float | None:
    """A speed figure over everything the setting generated (HumanEval if it ran, else the prompts)."""
    part = row["humaneval"] or row["parse"]
    return part[key] if part else None


def quality_plot(result: dict[str, Any], path: Path) -> None:
    """tokens per forward (x) against quality (y), one point per setting and measure."""
    need("matplotlib")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6.4, 4.2), dpi=120)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    series = (
        ("HumanEval pass@1", "humaneval", "pass@1", "o"),
        ("parse-valid after repair", "parse", "valid_after_repair", "s"),
        ("parse-valid before repair", "parse", "valid_before_repair", "^"),
    )
    labelled: set[str] = set()  # each setting's name once, beside its first point
    for label, part, key, marker in series:
        points = [
            (x, 100 * row[part][key], row["setting"])
            for row in result["settings"]
            if row[part] and row[part][key] is not None and (x := _speed(row, "tokens_per_forward")) is not None
        ]
        if not points:
            continue
        axes.scatter([p[0] for p in points], [p[1] for p in points], marker=marker, label=label)
        for x, y, name in points:
            if name not in labelled:
                labelled.add(name)
                axes.annotate(name, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
    axes.set_xlabel("tokens per forward pass")
    axes.set_ylabel("%")
    axes.set_ylim(-5, 105)
    axes.set_title(f"{result['model']}: speed against quality, one point per setting", fontsize=9)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=7, loc="best")
    figure.tight_layout()
    figure.savefig(path, format="png")


def write_reports(result: dict[str, Any], out: Path) -> list[Path]:
    """<suite>.json and <suite>.md in `out` (created), and <suite>.png for quality. Returns the paths."""
    out.mkdir(parents=True, exist_ok=True)
    suite = result["suite"]
    paths = [out / f"{suite}.json", out / f"{suite}.md"]
    paths[0].write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    markdown = speed_markdown(result) if suite == "speed" else quality_markdown(result)
    if result.get("provenance"):
        markdown = provenance_markdown(result["provenance"]) + "\n" + markdown
    paths[1].write_text(markdown, encoding="utf-8")
    if suite == "quality":
        paths.append(out / f"{suite}.png")
        quality_plot(result, paths[-1])
    return paths


# The metrics' columns (dcode.bench.metrics.Tally.summary), as every answer table shows them.
ANSWER_COLUMNS = (
    ("forward_passes", "passes", "{:.0f}"),
    ("rows_per_pass", "rows a pass", "{:.1f}"),
    ("tokens", "tokens", "{:.0f}"),
    ("tokens_per_forward", "tokens/pass", "{:.2f}"),
    ("tokens_per_second", "tok/s", "{:.1f}"),
    ("wall_seconds", "wall s", "{:.1f}"),
    ("real_code_rate", "real code", "{:.0%}"),
    ("key_words_rate", "key words", "{:.0%}"),
    ("edits", "edits", "{:.0f}"),
)


def answers_markdown(rows: dict[str, dict[str, Any]], first: str = "setting") -> str:
    """One row per setting (or model) of metric summaries; a column is left out when no row has it."""
    columns = [c for c in ANSWER_COLUMNS if any(c[0] in row for row in rows.values())]
    body = [[name] + [cell(row.get(key), form) for key, _, form in columns] for name, row in rows.items()]
    return table([first] + [label for _, label, _ in columns], body)


def provenance_markdown(measured: dict[str, Any]) -> str:
    """The lines that say how a result was made: command, weights, date."""
    weights = measured.get("weights_sha256")
    lines = [f"Command: `{measured['command']}`"]
    lines.append(f"Weights: sha256 `{weights}`" if weights else "Weights: none (no model measured)")
    lines.append(f"Measured: {measured['date']}")
    return "\n".join(f"{line}  " for line in lines[:-1]) + "\n" + lines[-1] + "\n"
