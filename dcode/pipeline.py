"""`new`, `edit` and `repair_file` as streams of dcode.events: Started, the sampler's Steps, the
repair pass's rounds, then a Finished, Edited or Repaired record.

Owns: turning a request into a canvas (prompt template, chat template, masks), decoding the
answer, and the counters a report needs. Knows nothing about argv, the environment or the
terminal; consumers (CLI, live view, benchmarks) iterate the same stream.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from importlib import resources

import torch

from dcode.config import REPAIR_TRIES, SamplerConfig
from dcode.events import Edited, Finished, Repaired, RepairRound, Started, Step
from dcode.models.base import Denoiser
from dcode.repair import repair
from dcode.sampler import denoise, trim_answer


class InputError(ValueError):
    """A request the model cannot serve (too long, empty): a usage error, reported in one line."""


def template(name: str) -> str:
    """A prompt template shipped in dcode/prompts (the repo's top-level prompts/ folder, which an
    installed package maps there; a checkout run without installing, as on a lent GPU machine, reads
    the folder itself)."""
    try:
        folder = resources.files("dcode.prompts")
    except ModuleNotFoundError:
        folder = resources.files("dcode").joinpath("..", "prompts")
    return folder.joinpath(f"{name}.txt").read_text(encoding="utf-8")


def prompt_ids(model: Denoiser, request: str, language: str) -> list[int]:
    """The request in the model's prompt template and chat template, as token ids."""
    text = template(model.facts.prompt).format(request=request.strip(), language=language).strip()
    tokenizer = model.tokenizer
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
        )
    return list(tokenizer.encode(text, add_special_tokens=False))


def decode(model: Denoiser, ids: list[int]) -> str:
    return str(model.tokenizer.decode(ids, skip_special_tokens=False))


def answer_text(model: Denoiser, canvas: torch.Tensor, start: int) -> tuple[str, int]:
    """Decoded answer and its token count: up to the first end token, pads and masks dropped."""
    facts = model.facts
    ids = trim_answer(canvas[start:], facts.eos_ids, frozenset({facts.pad_id, facts.mask_id}))
    return decode(model, ids), len(ids)


def check_length(model: Denoiser, prompt_tokens: int, length: int) -> None:
    limit = model.facts.max_length
    if length < 1:
        raise InputError("--length must be at least 1 token")
    if prompt_tokens + length > limit:
        raise InputError(
            f"--length {length} plus the {prompt_tokens}-token prompt exceeds the model's "
            f"context of {limit} tokens (at most {max(0, limit - prompt_tokens)} fit)"
        )


def new(
    model: Denoiser,
    request: str,
    language: str,
    length: int,
    config: SamplerConfig,
    repair_rounds: int = 3,
    repair_tries: int = REPAIR_TRIES,
) -> Iterator[Started | Step | RepairRound | Finished]:
    """Generate a whole file for `request`: the draft's Started and steps, the repair pass's tries
    (Started, steps, RepairRound; syntax is checked even with 0 rounds), then Finished."""
    if not request.strip():
        raise InputError("the prompt is empty")
    ids = prompt_ids(model, request, language)
    check_length(model, len(ids), length)
    canvas = torch.tensor(ids + [model.facts.mask_id] * length, dtype=torch.long)
    fill = torch.arange(len(canvas)) >= len(ids)  # explicit: a uniform-noise model's placeholder is a real token
    yield Started((len(ids), len(canvas)), ((len(ids), len(canvas)),))
    began = time.perf_counter()
    last: Step | None = None
    for last in denoise(model, canvas, len(ids), config, fill=fill):
        yield last
    assert last is not None
    text, kept = answer_text(model, last.canvas, len(ids))
    code = text.strip("\n") + "\n" if text.strip() else ""
    seconds = time.perf_counter() - began
    repaired: Repaired | None = None
    for event in repair(model, ids, code, language, config, repair_rounds, repair_tries, origin="draft"):
        if isinstance(event, Repaired):
            repaired = event
        else:
            yield event
    final = repaired.code if repaired is not None else code
    if final.strip() and not final.endswith("\n"):
        final += "\n"  # a new file ends with a line break, whatever the repair spliced at its end
    yield Finished(
        code=final,
        prompt_tokens=len(ids),
        tokens=kept,
        canvas=length,
        forward=last.forward,
        seconds=seconds,
        repair=repaired if repaired is not None and not repaired.note.startswith("not checked") else None,
        draft=code,
    )


