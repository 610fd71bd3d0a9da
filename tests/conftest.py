"""Shared test parts: a deterministic fake denoiser and a tiny random-weight Qwen2 checkpoint
written in the real on-disk format, so tests drive the real sampler and the real loader."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

# Torch on one thread here and in the commands the tests start (before torch is imported): the
# models are tiny, and two threads a process on two cores busy with other work thrash (the
# suite took 16.7 min in CI beside a training job, 2.8 min on one thread).
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from dcode.models.base import ModelFacts

CONTEXT_BUCKETS = 97  # how many distinct context summaries the fake tells apart


@pytest.fixture(autouse=True, scope="session")
def private_history(tmp_path_factory: pytest.TempPathFactory):
    """The commands the tests run (new, edit, repair, fix) record into a history of their own,
    never the developer's (`dcode log`); subprocesses inherit it."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_DATA_HOME", str(tmp_path_factory.mktemp("data")))
        patch.delenv("DCODE_LOG_PATH", raising=False)
        yield


class FakeDenoiser:
    """A test fake satisfying dcode.models.base.Denoiser.

    logits(i) = scale * (T[ids[i]] + P[i] + C[sum of the ids position i can see % 97]), from
    fixed random tables, so they depend on the token, its position and its context. "Can see"
    follows the attention: every position under full attention, earlier blocks and its own block
    under block-causal attention (so committing a token changes later blocks' logits, never
    earlier ones'). `suppress` tokens are never predicted (a trained model never predicts the
    mask); `force` maps canvas positions to a token the fake is certain of there (even a
    suppressed one).
    Counts forward passes and the tokens fed to them. No cache: new_cache() returns None.
    """

    tokenizer = None

    def __init__(
        self,
        *,
        vocab_size: int = 50,
        mask_id: int = 49,
        eos_ids: frozenset[int] = frozenset({1}),
        pad_id: int = 0,
        shifted: bool = False,
        block: int | None = None,
        max_length: int = 128,
        scale: float = 1.5,
        seed: int = 0,
        suppress: frozenset[int] | None = None,
        force: dict[int, int] | None = None,
    ) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.token_table = torch.randn(vocab_size, vocab_size, generator=gen)  # (V, V)
        self.position_table = torch.randn(max_length, vocab_size, generator=gen)  # (max_length, V)
        self.context_table = torch.randn(CONTEXT_BUCKETS, vocab_size, generator=gen)  # (97, V)
        self.scale = scale
        self.suppress = frozenset({mask_id}) if suppress is None else suppress
        self.force = dict(force or {})
        self.facts = ModelFacts(
            name="fake",
            family="fake",
            mask_id=mask_id,
            eos_ids=eos_ids,
            pad_id=pad_id,
            shifted=shifted,
            block=block,
            max_length=max_length,
            vocab_size=vocab_size,
        )
        self.forwards = 0
        self.input_tokens = 0

    def logits(self, ids: torch.Tensor) -> torch.Tensor:
        """ids (B, L) at canvas positions [0, L) -> logits (B, L, V); not counted as a pass."""
        length = ids.shape[1]
        pos = torch.arange(length)
        if self.facts.block is None:
            sees = torch.ones(length, length, dtype=torch.long)  # (L, L)
        else:
            sees = ((pos[None, :] // self.facts.block) <= (pos[:, None] // self.facts.block)).long()
        context = ids.long() @ sees.T  # (B, L): sum of the ids each position sees
        out = self.token_table[ids] + self.position_table[:length] + self.context_table[context % CONTEXT_BUCKETS]
        out = self.scale * out  # (B, L, V)
        forced = torch.zeros(length, self.facts.vocab_size, dtype=torch.bool)  # (L, V)
        for position, token in self.force.items():
            row = position - 1 if self.facts.shifted else position  # shifted: row i-1 predicts i
            if 0 <= row < length:
                out[:, row, token] += 40.0
                forced[row, token] = True
        for token in self.suppress:  # forcing wins over suppression
            out[..., token] = out[..., token].masked_fill(~forced[:, token], float("-inf"))
        return out

    def __call__(self, ids: torch.Tensor, cache: object = None) -> torch.Tensor:
        assert cache is None, "the fake makes no cache, so the sampler must not pass one"
        self.forwards += 1
        self.input_tokens += ids.numel()
        return self.logits(ids)

    def new_cache(self) -> None:
        return None

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")


# ---------------------------------------------------------------------------------------------
# A tiny random-weight Qwen2 checkpoint in the format dcode.models.load() reads.


def benchmark_module(filename: str) -> ModuleType:
    """A script of benchmarks/ as a module (benchmarks/ is not a package), loaded once."""
    name = "dcode_bench_" + Path(filename).stem
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).parents[1] / "benchmarks" / filename)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # a dataclass looks its module up while the file runs
        spec.loader.exec_module(module)
    return sys.modules[name]


