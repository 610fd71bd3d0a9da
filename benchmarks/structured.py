"""Structured output measured: which grammar engine, and what a constraint costs the sampler.

Prints numbers (a benchmark, not a timed test) and writes them as JSON under --out:

  engines  mask time per token of llguidance, xgrammar and outlines-core (those that import) for
           the answer schema below, on dcode-tiny's tokenizer (8,192 tokens) and on a vocabulary of
           Qwen2.5's size (151,936 byte strings: dcode-tiny's tokens, then the identifiers and
           punctuation runs of the installed Python sources; the real Qwen2.5 tokenizer is not on
           this offline machine): the grammar's compile time, then per token of a valid document
           the mask (allowed-token bitmask) and the advance, medians over --repeats.
  prompts  the public prompts (dcode/bench/prompts.jsonl and ../shared/eval/prompts.jsonl, each
           text once) asked as a JSON document {"code": string, "language": enum, "tests": [string]},
           on dcode-tiny with its own decoding, with and without the constraint, in the same run:
           % valid (jsonschema), tokens, passes, tokens per pass, tok/s, wall seconds.

  python benchmarks/structured.py engines prompts --out docs/benchmarks/structured
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PROMPT_FILES = (ROOT / "dcode" / "bench" / "prompts.jsonl", ROOT.parent / "shared" / "eval" / "prompts.jsonl")
QWEN_VOCAB = 151_936


def answer_schema(languages: list[str]) -> dict[str, Any]:
    """What each prompt is asked for: the code, its language, and test cases."""
    return {
        "type": "object",
        "properties": {
            "code": {"type": "string"},
            "language": {"enum": sorted(set(languages))},
            "tests": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["code", "language", "tests"],
        "additionalProperties": False,
    }


def public_prompts() -> list[dict[str, str]]:
    seen: dict[str, dict[str, str]] = {}
    for path in PROMPT_FILES:
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                if line.strip():
                    row = json.loads(line)
                    seen.setdefault(row["prompt"], row)
    return list(seen.values())


# ---------------------------------------------------------------------------------------------
# engines


def tiny_vocabulary() -> tuple[list[bytes], int]:
    """dcode-tiny's tokens as bytes, and its end id."""
    from dcode.constrain import engine_tokenizer
    from dcode.models.plain_tokenizer import PlainTokenizer

    tokenizer = PlainTokenizer(ROOT / "dcode" / "assets" / "dcode-tiny")
    engine = engine_tokenizer(tokenizer, 0, [1])
    return [engine.decode_bytes([i]) for i in range(engine.vocab_size)], 1


def large_vocabulary(base: list[bytes], size: int) -> list[bytes]:
    """`base`, then identifiers and punctuation runs of the installed Python sources (each bare and
    after a space, by frequency) up to `size` distinct byte strings."""
    import collections

    counts: collections.Counter[bytes] = collections.Counter()
    folders = sorted({Path(p) for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()})
    pieces = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*|[0-9]+|[^\sA-Za-z0-9_]{1,3}")
    for folder in folders:
        for path in sorted(folder.rglob("*.py"))[:20000]:
            for piece in pieces.findall(path.read_bytes()[:20000]):
                counts[piece] += 1
                counts[b" " + piece] += 1
        if len(counts) > 4 * size:
            break
    out, known = list(base), set(base)
    for piece, _ in counts.most_common():
        if len(out) >= size:
            break
        if piece not in known:
            out.append(piece)
            known.add(piece)
    return out


def greedy(vocab: list[bytes], text: bytes) -> list[int]:
    """Longest-match tokenization of text over vocab (a valid sequence for the measurement)."""
    index = {t: i for i, t in enumerate(vocab) if t}
    longest = max(len(t) for t in index)
    ids, at = [], 0
    while at < len(text):
        for width in range(min(longest, len(text) - at), 0, -1):
            if text[at : at + width] in index:
                ids.append(index[text[at : at + width]])
                at += width
                break
        else:
            raise ValueError(f"byte {text[at : at + 1]!r} has no token")
    return ids


