"""Decoding speed and answer quality of one model under several decoding settings, in one process.

    python benchmarks/sampling.py                      # dcode-tiny, python prompts, 256-token canvas
    python benchmarks/sampling.py --limit 5 --json out.json --markdown out.md
    python benchmarks/sampling.py --settings one-per-pass,verify,entropy-bound-1.2   # any registry names
    python benchmarks/sampling.py --thresholds 0.5,0.3 --entropy-bounds 0.3,1.0   # more rows
    python benchmarks/sampling.py --unheld             # and each adaptive row without hold_conflicts
    python benchmarks/sampling.py --drafts 0,4         # verify rows checking 0 and 4 drafts a pass
    python benchmarks/sampling.py --edits 0.9,0.5      # and each non-verify row with token editing at 0.9, 0.5
    python benchmarks/sampling.py --transformers       # and two rows on transformers' Qwen2 and tokenizer

Every setting comes from dcode.bench's registry and every row from dcode.bench.metrics: forward
passes, rows a pass (the verify rule's drafts), tokens, tokens per pass, tok/s, wall time, real
code and key words, for every python prompt of benchmarks/prompts.jsonl through `dcode new`'s
pipeline with repair off. The one-token-per-pass row is the baseline measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from dataclasses import replace
from pathlib import Path

import torch

from dcode.bench import PROMPTS, REGISTRY, named, provenance, python_prompts, select, with_family
from dcode.bench.answers import answer
from dcode.bench.report import answers_markdown, provenance_markdown
from dcode.models import load, resolve
from dcode.models.families import qwen2

# The rows run by default (registry names); --settings replaces them, the other options add rows.
DEFAULT_SETTINGS = ("one-per-pass", "threshold-0.9", "threshold-0.7", "entropy-bound-0.1", "verify", "model-defaults")


def rows_asked(args: argparse.Namespace) -> list[str]:
    """The setting names: --settings (or the defaults), then one per --thresholds, --entropy-bounds, --drafts value."""
    names = [n.strip() for n in args.settings.split(",") if n.strip()] if args.settings else list(DEFAULT_SETTINGS)
    for values, prefix in (
        (args.thresholds, "threshold"),
        (args.entropy_bounds, "entropy-bound"),
        (args.drafts, "verify"),
    ):
        names += [f"{prefix}-{value.strip()}" for value in values.split(",") if value.strip()]
    return names


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--no-cache", action="store_true")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--markdown", type=Path, default=None, help="also write the table, headed by how it was made")
    parser.add_argument("--settings", default="", help="comma-separated setting names (default: %(default)s)")
    parser.add_argument("--thresholds", default="", help="more threshold rows, e.g. 0.5,0.3")
    parser.add_argument("--entropy-bounds", default="", help="more entropy-bound rows, e.g. 0.3,1.0")
    parser.add_argument("--drafts", default="", help="more verify rows by drafts checked per pass, e.g. 0,4")
    parser.add_argument("--unheld", action="store_true", help="repeat each adaptive row with hold_conflicts off")
    parser.add_argument("--edits", default="", help="repeat each non-verify row with token editing at these (0.9,0.5)")
    parser.add_argument(
        "--transformers",
        action="store_true",
        help="repeat one-per-pass and model-defaults on transformers' Qwen2 and tokenizer, the path other"
        " Qwen2-layer checkpoints load with",
    )
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        chosen = select(list(REGISTRY.values()), rows_asked(args))
    except ValueError as error:
        parser.error(str(error))
    prompts = python_prompts(PROMPTS)[: args.limit or None]
    model = load(args.model)
    defaults = model.facts.defaults
    # what `dcode new` runs with each setting's options; the cache as --no-cache says
    configs = {s.name: with_family(s, defaults, cache=not args.no_cache) for s in chosen}
    if args.unheld:
        adaptive = [name for name, config in configs.items() if config.rule in ("threshold", "entropy-bound")]
        configs |= {f"{name}-unheld": replace(configs[name], hold_conflicts=False) for name in adaptive}
    editable = [name for name, config in configs.items() if config.rule != "verify"]
    for tau in (float(v) for v in args.edits.split(",") if v.strip()):
        configs |= {f"{name}-edit-{tau:g}": replace(configs[name], edit_threshold=tau) for name in editable}
    results = {name: answer(model, prompts, args.length, config) for name, config in configs.items()}
    if args.transformers:
        folder, shown = resolve(args.model)
        twin = qwen2.load(folder, torch.device("cpu"), torch.float32, shown, native_path=False)
        for name in ("one-per-pass", "model-defaults"):
            config = with_family(named(name), defaults, cache=not args.no_cache)
            results[f"{name} (transformers)"] = answer(twin, prompts, args.length, config)
    command = shlex.join(["python", "benchmarks/sampling.py", *(sys.argv[1:] if argv is None else argv)])
    measured = provenance(command, resolve(args.model)[0])
    head = f"{model.facts.name}, {len(prompts)} python prompts, canvas {args.length}, threads {torch.get_num_threads()}"
    markdown = f"{head}\n\n{answers_markdown(results)}"
    print(markdown, end="")
    if args.markdown:
        args.markdown.write_text(provenance_markdown(measured) + "\n" + markdown)
    if args.json:
        report = {"provenance": measured, "model": model.facts.name, "length": args.length}
        report |= {"threads": torch.get_num_threads(), "defaults": defaults, "results": results}
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
