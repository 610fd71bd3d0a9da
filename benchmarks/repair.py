"""The repair pass measured two ways, with the embedded model (or --model).

    python benchmarks/repair.py                 # both parts
    python benchmarks/repair.py --prompts 5 --files 10
    python benchmarks/repair.py --seeds 8       # each draft repaired with seeds 0..7
    python benchmarks/repair.py --prompt-file benchmarks/dev_prompts.jsonl --files 0 --decode '{"rule": "schedule"}'

1) Generation: every python prompt of benchmarks/prompts.jsonl through `dcode new`'s pipeline with
   repair off and on (same seed, so the draft is identical): parse-valid rate, rounds used, share
   of tokens regenerated, extra forward passes and extra seconds.
2) Corrupted real code: top-level functions from the standard library's test/ folder (held out
   from training), each broken by deleting a random span inside one statement's line, then run
   through the repair pass: share restored to valid (and to exactly the original), and share of
   bytes outside the damaged lines left identical.
"""

from __future__ import annotations

import argparse
import ast
import json
import random
import shlex
import sys
import sysconfig
import time
from pathlib import Path

from dcode import flows
from dcode.bench import custom, provenance, python_prompts, with_family
from dcode.bench.metrics import is_real_code
from dcode.config import REPAIR_FILE_TRIES, REPAIR_TRIES, SamplerConfig
from dcode.events import Finished, Repaired, drain
from dcode.localfill import LocalFiller
from dcode.models import load, resolve
from dcode.syntax import find_issues

PROMPTS = Path(__file__).with_name("prompts.jsonl")


def generation(model, prompts: list[str], length: int, configs: list[SamplerConfig], tries: int) -> dict[str, float]:
    valid_raw = valid_fixed = real_raw = real_fixed = rounds = regenerated = tokens = extra_forward = 0
    draft_seconds = extra_seconds = 0.0
    for prompt, config in ((p, c) for c in configs for p in prompts):
        events = flows.new(LocalFiller(model, config), prompt, "python", length, 3, tries)
        finished = drain(events, result=Finished)
        done = finished.repair
        assert done is not None
        valid_raw += done.issues_before == 0
        valid_fixed += done.issues_after == 0
        real_raw += is_real_code(finished.draft)
        real_fixed += is_real_code(finished.code)
        rounds += done.rounds
        regenerated += done.tokens
        tokens += finished.tokens
        extra_forward += done.forward
        draft_seconds += finished.seconds
        extra_seconds += done.seconds
    n = len(prompts) * len(configs)
    return {
        "prompts": len(prompts),
        "drafts": n,  # prompts x seeds; a greedy draft is the same for every seed, its repair is not
        "valid_without_repair": valid_raw / n,
        "valid_with_repair": valid_fixed / n,
        "real_code_without_repair": real_raw / n,  # valid and 2+ non-blank lines (dcode.syntax.is_real_code)
        "real_code_with_repair": real_fixed / n,
        "mean_rounds": rounds / n,
        "share_of_tokens_regenerated": regenerated / max(1, tokens),
        "extra_forward_passes": extra_forward / n,
        "extra_seconds_mean": extra_seconds / n,
        "extra_time_share": extra_seconds / max(1e-9, draft_seconds),
    }


def held_out_functions(limit: int, rng: random.Random) -> list[str]:
    """Top-level functions of 6-40 lines from the standard library's test/ folder."""
    folder = Path(sysconfig.get_paths()["stdlib"]) / "test"
    found: list[str] = []
    for path in sorted(folder.glob("test_*.py")):
        try:
            source = path.read_text(encoding="utf-8")
            tree = ast.parse(source)
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        lines = source.splitlines(keepends=True)
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and 6 <= node.end_lineno - node.lineno + 1 <= 40:
                found.append("".join(lines[node.lineno - 1 : node.end_lineno]))
    rng.shuffle(found)
    return found[:limit]


def corrupt(code: str, rng: random.Random) -> tuple[str, int, int] | None:
    """Delete a random span inside one non-blank body line so the code stops parsing.
    Returns (broken code, first byte of the damaged line, end byte of it in the broken code)."""
    lines = code.splitlines(keepends=True)
    for _ in range(20):
        index = rng.randrange(1, len(lines))
        line = lines[index]
        body = line.rstrip("\n")
        stripped = len(body) - len(body.lstrip())
        if len(body) - stripped < 4:
            continue
        a = rng.randrange(stripped, len(body) - 1)
        b = rng.randrange(a + 1, min(len(body), a + 12) + 1)
        broken_line = body[:a] + body[b:] + line[len(body) :]
        broken = "".join(lines[:index] + [broken_line] + lines[index + 1 :])
        if find_issues(broken, "python"):
            start = len("".join(lines[:index]).encode())
            return broken, start, start + len(broken_line.encode())
    return None


