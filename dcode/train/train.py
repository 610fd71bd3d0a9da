"""Training for dcode-tiny: autoregressive pretraining, then block-diffusion adaptation.

Owns: the model size, both losses, the resumable checkpoint (model, EMA, optimizer, counters),
the log of tokens seen and validation loss, and exporting the EMA weights as a model folder that
dcode.models loads like any other Qwen2-layer checkpoint. Knows nothing about sampling or the CLI.

Phases (BD3-LM, Arriola et al. 2025; Fast-dLLM v2 adapts an AR model the same way):
  1) "ar": next-token loss on packed prompt->code examples with a causal mask.
  2) "bd": block-diffusion loss. Each example's answer is split into blocks of `block` tokens at
     absolute positions; inside each block tokens are masked with probability t ~ U[t_min, 1];
     the noisy copy and the clean copy run side by side in one forward (2T tokens) so every
     noisy block sees its own noisy block plus the clean earlier blocks. Logits are shifted:
     the token at position j is predicted from the hidden state at j-1 (the clean copy's when
     j-1 lies in the previous block), so the autoregressive head keeps its job.
"""

from __future__ import annotations

import json
import math
import shutil
import signal
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer
from transformers import Qwen2Config, Qwen2ForCausalLM

from dcode.train.data import Examples, TrainingBatches
from dcode.train.tokenizer import EOS, MASK, PAD, special_id

SAVE_EVERY = 600  # seconds between checkpoints even when no validation is due (BD steps are slow)


# The sampler values the exported model recommends (config.json's dcode_defaults; `dcode new`
# applies them to every option the user leaves unset), measured (docs/dcode-tiny.md): the verify
# rule writes what one token per pass left to right writes, which for the distilled weights is more
# real code than the entropy bound 0.6 at more tokens per pass (validation and dev requests);
# `--strategy entropy-bound` uses 0.6 and `--strategy threshold` 0.7. The verify rule checks drafts
# while their run's joint probability is at least 0.3: on a CPU a row costs about a quarter of a
# pass's fixed cost, so a draft less likely than that costs more than it brings (0.3-0.4 gave
# 1.62-1.67x one token per pass against 1.47x at the general 0.05, the same answers; 30 public
# prompts, bfloat16, 2 threads).
DECODING_DEFAULTS: dict[str, float | str] = {
    "rule": "verify",
    "draft_floor": 0.3,
    "entropy_bound": 0.6,
    "threshold": 0.7,
}


@dataclass(frozen=True)
class TrainConfig:
    hidden: int = 256  # model width; ~7.5M parameters with the settings below
    layers: int = 6  # transformer layers
    heads: int = 8  # attention heads (head dim 32)
    ffn: int = 704  # SwiGLU inner width (~2.75x hidden)
    block: int = 16  # attention block size of the finished model (BD3-LM uses 4-16)
    context: int = 256  # AR phase row length
    batch: int = 16  # rows per step
    answer_lengths: tuple[int, ...] = (64, 128, 256)  # BD phase answer lengths, one per step in turn
    ar_tokens: int = 12_000_000  # tokens of AR pretraining before switching to BD
    lr: float = 2e-3  # peak AdamW learning rate (constant after warm-up; the EMA smooths it)
    bd_lr: float = 1e-3  # learning rate in the BD phase
    warmup: int = 200  # linear warm-up steps
    weight_decay: float = 0.1
    ema: float = 0.998  # decay of the exported weight average
    t_min: float = 0.1  # lowest masking rate in the BD phase
    # Weight of dParallel's certainty forcing in the BD loss: the mean entropy of the predictions
    # that are already right (0 = the plain loss; self-distillation measures a value).
    certainty: float = 0.0
    eval_every: int = 200  # steps between validation losses and checkpoints
    seed: int = 0


def model_config(cfg: TrainConfig, vocab: int, ids: dict[str, int]) -> Qwen2Config:
    return Qwen2Config(
        vocab_size=vocab,
        hidden_size=cfg.hidden,
        intermediate_size=cfg.ffn,
        num_hidden_layers=cfg.layers,
        num_attention_heads=cfg.heads,
        num_key_value_heads=cfg.heads,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        pad_token_id=ids[PAD],
        eos_token_id=ids[EOS],
        bos_token_id=None,
    )


