"""Plot dcode-tiny's validation loss against tokens seen, from the training log.

    python benchmarks/training_curve.py .train/run/log.jsonl docs/dcode-tiny-loss.png

The log (one JSON record per evaluation) is cumulative across sessions because training resumes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(log: Path, out: Path) -> None:
    records = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    tokens = [r["tokens"] / 1e6 for r in records]
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    ax.plot(tokens, [r["valid_ar"] for r in records], label="validation loss, next token (AR)")
    ax.plot(tokens, [r["valid_bd"] for r in records], label="validation loss, block diffusion (masked)")
    switch = next((r["tokens"] / 1e6 for r in records if r["phase"] == "bd"), None)
    if switch is not None:
        ax.axvline(switch, color="grey", linestyle=":", label="switch to block-diffusion training")
    ax.set_xlabel("training tokens seen (millions)")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.set_title("dcode-tiny (EMA weights)")
    ax.set_ylim(0, min(10, max(r["valid_bd"] for r in records) + 0.5))
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
