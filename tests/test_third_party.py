"""dcode new, edit and repair through --endpoint against a real third-party OpenAI-compatible
server: `transformers serve` (transformers' own, FastAPI) in its own process on a loopback port,
serving a tiny random-weight Llama built here with transformers' classes and a byte-level tokenizer
with a chat template. No hub: the model is a folder in tmp_path.

The model writes noise, so the tests assert what must hold whatever it writes: an honest exit code
(0 done, 3 syntax errors remain; never 1 or 2), no traceback, the answer on stdout, every byte
outside the rewritten span kept, nothing of the file's tail repeated inside the span (the server
appends `suffix` to what it generates), and the server's log showing it answered the requests.
"""

from __future__ import annotations

import difflib
import importlib.util
import json
import os
import re
import shutil
import socket
import string
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# `transformers serve` needs transformers[serving]: fastapi, uvicorn, openai's types, and accelerate
# (it always loads with a device_map).
MISSING = [name for name in ("accelerate", "fastapi", "uvicorn", "openai") if importlib.util.find_spec(name) is None]
pytestmark = [
    pytest.mark.skipif(bool(MISSING), reason=f"transformers serve needs {', '.join(MISSING)}"),
    pytest.mark.slow,  # ~40 s on two busy cores: building the model and starting the server take most
]

SPECIALS = ("<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>")
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
# The bytes the model may write: lines of lower-case letters, which parse as Python (names) unless
# a line is a keyword, so the paths that write files run too, not only those of exit 3.
WRITES = set(string.ascii_lowercase + "\n")
SOURCE = (
    "import sys\n\n\ndef first(a, b):\n    return a + b\n\n\n"
    "def middle(x):\n    total = 0\n    for i in range(x):\n        total += i\n    return total\n\n\n"
    'def last():\n    print("done", file=sys.stderr)\n'
)
MIDDLE = (8, 12)  # lines of `middle` in SOURCE, 1-based
# The error on line 1: the first round's span starts at byte 0, so a fill in the middle would have
# an empty prompt (transformers serve fails on an empty input).
BROKEN = "def first(a, b:\n    return a + b\n\n\n" + SOURCE[SOURCE.index("def middle") :]


def build_model(folder: Path) -> None:
    """A 2-layer Llama (hidden 32) over 256 byte tokens and the chat specials, saved as transformers
    saves one. Its output rows outside WRITES are zero, so greedy decoding writes printable ASCII
    (a random row's logit beats 0) and never a special token or the end of text."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {char: i for i, char in enumerate(alphabet)} | {s: len(alphabet) + i for i, s in enumerate(SPECIALS)}
    rust = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    rust.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    rust.decoder = decoders.ByteLevel()
    rust.add_special_tokens(list(SPECIALS))
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=rust, eos_token=SPECIALS[0], pad_token=SPECIALS[0], chat_template=CHAT_TEMPLATE
    )
    tokenizer.save_pretrained(folder)
    eos = vocab[SPECIALS[0]]
    config = LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=4096,
        eos_token_id=eos,
        pad_token_id=eos,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    allowed = [rust.encode(char).ids[0] for char in sorted(WRITES)]
    with torch.no_grad():
        keep = model.lm_head.weight[allowed].clone()
        model.lm_head.weight.zero_()
        model.lm_head.weight[allowed] = keep
    model.save_pretrained(folder)


@dataclass
class Server:
    url: str
    model: str  # the name the server knows the model by: the folder it was started with
    log: Path

    def said(self) -> str:
        return self.log.read_text(errors="replace")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return answer.status == 200
    except OSError:
        return False


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """`transformers serve MODEL_FOLDER` on a free loopback port, ready (GET /health is 200)."""
    home = tmp_path_factory.mktemp("transformers-serve")
    folder = home / "tiny-llama"
    build_model(folder)
    port, log = free_port(), home / "server.log"
    program = Path(sys.executable).with_name("transformers")  # the venv's script, else the one on PATH
    program = program if program.exists() else Path(shutil.which("transformers") or "transformers")
    command = [str(program), "serve", str(folder), "--device", "cpu", "--dtype", "float32"]
    command += ["--host", "127.0.0.1", "--port", str(port)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DCODE_", "OPENAI_"))}
    env |= {"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    with log.open("wb") as sink:
        process = subprocess.Popen(command, env=env, cwd=home, stdout=sink, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 180
        while not healthy(f"http://127.0.0.1:{port}/health"):
            assert process.poll() is None, f"transformers serve exited {process.returncode}:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"transformers serve not ready in 180 s:\n{log.read_text()}"
            time.sleep(0.2)
        yield Server(f"http://127.0.0.1:{port}/v1", str(folder), log)
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def dcode(server: Server, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`python -m dcode.cli ARGS --endpoint URL --model NAME -q`, this tree's dcode in its own process."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DCODE_", "OPENAI_"))}
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env |= {"PYTHONPATH": path, "HF_HUB_OFFLINE": "1", "NO_COLOR": "1", "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "dcode.cli", *args, "--endpoint", server.url, "--model", server.model, "-q"]
    return subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=300)


def honest(done: subprocess.CompletedProcess[str]) -> None:
    """Exit 0 (done) or 3 (syntax errors remain), and no traceback."""
    assert done.returncode in (0, 3), f"exit {done.returncode}: {done.stderr}"
    assert "Traceback" not in done.stderr + done.stdout, done.stderr


def posts(server: Server, path: str) -> int:
    """Requests to path that the server's access log shows it answered with 200."""
    return len(re.findall(rf'"POST /v1/{path} HTTP/1\.1" 200', server.said()))


