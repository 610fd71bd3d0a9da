"""dcode.train with small real parts built in the test: a few hundred lines of Python, a BPE
trained on them, a data folder of a few dozen units and a Qwen2 of two layers of width 32.

The losses are checked against short, obviously-correct references: the two-copy attention mask
against its rule cell by cell, the block-diffusion loss against one forward per masked target
that shows the model only what the rule lets it see, the AR loss against transformers' own.
The Trainer is driven through its real entry points: one_step, save / resume, validate, export,
and the exported folder is loaded by dcode.models.load and run by `dcode new`.
"""

from __future__ import annotations

import ast
import email.message
import json
import math
import os
import shutil
import signal
import textwrap
import threading
import time
import types
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import benchmark_module, python_lines
from tokenizers import Tokenizer
from transformers import Qwen2ForCausalLM

from dcode.models.native import block_causal_mask
from dcode.train import corpus
from dcode.train.data import MAX_CODE, MAX_PROMPT, Examples, TrainingBatches, build, encode_units
from dcode.train.tokenizer import CODE, EOS, MASK, PAD, PROMPT, SPECIAL_TOKENS, save_tokenizer, train_tokenizer
from dcode.train.train import (
    TrainConfig,
    Trainer,
    ar_loss,
    bd_logits,
    bd_loss,
    certainty_term,
    model_config,
    noise,
    two_copy_mask,
)

# ---------------------------------------------------------------------------------------------
# Shared parts


def short_functions(count: int, offset: int = 0) -> str:
    """Short commented functions (under 32 tokens each) that fit the smallest BD canvas."""
    out = []
    for i in range(offset, offset + count):
        out.append(
            f"# Multiply every value by the factor {i}.\ndef scale_{i}(values):\n    return [v * {i} for v in values]\n"
        )
    return "\n\n".join(out)


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return train_tokenizer(python_lines(80) + short_functions(40).splitlines(), vocab_size=400)


@pytest.fixture(scope="module")
def examples(tokenizer: Tokenizer) -> Examples:
    units = list(corpus.units_of(short_functions(12) + "\n\n" + "\n".join(python_lines(6)), "test:mod.py"))
    return encode_units(tokenizer, units)


def randomize(model: torch.nn.Module, seed: int) -> None:
    """Weights large enough that attention is far from uniform and every norm weight matters."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise_ = torch.randn(param.shape, generator=gen)
            if "norm" in name:
                param.copy_(1.0 + 0.2 * noise_)
            elif name.endswith("bias"):
                param.copy_(0.3 * noise_)
            elif "embed_tokens" in name:
                param.copy_(noise_)
            else:
                param.copy_(0.25 * noise_)


VOCAB, MASK_ID = 48, 2  # the loss tests' tiny model: ids 0..4 special as in dcode-tiny


@pytest.fixture(scope="module")
def tiny_model() -> Qwen2ForCausalLM:
    """A random Qwen2 built by train.py's own model_config, run with sdpa as the Trainer does."""
    cfg = TrainConfig(hidden=32, layers=2, heads=4, ffn=64)
    model = Qwen2ForCausalLM(model_config(cfg, VOCAB, {PAD: 0, EOS: 1})).float()
    model.config._attn_implementation = "sdpa"
    randomize(model, seed=0)
    return model.eval()


def random_ids(rows: int, length: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(5, VOCAB, (rows, length), generator=gen)


def block_causal_hidden(model: Qwen2ForCausalLM, ids: torch.Tensor, block: int) -> torch.Tensor:
    """(B, L, D) hidden states of ids at positions 0..L-1 under dcode's block-causal mask."""
    rows, length = ids.shape
    mask = block_causal_mask(0, length, length, block, ids.device).expand(rows, -1, -1, -1)
    positions = torch.arange(length)[None].expand(rows, -1)
    return model.model(input_ids=ids, attention_mask=mask, position_ids=positions).last_hidden_state


# ---------------------------------------------------------------------------------------------
# corpus


@pytest.mark.parametrize(
    ("relative", "split"),
    [
        ("stdlib/test/test_os.py", "heldout"),
        ("stdlib/unittest/test/testmock/support.py", "heldout"),
        ("numpy/tests/conftest.py", "heldout"),
        ("tests/helpers.py", "heldout"),
        ("pkg/test_helpers.py", "train"),  # a test-looking file name outside a test folder
        ("pkg/testing/utils.py", "train"),  # "testing" is not a test folder
        ("pkg/test.py", "train"),
        # Hard-coded from sha1: a process-salted hash (hash()) would move these between runs.
        ("pkg/mod_17.py", "valid"),
        ("pkg/mod_43.py", "valid"),
        ("pkg/mod_0.py", "train"),
    ],
)
def test_split_of(relative: str, split: str) -> None:
    assert corpus.split_of(relative) == split


def test_split_of_keeps_about_two_percent_for_validation() -> None:
    splits = [corpus.split_of(f"pkg/sub/mod_{i}.py") for i in range(5000)]
    assert splits == [corpus.split_of(f"pkg/sub/mod_{i}.py") for i in range(5000)]  # stable
    share = splits.count("valid") / len(splits)
    assert 0.01 < share < 0.03, share
    assert set(splits) == {"train", "valid"}


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("parseHTTPDate_v2", "parse http date v2"),
        ("__init__", "init"),
        ("LRUCache", "lru cache"),
        ("get_URL", "get url"),
        ("merge_sorted_lists", "merge sorted lists"),
    ],
)
def test_words_of(name: str, words: str) -> None:
    assert corpus.words_of(name) == words


SOURCE = textwrap.dedent(
    '''\
    """Helpers for parsing dates in HTTP headers."""

    import functools
    import re


    # Parse the date of an HTTP header into a tuple of numbers.
    def parseHTTPDate_v2(text):
        return tuple(re.findall(r"\\d+", text))


    class Cache:
        """A least recently used cache with a fixed size."""

        # Build an empty cache of the given size.
        @staticmethod
        @functools.lru_cache
        def make(size):
            return Cache()

        def get(self, key):
            """Tiny."""
            if key in self.items:
                return self.items[key]
            return None
    '''
)