def common_prefix(a: bytes, b: bytes) -> int:
    """Length of the longest common prefix. Example: common_prefix(b"abcX", b"abQ") -> 2."""
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def untouched(before: bytes, after: bytes, start: int, tail: int) -> int:
    """Bytes of before's first `start` and last `tail` bytes still in place in after: its common
    prefix (up to start) and common suffix (up to tail). A byte past the first change counts as
    changed even if it is the same.
    Example: untouched(b"abcXdef", b"abQYdef", 3, 3) -> 5."""
    head = common_prefix(before[:start], after)
    return head + common_prefix(before[len(before) - tail :][::-1], after[head:][::-1])


def corrupted(model, functions: list[str], config: SamplerConfig, rng: random.Random, tries: int) -> dict[str, float]:
    restored = exact = cases = 0
    outside_same = outside_total = 0
    fixed_same = fixed_total = 0  # the same, over the cases repair restored to valid
    rounds: dict[int, int] = {}  # rounds used by the restored cases -> count
    seconds = 0.0
    for code in functions:
        damaged = corrupt(code, rng)
        if damaged is None:
            continue
        broken, start, end = damaged
        began = time.perf_counter()
        done = next(
            e
            for e in flows.repair_file(LocalFiller(model, config), broken, "python", "test.py", 3, tries)
            if isinstance(e, Repaired)
        )
        seconds += time.perf_counter() - began
        cases += 1
        restored += done.issues_after == 0
        exact += done.code == code
        before, after = broken.encode(), done.code.encode()
        tail = len(before) - end
        same = untouched(before, after, start, tail)
        outside_total += start + tail
        outside_same += same
        if done.issues_after == 0:
            fixed_total += start + tail
            fixed_same += same
            rounds[done.rounds] = rounds.get(done.rounds, 0) + 1
    return {
        "cases": cases,
        "restored_to_valid": restored / max(1, cases),
        "restored_exactly": exact / max(1, cases),  # the function as it was before the damage
        "bytes_outside_damaged_lines_identical": outside_same / max(1, outside_total),
        # A case repair leaves broken keeps its text, so the share above rises as repair fails;
        # this one counts only the cases it restored.
        "bytes_outside_identical_when_restored": fixed_same / max(1, fixed_total),
        "restored_in_round": {str(k): v for k, v in sorted(rounds.items())},
        "seconds_mean": seconds / max(1, cases),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=None)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--prompts", type=int, default=0, help="limit the prompts (0 = all python ones)")
    parser.add_argument("--files", type=int, default=40)
    parser.add_argument("--tries", type=int, default=REPAIR_TRIES, help="tries per round after dcode new")
    parser.add_argument("--file-tries", type=int, default=REPAIR_FILE_TRIES, help="tries per round, dcode repair")
    parser.add_argument("--seed", type=int, default=0, help="the sampler's seed (repair tries sample)")
    parser.add_argument("--seeds", type=int, default=1, help="generation: repair each draft with seeds --seed, +1, ...")
    parser.add_argument("--prompt-file", type=Path, default=PROMPTS, help="e.g. benchmarks/dev_prompts.jsonl")
    parser.add_argument("--decode", default="{}", help="sampler fields over the model's defaults, as JSON")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    model = load(args.model)
    # what `dcode new --seed N` runs with no other options than --decode's
    fields = json.loads(args.decode)
    configs = [
        with_family(custom(f"seed {args.seed + k}", {**fields, "seed": args.seed + k}), model.facts.defaults)
        for k in range(args.seeds)
    ]
    prompts = python_prompts(args.prompt_file)[: args.prompts or None]
    rng = random.Random(0)
    command = shlex.join(["python", "benchmarks/repair.py", *sys.argv[1:]])
    results = {
        "provenance": provenance(command, resolve(args.model)[0]),
        "model": model.facts.name,
        "seed": args.seed,
        "seeds": args.seeds,
        "prompt_file": args.prompt_file.name,
        "decode": fields,
        "tries": {"generation": args.tries, "corrupted": args.file_tries},
        "generation": generation(model, prompts, args.length, configs, args.tries),
        "corrupted": corrupted(model, held_out_functions(args.files, rng), configs[0], rng, args.file_tries),
    }
    print(json.dumps(results, indent=2))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