def timings(compile_s: float, masks: list[float], steps: list[float]) -> dict[str, float]:
    """Compile milliseconds, and the median mask and advance (and the slowest mask) in microseconds."""
    median = statistics.median
    return {"compile_ms": compile_s * 1e3, "mask_us": median(masks) * 1e6, "advance_us": median(steps) * 1e6,
            "mask_max_us": max(masks) * 1e6}  # fmt: skip


def time_llguidance(vocab: list[bytes], end: int, schema: dict[str, Any], ids: list[int]) -> dict[str, float]:
    from llguidance import LLMatcher, LLTokenizer, TokenizerWrapper

    class Words:
        eos_token_id, bos_token_id, tokens, special_token_ids = end, None, vocab, [end]

        def __call__(self, text: bytes | str) -> list[int]:
            return greedy(vocab, text.encode() if isinstance(text, str) else text)

    began = time.perf_counter()
    tokenizer = LLTokenizer(TokenizerWrapper(Words()))
    grammar = LLMatcher.grammar_from_json_schema(schema, defaults={"whitespace_flexible": False})
    matcher = LLMatcher(tokenizer, grammar, log_level=0)
    compile_s = time.perf_counter() - began
    masks, steps = [], []
    for token in ids:
        t0 = time.perf_counter()
        matcher.compute_bitmask()
        t1 = time.perf_counter()
        assert matcher.consume_token(token), matcher.get_error()
        masks.append(t1 - t0)
        steps.append(time.perf_counter() - t1)
    return timings(compile_s, masks, steps)


def time_xgrammar(vocab: list[bytes], end: int, schema: dict[str, Any], ids: list[int]) -> dict[str, float]:
    import xgrammar

    began = time.perf_counter()
    info = xgrammar.TokenizerInfo(vocab, stop_token_ids=[end])
    compiled = xgrammar.GrammarCompiler(info).compile_json_schema(json.dumps(schema), any_whitespace=False)
    matcher = xgrammar.GrammarMatcher(compiled)
    compile_s = time.perf_counter() - began
    bitmask = xgrammar.allocate_token_bitmask(1, len(vocab))
    masks, steps = [], []
    for token in ids:
        t0 = time.perf_counter()
        matcher.fill_next_token_bitmask(bitmask)
        t1 = time.perf_counter()
        assert matcher.accept_token(token)
        masks.append(t1 - t0)
        steps.append(time.perf_counter() - t1)
    return timings(compile_s, masks, steps)


def time_outlines(vocab: list[bytes], end: int, schema: dict[str, Any], ids: list[int]) -> dict[str, float]:
    from outlines_core import Guide, Index, Vocabulary
    from outlines_core.json_schema import build_regex_from_schema

    began = time.perf_counter()
    table: dict[bytes, list[int]] = {}
    for i, token in enumerate(vocab):
        if i != end and token:
            table.setdefault(token, []).append(i)
    index = Index(build_regex_from_schema(json.dumps(schema)), Vocabulary(end, table))
    guide = Guide(index)
    compile_s = time.perf_counter() - began
    masks, steps = [], []
    for token in ids:
        t0 = time.perf_counter()
        guide.get_tokens()
        t1 = time.perf_counter()
        guide.advance(token)
        masks.append(t1 - t0)
        steps.append(time.perf_counter() - t1)
    return timings(compile_s, masks, steps)


ENGINES = {"llguidance": time_llguidance, "xgrammar": time_xgrammar, "outlines-core": time_outlines}


def engines(repeats: int) -> dict[str, object]:
    schema = answer_schema(["python", "javascript", "go"])
    document = json.dumps(
        {"code": "def add(a, b):\n    return a + b\n", "language": "python", "tests": ["assert add(1, 2) == 3"]},
        separators=(",", ":"),
    ).encode()
    base, end = tiny_vocabulary()
    rows = []
    for name, vocab in (("dcode-tiny", base), ("qwen2.5-size", large_vocabulary(base, QWEN_VOCAB))):
        ids = greedy(vocab, document)
        for engine, timed in ENGINES.items():
            try:
                runs = [timed(vocab, end, schema, ids) for _ in range(repeats)]
            except ImportError as error:
                rows.append({"vocabulary": name, "engine": engine, "error": f"not installed: {error}"})
                continue
            row = {k: round(statistics.median(r[k] for r in runs), 1) for k in runs[0]}
            rows.append(
                {"vocabulary": name, "tokens": len(vocab), "engine": engine, "document_tokens": len(ids), **row}
            )
            print(f"engines {name} {engine}: {row}")
    return {"schema": schema, "document": document.decode(), "rows": rows}