def test_units_of_cuts_module_classes_and_functions() -> None:
    units = list(corpus.units_of(SOURCE, "pkg:dates.py"))

    def either(kind: str, name: str, described: str, request: str) -> set[str]:
        named = f"{'class' if kind == 'class' else 'a function'} {corpus.words_of(name)}"
        return {described, f"{named}: {described}", request}

    assert [(u.kind, u.origin) for u in units] == [
        ("module", "pkg:dates.py:1"),
        ("function", "pkg:dates.py:8"),
        ("class", "pkg:dates.py:12"),
        ("function", "pkg:dates.py:16"),  # the first decorator's line
        ("function", "pkg:dates.py:21"),
    ]
    module, parse, cache, make, get = units
    assert module.prompt == "Helpers for parsing dates in HTTP headers."
    assert module.code == SOURCE.strip() + "\n"
    assert parse.prompt in either(
        "function",
        "parseHTTPDate_v2",
        "Parse the date of an HTTP header into a tuple of numbers.",
        "a function that parses the date of an HTTP header into a tuple of numbers",
    )
    assert parse.code == 'def parseHTTPDate_v2(text):\n    return tuple(re.findall(r"\\d+", text))\n'
    assert cache.prompt in either(
        "class",
        "Cache",
        "A least recently used cache with a fixed size.",
        "a class representing a least recently used cache with a fixed size",
    )
    assert cache.code.startswith("class Cache:\n    ") and cache.code.endswith("        return None\n")
    # A method: decorators included, dedented to column 0, its leading comment as the prompt.
    assert make.prompt in either(
        "function",
        "make",
        "Build an empty cache of the given size.",
        "a function that builds an empty cache of the given size",
    )
    assert make.code == "@staticmethod\n@functools.lru_cache\ndef make(size):\n    return Cache()\n"
    # A docstring too short to be a request: the name is the prompt.
    assert get.prompt == "a function get"
    assert get.code.startswith("def get(self, key):\n") and get.code.endswith("\n    return None\n")


def test_units_of_skips_broken_files_and_undocumented_modules() -> None:
    assert list(corpus.units_of("def broken(:\n    pass\n", "x")) == []
    assert list(corpus.units_of("x = 1\0\n", "x")) == []  # null bytes: ValueError or SyntaxError
    units = list(corpus.units_of("import os\n\n\ndef listing_of(path):\n    return os.listdir(path)\n", "m"))
    assert [(u.kind, u.prompt) for u in units] == [("function", "a function listing of")]


def test_prompt_for_is_stable_and_uses_all_three_phrasings() -> None:
    doc = "Return the sum of two numbers."
    prompts = [corpus.prompt_for("function", "add_numbers", doc, None, f"m.py:{i}") for i in range(200)]
    assert prompts == [corpus.prompt_for("function", "add_numbers", doc, None, f"m.py:{i}") for i in range(200)]
    assert set(prompts) == {doc, f"a function add numbers: {doc}", "a function that returns the sum of two numbers"}
    # The docstring wins over the comment; no docstring: the comment; neither: the name.
    assert corpus.prompt_for("class", "LRUCache", None, None, "s") == "class lru cache"
    assert corpus.prompt_for("function", "f", None, "Compute the thing we need.", "m.py:1") in {
        "Compute the thing we need.",
        "a function f: Compute the thing we need.",
        "a function that computes the thing we need",
    }


def test_prompt_for_shares_are_a_quarter_named_and_half_requests_as_documented() -> None:
    doc = "Return the sum of two numbers."
    prompts = [corpus.prompt_for("generator", "add", doc, None, f"m.py:{i}", "a generator") for i in range(4000)]
    named = sum(p.startswith("a function add: ") for p in prompts) / len(prompts)
    requests = sum(p == "a generator that returns the sum of two numbers" for p in prompts) / len(prompts)
    assert 0.2 < named < 0.3, named
    assert 0.45 < requests < 0.55, requests
    # A summary that cannot be phrased as a request stays as written in that half.
    noun_first = [corpus.prompt_for("function", "add", "The sum of two.", None, f"m.py:{i}") for i in range(40)]
    assert set(noun_first) == {"The sum of two.", "a function add: The sum of two."}


@pytest.mark.parametrize(
    ("noun", "summary", "expected"),
    [
        ("a function", "Return the sum.", "a function that returns the sum"),
        ("a function", "Returns a list.", "a function that returns a list"),
        ("a function", "Match a pattern.", "a function that matches a pattern"),
        ("a function", "Copy a tree.", "a function that copies a tree"),
        ("a function", "Process the queue.", "a function that processes the queue"),
        ("a function", "Do it twice.", "a function that does it twice"),
        ("a generator", "Yield lines.", "a generator that yields lines"),
        ("a class", "A least recently used cache.", "a class representing a least recently used cache"),
        ("a class", "Represents a point.", "a class that represents a point"),
        ("a class", "Enum where members are strings.", None),  # a noun, not a verb
        ("a function", "The sum of two.", None),
        ("a function", "Helper for parsing.", None),
        ("a function", "Parsing helper.", None),
        ("a function", "XML reader.", None),
    ],
)
def test_as_request(noun: str, summary: str, expected: str | None) -> None:
    assert corpus.as_request(noun, summary) == expected


def test_noun_of_tells_generators_context_managers_and_classes() -> None:
    tree = ast.parse(
        textwrap.dedent(
            """\
            class C: pass
            def gen(): yield 1
            def outer():
                def inner(): yield 1
                return inner
            @contextlib.contextmanager
            def held(): yield
            async def fetch(): pass
            """
        )
    )
    assert [corpus.noun_of(n) for n in tree.body] == [
        "a class",
        "a generator",
        "a function",
        "a context manager",
        "an async function",
    ]


def test_normalized_hash_ignores_trailing_whitespace_only() -> None:
    code = "def f(x):\n    return x + 1\n"
    same = [
        "def f(x):   \n    return x + 1\t\n",
        "\n\ndef f(x):\n    return x + 1\n\n\n",
        "def f(x):\r\n    return x + 1",
    ]
    for variant in same:
        assert corpus.normalized_hash(variant) == corpus.normalized_hash(code), repr(variant)
    for different in [
        "def f(x):\n  return x + 1\n",
        "def f(x):\n    return x + 2\n",
        "def f(x):\n\n    return x + 1\n",
    ]:
        assert corpus.normalized_hash(different) != corpus.normalized_hash(code), repr(different)


def fake_dist(expression: str | None = None, license: str | None = None, classifiers: tuple[str, ...] = ()):
    """Something with the .metadata license_of reads: an email.message.Message, as at run time."""
    meta = email.message.Message()
    meta["Name"] = "fake"
    if expression is not None:
        meta["License-Expression"] = expression
    if license is not None:
        meta["License"] = license
    for classifier in ("Programming Language :: Python :: 3", *classifiers):
        meta["Classifier"] = classifier
    return types.SimpleNamespace(metadata=meta)


