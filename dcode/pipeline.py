"""`new`, `edit` and `repair_file` as streams of dcode.events: Started, the sampler's Steps, the
repair pass's rounds, then a Finished, Edited or Repaired record.

Owns: turning a request into a canvas (prompt template, chat template, masks), decoding the
answer, and the counters a report needs. Knows nothing about argv, the environment or the
terminal; consumers (CLI, live view, benchmarks) iterate the same stream.
"""

from __future__ import annotations

import json
import time
from collections.abc import Generator, Iterator, Mapping
from dataclasses import dataclass
from importlib import resources

import torch

from dcode.config import REPAIR_TRIES, SamplerConfig
from dcode.events import Edited, Finished, Repaired, RepairRound, Started, Step
from dcode.linediff import newline_of
from dcode.models.base import Denoiser
from dcode.repair import repair
from dcode.sampler import denoise, trim_answer
from dcode.spans import fit_region
from dcode.syntax import normalize_language
from dcode.window import Window, choose, narrower


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
    """InputError unless `length` masks fit beside the prompt in the model's context."""
    check_room(prompt_tokens, length, model.facts.max_length)


def check_room(prompt_tokens: int, length: int, limit: int) -> None:
    """InputError unless `length` (at least 1) plus the prompt fits in `limit` tokens."""
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
    prompt: list[int] | None = None,
) -> Iterator[Started | Step | RepairRound | Finished]:
    """Generate a whole file for `request`: the draft's Started and steps, the repair pass's tries
    (Started, steps, RepairRound; syntax is checked even with 0 rounds), then Finished. `prompt`:
    the templated prompt's ids when the caller built them (a served conversation), else prompt_ids."""
    if not request.strip():
        raise InputError("the prompt is empty")
    ids = prompt if prompt is not None else prompt_ids(model, request, language)
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
    """Repair an existing file: the request names the file; repair's tries, then Repaired. A file
    longer than the model's context is repaired span by span, each in its own window."""
    ids = prompt_ids(model, f"the {language} file {name}", language)
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


def _check(code: str, language: str, span: tuple[int, int]) -> tuple[int, bool] | None:
    """(syntax issues in code, whether one touches the byte span), or None for a language dcode
    cannot check."""
    from dcode.syntax import UnknownLanguage, find_issues

    try:
        found = find_issues(code, language)
    except (UnknownLanguage, ImportError):
        return None
    return len(found), any(i.start_byte <= span[1] and i.end_byte >= span[0] for i in found)


@dataclass(frozen=True)
class EditCanvas:
    """The canvas of an edit: prompt, the context the window keeps before the region, the
    region's masks, the context after it."""

    ids: list[int]
    start: int  # the first mask
    budget: int  # masks: the region's room
    region_tokens: int  # tokens of the region before the edit
    context_tokens: int  # tokens of the file around the region on the canvas
    window: Window


def region_budget(prompt: int, region: int, length: int | None, limit: int, where: str) -> int:
    """Masks for a region of `region` tokens: --length, else edit_budget() cut to what fits beside
    the prompt; InputError (naming the model's context) when the region itself cannot fit."""
    if length is not None:
        check_room(prompt, length, limit)
        return length
    budget = min(edit_budget(region), limit - prompt)  # less room rather than no edit
    if budget < max(1, region):
        raise InputError(
            f"{where} is {region} tokens; with the {prompt}-token prompt that exceeds the model's context "
            f"of {limit} tokens by {prompt + max(1, region) - limit} (select fewer lines)"
        )
    return budget


