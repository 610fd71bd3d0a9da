"""The one sampling loop: denoise() yields a Step per forward pass.

Pure tensor code: takes a denoiser (see dcode.models.base) and a canvas of token ids in which some
positions are still to fill (by default those holding the mask token), and fills them block by
block. A masked-diffusion model sees those positions as masks; a uniform-noise model
(DiffusionGemma) sees them as random tokens, re-noised before every pass, and may be fed the
previous pass's logits. How a pass runs the model is a forward strategy chosen once, before the
loop (exact block cache, Fast-dLLM's window cache, the full canvas, uniform noise); which
positions it writes, and with what, dcode.passes decides (commit_rule_pass or verify_pass) with the pure
functions of dcode.rules (logit filters, token choice; fixed schedule, threshold, entropy bound,
verified drafts), and edit_pass which tokens of earlier passes it rewrites (LLaDA2.1's token
editing). Knows nothing about tokenizers, tree-sitter, files or the terminal. The CLI, the live
view, the repair pass, the benchmarks and the tests all consume this generator; "just the result"
is dcode.events.drain(denoise(...)).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import torch

from dcode.config import SamplerConfig
from dcode.constrained import Constraint
from dcode.events import Step
from dcode.forward import Forward, Pass, choose_forward
from dcode.models.base import Denoiser, ModelFacts
from dcode.passes import (
    Carried,
    Choosing,
    Commit,
    Drafts,
    apply_choice,
    choose_pass,
    verify_rows,
)
from dcode.rules import (
    schedule_counts,
)

# ---------------------------------------------------------------------------------------------
# Uniform noise and the per-block schedule (DiffusionGemma, transformers generation_diffusion_gemma)


def linear_temperature(temperature: float, cooling: float, step: int, horizon: int) -> float:
    """DiffusionGemma's linear schedule: at pass n of a block with N allowed passes,
    T_n = T_min + (T_max - T_min) * (N - n) / N with T_max = temperature, T_min = temperature * cooling.
    Example: linear_temperature(0.8, 0.5, 0, 48) -> 0.8; linear_temperature(0.8, 0.5, 47, 48) ~ 0.408."""
    if cooling == 1.0:
        return temperature
    left = max(0, horizon - step) / horizon
    return temperature * (cooling + (1.0 - cooling) * left)


# ---------------------------------------------------------------------------------------------
# Blocks


def block_spans(start: int, length: int, block: int, aligned: bool) -> list[tuple[int, int]]:
    """Split [start, length) into blocks of `block` tokens. Aligned spans cut at multiples of
    `block` (a block-causal model's own attention blocks); otherwise they count from start.
    Example: block_spans(5, 20, 8, aligned=True) -> [(5, 8), (8, 16), (16, 20)]."""
    cuts = range((start // block + 1) * block, length, block) if aligned else range(start + block, length, block)
    edges = [start, *cuts, length]
    return [(a, b) for a, b in zip(edges, edges[1:], strict=False) if a < b]


def trim_answer(tokens: torch.Tensor, eos_ids: frozenset[int], drop: frozenset[int]) -> list[int]:
    """The answer's ids up to (not including) the first end token, without pad/mask ids."""
    out: list[int] = []
    for token in tokens.tolist():
        if token in eos_ids:
            break
        if token not in drop:
            out.append(token)
    return out


# ---------------------------------------------------------------------------------------------
# The loop


def to_fill(canvas: torch.Tensor, start: int, masks: torch.Tensor | None, mask_id: int) -> torch.Tensor:
    """The positions (L,) bool denoise() fills: `masks`'s, else those holding the mask, never the
    prompt's [0, start); written into canvas (L,) as the mask, the placeholder every Step shows."""
    is_open = canvas == mask_id if masks is None else masks.to(device=canvas.device, dtype=torch.bool, copy=True)
    is_open[:start] = False
    canvas[is_open] = mask_id
    return is_open


def pad_after_end(
    canvas: torch.Tensor, is_open: torch.Tensor, start: int, ends: torch.Tensor, pad_id: int, made: torch.Tensor
) -> None:
    """The answer ends at its first committed end (or pad) token: what follows is padding, as in
    training, so the positions still open after it are written with the pad id (no passes), and
    token editing leaves them alone (made (L,): the positions the model wrote)."""
    hits = (torch.isin(canvas[start:], ends) & ~is_open[start:]).nonzero()
    if len(hits):
        rest = is_open.clone()
        rest[: start + int(hits[0]) + 1] = False
        canvas[rest] = pad_id
        is_open[rest] = False
        made[rest] = False


def check_arguments(
    facts: ModelFacts, config: SamplerConfig, canvas: torch.Tensor, start: int, masks: torch.Tensor | None
) -> None:
    if facts.shifted and start < 1:
        raise ValueError("a model with shifted logits needs at least one prompt token")
    if facts.noise == "uniform" and start < 1:
        raise ValueError("a uniform-noise model needs at least one prompt token as context")
    if config.rule == "verify" and facts.noise == "uniform":
        raise ValueError("the verify rule needs a masked-diffusion model (a uniform-noise model redraws its drafts)")
    if masks is not None and masks.shape != canvas.shape:
        raise ValueError(f"masks must have the canvas's shape {tuple(canvas.shape)}, got {tuple(masks.shape)}")


def begin_constrained(constraint: Constraint, is_open: torch.Tensor, start: int) -> None:
    """A grammar reads the answer left to right from its start: it constrains a whole answer, whose
    positions to fill run from `start` to the canvas's end (not a middle, nor a repair's spans)."""
    if not bool(is_open[start:].all()):
        raise ValueError("a grammar constraint fills a whole answer: every position from the start to the end is open")
    constraint.begin(len(is_open) - start)


def choosing_for(
    model: Denoiser,
    config: SamplerConfig,
    gen: torch.Generator,
    start: int,
    ban: Sequence[int],
    dtype: torch.dtype,
    least: int = 0,
    constraint: Constraint | None = None,
) -> Choosing:
    """What one denoise() call chooses with: the mask id and `ban` never written, and the tokens
    that end the answer (EOS, and padding, which in training only ever follows the end), which
    the answer's first `least` positions never hold."""
    facts, device = model.facts, model.device
    ends = torch.tensor(sorted(facts.eos_ids | {facts.pad_id}), dtype=dtype, device=device)  # (m,)
    suppressed = torch.tensor([facts.mask_id, *sorted(set(ban))], dtype=torch.long, device=device)  # (k,)
    return Choosing(config, gen, start, facts.mask_id, suppressed, ends, start + least, dtype, device, constraint)


def snapshot(
    canvas: torch.Tensor,
    positions: torch.Tensor,
    commit: Commit,
    now: Pass,
    forwards: int,
    fed: int,
    left: int,
    renoises: bool,
    edited: torch.Tensor,
    edits: int,
) -> Step:
    """The Step a pass yields: a copy of the canvas on the CPU (the loop keeps writing it)."""
    return Step(
        canvas=canvas.to("cpu", copy=True),
        committed=positions.cpu(),
        scores=commit.scores[commit.picked].float().cpu(),
        block=now.block,
        forward=forwards,
        input_tokens=fed,
        masked=left,
        done=left == 0,
        renoised=len(now.open_offsets) if renoises else 0,
        rows=len(now.rows),
        edited=edited.cpu(),
        edits=edits,
    )


def next_pass(
    canvas: torch.Tensor,
    is_open: torch.Tensor,
    block: tuple[int, int],
    index: int,
    drafts: Drafts,
    size: int,
    horizon: int,
    config: SamplerConfig,
    choosing: Choosing,
) -> Pass:
    """The block's next pass: the canvas alone (1, L) at the block's falling temperature, or the
    verify rule's checked drafts in place (R, L) at one temperature, so that its fewer passes
    sample what one pass per token samples."""
    s, e = block
    open_offsets = is_open[s:e].nonzero()[:, 0]  # (n,) block offsets of the positions to fill
    if config.rule == "verify":
        drafted, rows, reach = verify_rows(canvas, open_offsets, block, drafts, size, choosing)  # (R, L)
        return Pass(rows, block, reach, index, open_offsets, config.temperature, drafted)
    temperature = linear_temperature(config.temperature, config.cooling, index, horizon)
    return Pass(canvas[None], block, e, index, open_offsets, temperature, open_offsets[:0])


def denoise(
    model: Denoiser,
    canvas: torch.Tensor,
    start: int,
    config: SamplerConfig,
    masks: torch.Tensor | None = None,
    ban: Sequence[int] = (),
    least: int = 0,
    constraint: Constraint | None = None,
) -> Iterator[Step]:
    """Fill the positions `masks` marks in canvas[start:] and yield a Step after each forward pass.

    canvas (L,) holds the prompt in [0, start) and the answer region in [start, L). masks (L,) bool
    marks the positions to fill (default: those holding facts.mask_id), anywhere in the answer
    region (repair re-masks spans in the middle); every Step's canvas shows them as facts.mask_id
    until committed. `ban`: token ids never written there (repair's retries ban what the checker
    blamed); `least`: canvas[start : start + least] holds no end or pad token (a server's
    min_tokens, ignore_eos); `constraint`: a grammar the answer follows (dcode.constrained: commits
    only a prefix it accepts; no token editing). Blocks fill left to right, each finished before the next commits
    (with token editing, a filled block may take more passes: edit_pass). A uniform-noise model
    (DiffusionGemma: dcode.forward.UniformNoise) keeps what it committed; its blocks count from
    `start` (its canvases begin where the answer does).
    """
    facts, device = model.facts, model.device
    canvas = canvas.clone().to(device)  # (L,)
    length = len(canvas)
    check_arguments(facts, config, canvas, start, masks)
    gen = torch.Generator().manual_seed(config.seed)  # every random draw, in a fixed order
    origin = start if facts.block_origin == "answer" else 0  # where the model's attention blocks start
    is_open = to_fill(canvas, start, masks, facts.mask_id)  # (L,)
    if constraint is not None:
        begin_constrained(constraint, is_open, start)
    size = facts.block or config.block or max(1, length - start)
    aligned = facts.block is not None and facts.noise != "uniform" and not origin  # a block-causal model's own blocks
    run = Run(
        facts, config, canvas, start, is_open, size, int(is_open[start:].sum()),
        choose_forward(model, config, gen, origin),  # exact cache, window cache, full canvas or uniform noise
        choosing_for(model, config, gen, start, ban, canvas.dtype, least, constraint),
        is_open.clone(),
        config.edit_passes if config.edit_threshold is not None and config.rule != "verify" and not constraint else 0,
    )  # fmt: skip
    for block in block_spans(start, length, size, aligned):
        if int(is_open[block[0] : block[1]].sum()):
            yield from block_steps(run, block)


@dataclass
class Run:
    """What denoise()'s passes share: the canvas they write, the positions still open, the forward
    strategy, the choosing settings, the drafts made ahead, and the counters its Steps carry."""

    facts: ModelFacts
    config: SamplerConfig
    canvas: torch.Tensor  # (L,) written in place
    start: int
    is_open: torch.Tensor  # (L,) bool: the positions still to fill
    size: int  # the block size
    open_total: int  # positions to fill at the start
    forward: Forward
    choosing: Choosing
    made: torch.Tensor  # (L,) the positions this call fills: the only ones token editing rewrites
    edit_passes: int  # with token editing, passes a filled block may take
    ahead: dict[int, Drafts] = field(default_factory=dict)  # block start -> drafts made by the block before
    forwards: int = 0
    edits: int = 0


def block_steps(run: Run, block: tuple[int, int]) -> Iterator[Step]:
    """The passes of one block, a Step each, until it is filled (and, with token editing, final)."""
    s, e = block
    config, canvas, is_open, choosing = run.config, run.canvas, run.is_open, run.choosing
    in_block = int(is_open[s:e].sum())
    # 1) the block's budget (blocks left to right: LLaDA's semi-autoregressive sampling): its share
    # of the fixed schedule's passes, and the passes DiffusionGemma's falling temperature spans
    share = max(1, round((config.steps or run.open_total) * in_block / max(1, run.open_total)))
    counts = schedule_counts(in_block, share)
    horizon = config.max_block_steps or in_block
    stable: torch.Tensor | None = None  # (e-s,) last pass's argmax, for the early stop
    drafts = run.ahead.pop(s, Drafts())
    index = post = 0  # passes in this block; of them, passes after its last mask was filled
    while True:
        # 1b) with token editing, a filled block takes more passes while they edit (LLaDA2.1's post steps)
        filling = bool(is_open[s:e].any())
        if not filling and post >= run.edit_passes:
            break
        post += not filling
        # 2) the rows to feed: the canvas, or the verify rule's checked drafts in place
        now = next_pass(canvas, is_open, block, index, drafts, run.size, horizon, config, choosing)
        # 3) forward, as the strategy chosen above runs it: the logits of positions [s, reach) of
        # each row, in float32 (a model run in bfloat16 chooses in float32), made where they are read
        readout, fed = run.forward(now)
        run.forwards += 1
        # 4) choose tokens and commit some, and the edits of what earlier passes wrote (choose_pass)
        choice = choose_pass(readout, now, is_open, run.made, counts, Carried(stable, drafts), choosing, filling)
        stable, drafts = choice.stable, choice.drafts
        if choice.next_drafts is not None:
            run.ahead[e] = choice.next_drafts
        positions, edited = apply_choice(canvas, is_open, now, choice)
        index += 1
        run.edits += len(edited)
        # 5) the answer ends at its first end (or pad) token: what follows is padding, as in
        # training, so those positions need no passes and the loop stops once the rest is filled
        if config.stop_at_eos:
            pad_after_end(canvas, is_open, run.start, choosing.ends, run.facts.pad_id, run.made)
        left = int(is_open[run.start :].sum())
        # 6) a snapshot of the pass (the loop keeps writing the canvas)
        renoises = run.forward.renoises
        yield snapshot(canvas, positions, choice.commit, now, run.forwards, fed, left, renoises, edited, run.edits)
        if not filling and not len(edited):
            break  # a pass over the filled block that edits nothing: the block is final