@pytest.mark.parametrize(
    ("dist", "licence"),
    [
        (fake_dist(expression="MIT"), "MIT"),
        (fake_dist(expression="Apache-2.0 OR BSD-2-Clause"), "Apache-2.0 OR BSD-2-Clause"),
        (fake_dist(license="BSD 3-Clause License\n\nCopyright (c) 2021, Someone"), "BSD 3-Clause License"),
        (fake_dist(license="Apache 2.0"), "Apache 2.0"),
        (fake_dist(classifiers=("License :: OSI Approved :: MIT License",)), "permissive (classifier)"),
        (fake_dist(classifiers=("License :: OSI Approved :: BSD License",)), "permissive (classifier)"),
        (fake_dist(expression="GPL-3.0-or-later"), None),
        (fake_dist(license="MPL-2.0 AND MIT"), None),  # a permissive name does not rescue a copyleft one
        (fake_dist(classifiers=("License :: OSI Approved :: Mozilla Public License 2.0 (MPL 2.0)",)), None),
        (
            fake_dist(
                license="MIT",
                classifiers=("License :: OSI Approved :: GNU Lesser General Public License v3 (LGPLv3)",),
            ),
            None,
        ),
        (fake_dist(), None),  # no licence metadata at all
        (fake_dist(license="Proprietary"), None),
    ],
)
def test_license_of(dist, licence: str | None) -> None:
    assert corpus.license_of(dist) == licence


@pytest.mark.parametrize(
    "text",
    [
        "Proprietary. Copyright (c) 2024 ACME LIMITED. All rights reserved.",
        "Commercial use is not PERMITTED.",
        "Internal use only, see the DISCLAIMER file.",
    ],
)
def test_license_of_rejects_proprietary_text_that_contains_a_licence_name(text: str) -> None:
    assert corpus.license_of(fake_dist(license=text)) is None


# ---------------------------------------------------------------------------------------------
# tokenizer


def test_special_tokens_take_ids_0_to_4_in_order(tokenizer: Tokenizer) -> None:
    assert [tokenizer.token_to_id(t) for t in SPECIAL_TOKENS] == [0, 1, 2, 3, 4]
    assert SPECIAL_TOKENS == [PAD, EOS, MASK, PROMPT, CODE]
    assert tokenizer.get_vocab_size() == 400


@pytest.mark.parametrize(
    "text",
    [
        "def f(x):\n    if x:\n        return [x, x * 2]\n    return None\n",
        "def g():\n\tif True:\n\t\treturn 'tab'\n",  # tabs
        "name = 'é✓ 漢字 🙂'  # unicode\n",
        "a = 1\n\n\n\nb = 2\n",  # blank lines
        "   three spaces and trailing   \n",
        "x\u00a0=\u20031\r\n",  # unusual spaces and a CRLF
        "",
    ],
)
def test_decode_inverts_encode(tokenizer: Tokenizer, text: str) -> None:
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    assert all(i > 4 for i in ids)  # text never becomes a special token
    assert tokenizer.decode(ids) == text


def test_pre_tokenizer_keeps_indentation_in_runs_of_four(tokenizer: Tokenizer) -> None:
    pieces = [p for p, _ in tokenizer.pre_tokenizer.pre_tokenize_str("    if x:\n        y = 10\n         z\n      w")]
    assert pieces == ["ĠĠĠĠ", "if", "Ġx", ":", "Ċ", "ĠĠĠĠĠĠĠĠ", "y", "Ġ=", "Ġ10", "Ċ"] + [
        "ĠĠĠĠĠĠĠĠ",  # 9 spaces: two indentation levels, then a word with its one leading space
        "Ġz",
        "Ċ",
        "ĠĠĠĠ",  # 6 spaces: one level, then the rest
        "ĠĠ",
        "w",
    ]