def ar_loss(model: Qwen2ForCausalLM, ids: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy of (B, T) rows under a causal mask."""
    hidden = model.model(input_ids=ids).last_hidden_state  # (B, T, D)
    logits = model.lm_head(hidden[:, :-1])  # (B, T-1, V)
    return F.cross_entropy(logits.flatten(0, 1).float(), ids[:, 1:].flatten())


def two_copy_mask(length: int, block: int) -> torch.Tensor:
    """(1, 1, 2T, 2T) bool for [noisy copy, clean copy] (BD3-LM's vectorized training mask).

    noisy block b sees noisy block b and clean blocks < b; clean block b sees clean blocks <= b.
    """
    b = torch.arange(length) // block  # (T,)
    same = b[:, None] == b[None, :]
    earlier = b[None, :] < b[:, None]
    upto = b[None, :] <= b[:, None]
    none = torch.zeros(length, length, dtype=torch.bool)
    top = torch.cat([same, earlier], dim=1)
    bottom = torch.cat([none, upto], dim=1)
    return torch.cat([top, bottom], dim=0)[None, None]


def noise(ids: torch.Tensor, answer: torch.Tensor, block: int, t_min: float, gen: torch.Generator) -> torch.Tensor:
    """(B, T) bool of masked positions: in each answer block, each token with probability t."""
    rows, length = ids.shape
    blocks = math.ceil(length / block)
    t = t_min + (1 - t_min) * torch.rand(rows, blocks, generator=gen)  # (B, nblocks)
    rate = t.repeat_interleave(block, dim=1)[:, :length]  # (B, T)
    masked = answer & (torch.rand(rows, length, generator=gen) < rate)
    first = answer.float().argmax(dim=1)  # every row learns something
    masked[torch.arange(rows), first] |= ~masked.any(dim=1)
    return masked


def bd_logits(
    model: Qwen2ForCausalLM, ids: torch.Tensor, masked: torch.Tensor, mask_id: int, block: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits (M, V) and targets (M,) of the masked positions, noisy and clean copies in one forward."""
    rows, length = ids.shape
    noisy = torch.where(masked, mask_id, ids)
    x = torch.cat([noisy, ids], dim=1)  # (B, 2T)
    positions = torch.arange(length, device=ids.device).repeat(2)[None].expand(rows, -1)  # (B, 2T)
    attention = two_copy_mask(length, block).to(ids.device).expand(rows, -1, -1, -1)
    hidden = model.model(input_ids=x, attention_mask=attention, position_ids=positions)
    hidden = hidden.last_hidden_state  # (B, 2T, D)
    row, col = masked.nonzero(as_tuple=True)  # targets at (row, col), col >= 1
    source = col - 1
    crosses = (source // block) != (col // block)  # previous position in the clean earlier block
    source = torch.where(crosses, source + length, source)
    return model.lm_head(hidden[row, source]).float(), ids[row, col]


def certainty_term(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean entropy of the rows of logits (M, V) whose argmax is already the target (0 if none):
    dParallel's certainty forcing (Chen et al., 2025) pushes those towards one-hot, so that a
    threshold commits them together."""
    right = logits.argmax(dim=-1) == targets  # (M,)
    logp = logits[right].log_softmax(dim=-1)  # (R, V)
    return -(logp.exp() * logp).sum() / max(1, int(right.sum()))


def bd_loss(
    model: Qwen2ForCausalLM,
    ids: torch.Tensor,
    masked: torch.Tensor,
    mask_id: int,
    block: int,
    certainty: float = 0.0,
) -> torch.Tensor:
    """Mean cross-entropy on masked positions, plus `certainty` x certainty_term."""
    logits, targets = bd_logits(model, ids, masked, mask_id, block)
    loss = F.cross_entropy(logits, targets)
    return loss + certainty * certainty_term(logits, targets) if certainty else loss


class Trainer:
    """Resumable training state in `run/` (checkpoint.pt, log.jsonl).

    `init`: a model folder (an export) to start from when `run` holds no checkpoint yet: its
    architecture, weights (as both the live and the EMA weights) and training counters, with a
    fresh optimizer and a new warm-up. `device`: where to train; on CUDA the forward runs in
    bfloat16 autocast (weights, optimizer and EMA stay float32).
    """

    def __init__(
        self, data: Path, run: Path, cfg: TrainConfig, device: str | torch.device = "cpu", init: Path | None = None
    ) -> None:
        self.run, self.data, self.cfg = run, data, cfg
        self.device = torch.device(device)
        self.tokenizer = Tokenizer.from_file(str(data / "tokenizer" / "tokenizer.json"))
        self.ids = {t: special_id(self.tokenizer, t) for t in (PAD, EOS, MASK)}
        self.train = TrainingBatches(Examples.load(data / "train.npz"), self.tokenizer, cfg.seed)
        self.valid = Examples.load(data / "valid.npz")
        torch.manual_seed(cfg.seed)
        checkpoint = run / "checkpoint.pt"
        state = torch.load(checkpoint, weights_only=False, map_location=self.device) if checkpoint.exists() else None
        if state is not None and "model_config" in state:
            architecture = Qwen2Config.from_dict(state["model_config"])
        elif state is None and init is not None:
            architecture = Qwen2Config.from_dict(json.loads((init / "config.json").read_text()))
        else:
            architecture = model_config(cfg, self.tokenizer.get_vocab_size(), self.ids)
        self.model = Qwen2ForCausalLM(architecture).float().to(self.device)
        self.model.config._attn_implementation = "sdpa"
        self.step, self.tokens, self.seconds = 0, 0, 0.0
        self.cpu_seconds = 0.0  # process CPU time spent in steps: a budget other work cannot shrink
        self.warm_from = 0  # the step the learning-rate warm-up counts from
        if state is None and init is not None:
            self.start_from(init)
        self.ema = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        self.opt = torch.optim.AdamW(
            self.model.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=cfg.weight_decay
        )
        self.gen = torch.Generator().manual_seed(cfg.seed)
        if state is not None:
            self.model.load_state_dict(state["model"])
            self.ema = state["ema"]
            self.opt.load_state_dict(state["opt"])
            self.step, self.tokens, self.seconds = state["step"], state["tokens"], state["seconds"]
            self.warm_from = state.get("warm_from", 0)
            self.cpu_seconds = state.get("cpu_seconds", 0.0)
            self.gen.set_state(state["gen"].cpu())
            self.train.rng.bit_generator.state = state["rng"]

    def start_from(self, folder: Path) -> None:
        """Weights and counters of an exported model folder (lm_head is tied to the embedding)."""
        weights = load_file(str(folder / "model.safetensors"), device=str(self.device))
        missing, unexpected = self.model.load_state_dict({k: v.float() for k, v in weights.items()}, strict=False)
        if unexpected or set(missing) - {"lm_head.weight"}:
            raise ValueError(f"{folder}: weights do not fit the model (missing {missing}, unexpected {unexpected})")
        counters = json.loads((folder / "config.json").read_text()).get("dcode_training", {})
        self.step, self.tokens = int(counters.get("steps", 0)), int(counters.get("tokens_seen", 0))
        self.warm_from = self.step

    def autocast(self) -> torch.autocast:
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.device.type == "cuda")

    @property
    def phase(self) -> str:
        return "ar" if self.tokens < self.cfg.ar_tokens else "bd"

    def learning_rate(self) -> float:
        peak = self.cfg.lr if self.phase == "ar" else self.cfg.bd_lr
        return peak * min(1.0, (self.step - self.warm_from + 1) / self.cfg.warmup)

    def one_step(self) -> float:
        began = time.process_time()
        cfg = self.cfg
        for group in self.opt.param_groups:
            group["lr"] = self.learning_rate()
        if self.phase == "ar":
            ids = self.train.packed(cfg.batch, cfg.context).to(self.device)
            with self.autocast():
                loss = ar_loss(self.model, ids)
        else:
            length = cfg.answer_lengths[self.step % len(cfg.answer_lengths)]
            # Same token budget per step: short canvases get proportionally more rows.
            rows = max(1, cfg.batch * cfg.context // (length + 32))
            ids, answer = self.train.canvases(rows, length)
            masked = noise(ids, answer, cfg.block, cfg.t_min, self.gen)
            with self.autocast():
                loss = bd_loss(
                    self.model, ids.to(self.device), masked.to(self.device), self.ids[MASK], cfg.block, cfg.certainty
                )
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        with torch.no_grad():
            for k, v in self.model.state_dict().items():
                self.ema[k].lerp_(v, 1 - cfg.ema)
        self.step += 1
        self.tokens += ids.numel()
        self.cpu_seconds += time.process_time() - began
        return float(loss.detach())

    @torch.no_grad()
    def validate(self, rows: int = 96, ema: bool = True) -> dict[str, float]:
        """AR and BD losses of the EMA (or the live) weights on a fixed slice of the validation split."""
        live = {k: v.clone() for k, v in self.model.state_dict().items()}
        self.model.load_state_dict(self.ema if ema else live)
        self.model.eval()
        batcher = TrainingBatches(self.valid, self.tokenizer, seed=1234)
        gen = torch.Generator().manual_seed(1234)
        ar, bd = [], []
        for _ in range(rows // 16):
            packed = batcher.packed(16, self.cfg.context).to(self.device)
            ids, answer = batcher.canvases(16, 128)
            masked = noise(ids, answer, self.cfg.block, self.cfg.t_min, gen).to(self.device)
            with self.autocast():
                ar.append(float(ar_loss(self.model, packed)))
                bd.append(float(bd_loss(self.model, ids.to(self.device), masked, self.ids[MASK], self.cfg.block)))
        self.model.load_state_dict(live)
        self.model.train()
        return {"valid_ar": sum(ar) / len(ar), "valid_bd": sum(bd) / len(bd)}

    def prefer_ema(self, loss: str) -> tuple[bool, dict[str, float], dict[str, float]]:
        """Whether the EMA weights beat the live ones on validation `loss` ("valid_ar" or "valid_bd";
        a tie goes to the EMA), with both validations: which weights an export should take."""
        ema, live = self.validate(ema=True), self.validate(ema=False)
        return ema[loss] <= live[loss], ema, live

    def save(self) -> None:
        self.run.mkdir(parents=True, exist_ok=True)
        state = {
            "model": self.model.state_dict(),
            "ema": self.ema,
            "opt": self.opt.state_dict(),
            "step": self.step,
            "tokens": self.tokens,
            "seconds": self.seconds,
            "cpu_seconds": self.cpu_seconds,
            "gen": self.gen.get_state(),
            "rng": self.train.rng.bit_generator.state,
            "config": asdict(self.cfg),
            "model_config": self.model.config.to_dict(),
            "warm_from": self.warm_from,
        }
        torch.save(state, self.run / "checkpoint.tmp")
        (self.run / "checkpoint.tmp").replace(self.run / "checkpoint.pt")

    def log(self, record: dict[str, object]) -> None:
        with (self.run / "log.jsonl").open("a") as f:
            f.write(json.dumps(record) + "\n")
        print(json.dumps(record), flush=True)

    def fit(self, minutes: float, tokens: int | None = None) -> None:
        """Train for `minutes` of wall time (or until `tokens` tokens seen, if that comes first),
        validating and checkpointing every eval_every steps,
        checkpointing at least every SAVE_EVERY seconds, and before leaving early on SIGINT or
        SIGTERM (`kill PID`) after the step in progress. A shell starts a background job with
        SIGINT ignored; fit listens to it anyway."""
        self.run.mkdir(parents=True, exist_ok=True)
        self.model.train()
        deadline = time.monotonic() + minutes * 60
        saved = time.monotonic()
        losses: list[float] = []
        stop: list[int] = []  # the signal that asked to stop

        def request_stop(signum: int, frame: object) -> None:
            stop.append(signum)

        previous = {}
        if threading.current_thread() is threading.main_thread():
            previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            while time.monotonic() < deadline and not stop and (tokens is None or self.tokens < tokens):
                began = time.monotonic()
                losses.append(self.one_step())
                self.seconds += time.monotonic() - began
                if self.step % self.cfg.eval_every == 0:
                    self.log_progress(losses)
                    losses = []
                if self.step % self.cfg.eval_every == 0 or time.monotonic() - saved > SAVE_EVERY:
                    self.save()
                    saved = time.monotonic()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if losses:  # steps since the last record: the log ends where training ended
            self.log_progress(losses)
        self.save()

    def log_progress(self, losses: list[float]) -> None:
        """A log record: counters, the mean training loss since the last one, validation losses."""
        record = {
            "step": self.step,
            "tokens": self.tokens,
            "phase": self.phase,
            "train_loss": sum(losses) / len(losses),
            "seconds": round(self.seconds),
            **self.validate(),
        }
        self.log(record)

    def export(self, folder: Path, ema: bool = True, dtype: torch.dtype = torch.float32) -> None:
        """Write the EMA (or the live) weights as a loadable model folder (config, safetensors,
        tokenizer), in `dtype` (float16 halves the file: a GPU machine sends back at most 16 MB a file)."""
        folder.mkdir(parents=True, exist_ok=True)
        weights = self.ema if ema else self.model.state_dict()
        tensors = {
            k: v.detach().to("cpu", dtype).contiguous()
            for k, v in weights.items()
            if k != "lm_head.weight"  # tied to the embedding
        }
        save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
        config = self.model.config.to_dict()
        config.update(
            architectures=["Qwen2ForCausalLM"],
            block_size=self.cfg.block,
            mask_token_id=self.ids[MASK],
            shifted_logits=True,
            dcode_prompt="new-bare",
            dcode_defaults=DECODING_DEFAULTS,
            dcode_training={"steps": self.step, "tokens_seen": self.tokens},
        )
        (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(self.data / "tokenizer" / name, folder / name)
