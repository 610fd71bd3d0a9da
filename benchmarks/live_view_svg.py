"""Redraw docs/live-view.svg from a real run: the embedded model's frame halfway through a request.

    python benchmarks/live_view_svg.py ["a request"] [--at 0.5]

The frame comes from the same pipeline, Describer and renderer the live view uses; only the
terminal is replaced by Rich's SVG export.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from dcode import flows
from dcode.config import SamplerConfig
from dcode.events import Finished
from dcode.localfill import LocalFiller
from dcode.models import load
from dcode.render import Describer, export_svg


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("request", nargs="?", default="a function that merges two sorted lists into one sorted list")
    parser.add_argument("--at", type=float, default=0.5, help="which pass to show, as a share of all passes")
    parser.add_argument("--out", type=Path, default=Path(__file__).parents[1] / "docs" / "live-view.svg")
    args = parser.parse_args()
    model = load(None)
    facts = model.facts
    length = 128
    describe = Describer(
        model.tokenizer,
        facts.mask_id,
        model=facts.name,
        device="cpu",
        language="python",
        hidden=facts.eos_ids | {facts.pad_id},
    )
    events = list(flows.new(LocalFiller(model, SamplerConfig()), args.request, "python", length, repair_rounds=0))
    frames = [describe(event, 0.05 * i) for i, event in enumerate(events)]
    steps = [f for f, e in zip(frames, events, strict=True) if f is not None and not isinstance(e, Finished)]
    frame = steps[min(len(steps) - 1, int(args.at * len(steps)))]
    export_svg(frame, args.out, title=f'dcode new "{args.request}"')
    print(f"wrote {args.out} (pass {frame.forward} of {len(steps)})")


if __name__ == "__main__":
    main()