def repair_file(
    model: Denoiser,
    source: str,
    language: str,
    name: str,
    config: SamplerConfig,
    rounds: int,
    tries: int = REPAIR_TRIES,
) -> Iterator[Started | Step | RepairRound | Repaired]:
    """Repair an existing file: the request names the file; repair's tries, then Repaired."""
    ids = prompt_ids(model, f"the {language} file {name}", language)
    code_tokens = len(model.tokenizer.encode(source, add_special_tokens=False))
    if len(ids) + code_tokens > model.facts.max_length:
        raise InputError(
            f"{name} is {code_tokens} tokens; with the prompt that exceeds the model's context "
            f"of {model.facts.max_length} tokens by {len(ids) + code_tokens - model.facts.max_length}"
        )
    yield from repair(model, ids, source, language, config, rounds=rounds, tries=tries)


def report_json(finished: Finished, extra: Mapping[str, object]) -> str:
    return json.dumps({"code": finished.code, **extra, **finished.metadata()}, indent=2)


# ---------------------------------------------------------------------------------------------
# edit: regenerate one region of an existing file, conditioned on an instruction and the code
# around it. Every byte outside the region is copied as is.


def edit_budget(region_tokens: int) -> int:
    """Masks for a region of n tokens: n plus max(16, 50%) of room, so an edit may add lines.
    Example: edit_budget(10) -> 26; edit_budget(100) -> 150."""
    return region_tokens + max(16, -(-region_tokens // 2))


def fit_region(text: str, old: str) -> str:
    """The decoded region as whole lines in the old region's line-ending style: trailing blank
    lines and spaces dropped, leading blank lines too (unless the old region began with one), and
    a line ending after the last line unless the old region ended the file without one. Blank
    text stays blank: the edit deleted the region.
    Example: fit_region("\\n  x = 1\\n\\n", "  x = 0\\r\\n") -> "  x = 1\\r\\n"."""
    import re

    newline = "\r\n" if "\r\n" in old else "\n"
    body = text.replace("\r\n", "\n").rstrip()
    if old.split("\n", 1)[0].strip() or not old:
        body = re.sub(r"\A(?:[ \t]*\n)+", "", body)
    if not body:
        return ""
    return body.replace("\n", newline) + (newline if old.endswith("\n") or not old else "")


def _check(code: str, language: str, span: tuple[int, int]) -> tuple[int, bool] | None:
    """(syntax issues in code, whether one touches the byte span), or None for a language dcode
    cannot check."""
    from dcode.syntax import UnknownLanguage, find_issues

    try:
        found = find_issues(code, language)
    except (UnknownLanguage, ImportError):
        return None
    return len(found), any(i.start_byte <= span[1] and i.end_byte >= span[0] for i in found)


def edit(
    model: Denoiser,
    source: str,
    region: tuple[int, int],
    instruction: str,
    language: str,
    config: SamplerConfig,
    length: int | None = None,
    repair_rounds: int = 3,
    name: str = "the file",
    repair_tries: int = REPAIR_TRIES,
) -> Iterator[Started | Step | RepairRound | Edited]:
    """Rewrite the byte span `region` of source (whole lines) as `instruction` asks. Yields the
    draft's Started and steps, the repair pass's tries when the edit broke the syntax, then Edited.

    The canvas is prompt + text before the region + masks + text after it, so the model sees the
    code on both sides (a block-causal model such as dcode-tiny only uses what comes before).
    `length` masks, or the region's tokens plus max(16, 50%), so the region can grow; masks filled
    with end or pad tokens are dropped, so it can shrink. The result is spliced on bytes: every
    byte outside the region is the source's. A repair is kept only if it leaves them so too.
    `name` names the file in error messages.
    """
    from dataclasses import replace

    # 1) the pieces of the canvas
    if not instruction.strip():
        raise InputError("the instruction is empty")
    data = source.encode()
    a, b = region
    if not 0 <= a <= b <= len(data):
        raise ValueError(f"region {region} is outside the {len(data)}-byte source")
    try:
        before, old, after = data[:a].decode(), data[a:b].decode(), data[b:].decode()
    except UnicodeDecodeError:
        raise ValueError(f"region {region} splits a UTF-8 character") from None
    facts = model.facts
    ids = prompt_ids(model, instruction, language)
    head, body, tail = (
        list(model.tokenizer.encode(t, add_special_tokens=False)) if t else [] for t in (before, old, after)
    )
    fixed, limit = len(ids) + len(head) + len(tail), facts.max_length
    if length is not None:
        if length < 1:
            raise InputError("--length must be at least 1 token")
        if fixed + length > limit:
            raise InputError(
                f"--length {length} plus the {len(ids)}-token prompt and the {len(head) + len(tail)} tokens of "
                f"{name} around the region exceeds the model's context of {limit} tokens by {fixed + length - limit}"
            )
        budget = length
    else:
        budget = min(edit_budget(len(body)), limit - fixed)  # less room rather than no edit
        if budget < max(1, len(body)):
            over = fixed + max(1, len(body)) - limit
            raise InputError(
                f"{name} is {len(head) + len(body) + len(tail)} tokens; with the {len(ids)}-token prompt that "
                f"exceeds the model's context of {limit} tokens by {over}"
            )
    start = len(ids) + len(head)
    canvas = torch.tensor(ids + head + [facts.mask_id] * budget + tail, dtype=torch.long)
    fill = torch.zeros(len(canvas), dtype=torch.bool)
    fill[start : start + budget] = True

    # 2) the same sampler fills the masks; a region in the middle of the file must not end it
    yield Started((len(ids), len(canvas)), ((start, start + budget),))  # the view shows the whole file
    began = time.perf_counter()
    last: Step | None = None
    for last in denoise(model, canvas, start, replace(config, stop_at_eos=False), fill=fill):
        yield last
    assert last is not None
    drop = facts.eos_ids | {facts.pad_id, facts.mask_id}
    kept = [t for t in last.canvas[start : start + budget].tolist() if t not in drop]
    text = fit_region(decode(model, kept), old)
    seconds = time.perf_counter() - began
    code = before + text + after
    new_region = (a, a + len(text.encode()))

    # 3) check; repair only when the edit broke something, and keep it only if the rest is intact
    original, found = _check(source, language, region), _check(code, language, new_region)
    repaired: Repaired | None = None
    used = False
    if found is not None and found[0] and repair_rounds > 0 and (found[1] or found[0] > (original or (0,))[0]):
        for event in repair(model, ids, code, language, config, repair_rounds, repair_tries, origin="edit"):
            if isinstance(event, Repaired):
                repaired = event
            else:
                yield event
        assert repaired is not None
        fixed_data, suffix = repaired.code.encode(), after.encode()
        intact = fixed_data[:a] == data[:a] and fixed_data.endswith(suffix) and len(fixed_data) - len(suffix) >= a
        if repaired.code != code and intact:
            code, used = repaired.code, True
            new_region = (a, len(fixed_data) - len(suffix))
            found = _check(code, language, new_region)
    yield Edited(
        code=code,
        region=(a, b),
        new_region=new_region,
        prompt_tokens=len(ids),
        context_tokens=len(head) + len(tail),
        region_tokens=len(body),
        tokens=len(kept),
        canvas=budget,
        forward=last.forward,
        seconds=seconds,
        original_errors=None if original is None else original[0],
        errors_after=None if found is None else found[0],
        repair=repaired,
        repair_used=used,
    )