def make_checkpoints() -> ModuleType:
    """benchmarks/make_checkpoints.py, whose main() the GPU-check tests run.
    Its writers live in dcode.testing.checkpoints."""
    return benchmark_module("make_checkpoints.py")


def python_lines(count: int = 300) -> list[str]:
    """A few hundred lines of varied, plausible Python to train a tiny BPE on."""
    from dcode.testing.kit import python_lines as lines

    return lines(count)


def write_tiny_checkpoint(folder: Path, *, block: int | None, shifted: bool = True, seed: int = 0) -> None:
    """Write config.json, model.safetensors and tokenizer files of a tiny random Qwen2 (GQA)."""
    from safetensors.torch import save_file
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from dcode.train.tokenizer import EOS, MASK, PAD, save_tokenizer, train_tokenizer

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(python_lines(), vocab_size=300)
    save_tokenizer(tokenizer, folder)
    pad_id, eos_id, mask_id = (tokenizer.token_to_id(t) for t in (PAD, EOS, MASK))

    config = Qwen2Config(
        vocab_size=tokenizer.get_vocab_size(),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,  # grouped-query attention: two query heads per key/value head
        max_position_embeddings=512,
        rope_parameters={"rope_type": "default", "rope_theta": 1000.0},  # not the default 10000
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        pad_token_id=pad_id,
        eos_token_id=eos_id,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    # Random weights large enough that attention is far from uniform and every bias and norm
    # weight matters (transformers' init sets biases to 0 and norms to 1, which would hide bugs).
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=gen)
            if "norm" in name:
                param.copy_(1.0 + 0.2 * noise)
            elif name.endswith("bias"):
                param.copy_(0.3 * noise)
            elif "embed_tokens" in name:
                param.copy_(noise)
            else:
                param.copy_(0.25 * noise)
    state = {k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}  # tied
    save_file(state, str(folder / "model.safetensors"))

    data = config.to_dict()
    data.update(
        model_type="qwen2",
        architectures=["Qwen2ForCausalLM"],
        mask_token_id=mask_id,
        shifted_logits=shifted,
        pad_token_id=pad_id,
        eos_token_id=eos_id,
        max_position_embeddings=512,
    )
    if block is not None:
        data["block_size"] = block
    (folder / "config.json").write_text(json.dumps(data, indent=2) + "\n")


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A block-causal (block 4) tiny checkpoint with shifted logits."""
    folder = tmp_path_factory.mktemp("tiny-block4")
    write_tiny_checkpoint(folder, block=4)
    return folder


@pytest.fixture(scope="session")
def tiny_full_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A full-attention tiny checkpoint (no block_size in config.json)."""
    folder = tmp_path_factory.mktemp("tiny-full")
    write_tiny_checkpoint(folder, block=None, seed=1)
    return folder


TINY_PAD, TINY_EOS, TINY_MASK = 0, 1, 2  # dcode-tiny's special tokens


class ScriptedDenoiser:
    """A Denoiser that knows what to write. In every run of consecutive masks it puts all
    probability on a script's token ids in order, then on pad (a run left partly filled by the
    last pass goes on where it was); forward pass k uses script k (the
    last one repeats), so a draft and a repair round can write different things. Under the
    threshold rule every mask is committed in the first pass (unless the script repeats a token
    in neighbouring positions: the sampler holds the second back a pass). Records each canvas it is given;
    raises KeyboardInterrupt on pass `interrupt_at`. Full attention, unshifted logits, no cache."""

    def __init__(
        self, tokenizer, *scripts: str | list[int], max_length: int = 2048, interrupt_at: int | None = None
    ) -> None:
        self.tokenizer = tokenizer
        self.scripts = [s if isinstance(s, list) else tokenizer.encode(s, add_special_tokens=False) for s in scripts]
        self.facts = ModelFacts(
            name="scripted",
            family="scripted",
            mask_id=TINY_MASK,
            eos_ids=frozenset({TINY_EOS}),
            pad_id=TINY_PAD,
            shifted=False,
            block=None,
            max_length=max_length,
            vocab_size=len(tokenizer),
            prompt="new-bare",
        )
        self.seen: list[list[int]] = []
        self.offsets: dict[int, int] = {}  # canvas position -> its index in the script
        self.interrupt_at = interrupt_at

    @property
    def forwards(self) -> int:
        return len(self.seen)

    def __call__(self, ids: torch.Tensor, cache: object = None) -> torch.Tensor:
        if self.interrupt_at is not None and len(self.seen) + 1 >= self.interrupt_at:
            raise KeyboardInterrupt
        script = self.scripts[min(len(self.seen), len(self.scripts) - 1)]
        before = self.seen[-1] if self.seen else []
        self.seen.append(ids[0].tolist())
        logits = torch.zeros(*ids.shape, self.facts.vocab_size)  # (B, L, V)
        for b, row in enumerate(ids.tolist()):
            offset = 0  # position inside the current run of masks
            for i, token in enumerate(row):
                if token == TINY_MASK:
                    # A mask left over from the last pass keeps its place in the script, so a
                    # run the sampler filled only partly (holding a token back) goes on as written.
                    if len(before) == len(row) and before[i] == TINY_MASK and i in self.offsets:
                        offset = self.offsets[i]
                    self.offsets[i] = offset
                    logits[b, i, script[offset] if offset < len(script) else TINY_PAD] = 50.0
                    offset += 1
                else:
                    offset = 0
        return logits

    def new_cache(self) -> None:
        return None

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")