# ---------------------------------------------------------------------------------------------
# prompts


def weights_hash() -> str:
    digest = hashlib.sha256((ROOT / "dcode" / "assets" / "dcode-tiny" / "model.safetensors").read_bytes())
    return digest.hexdigest()[:16]


def run_one(model: Any, config: Any, request: str, length: int, grammar: Any) -> dict[str, Any]:
    from dcode import flows
    from dcode.events import Finished, Step
    from dcode.localfill import LocalFiller

    began = time.perf_counter()
    events = list(flows.new(LocalFiller(model, config, grammar=grammar), request, "json", length, 0))
    seconds = time.perf_counter() - began
    done = events[-1]
    assert isinstance(done, Finished)
    passes = sum(isinstance(e, Step) for e in events)
    return {"code": done.code, "tokens": done.tokens, "passes": passes, "seconds": seconds, "extra": done.extra}


def prompts(limit: int, length: int, rules: list[str]) -> dict[str, object]:
    from dataclasses import replace

    from dcode import models
    from dcode.cli.loading import with_family_defaults
    from dcode.config import SamplerConfig
    from dcode.constrain import Grammar, ask_for, validate

    rows = public_prompts()[: limit or None]
    grammar = Grammar.json_schema(answer_schema([r["lang"] for r in public_prompts()]))
    model = models.load("dcode-tiny")
    base = with_family_defaults(SamplerConfig(), model, frozenset(), None)
    results = []
    for rule in rules:
        config = base if rule == "default" else replace(base, rule=rule)  # type: ignore[arg-type]
        for constrained in (False, True):
            runs = [
                run_one(model, config, ask_for(grammar, row["prompt"]), length, grammar if constrained else None)
                for row in rows
            ]
            valid = sum(validate(grammar, r["code"]) for r in runs)
            tokens, passes, seconds = (sum(r[k] for r in runs) for k in ("tokens", "passes", "seconds"))
            summary = {
                "rule": config.rule, "constrained": constrained, "prompts": len(runs),
                "valid": valid, "valid_percent": round(100 * valid / len(runs), 1),
                "incomplete": sum(r["extra"].get("grammar") == "incomplete" for r in runs),
                "tokens": tokens, "passes": passes, "tokens_per_pass": round(tokens / max(1, passes), 3),
                "tokens_per_second": round(tokens / seconds, 2), "seconds": round(seconds, 1),
                "example": runs[0]["code"][:300],
            }  # fmt: skip
            results.append(summary)
            shown = {k: v for k, v in summary.items() if k != "example"}
            print(f"prompts {config.rule} constrained={constrained}: {json.dumps(shown)}")
    schema = json.loads(grammar.source)
    return {
        "model": "dcode-tiny",
        "weights_sha256": weights_hash(),
        "length": length,
        "schema": schema,
        "rows": results,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("parts", nargs="+", choices=("engines", "prompts"))
    parser.add_argument("--out", type=Path, default=Path("bench-results/structured"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--limit", type=int, default=0, help="prompts: the first N prompts (0 = all)")
    parser.add_argument("--length", type=int, default=128, help="prompts: the answer canvas in tokens")
    parser.add_argument("--rules", default="default", help="prompts: comma-separated rules (default: the model's)")
    args = parser.parse_args()
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())  # fmt: skip
    report: dict[str, object] = {
        "command": " ".join(["python", "benchmarks/structured.py", *sys.argv[1:]]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
    }  # fmt: skip
    if "engines" in args.parts:
        report["engines"] = engines(args.repeats)
    if "prompts" in args.parts:
        report["prompts"] = prompts(args.limit, args.length, args.rules.split(","))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{'-'.join(args.parts)}.json").write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
