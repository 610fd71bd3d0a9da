"""Plot dcode-tiny's validation loss against tokens seen, from the training log.

    python benchmarks/training_curve.py .train/run/log.jsonl docs/dcode-tiny-loss.png
    python benchmarks/training_curve.py LOG PNG --mark "5673=data rebuilt"   # a line at a step

The log (one JSON record per evaluation) is cumulative across runs because training resumes.
--mark draws a labelled vertical line at a step, for events the log does not record (the data
rebuilt with a new validation split, which moves the validation losses).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(log: Path, out: Path, marks: dict[int, str]) -> plt.Figure:
    records = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    tokens = [r["tokens"] / 1e6 for r in records]
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    ax.plot(tokens, [r["valid_ar"] for r in records], label="validation loss, next token (AR)")
    ax.plot(tokens, [r["valid_bd"] for r in records], label="validation loss, block diffusion (masked)")
    switch = next((r["tokens"] / 1e6 for r in records if r["phase"] == "bd"), None)
    if switch is not None:
        ax.axvline(switch, color="grey", linestyle=":", label="switch to block-diffusion training")
    for step, label in marks.items():
        at = next((r["tokens"] / 1e6 for r in records if r["step"] >= step), None)
        if at is not None:
            ax.axvline(at, color="tab:red", linestyle="--", label=f"step {step}: {label}")
    ax.set_xlabel("training tokens seen (millions)")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.set_title("dcode-tiny (EMA weights)")
    ax.set_ylim(0, min(10, max(r["valid_bd"] for r in records) + 0.5))
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out)
    return fig


def parse_mark(text: str) -> tuple[int, str]:
    """ "5673=data rebuilt" -> (5673, "data rebuilt")."""
    step, _, label = text.partition("=")
    return int(step), label.strip()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("log", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--mark", action="append", type=parse_mark, default=[], help="STEP=LABEL")
    args = parser.parse_args()
    main(args.log, args.out, dict(args.mark))