def spliced(before: str, after: str) -> tuple[str, str, str]:
    """(head, middle, tail) of after: the longest common line-wise head and tail with before, and
    what lies between them in after."""
    old, new = before.splitlines(keepends=True), after.splitlines(keepends=True)
    head = 0
    while head < min(len(old), len(new)) and old[head] == new[head]:
        head += 1
    tail = 0
    while tail < min(len(old), len(new)) - head and old[-1 - tail] == new[-1 - tail]:
        tail += 1
    return "".join(new[:head]), "".join(new[head : len(new) - tail]), "".join(new[len(new) - tail :])


def applied(source: str, diff: str) -> str:
    """source with a unified diff (as `--diff` prints it) applied; a hunk that does not match is a failure."""
    old, out, at = source.splitlines(keepends=True), [], 0
    lines = diff.splitlines(keepends=True)
    assert lines[0].startswith("--- ") and lines[1].startswith("+++ "), diff
    for line in lines[2:]:
        hunk = re.match(r"@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@", line)
        if hunk:
            start = int(hunk.group(1)) - (0 if hunk.group(2) == "0" else 1)
            out += old[at:start]
            at = start
        elif line.startswith(("-", " ")):
            assert old[at] == line[1:] or (old[at].rstrip("\r\n") == line[1:].rstrip("\r\n")), (at, line)
            if line.startswith(" "):
                out.append(old[at])
            at += 1
        elif line.startswith("+"):
            out.append(line[1:])
        elif not line.startswith("\\"):
            raise AssertionError(f"not a diff line: {line!r}")
    return "".join(out + old[at:])


def test_new_through_transformers_serve(server: Server, tmp_path: Path) -> None:
    chats = posts(server, "chat/completions")
    done = dcode(server, "new", "a function that adds two numbers", "--length", "32", cwd=tmp_path)
    honest(done)
    assert done.stdout.strip(), done.stderr
    assert set(done.stdout) <= WRITES, done.stdout  # what the model wrote, not a message or the prompt
    assert posts(server, "chat/completions") > chats, server.said()


def test_edit_through_transformers_serve_keeps_every_byte_outside_the_symbol(server: Server, tmp_path: Path) -> None:
    path = tmp_path / "app.py"
    path.write_text(SOURCE)
    region_lines = SOURCE.splitlines(keepends=True)
    before = "".join(region_lines[: MIDDLE[0] - 1])
    after = "".join(region_lines[MIDDLE[1] :])
    # 1) --diff: the change as the edit would write it
    shown = dcode(server, "edit", str(path), "--symbol", "middle", "--instruct", "count down", "--diff", cwd=tmp_path)
    honest(shown)
    assert path.read_text() == SOURCE and not Path(f"{path}.orig").exists()
    if shown.stdout:
        result = applied(SOURCE, shown.stdout)
        assert result.startswith(before) and result.endswith(after), shown.stdout
        middle = result[len(before) : len(result) - len(after)]
        assert "def last" not in middle and "def first" not in middle, shown.stdout  # no echo of the file
    # 2) in place: written with a backup, or (exit 3) nothing written
    done = dcode(server, "edit", str(path), "--symbol", "middle", "--instruct", "count down", cwd=tmp_path)
    honest(done)
    if done.returncode == 0:
        assert Path(f"{path}.orig").read_text() == SOURCE
        written = path.read_text()
        assert written.startswith(before) and written.endswith(after)
        assert "def last" not in written[len(before) : len(written) - len(after)]
    else:
        assert path.read_text() == SOURCE and "syntax error" in done.stderr, done.stderr
    assert posts(server, "completions") >= 2, server.said()


def test_repair_through_transformers_serve_changes_only_the_broken_function(server: Server, tmp_path: Path) -> None:
    path = tmp_path / "broken.py"
    path.write_text(BROKEN)
    done = dcode(server, "repair", str(path), "--json", cwd=tmp_path)
    honest(done)
    report = json.loads(done.stdout)
    # every round's fills were answered: a repair stopped by a failed request is not a repair
    assert report["rounds"] >= 1 and report["attempts"] >= 1 and "note" not in report, report.get("note", report)
    assert report["changed"] == (path.read_text() != BROKEN), report
    result = path.read_text()
    kept = BROKEN[BROKEN.index("\n\n\ndef middle") :]  # everything after `first`
    assert result.endswith(kept), "".join(difflib.unified_diff(BROKEN.splitlines(True), result.splitlines(True)))
    _, middle, _ = spliced(BROKEN, result)
    assert "def middle" not in middle and "def last" not in middle, result  # no echo of the file's tail
    if done.returncode == 0:
        compile(result, str(path), "exec")
    assert posts(server, "completions") + posts(server, "chat/completions") >= 1, server.said()
