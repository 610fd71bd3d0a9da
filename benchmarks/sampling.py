"""Decoding speed and real-code rate of one model under several commit rules, in one process.

    python benchmarks/sampling.py                      # dcode-tiny, python prompts, 256-token canvas
    python benchmarks/sampling.py --limit 5 --json out.json
    python benchmarks/sampling.py --thresholds 0.5,0.3 --entropy-bounds 0.3,1.0   # more rows
    python benchmarks/sampling.py --unheld             # and each adaptive row without hold_conflicts
    python benchmarks/sampling.py --drafts 0,4         # verify rows checking 0 and 4 drafts a pass
    python benchmarks/sampling.py --transformers       # and two rows on transformers' Qwen2 (the old path)

For each setting it runs every prompt through the same pipeline the CLI uses and reports forward
passes, rows per pass (the canvases a pass feeds side by side: the verify rule's drafts), tokens
per forward (TPF), tok/s, wall time, the share of outputs that are real code (at
least two non-blank lines that compile()) and the share that mention the request's key words (at
least half of its content words appear in the output's identifiers, comments or docstrings). The
one-token-per-pass schedule is the baseline measured in the same run; ratios are against it.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from dataclasses import replace
from pathlib import Path

import torch

from dcode import pipeline
from dcode.bench import python_prompts
from dcode.config import SamplerConfig, merge_family_defaults
from dcode.models import load, qwen2, resolve
from dcode.sampler import Step
from dcode.syntax import is_real_code

PROMPTS = Path(__file__).with_name("prompts.jsonl")
# Each row sets these fields; the model's own defaults (dcode-tiny: its repetition penalty) fill
# in the rest, as they do for `dcode new`. The last row shows the penalty's effect in the same run.
SETTINGS: dict[str, dict[str, object]] = {
    "one-per-pass": {"rule": "schedule"},
    "threshold-0.9": {"rule": "threshold", "threshold": 0.9},
    "threshold-0.7": {"rule": "threshold", "threshold": 0.7},
    "entropy-bound": {"rule": "entropy-bound", "entropy_bound": 0.1},
    "0.7-no-penalty": {"rule": "threshold", "threshold": 0.7, "repetition_penalty": 1.0},
    "verify": {"rule": "verify"},  # one-per-pass left to right's answer, its drafts checked in one pass
    "model-defaults": {},  # what `dcode new` runs without options
}


# Words of a request that say nothing about what to write.
STOP_WORDS = frozenset(
    {"a", "an", "the", "that", "this", "these", "with", "without", "and", "or", "of", "to", "in", "into"}
    | {"for", "from", "on", "by", "as", "is", "are", "be", "it", "its", "one", "two", "each", "every", "all"}
    | {"any", "function", "class", "method", "which", "when", "where", "while", "than", "then", "returns"}
    | {"return", "given", "using", "use", "python"}
)


def words(text: str) -> set[str]:
    """Lower-case words of text, identifiers split at underscores and camelCase humps."""
    return {w.lower() for w in re.findall(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])", text)}


def key_word_share(prompt: str, code: str) -> float:
    """Share of the prompt's content words (3+ letters, not STOP_WORDS) found in the code's words
    (identifiers, comments, docstrings), matching on the first five letters (sort ~ sorted).
    Example: key_word_share("merge two sorted lists", "def merge_sorted(a): ...") -> 2/3."""
    wanted = {w for w in words(prompt) if len(w) >= 3 and w not in STOP_WORDS}
    if not wanted:
        return 1.0
    have = {w[:5] for w in words(code)}
    return sum(w[:5] in have for w in wanted) / len(wanted)


def run(model, prompts: list[str], length: int, config: SamplerConfig) -> dict[str, float]:
    forwards = tokens = real = mentions = rows = 0
    seconds = 0.0
    for prompt in prompts:
        began = time.perf_counter()
        events = list(pipeline.new(model, prompt, "python", length, config, repair_rounds=0))
        seconds += time.perf_counter() - began
        finished = events[-1]
        assert isinstance(finished, pipeline.Finished)
        rows += sum(e.rows for e in events if isinstance(e, Step))
        forwards += finished.forward
        tokens += finished.tokens
        real += is_real_code(finished.code)
        mentions += key_word_share(prompt, finished.code) >= 0.5
    return {
        **summary(len(prompts), forwards, tokens, seconds, real, mentions),
        "rows_per_pass": rows / max(1, forwards),
    }


def summary(prompts: int, forwards: int, tokens: int, seconds: float, real: int, mentions: int) -> dict[str, float]:
    """The row every setting reports: totals over the prompts, rates per prompt."""
    return {
        "prompts": prompts,
        "forward_passes": forwards,
        "tokens": tokens,
        "tokens_per_forward": tokens / max(1, forwards),
        "tokens_per_second": tokens / seconds if seconds else 0.0,
        "wall_seconds": seconds,
        "real_code_rate": real / prompts,
        "key_words_rate": mentions / prompts,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=None)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--no-cache", action="store_true")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--thresholds", default="", help="more threshold rows, e.g. 0.5,0.3")
    parser.add_argument("--entropy-bounds", default="", help="more entropy-bound rows, e.g. 0.3,1.0")
    parser.add_argument("--drafts", default="", help="more verify rows by drafts checked per pass, e.g. 0,4")
    parser.add_argument("--unheld", action="store_true", help="repeat each adaptive row with hold_conflicts off")
    parser.add_argument(
        "--transformers",
        action="store_true",
        help="repeat one-per-pass and model-defaults on transformers' Qwen2 and tokenizer (the path dcode-tiny"
        " took before session 10, but for its tokenizer, fixed in both)",
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    prompts = python_prompts(PROMPTS)
    if args.limit:
        prompts = prompts[: args.limit]
    model = load(args.model)
    settings = dict(SETTINGS)
    for values, label, rule, field in (
        (args.thresholds, "threshold", "threshold", "threshold"),
        (args.entropy_bounds, "entropy", "entropy-bound", "entropy_bound"),
        (args.drafts, "verify", "verify", "draft"),
    ):
        for value in filter(None, (t.strip() for t in values.split(","))):
            number = int(value) if field == "draft" else float(value)
            settings[f"{label}-{number:g}"] = {"rule": rule, field: number}
    configs = {name: merge_family_defaults(SamplerConfig(**f), f, model.facts.defaults) for name, f in settings.items()}  # type: ignore[arg-type]
    if args.unheld:
        adaptive = [name for name, config in configs.items() if config.rule in ("threshold", "entropy-bound")]
        configs |= {f"{name}-unheld": replace(configs[name], hold_conflicts=False) for name in adaptive}
    results = {}
    for name, config in configs.items():
        results[name] = run(model, prompts, args.length, replace(config, cache=not args.no_cache))
    if args.transformers:
        folder, shown = resolve(args.model)
        twin = qwen2.load(folder, torch.device("cpu"), torch.float32, shown, native_path=False)
        for row in ("one-per-pass", "model-defaults"):
            results[f"{row} (tf)"] = run(twin, prompts, args.length, replace(configs[row], cache=not args.no_cache))
    base = results["one-per-pass"]
    threads = torch.get_num_threads()
    print(f"model {model.facts.name}, {len(prompts)} python prompts, canvas {args.length}, threads {threads}")
    header = ("setting", "passes", "rows", "tokens", "TPF", "tok/s", "wall s", "real code", "key words", "speed-up")
    print(f"{header[0]:<20}" + "".join(f"{h:>10}" for h in header[1:]))
    for name, r in results.items():
        speedup = r["tokens_per_second"] / base["tokens_per_second"] if base["tokens_per_second"] else 0
        print(
            f"{name:<20}{r['forward_passes']:>10}{r['rows_per_pass']:>10.1f}{r['tokens']:>10}{r['tokens_per_forward']:>10.2f}"
            f"{r['tokens_per_second']:>10.1f}{r['wall_seconds']:>10.1f}{r['real_code_rate']:>10.0%}"
            f"{r['key_words_rate']:>10.0%}{speedup:>9.2f}x"
        )
    if args.json:
        report = {
            "model": model.facts.name,
            "length": args.length,
            "threads": threads,
            "defaults": model.facts.defaults,
            "results": results,
        }
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