@pytest.fixture(scope="session")
def tokenizer():
    """The embedded dcode-tiny's tokenizer, as the real loader reads it."""
    from transformers import AutoTokenizer

    from dcode.models import EMBEDDED

    return AutoTokenizer.from_pretrained(EMBEDDED)


@pytest.fixture
def scripted(tokenizer, monkeypatch: pytest.MonkeyPatch):
    """Make the commands load a ScriptedDenoiser: call it with the scripts (and options); it
    returns the list of the denoisers the commands made."""
    from dcode.cli import running as cli  # where run_flow finds load_model

    made: list[ScriptedDenoiser] = []

    def use(*scripts, **options) -> list[ScriptedDenoiser]:
        def load_model(spec, device, dtype="auto", quantize="auto"):
            made.append(ScriptedDenoiser(tokenizer, *scripts, **options))
            return made[-1]

        monkeypatch.setattr(cli, "load_model", load_model)
        return made

    return use


# ---------------------------------------------------------------------------------------------
# The commands on a family's tiny checkpoint.

# Python with an unclosed call in `total`: something for `dcode repair` to do.
BROKEN = (
    "def total(items):\n    return sum(x for x in items\n\n\ndef mean(items):\n    return total(items) / len(items)\n"
)


def new_edit_repair(folder: Path, tmp_path: Path) -> tuple[Any, Any, Any]:
    """Run `dcode new --json`, `dcode edit --diff` and `dcode repair --diff` with the checkpoint at
    `folder` (DCODE_MODEL, the default length); each must end 0 or 3 (written, or issues left)
    without a traceback; then `dcode serve` answers with it (serve_once).
    Returns the three CliRunner results for the family's own checks."""
    from typer.testing import CliRunner

    from dcode.cli import app

    env = {"DCODE_MODEL": str(folder), "DCODE_LENGTH": None}
    runner = CliRunner()
    new = runner.invoke(app, ["new", "add two numbers", "--length", "16", "--json", "-q"], env=env, prog_name="dcode")
    assert new.exit_code in (0, 3), (new.exit_code, new.stderr, new.exception)
    source = tmp_path / "m.py"
    source.write_text("def total(items):\n    return sum(items)\n")
    edit = runner.invoke(
        app, ["edit", str(source), "--instruct", "add a docstring", "--diff"], env=env, prog_name="dcode"
    )
    assert edit.exit_code in (0, 3), (edit.exit_code, edit.stderr, edit.exception)
    broken = tmp_path / "b.py"
    broken.write_text(BROKEN)
    repair = runner.invoke(app, ["repair", str(broken), "--diff"], env=env, prog_name="dcode")
    assert repair.exit_code in (0, 3), (repair.exit_code, repair.stderr, repair.exception)
    assert "Traceback" not in new.stderr + edit.stderr + repair.stderr
    serve_once(folder)
    return new, edit, repair


def serve_once(folder: Path) -> None:
    """`dcode serve`'s app over the checkpoint at `folder`, on a real loopback socket, with the
    family's defaults as the command merges them: a chat request and a fill-in-the-middle request
    are each answered 200 with a choice."""
    import socket
    import threading
    import time

    import httpx2
    import uvicorn

    from dcode.config import SamplerConfig, merge_family_defaults
    from dcode.models import load
    from dcode.serve.app import create_app
    from dcode.serve.engine import Engine

    model = load(str(folder))
    engine = Engine(model, merge_family_defaults(SamplerConfig(), set(), model.facts.defaults), length=16)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    server = uvicorn.Server(uvicorn.Config(create_app(engine), log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        for _ in range(200):
            if server.started:
                break
            time.sleep(0.05)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
        chat = {"messages": [{"role": "user", "content": "add two numbers"}], "max_tokens": 16}
        fim = {"prompt": "def add(a, b):\n", "suffix": "\n\nprint(add(1, 2))\n", "max_tokens": 8}
        for path, body in (("/chat/completions", chat), ("/completions", fim)):
            answer = httpx2.post(url + path, json=body, timeout=120)
            assert answer.status_code == 200, (path, answer.text)
            assert len(answer.json()["choices"]) == 1, answer.text
    finally:
        engine.cancel_all()
        server.should_exit = True
        thread.join(timeout=10)