def edit_canvas(
    model: Denoiser, data: bytes, region: tuple[int, int], ids: list[int], length: int | None, language: str, name: str
) -> EditCanvas:
    """Lay out an edit's canvas. The whole file goes on it when it fits; otherwise a window of the
    nearest whole lines (dcode.window), so a file of any size can be edited a region at a time."""
    from dcode.edit import describe
    from dcode.repair import tokenize

    a, b = region
    facts = model.facts

    def encode(text: bytes) -> list[int]:
        return list(model.tokenizer.encode(text.decode(), add_special_tokens=False)) if text else []

    body = encode(data[a:b])
    where = f"the region ({describe(data.decode(), region)} of {name})" if (a, b) != (0, len(data)) else name
    budget = region_budget(len(ids), len(body), length, facts.max_length, where)
    room = facts.max_length - len(ids) - budget
    head, tail = encode(data[:a]), encode(data[b:])
    window = Window((0, a), (b, len(data)))
    if len(head) + len(tail) > room:
        starts = [start for start, _ in tokenize(model.tokenizer, data.decode())[1]]
        window = choose(data, region, starts, room, facts.block is None, normalize_language(language))
        while True:
            head = encode(b"".join(data[s:e] for s, e in window.imports)) + encode(data[slice(*window.before)])
            tail = encode(data[slice(*window.after)])
            if len(head) + len(tail) <= room:
                break
            narrowed = narrower(window, data)  # the estimate from the whole file's tokens was short
            assert narrowed is not None, "a window without context always fits"
            window = narrowed
    start = len(ids) + len(head)
    canvas = ids + head + [facts.mask_id] * budget + tail
    return EditCanvas(canvas, start, budget, len(body), len(head) + len(tail), window)


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
    code on both sides (a block-causal model such as dcode-tiny only uses what comes before); a
    file too long for the model's context gets a window of the lines nearest the region
    (edit_canvas). `length` masks, or the region's tokens plus max(16, 50%), so the region can
    grow; masks filled with end or pad tokens are dropped, so it can shrink. The result is
    spliced on bytes: every byte outside the region is the source's. A repair is kept only if it
    leaves them so too. `name` names the file in error messages.
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
    plan = edit_canvas(model, data, region, ids, length, language, name)
    canvas = torch.tensor(plan.ids, dtype=torch.long)
    fill = torch.zeros(len(canvas), dtype=torch.bool)
    fill[plan.start : plan.start + plan.budget] = True

    # 2) the same sampler fills the masks; a region in the middle of the file must not end it
    yield Started((len(ids), len(canvas)), ((plan.start, plan.start + plan.budget),))  # the view shows the whole file
    began = time.perf_counter()
    last: Step | None = None
    for last in denoise(model, canvas, plan.start, replace(config, stop_at_eos=False), fill=fill):
        yield last
    assert last is not None
    drop = facts.eos_ids | {facts.pad_id, facts.mask_id}
    kept = [t for t in last.canvas[plan.start : plan.start + plan.budget].tolist() if t not in drop]
    text = fit_region(decode(model, kept), old, newline_of(source))
    seconds = time.perf_counter() - began
    code = before + text + after

    # 3) check; repair only when the edit broke something, and keep it only if the rest is intact
    original = _check(source, language, region)
    checked = yield from repair_edit(
        model, ids, source, code, (a, a + len(text.encode())), language, config, original, repair_rounds, repair_tries
    )
    yield Edited(
        code=checked.code,
        region=(a, b),
        new_region=checked.new_region,
        prompt_tokens=len(ids),
        context_tokens=plan.context_tokens,
        region_tokens=plan.region_tokens,
        tokens=len(kept),
        canvas=plan.budget,
        forward=last.forward,
        seconds=seconds,
        original_errors=None if original is None else original[0],
        errors_after=None if checked.found is None else checked.found[0],
        repair=checked.repaired,
        repair_used=checked.used,
        window=plan.window.metadata(data, plan.context_tokens),
    )


@dataclass(frozen=True)
class Checked:
    """An edit's result after the check and, where it broke something, the repair pass."""

    code: str
    new_region: tuple[int, int]
    found: tuple[int, bool] | None  # as _check() says of code
    repaired: Repaired | None
    used: bool


def repair_edit(
    model: Denoiser,
    ids: list[int],
    source: str,
    code: str,
    new_region: tuple[int, int],
    language: str,
    config: SamplerConfig,
    original: tuple[int, bool] | None,
    rounds: int,
    tries: int,
) -> Generator[Started | Step | RepairRound, None, Checked]:
    """Check an edit's code; when the edit broke something, repair it (a big file span by span, in
    windows: dcode.repair) and keep the repair only if every byte outside the region is intact.
    Yields the repair's steps and rounds; returns (StopIteration's value) the Checked result."""
    a = new_region[0]
    data, suffix = source.encode(), code.encode()[new_region[1] :]
    found = _check(code, language, new_region)
    repaired: Repaired | None = None
    used = False
    if found is not None and found[0] and rounds > 0 and (found[1] or found[0] > (original or (0,))[0]):
        for event in repair(model, ids, code, language, config, rounds, tries, origin="edit"):
            if isinstance(event, Repaired):
                repaired = event
            else:
                yield event
        assert repaired is not None
        fixed = repaired.code.encode()
        intact = fixed[:a] == data[:a] and fixed.endswith(suffix) and len(fixed) - len(suffix) >= a
        if repaired.code != code and intact:
            code, used = repaired.code, True
            new_region = (a, len(fixed) - len(suffix))
            found = _check(code, language, new_region)
    return Checked(code, new_region, found, repaired, used)