def test_saved_tokenizer_loads_in_transformers_with_the_chat_template(tokenizer: Tokenizer, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    save_tokenizer(tokenizer, tmp_path / "tok")
    assert sorted(p.name for p in (tmp_path / "tok").iterdir()) == ["tokenizer.json", "tokenizer_config.json"]
    loaded = AutoTokenizer.from_pretrained(str(tmp_path / "tok"), local_files_only=True)
    assert (loaded.pad_token_id, loaded.eos_token_id, loaded.mask_token_id) == (0, 1, 2)
    messages = [{"role": "user", "content": "  merge two sorted lists \n"}]
    text = loaded.apply_chat_template(messages, tokenize=False)
    assert text == "<|prompt|>merge two sorted lists<|code|>"
    ids = loaded(text, add_special_tokens=False)["input_ids"]
    assert ids[0] == 3 and ids[-1] == 4
    assert ids[1:-1] == tokenizer.encode("merge two sorted lists", add_special_tokens=False).ids
    code = "def f(x):\n\treturn x  # é\n\n"
    assert loaded.decode(loaded(code, add_special_tokens=False)["input_ids"]) == code


# ---------------------------------------------------------------------------------------------
# data


def build_from(files: dict[str, tuple[str, corpus.Split]], root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run the real `build` on a few files instead of the whole standard library."""
    for name, (text, _) in files.items():
        (root / "src" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "src" / name).write_text(text)

    def find_sources(include_packages: bool = True):
        for name, (_, split) in files.items():
            yield corpus.Source(root / "src" / name, "app", "MIT", split)

    monkeypatch.setattr(corpus, "find_sources", find_sources)
    build(root / "data", vocab_size=300)
    return root / "data"


def codes_in(data: Path, split: str) -> list[str]:
    tokenizer = Tokenizer.from_file(str(data / "tokenizer" / "tokenizer.json"))
    examples = Examples.load(data / f"{split}.npz")
    eos = tokenizer.token_to_id(EOS)
    out = []
    for i in range(len(examples)):
        code = examples.code(i).tolist()
        assert code[-1] == eos and eos not in code[:-1]
        out.append(tokenizer.decode(code[:-1]))
    return out


def scale_code(i: int) -> str:
    """The code of short_functions' i-th unit, without its comment."""
    return f"def scale_{i}(values):\n    return [v * {i} for v in values]\n"


ONLY_IN_UTIL = "def only_in_util(x):\n    return x - 1\n"
ONLY_IN_VALID = "def only_in_valid(x):\n    return x + 2\n"
HELD_OUT = "def test_scale():\n    assert scale_1([1]) == [1]\n"


def test_build_writes_deduplicated_splits_and_holds_out_tests(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    core = short_functions(4)
    copy = scale_code(2).replace("):\n", "):   \n")  # scale_2 again, with trailing spaces
    files = {
        "app/core.py": (core, "train"),
        "app/util.py": (copy + "\n\n" + ONLY_IN_UTIL, "train"),
        "app/extra.py": (ONLY_IN_VALID, "valid"),
        "app/tests/test_core.py": (HELD_OUT, corpus.split_of("app/tests/test_core.py")),
    }
    data = build_from(files, tmp_path, monkeypatch)
    assert sorted(p.name for p in data.iterdir()) == ["tokenizer", "train.npz", "valid.npz"]
    assert sorted(p.name for p in (data / "tokenizer").iterdir()) == ["tokenizer.json", "tokenizer_config.json"]
    assert codes_in(data, "train") == [scale_code(i) for i in range(4)] + [ONLY_IN_UTIL]
    assert codes_in(data, "valid") == [ONLY_IN_VALID]


def test_build_keeps_train_units_out_of_validation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    core = short_functions(4)
    files = {
        "app/core.py": (core, "train"),
        "app/extra.py": (scale_code(0) + "\n\n" + ONLY_IN_VALID, "valid"),
    }
    data = build_from(files, tmp_path, monkeypatch)
    assert codes_in(data, "valid") == [ONLY_IN_VALID]


def test_build_again_keeps_the_tokenizer_a_model_was_trained_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = {"app/core.py": (short_functions(4), "train"), "app/extra.py": (ONLY_IN_VALID, "valid")}
    data = build_from(files, tmp_path, monkeypatch)
    before = (data / "tokenizer" / "tokenizer.json").read_bytes()
    files["app/more.py"] = ("def another_one(y):\n    return y * 3\n", "train")
    build_from(files, tmp_path, monkeypatch)  # new examples, the same ids
    assert (data / "tokenizer" / "tokenizer.json").read_bytes() == before
    assert codes_in(data, "train")[-1] == "def another_one(y):\n    return y * 3\n"
    shutil.rmtree(data / "tokenizer")  # deleted: a new one is trained
    build_from(files, tmp_path, monkeypatch)
    assert (data / "tokenizer" / "tokenizer.json").exists()
    # A fresh folder takes a model's tokenizer when given one (the command line: the shipped model's).
    model = tmp_path / "model"
    shutil.copytree(data / "tokenizer", model)
    fresh = tmp_path / "fresh"
    build(fresh, vocab_size=999, tokenizer_from=model)
    assert (fresh / "tokenizer" / "tokenizer.json").read_bytes() == (model / "tokenizer.json").read_bytes()


def test_encode_units_and_examples_round_trip(tokenizer: Tokenizer, tmp_path: Path) -> None:
    long_prompt = " ".join(f"word{i}" for i in range(100))
    units = [
        corpus.Unit("add two numbers", "def add(a, b):\n    return a + b\n", "function", "m:1"),
        corpus.Unit(long_prompt, "x = 1\n", "module", "m:2"),
        corpus.Unit("fits exactly", "\x07" * (MAX_CODE - 1), "module", "m:3"),  # one token per unseen byte
        corpus.Unit("one token too long", "\x07" * MAX_CODE, "module", "m:4"),
    ]
    examples = encode_units(tokenizer, units)
    assert len(examples) == 3
    eos = tokenizer.token_to_id(EOS)
    for i, unit in enumerate(units[:3]):
        prompt = tokenizer.encode(unit.prompt, add_special_tokens=False).ids[:MAX_PROMPT]
        assert examples.prompt(i).tolist() == prompt
        assert examples.code(i).tolist() == tokenizer.encode(unit.code, add_special_tokens=False).ids + [eos]
    assert len(examples.prompt(1)) == MAX_PROMPT
    assert examples.code_lengths().tolist()[2] == MAX_CODE

    examples.save(tmp_path / "train.npz")
    loaded = Examples.load(tmp_path / "train.npz")
    for field in Examples.__dataclass_fields__:
        before, after = getattr(examples, field), getattr(loaded, field)
        assert after.dtype == before.dtype and np.array_equal(after, before), field
    assert loaded.prompt_tokens.dtype == np.int32 and loaded.code_offsets.dtype == np.int64


def test_packed_rows_are_whole_sequences_cut_to_the_context(tokenizer: Tokenizer, examples: Examples) -> None:
    batcher = TrainingBatches(examples, tokenizer, seed=3)
    rows = batcher.packed(3, 40)
    assert rows.shape == (3, 40) and rows.dtype == torch.long
    stream = rows.flatten().tolist()
    known = [batcher.sequence(i)[0].tolist() for i in range(len(examples))]
    starts = [k for k, t in enumerate(stream) if t == 3] + [len(stream)]
    assert starts[0] == 0
    for a, b in zip(starts, starts[1:], strict=False):
        piece = stream[a:b]
        if b < len(stream):
            assert piece in known
        else:  # the last one is cut at the end of the batch
            assert any(seq[: len(piece)] == piece for seq in known)


def test_canvases_rows_are_prompt_code_eos_pad(tokenizer: Tokenizer, examples: Examples) -> None:
    length = 32
    lengths = examples.code_lengths()
    assert (lengths > length).any() and (lengths <= length).any()  # both kinds are in the data
    batcher = TrainingBatches(examples, tokenizer, seed=0)
    for _ in range(5):
        ids, answer = batcher.canvases(6, length)
        assert ids.shape == answer.shape and answer.dtype == torch.bool
        starts = []
        for row, mask in zip(ids.tolist(), answer.tolist(), strict=True):
            assert row[0] == 3
            start = row.index(4) + 1  # just after <|code|>
            starts.append(start)
            end = row.index(1)  # <|eos|>
            match = [
                i
                for i in range(len(examples))
                if examples.prompt(i).tolist() == row[1 : start - 1]
                and examples.code(i).tolist() == row[start : end + 1]
            ]
            assert match, "the row is not prompt, code, EOS of one example"
            assert lengths[match[0]] <= length
            assert row[end + 1 :] == [0] * (len(row) - end - 1)
            assert mask == [k >= start for k in range(len(row))]
        assert ids.shape[1] == max(starts) + length


# ---------------------------------------------------------------------------------------------
# losses


@pytest.mark.parametrize(("length", "block"), [(8, 4), (10, 4), (7, 3), (5, 8), (6, 1)])
def test_two_copy_mask_follows_its_rule(length: int, block: int) -> None:
    expected = torch.zeros(2 * length, 2 * length, dtype=torch.bool)
    for q in range(2 * length):
        for k in range(2 * length):
            q_noisy, k_noisy = q < length, k < length
            qb, kb = (q % length) // block, (k % length) // block
            if q_noisy and k_noisy:
                expected[q, k] = qb == kb
            elif q_noisy:
                expected[q, k] = kb < qb
            elif k_noisy:
                expected[q, k] = False  # clean never sees noisy
            else:
                expected[q, k] = kb <= qb
    mask = two_copy_mask(length, block)
    assert mask.shape == (1, 1, 2 * length, 2 * length) and mask.dtype == torch.bool
    assert torch.equal(mask[0, 0], expected)


@torch.no_grad()
def test_clean_half_of_two_copy_forward_is_a_block_causal_forward(tiny_model: Qwen2ForCausalLM) -> None:
    rows, length, block = 2, 11, 4
    ids = random_ids(rows, length, seed=1)
    noisy = ids.clone()
    noisy[:, 3::2] = MASK_ID
    x = torch.cat([noisy, ids], dim=1)
    positions = torch.arange(length).repeat(2)[None].expand(rows, -1)
    mask = two_copy_mask(length, block).expand(rows, -1, -1, -1)
    both = tiny_model.model(input_ids=x, attention_mask=mask, position_ids=positions).last_hidden_state
    clean = block_causal_hidden(tiny_model, ids, block)
    torch.testing.assert_close(both[:, length:], clean, atol=1e-5, rtol=0)
    # Not vacuous: the model tells block-causal from causal attention, and the noisy copy matters.
    causal = tiny_model.model(input_ids=ids).last_hidden_state
    assert (causal - clean).abs().max() > 1e-2
    assert (both[:, :length] - clean).abs().max() > 1e-2


@pytest.mark.parametrize("seed", range(4))
def test_noise_masks_only_answer_positions_and_at_least_one_per_row(seed: int) -> None:
    rows, length, block = 16, 23, 4
    gen = torch.Generator().manual_seed(100 + seed)
    starts = torch.randint(1, length - 1, (rows,), generator=gen)
    answer = torch.arange(length)[None] >= starts[:, None]
    ids = torch.randint(5, VOCAB, (rows, length), generator=gen)
    masked = noise(ids, answer, block, t_min=0.0, gen=torch.Generator().manual_seed(seed))
    assert masked.dtype == torch.bool and masked.shape == (rows, length)
    assert not (masked & ~answer).any()
    assert masked.any(dim=1).all()
    # t_min = 1: every answer position is masked.
    everything = noise(ids, answer, block, t_min=1.0, gen=torch.Generator().manual_seed(seed))
    assert torch.equal(everything, answer)


def test_noise_masks_the_first_answer_position_of_a_row_that_drew_nothing() -> None:
    # One answer position per row and low rates: many rows draw nothing and must get that position.
    rows, length = 64, 12
    answer = torch.zeros(rows, length, dtype=torch.bool)
    answer[torch.arange(rows), torch.arange(rows) % (length - 2) + 2] = True
    ids = torch.randint(5, VOCAB, (rows, length), generator=torch.Generator().manual_seed(0))
    masked = noise(ids, answer, 4, t_min=0.0, gen=torch.Generator().manual_seed(0))
    assert torch.equal(masked, answer)


def reference_bd_loss(
    model: Qwen2ForCausalLM, ids: torch.Tensor, masked: torch.Tensor, mask_id: int, block: int
) -> torch.Tensor:
    """One forward per masked target j of block b = j // block, showing the model exactly what it
    may see: when j-1 is in block b, the clean blocks before b and the noisy block b (logits from
    j-1); when j starts block b, only the clean blocks before b (logits from j-1, their last)."""
    length = ids.shape[1]
    losses = []
    for r in range(ids.shape[0]):
        noisy = torch.where(masked[r], mask_id, ids[r])
        for j in masked[r].nonzero().flatten().tolist():
            start = (j // block) * block
            if (j - 1) // block == j // block:
                x = torch.cat([ids[r, :start], noisy[start : min(start + block, length)]])
            else:
                x = ids[r, :start]
            hidden = block_causal_hidden(model, x[None], block)[0, j - 1]
            logits = model.lm_head(hidden)
            losses.append(F.cross_entropy(logits[None].float(), ids[r, j][None]))
    return torch.stack(losses).mean()


@torch.no_grad()
@pytest.mark.parametrize(("length", "block"), [(11, 4), (12, 3)])
def test_bd_loss_equals_a_position_by_position_reference(tiny_model: Qwen2ForCausalLM, length: int, block: int) -> None:
    rows = 2
    ids = random_ids(rows, length, seed=2)
    answer = torch.zeros(rows, length, dtype=torch.bool)
    answer[0, 3:] = True
    answer[1, 2:] = True
    masked = noise(ids, answer, block, t_min=0.3, gen=torch.Generator().manual_seed(5))
    masked[0, block] = masked[1, 2 * block] = True  # targets that start a block (logits from the clean copy)
    masked[0, block + 1] = True  # and one inside a block (from the noisy copy)
    loss = bd_loss(tiny_model, ids, masked, MASK_ID, block)
    expected = reference_bd_loss(tiny_model, ids, masked, MASK_ID, block)
    assert loss.shape == ()
    torch.testing.assert_close(loss, expected, atol=1e-5, rtol=0)


def test_fit_options_reach_the_training_config() -> None:
    from dcode.train.__main__ import command_line, train_config

    assert train_config(command_line().parse_args(["fit"])) == TrainConfig()
    args = ["fit", "--lr", "3e-4", "--certainty", "0.5", "--canvases", "64,128", "--t-min", "0.4"]
    config = train_config(command_line().parse_args(args))
    assert (config.lr, config.bd_lr, config.certainty, config.answer_lengths) == (3e-4, 3e-4, 0.5, (64, 128))
    assert config.t_min == 0.4


def test_certainty_term_is_the_mean_entropy_of_the_right_rows() -> None:
    logits = torch.tensor([[2.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 3.0]])
    targets = torch.tensor([0, 2, 2])  # rows 0 and 2 right, row 1 wrong
    p = logits[[0, 2]].softmax(-1)
    expected = -(p * p.log()).sum(-1).mean()
    torch.testing.assert_close(certainty_term(logits, targets), expected)
    assert float(certainty_term(logits, torch.tensor([1, 0, 0]))) == 0.0  # none right


@torch.no_grad()
def test_bd_loss_with_certainty_forcing_adds_its_term(tiny_model: Qwen2ForCausalLM) -> None:
    ids = random_ids(2, 12, seed=3)
    answer = torch.zeros(2, 12, dtype=torch.bool)
    answer[:, 2:] = True
    masked = noise(ids, answer, 4, t_min=0.5, gen=torch.Generator().manual_seed(1))
    logits, targets = bd_logits(tiny_model, ids, masked, MASK_ID, 4)
    plain = bd_loss(tiny_model, ids, masked, MASK_ID, 4)
    torch.testing.assert_close(plain, F.cross_entropy(logits, targets), atol=1e-5, rtol=0)
    # targets set to the argmax where the logits stay the same: the last masked position of each
    # row (no later position reads it, through either copy, since nothing after it is masked)
    last = [int(masked[r].nonzero().max()) for r in range(2)]
    for r, j in enumerate(last):
        masked[r, j + 1 :] = False
    logits, targets = bd_logits(tiny_model, ids, masked, MASK_ID, 4)
    rows, cols = masked.nonzero(as_tuple=True)
    for r, j in enumerate(last):
        k = int(((rows == r) & (cols == j)).nonzero())
        ids[r, j] = logits[k].argmax()
    logits, targets = bd_logits(tiny_model, ids, masked, MASK_ID, 4)
    assert int((logits.argmax(-1) == targets).sum()) >= 2
    forced = bd_loss(tiny_model, ids, masked, MASK_ID, 4, certainty=0.5)
    expected = F.cross_entropy(logits, targets) + 0.5 * certainty_term(logits, targets)
    torch.testing.assert_close(forced, expected, atol=1e-5, rtol=0)


@torch.no_grad()
def test_ar_loss_equals_transformers_loss(tiny_model: Qwen2ForCausalLM) -> None:
    ids = random_ids(3, 17, seed=3)
    expected = tiny_model(input_ids=ids, labels=ids).loss
    torch.testing.assert_close(ar_loss(tiny_model, ids), expected, atol=1e-5, rtol=0)


# ---------------------------------------------------------------------------------------------
# Trainer, end to end on a tiny corpus


CONFIG = TrainConfig(
    hidden=32,
    layers=2,
    heads=4,
    ffn=64,
    context=64,
    batch=2,
    answer_lengths=(32,),
    ar_tokens=256,
    eval_every=3,
    warmup=2,
)


@pytest.fixture(scope="module")
def data_folder(tmp_path_factory: pytest.TempPathFactory, tokenizer: Tokenizer) -> Path:
    """tokenizer/, train.npz and valid.npz as `build` writes them, from a handful of units."""
    folder = tmp_path_factory.mktemp("data")
    save_tokenizer(tokenizer, folder / "tokenizer")
    train = list(corpus.units_of(short_functions(20) + "\n\n" + "\n".join(python_lines(10)), "t:train.py"))
    valid = list(corpus.units_of(short_functions(8, offset=100), "t:valid.py"))
    encode_units(tokenizer, train).save(folder / "train.npz")
    encode_units(tokenizer, valid).save(folder / "valid.npz")
    return folder


def state_of(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}


def assert_same_tensors(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


def test_trainer_phases_resume_validate_export_and_generate(
    data_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = tmp_path / "run"
    trainer = Trainer(data_folder, run, CONFIG)
    assert (trainer.step, trainer.tokens, trainer.phase) == (0, 0, "ar")
    initial = state_of(trainer)

    # 1) two AR steps of batch x context tokens, then block diffusion
    phases, losses = [], []
    for _ in range(4):
        phases.append(trainer.phase)
        losses.append(trainer.one_step())
    assert phases == ["ar", "ar", "bd", "bd"]
    assert all(math.isfinite(x) for x in losses), losses
    assert losses[0] == pytest.approx(math.log(trainer.tokenizer.get_vocab_size()), rel=0.2)  # untrained
    assert trainer.step == 4 and trainer.tokens > 2 * CONFIG.batch * CONFIG.context
    assert any(not torch.equal(initial[k], v) for k, v in state_of(trainer).items())

    # 2) validation scores the EMA weights and puts the live ones back
    live = state_of(trainer)
    scores = trainer.validate()
    assert set(scores) == {"valid_ar", "valid_bd"} and all(math.isfinite(v) for v in scores.values())
    assert_same_tensors(state_of(trainer), live)
    assert trainer.model.training
    on_live = trainer.validate(ema=False)
    for loss in ("valid_ar", "valid_bd"):
        assert trainer.prefer_ema(loss) == (scores[loss] <= on_live[loss], scores, on_live)

    # 3) save, then a new Trainer on the same run folder resumes exactly
    trainer.save()
    assert sorted(p.name for p in run.iterdir()) == ["checkpoint.pt"]
    resumed = Trainer(data_folder, run, CONFIG)
    assert (resumed.step, resumed.tokens, resumed.phase) == (trainer.step, trainer.tokens, "bd")
    assert_same_tensors(state_of(resumed), live)
    assert_same_tensors(resumed.ema, trainer.ema)
    # ... down to the data order and the noise: the next step is the same step
    assert resumed.one_step() == trainer.one_step()
    assert_same_tensors(state_of(resumed), state_of(trainer))

    # 4) export writes the EMA weights as a folder dcode.models loads
    from dcode import models

    folder = tmp_path / "export"
    trainer.export(folder)
    assert sorted(p.name for p in folder.iterdir()) == [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    loaded = models.load(str(folder))
    facts = loaded.facts
    assert (facts.block, facts.mask_id, facts.shifted) == (CONFIG.block, 2, True)
    assert (facts.pad_id, facts.eos_ids, facts.vocab_size) == (0, frozenset({1}), 400)
    weights = loaded.model.state_dict()
    for key, value in trainer.ema.items():
        assert torch.equal(weights[key], value), key
    assert not torch.equal(weights["model.norm.weight"], trainer.model.state_dict()["model.norm.weight"])  # EMA
    config = json.loads((folder / "config.json").read_text())
    assert config["dcode_training"] == {"steps": trainer.step, "tokens_seen": trainer.tokens}

    # 5) `dcode new` runs it
    from typer.testing import CliRunner

    from dcode.cli import app
    from dcode.syntax import find_issues

    for name in list(os.environ):
        if name.startswith("DCODE_"):
            monkeypatch.delenv(name)
    result = CliRunner().invoke(
        app,
        ["new", "a function that adds two numbers", "--model", str(folder), "--length", "16", "--json", "--no-repair"],
        prog_name="dcode",
    )
    assert result.exit_code in (0, 3), (result.exit_code, result.stderr, result.exception)
    report = json.loads(result.stdout)
    assert isinstance(report["code"], str)
    assert result.exit_code == (3 if find_issues(report["code"], "python") else 0)
    assert report["canvas"] == 16


def test_exported_model_gives_the_block_causal_logits_of_the_ema_weights(data_folder: Path, tmp_path: Path) -> None:
    """What the loader runs is what the Trainer trained: block-causal attention, EMA weights."""
    from dcode import models

    trainer = Trainer(data_folder, tmp_path / "run", CONFIG)
    for _ in range(3):
        trainer.one_step()
    trainer.export(tmp_path / "export")
    loaded = models.load(str(tmp_path / "export"))
    trainer.model.load_state_dict(trainer.ema)
    trainer.model.eval()
    ids = torch.tensor([[3, 40, 41, 42, 4] + [2] * 20])
    with torch.no_grad():
        hidden = block_causal_hidden(trainer.model, ids, CONFIG.block)
        expected = trainer.model.lm_head(hidden)
    torch.testing.assert_close(loaded(ids), expected, atol=1e-5, rtol=0)


# ---------------------------------------------------------------------------------------------
# benchmarks/training_recipes.py: the same CPU budget spent three ways, on the tiny data folder


def test_training_recipes_spend_the_budget_switch_phases_resume_and_score(data_folder: Path, tmp_path: Path) -> None:
    from conftest import benchmark_module

    recipes = benchmark_module("training_recipes.py")
    config = replace(CONFIG, ar_tokens=0, warmup=1)  # the script sets ar_tokens per recipe
    args = ["--cpu-minutes", "0.004", "--data", str(data_folder), "--runs", str(tmp_path / "runs")]
    args += ["--limit", "2", "--length", "16", "--no-shipped", "--json", str(tmp_path / "out.json")]
    report = recipes.main(args, config)

    assert list(report) == ["autoregressive", "block-diffusion", "ar-then-bd"]
    for name, row in report.items():
        assert row["cpu_seconds"] >= 0.24, name  # trained up to the budget (the last step may overrun it)
        assert math.isfinite(row["valid_ar"]) and math.isfinite(row["valid_bd"]), name
        for decoding in row["decoding"].values():
            assert decoding["prompts"] == 2 and 0 <= decoding["real_code_rate"] <= 1
            assert decoding["forward_passes"] >= 1
    # where each recipe's tokens went: all AR, all BD, AR first then BD
    assert report["autoregressive"]["ar_tokens"] == report["autoregressive"]["tokens_seen"]
    assert report["block-diffusion"]["ar_tokens"] == 0
    assert 0 < report["ar-then-bd"]["ar_tokens"] < report["ar-then-bd"]["tokens_seen"]
    # the AR model decodes token by token; the diffusion ones one per pass and at threshold 0.9
    assert set(report["autoregressive"]["decoding"]) == {"greedy"}
    assert report["autoregressive"]["decoding"]["greedy"]["tokens_per_forward"] <= 1
    assert set(report["block-diffusion"]["decoding"]) == {"one-per-pass", "threshold-0.9"}
    assert json.loads((tmp_path / "out.json").read_text())["recipes"]["ar-then-bd"]["steps"] >= 2

    # the same command again resumes each run at its budget: no further steps, same phase switch
    again = recipes.main(args, config)
    for name in report:
        assert again[name]["steps"] == report[name]["steps"], name
        assert again[name]["ar_tokens"] == report[name]["ar_tokens"], name
    # a larger budget continues from there (larger than what the first run spent, which on a busy
    # machine can be well past its budget after one slow step)
    more = f"{report['block-diffusion']['cpu_seconds'] * 1.5 / 60:.6f}"
    longer = recipes.main(["--cpu-minutes", more, "--recipes", "block-diffusion", *args[2:]], config)
    assert longer["block-diffusion"]["steps"] > report["block-diffusion"]["steps"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_fit_stops_on_a_signal_after_the_step_in_progress_and_saves(
    data_folder: Path, tmp_path: Path, sig: signal.Signals
) -> None:
    """`kill PID`, or SIGINT even where the shell started the job with SIGINT ignored, ends fit early
    with a checkpoint of every finished step; fit's handlers are removed afterwards."""
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as bash leaves a background job
    try:
        trainer = Trainer(data_folder, tmp_path / "run", CONFIG)
        threading.Timer(0.5, os.kill, (os.getpid(), sig)).start()
        began = time.monotonic()
        trainer.fit(minutes=2)
        assert time.monotonic() - began < 60
        assert trainer.step > 0
        assert torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=False)["step"] == trainer.step
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    finally:
        signal.signal(signal.SIGINT, before)


# ---------------------------------------------------------------------------------------------
# Training on a lent GPU: compact data, a run started from an export, benchmarks/gpu_train.sh


def test_pack_writes_a_compact_copy_that_loads_the_same(data_folder: Path, tmp_path: Path) -> None:
    from dcode.train.data import pack

    pack(data_folder, tmp_path / "gpu")
    for split in ("train", "valid"):
        before, after = Examples.load(data_folder / f"{split}.npz"), Examples.load(tmp_path / "gpu" / f"{split}.npz")
        for field in Examples.__dataclass_fields__:
            assert np.array_equal(getattr(before, field), getattr(after, field)), field
            assert getattr(after, field).dtype == getattr(before, field).dtype
        with np.load(tmp_path / "gpu" / f"{split}.npz") as raw:
            assert raw["code_tokens"].dtype == np.uint16
    assert (tmp_path / "gpu" / "tokenizer" / "tokenizer.json").read_bytes() == (
        data_folder / "tokenizer" / "tokenizer.json"
    ).read_bytes()
    too_large = Examples(np.array([70000], np.int32), np.array([0, 1]), np.array([1], np.int32), np.array([0, 1]))
    with pytest.raises(ValueError, match="above 65535"):
        too_large.save(tmp_path / "big.npz", compact=True)


def test_a_run_started_from_an_export_continues_its_weights_and_counters(data_folder: Path, tmp_path: Path) -> None:
    from safetensors import safe_open

    first = Trainer(data_folder, tmp_path / "first", CONFIG)
    for _ in range(3):
        first.one_step()
    first.export(tmp_path / "export", dtype=torch.float16)
    with safe_open(str(tmp_path / "export" / "model.safetensors"), "pt") as f:
        names = f.keys()
        assert {f.get_tensor(name).dtype for name in names} == {torch.float16}

    # a different architecture in the TrainConfig: the export's own config.json wins
    other = replace(CONFIG, hidden=16, ffn=32, heads=2)
    second = Trainer(data_folder, tmp_path / "second", other, init=tmp_path / "export")
    assert (second.step, second.tokens, second.warm_from) == (first.step, first.tokens, first.step)
    assert second.model.config.hidden_size == CONFIG.hidden
    for key, value in first.ema.items():
        torch.testing.assert_close(second.model.state_dict()[key], value.half().float(), rtol=0, atol=0)
        assert torch.equal(second.ema[key], second.model.state_dict()[key])
    assert second.phase == "bd" and second.learning_rate() == pytest.approx(CONFIG.bd_lr / CONFIG.warmup)  # warm-up
    second.one_step()
    second.save()

    # resuming needs no init and keeps the architecture and the warm-up origin
    resumed = Trainer(data_folder, tmp_path / "second", other)
    assert (resumed.step, resumed.warm_from, resumed.model.config.hidden_size) == (second.step, first.step, 32)
    assert resumed.one_step() == second.one_step()

    with pytest.raises(ValueError, match="do not fit"):
        Trainer(data_folder, tmp_path / "third", CONFIG, init=tmp_path / "export").start_from(
            write_mismatched_export(tmp_path / "export", tmp_path / "bad")
        )


def write_mismatched_export(good: Path, bad: Path) -> Path:
    """A copy of an export whose config.json is fine but whose weights lack a layer."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(good, bad)
    weights = load_file(str(bad / "model.safetensors"))
    save_file({k: v for k, v in weights.items() if ".layers.1." not in k}, str(bad / "model.safetensors"))
    return bad


def test_gpu_train_script_runs_end_to_end_on_the_cpu(data_folder: Path, tmp_path: Path) -> None:
    """benchmarks/gpu_train.sh with every setting pointed at tiny parts and the CPU: it trains from
    the export, then writes a float16 model folder that dcode.models loads, the log and fit's output."""
    import subprocess
    import sys

    from dcode import models

    start = Trainer(data_folder, tmp_path / "start", CONFIG)
    start.one_step()
    start.export(tmp_path / "init")
    out = tmp_path / "out"
    out.mkdir()
    env = dict(os.environ, OUT=str(out), DATA=str(data_folder), INIT=str(tmp_path / "init"), DEVICE="cpu")
    env.update(BATCH="2", CANVASES="32", MINUTES="0.03", RUN=str(tmp_path / "run"), PYTHON=sys.executable)
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        ["bash", "benchmarks/gpu_train.sh"], cwd=root, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == ["dcode-tiny", "fit.log", "log.jsonl"]
    loaded = models.load(str(out / "dcode-tiny"))
    assert loaded.facts.block == CONFIG.block
    trained = json.loads((out / "dcode-tiny" / "config.json").read_text())["dcode_training"]
    assert trained["steps"] > start.step and trained["tokens_seen"] > start.tokens
    assert "validation BD loss" in (out / "fit.log").read_text()


def test_training_curve_draws_the_log_and_marked_steps(tmp_path: Path) -> None:
    curve = benchmark_module("training_curve.py")
    log = tmp_path / "log.jsonl"
    records = [
        {"step": s, "tokens": 1000 * s, "phase": "ar" if s < 3 else "bd", "valid_ar": 3.0, "valid_bd": 2.0 - s / 10}
        for s in range(1, 6)
    ]
    log.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert curve.parse_mark("4=data rebuilt") == (4, "data rebuilt")
    out = tmp_path / "curve.png"
    fig = curve.main(log, out, {4: "data rebuilt", 99: "past the log"})
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    lines = {line.get_label(): list(line.get_xdata()) for line in fig.axes[0].get_lines()}
    assert lines["step 4: data rebuilt"] == [0.004, 0.004]  # at the tokens of step 4, in millions
    assert lines["switch to block-diffusion training"] == [0.003, 0.003]
    assert not any("past the log" in label for label in lines)


def test_checkpoints_benchmark_compares_models_on_validation_requests(data_folder: Path, tmp_path: Path) -> None:
    from conftest import benchmark_module

    checkpoints = benchmark_module("checkpoints.py")
    prompts = checkpoints.requests(data_folder, 3)
    assert len(prompts) == len(set(prompts)) == 3 and prompts == checkpoints.requests(data_folder, 3)
    valid = Examples.load(data_folder / "valid.npz")
    assert all(p.strip() for p in prompts) and len(valid) >= 3
    dev = checkpoints.dev_requests()
    assert len(dev) == len(set(dev)) == 60
    assert not set(dev) & {json.loads(line)["prompt"] for line in checkpoints.DEV.with_name("prompts.jsonl").open()}
    args = ["dcode-tiny", "--data", str(data_folder), "--prompts", "2", "--dev", "3", "--length", "16"]
    report = checkpoints.main(
        [*args, "--decode", "{}", "--decode", '{"entropy_bound": 1.0}', "--json", str(tmp_path / "out.json")]
    )
    assert list(report) == ["dcode-tiny", 'dcode-tiny {"entropy_bound": 1.0}']
    assert [r["prompts"] for r in report["dcode-tiny"].values()] == [2, 3]
    assert json.loads((tmp_path / "out.json").read_text())["requests"] == {"validation": prompts[:2], "dev": dev[:3]}


def test_distill_keeps_the_models_real_code_answers_mixes_human_units_and_resumes(
    data_folder: Path, tmp_path: Path
) -> None:
    from conftest import TINY_EOS, ScriptedDenoiser
    from transformers import AutoTokenizer

    from dcode.config import SamplerConfig
    from dcode.models import EMBEDDED
    from dcode.train import distill

    hf = AutoTokenizer.from_pretrained(EMBEDDED)
    model = ScriptedDenoiser(hf, [*hf.encode("def f(x):\n    return x", add_special_tokens=False), TINY_EOS])
    out = tmp_path / "distill"
    quiet = {"log": lambda line: None, "config": SamplerConfig(rule="threshold")}  # the fake writes all in one pass
    assert distill.build(model, data_folder, out, count=4, length=24, **quiet) == (4, 4)
    examples = Examples.load(out / "train.npz")
    assert len(examples) == 8  # the 4 answers, then 4 human units
    tokenizer = Tokenizer.from_file(str(out / "tokenizer" / "tokenizer.json"))
    assert tokenizer.decode(examples.code(0).tolist()) == "def f(x):\n    return x\n"
    assert examples.code(0)[-1] == tokenizer.token_to_id(EOS)
    assert (out / "valid.npz").read_bytes() == (data_folder / "valid.npz").read_bytes()
    # the same command again asks nothing: every answer is in answers.jsonl
    passes = model.forwards
    assert distill.build(model, data_folder, out, count=4, length=24, **quiet) == (4, 4)
    assert model.forwards == passes
    # an answer that is not real code (one line) is not kept
    one_line = ScriptedDenoiser(hf, [*hf.encode("x = 1", add_special_tokens=False), TINY_EOS])
    assert distill.build(one_line, data_folder, tmp_path / "other", count=2, length=8, **quiet) == (0, 2)


def test_yardstick_trains_to_milestones_exports_each_and_scores_them(data_folder: Path, tmp_path: Path) -> None:
    """benchmarks/yardstick.py: autoregressive steps only, an export (loadable, counters in its
    config) each time the tokens seen pass a milestone, then greedy answers scored beside dcode-tiny."""
    from conftest import benchmark_module

    from dcode import models

    yardstick = benchmark_module("yardstick.py")
    out = tmp_path / "out"
    args = ["train", "--data", str(data_folder), "--run", str(tmp_path / "run"), "--out", str(out)]
    exported = yardstick.main(args + ["--batch", "2", "--milestones", "100,300", "--minutes", "1"], CONFIG)

    step = CONFIG.context * 2  # tokens per step: 2 rows of the AR context
    assert [e["tokens"] for e in exported] == [step, 3 * step]  # the first steps past 100 and 300
    assert sorted(p.name for p in out.iterdir()) == [yardstick.label(step), yardstick.label(3 * step)]
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert {r["phase"] for r in log} == {"ar"}
    folder = out / yardstick.label(3 * step)
    assert json.loads((folder / "config.json").read_text())["dcode_training"]["tokens_seen"] == 3 * step
    assert models.load(str(folder)).facts.block == CONFIG.block

    report = yardstick.main(["evaluate", str(folder), "--limit", "1", "--length", "8"])
    assert list(report) == [folder.name, "dcode-tiny (its defaults)"]
    assert report[folder.name]["tokens_per_forward"] <= 1.0  # one token per call, token by token
