"""Structured output (issue 36): grammars (dcode.constrain), constrained commits in the one sampler
(dcode.constrained), LocalFiller.grammar, and `dcode new --schema / --json-object`.

Every answer under a grammar validates: dcode-tiny with several schemas under every commit rule
and the verify rule, and tiny released-format checkpoints of other families (Tiny-A2D's Qwen2,
DiffusionGemma's uniform noise). The verify rule under a grammar writes what a plain constrained
left-to-right loop writes. Bad grammars are one line (exit 2 on the command line), never a hang.
FakeConstraint is a test fake, named as one: a grammar of a fixed token sequence.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from test_endpoint import Reply, Seen, chat_chunk, dcode, error, replay, sse_chunks
from test_families import SIZE

from dcode import flows, models
from dcode.cli.loading import with_family_defaults
from dcode.config import SamplerConfig
from dcode.constrain import Grammar, GrammarError, ask_for, schema_file, validate
from dcode.constrained import constrained_pick, mask_logits
from dcode.events import Finished
from dcode.grammar_tokens import GrammarConstraint
from dcode.localfill import LocalFiller, masked, prompt_ids
from dcode.remote import Endpoint, fill
from dcode.remote.filler import EndpointFiller
from dcode.sampler import denoise
from dcode.testing import checkpoints as tiny

assert replay  # a fixture, imported for the endpoint tests below

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 130},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
    },
    "required": ["name", "age", "tags"],
    "additionalProperties": False,
}
ANSWER = {  # the shape benchmarks/structured.py asks the public prompts for
    "type": "object",
    "properties": {
        "code": {"type": "string"},
        "language": {"enum": ["python", "javascript", "go"]},
        "tests": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["code", "language", "tests"],
    "additionalProperties": False,
}
ITEMS = {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "minItems": 1, "maxItems": 4}
NOT_VALID = "is not valid under any of the given schemas"  # jsonschema's words
SCHEMAS = {"person": PERSON, "answer": ANSWER, "items": ITEMS}
RULES = {
    "schedule": {"rule": "schedule", "steps": 8},
    "threshold": {"rule": "threshold", "threshold": 0.7},
    "entropy-bound": {"rule": "entropy-bound", "entropy_bound": 0.6},
    "verify": {"rule": "verify"},
}


@pytest.fixture(scope="module")
def tiny_model() -> Any:
    return models.load("dcode-tiny")


def generate(model: Any, grammar: Grammar, config: SamplerConfig, length: int = 40) -> Finished:
    """dcode.flows.new with the local filler under `grammar`, drained to its Finished record."""
    events = list(flows.new(LocalFiller(model, config, grammar=grammar), "a small example", "json", length, 3, 2))
    assert isinstance(events[-1], Finished)
    return events[-1]


# ---------------------------------------------------------------------------------------------
# Grammars: checked without a model


def test_a_schema_and_its_validation() -> None:
    grammar = Grammar.json_schema(PERSON)
    grammar.check()
    assert validate(grammar, '{"name": "Ada", "age": 36, "tags": []}')
    assert not validate(grammar, '{"name": "Ada", "age": -1, "tags": []}')  # minimum
    assert not validate(grammar, '{"name": "Ada", "age": 36}')  # required
    assert not validate(grammar, '{"name": "Ada", "age": 36, "tags": [], "x": 1}')  # additionalProperties
    assert not validate(grammar, '{"name": "Ada", "age": 3')  # not JSON
    assert validate(Grammar.json_object(), "{}") and not validate(Grammar.json_object(), "[]")
    assert validate(Grammar.regex(r"[a-z]+\d"), "abc1") and not validate(Grammar.regex(r"[a-z]+\d"), "abc")
    assert validate(Grammar.lark('start: "a"+ "b"'), "aab") and not validate(Grammar.lark('start: "a"+ "b"'), "ba")
    assert Grammar.json_object().response_format() == {"type": "json_object"}
    shape = grammar.response_format()
    assert shape is not None and shape["json_schema"]["schema"] == PERSON and shape["json_schema"]["strict"] is True


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Grammar.json_schema({"type": "nope"}), f"not a JSON Schema: 'nope' {NOT_VALID} (at type)"),
        (lambda: Grammar.json_schema([1]), "a JSON Schema is an object, not list"),  # type: ignore[arg-type]
        (lambda: Grammar.regex("(").check(), "the regex cannot be enforced: at 1(8): unclosed group"),
        (
            lambda: Grammar.json_schema({"type": "string", "pattern": "(?<=a)b"}).check(),
            "the JSON Schema cannot be enforced: regex parse error: look-around, including look-ahead and "
            "look-behind, is not supported",
        ),
    ],
)  # fmt: skip
def test_a_grammar_the_engine_cannot_enforce_is_one_line(make: Any, message: str) -> None:
    with pytest.raises(GrammarError) as raised:
        make()
    assert str(raised.value) == message


def nested(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


def test_huge_or_deep_schemas_are_refused_at_once() -> None:
    """Never a hang: too deep is refused before compiling, too large by llguidance's limits."""
    nested(30) and Grammar.json_schema(nested(30)).check()  # deep but fine
    began = time.perf_counter()
    with pytest.raises(GrammarError, match="nests deeper than 64 levels"):
        Grammar.json_schema(nested(100))
    wide = {
        "type": "object",
        "properties": {f"key{i}": {"enum": [f"v{i}-{j}" for j in range(40)]} for i in range(4000)},
    }
    with pytest.raises(GrammarError, match="cannot be enforced|characters"):
        Grammar.json_schema(wide).check()
    assert time.perf_counter() - began < 30
    recursive = {"type": "object", "properties": {"child": {"$ref": "#"}}, "additionalProperties": False}
    Grammar.json_schema(recursive).check()  # recursion by $ref is a grammar, not a depth


def test_schema_file(tmp_path: Path) -> None:
    good, bad, text = tmp_path / "good.json", tmp_path / "bad.json", tmp_path / "text.json"
    good.write_text(json.dumps(PERSON))
    bad.write_text('{"type": 5}')
    text.write_text("nope")
    assert schema_file(str(good)) == Grammar.json_schema(PERSON)
    for path, message in [
        (bad, f"not a JSON Schema: 5 {NOT_VALID} (at type)"),
        (text, "not JSON: Expecting value: line 1 column 1 (char 0)"),
        (tmp_path / "missing.json", "cannot read it: No such file or directory"),
    ]:
        with pytest.raises(GrammarError) as raised:
            schema_file(str(path))
        assert str(raised.value) == message


# ---------------------------------------------------------------------------------------------
# The pass logic, with a fake grammar


class FakeConstraint:
    """A test fake: the grammar of one token sequence `want`, then an end (id 0)."""

    def __init__(self, want: list[int], vocab: int = 10) -> None:
        self.want, self.at, self.vocab = want, 0, vocab

    def begin(self, room: int) -> None:
        pass

    def closing(self, room: int) -> bool:
        return False

    def allowed(self, room: int | None = None) -> torch.Tensor:
        out = torch.zeros(self.vocab, dtype=torch.bool)
        out[self.want[self.at] if self.at < len(self.want) else 0] = True
        return out

    def accept(self, tokens: list[int]) -> int:
        taken = 0
        for token in tokens:
            if token != (self.want[self.at] if self.at < len(self.want) else 0):
                break
            self.at, taken = self.at + 1, taken + 1
        return taken

    def forced(self) -> list[int]:
        return []


def test_constrained_pick_commits_the_run_from_the_frontier_the_grammar_accepts() -> None:
    fake = FakeConstraint([5, 6, 7, 8])
    tokens = torch.tensor([5, 6, 9, 8])  # row 2 proposes what the grammar refuses
    picked, out = constrained_pick(fake, torch.tensor([], dtype=torch.long), tokens, torch.tensor([1, 2, 3]))
    assert picked.tolist() == [0, 1] and out.tolist() == [5, 6, 9, 8] and fake.at == 2
    fake = FakeConstraint([5, 6, 7, 8])
    picked, _ = constrained_pick(
        fake, torch.tensor([], dtype=torch.long), torch.tensor([5, 6, 7, 8]), torch.tensor([3])
    )
    assert picked.tolist() == [0]  # the frontier always; row 3 is not reached by a run of picks
    fake = FakeConstraint([5, 6, 7, 8])
    fake.at = 2  # the caller consumed forced tokens 5, 6 already (frontier_rows)
    picked, out = constrained_pick(fake, torch.tensor([5, 6]), torch.tensor([1, 1, 7, 8]), torch.tensor([3]))
    assert picked.tolist() == [0, 1, 2, 3] and out.tolist() == [5, 6, 7, 8]


def test_an_id_past_the_tokenizer_is_refused_and_the_grammar_goes_on(tiny_model: Any) -> None:
    """A wider output head proposes ids the tokenizer lacks: refused, not an engine error (which
    once left every later pass committing nothing)."""
    ends = sorted(tiny_model.facts.eos_ids)
    constraint = GrammarConstraint(Grammar.json_object(), tiny_model.tokenizer, 0, ends)
    assert constraint.accept([constraint.vocab + 5]) == 0 and constraint.accept([-1]) == 0
    assert not constraint.matcher.is_error() and bool(constraint.allowed().any())
    assert constraint.accept(tiny_model.tokenizer.encode("{}", add_special_tokens=False)) == 2
    assert constraint.complete


def test_mask_logits_fits_the_mask_and_lets_the_grammar_win() -> None:
    logits = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert mask_logits(logits, torch.tensor([True, False, True])).tolist() == [1.0, float("-inf"), 3.0, float("-inf")]
    banned = torch.tensor([float("-inf"), 2.0, 3.0, 4.0])  # the only allowed id was filtered out
    assert mask_logits(banned, torch.tensor([True, False, False, False])).tolist()[0] == 0.0


# ---------------------------------------------------------------------------------------------
# Every answer validates


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("schema", SCHEMAS)
def test_every_answer_under_a_schema_validates(tiny_model: Any, schema: str, rule: str) -> None:
    grammar = Grammar.json_schema(SCHEMAS[schema])
    done = generate(tiny_model, grammar, SamplerConfig(**RULES[rule]))
    assert validate(grammar, done.code), done.code
    assert done.code.endswith("\n") and done.extra["grammar"] == "complete"
    assert done.repair is not None and done.repair.rounds == 0  # parses by construction: no repair ran


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_sampled_answers_and_token_editing_stay_valid(tiny_model: Any, temperature: float) -> None:
    """Sampling cannot break the grammar; token editing is off under it (it would rewrite tokens
    the grammar has already read)."""
    grammar = Grammar.json_object()
    config = SamplerConfig(rule="threshold", threshold=0.5, temperature=temperature, seed=3, edit_threshold=0.1)
    done = generate(tiny_model, grammar, config)
    assert validate(grammar, done.code) and done.extra["edits"] == 0


def test_an_answer_that_runs_out_of_room_says_so(tiny_model: Any) -> None:
    done = generate(tiny_model, Grammar.json_schema(PERSON), SamplerConfig(rule="threshold"), length=4)
    assert done.extra["grammar"] == "incomplete" and done.tokens == 4


@pytest.mark.parametrize(("writer", "noise"), [("a2d_qwen2_bd3lm", "mask"), ("diffusion_gemma", "uniform")])
def test_other_families_answer_valid_json(writer: str, noise: str, tmp_path: Path) -> None:
    """A released-format Qwen2 tokenizer (transformers' fast tokenizer) and uniform noise."""
    tiny.write(writer, tmp_path / writer, SIZE, seed=7)
    model = models.load(str(tmp_path / writer))
    assert model.facts.noise == noise
    own = with_family_defaults(SamplerConfig(), model, frozenset(), None)  # the family's decoding, as the CLI runs it
    configs = [SamplerConfig(rule="threshold"), SamplerConfig(rule="schedule", steps=6), own]
    for schema in (PERSON, ITEMS):
        grammar = Grammar.json_schema(schema)
        for config in configs:
            done = generate(model, grammar, config, length=48)
            assert validate(grammar, done.code) and done.extra["grammar"] == "complete", (config, done.code)


# ---------------------------------------------------------------------------------------------
# The verify rule writes what a constrained left-to-right loop writes


def left_to_right(model: Any, ids: list[int], length: int, grammar: Grammar) -> list[int]:
    """The plain constrained loop: one position per forward pass, leftmost first, each the argmax
    of its logits among the tokens the grammar allows after what is written (closing tokens once
    the room left is short); padding after an end."""
    facts = model.facts
    ends = sorted(facts.eos_ids | {facts.pad_id})
    constraint = GrammarConstraint(grammar, model.tokenizer, 0, ends)
    x = torch.tensor(ids + [facts.mask_id] * length)
    for position in range(len(ids), len(x)):
        with torch.no_grad():
            logits = model(x[None].to(model.device))[0].float().cpu()  # (L, V)
        row = logits[position - 1 if facts.shifted else position].clone()
        row[facts.mask_id] = float("-inf")
        token = int(mask_logits(row, constraint.allowed(len(x) - position)).argmax())
        assert constraint.accept([token]) == 1
        x[position] = token
        if token in ends:
            x[position + 1 :] = facts.pad_id
            break
    return x[len(ids) :].tolist()


@pytest.mark.parametrize("length", [40, 20])
@pytest.mark.parametrize("draft", [0, 4, 15])
def test_verify_under_a_grammar_writes_what_a_constrained_loop_writes(tiny_model: Any, draft: int, length: int) -> None:
    """Drafts change what a pass costs, never what it writes; with 20 positions the answer is
    short of room and closes (the loop closes as the sampler does)."""
    grammar = Grammar.json_schema(PERSON)
    ids = prompt_ids(tiny_model, "a person", "json")
    facts = tiny_model.facts
    constraint = GrammarConstraint(grammar, tiny_model.tokenizer, 0, sorted(facts.eos_ids | {facts.pad_id}))
    canvas, masks = masked(ids, length, [], facts.mask_id)
    config = SamplerConfig(rule="verify", draft=draft, draft_floor=0.0, cache=False, repetition_penalty=1.0)
    steps = list(denoise(tiny_model, canvas, len(ids), config, masks=masks, constraint=constraint))
    expected = left_to_right(tiny_model, ids, length, grammar)
    assert steps[-1].canvas[len(ids) :].tolist() == expected
    if draft == 0:
        assert len(steps) == sum(1 for t in expected if t != facts.pad_id)


def test_verify_under_a_grammar_closes_where_one_token_a_pass_closes(tiny_model: Any) -> None:
    """Short of room the answer closes, decided at each position (a verify row decides its own):
    once it was decided a pass, and a pass that committed several tokens closed one list item
    later than one token a pass does (a public prompt, as benchmarks/structured.py asks it)."""
    grammar = Grammar.json_schema(replace_enum(ANSWER, ["go", "html", "javascript", "python", "rust"]))
    request = ask_for(grammar, "a javascript function that debounces another function")
    own = replace(with_family_defaults(SamplerConfig(), tiny_model, frozenset(), None), cache=False)
    answers = []
    for draft in (0, 15):
        events = list(
            flows.new(LocalFiller(tiny_model, replace(own, draft=draft), grammar=grammar), request, "json", 128, 0)
        )
        assert isinstance(events[-1], Finished)
        answers.append(events[-1].code)
    assert answers[0] == answers[1] and validate(grammar, answers[0])


def replace_enum(schema: dict[str, Any], languages: list[str]) -> dict[str, Any]:
    """ANSWER with another enum of languages."""
    return {**schema, "properties": {**schema["properties"], "language": {"enum": languages}}}


class RefusalSpy:
    """A test spy, named as one: a GrammarConstraint (and its forks) that records each token other
    than an end it is offered and refuses (an end after an end is no draft: nothing follows one)."""

    def __init__(self, inner: GrammarConstraint, refused: list[int]) -> None:
        self.inner, self.refused = inner, refused

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def fork(self) -> RefusalSpy:
        return RefusalSpy(self.inner.fork(), self.refused)

    def accept(self, tokens: list[int]) -> int:
        taken = self.inner.accept(tokens)
        if taken < len(tokens) and tokens[taken] not in self.inner.ends:
            self.refused.append(tokens[taken])
        return taken


@pytest.mark.parametrize("schema", ["person", "answer"])
def test_verify_drafts_under_a_grammar_are_never_refused(tiny_model: Any, schema: str) -> None:
    """The verify rule's drafts are made under the grammar (what it forces, else a choice from its
    mask after the drafts before), so none is one it refuses: each pass checks drafts that can
    stand. Drafts made without it were refused on every answer here (dcode-tiny writes Python)."""
    grammar = Grammar.json_schema(SCHEMAS[schema])
    ids = prompt_ids(tiny_model, "a small example", "json")
    facts = tiny_model.facts
    refused: list[int] = []
    spy = RefusalSpy(
        GrammarConstraint(grammar, tiny_model.tokenizer, 0, sorted(facts.eos_ids | {facts.pad_id})), refused
    )
    canvas, masks = masked(ids, 64, [], facts.mask_id)
    steps = list(denoise(tiny_model, canvas, len(ids), SamplerConfig(rule="verify"), masks=masks, constraint=spy))
    assert refused == []
    assert max(step.rows for step in steps) > 1 and spy.complete  # drafts were checked; the answer is whole
    answer = [t for t in steps[-1].canvas[len(ids) :].tolist() if t not in spy.inner.ends]
    assert validate(grammar, tiny_model.tokenizer.decode(answer))


def test_a_constraint_fills_a_whole_answer_only(tiny_model: Any) -> None:
    facts = tiny_model.facts
    ids = prompt_ids(tiny_model, "a person", "json")
    canvas, masks = masked(ids, 8, [5, 6], facts.mask_id)  # a middle before a suffix
    constraint = GrammarConstraint(Grammar.json_object(), tiny_model.tokenizer, 0, sorted(facts.eos_ids))
    with pytest.raises(ValueError, match="a grammar constraint fills a whole answer"):
        list(denoise(tiny_model, canvas, len(ids), SamplerConfig(), masks=masks, constraint=constraint))
    with pytest.raises(flows.InputError, match="not a middle before a suffix"):
        next(
            LocalFiller(tiny_model, SamplerConfig(), suffix=[5], grammar=Grammar.json_object()).draft(
                "x", "json", 8, False
            )
        )


# ---------------------------------------------------------------------------------------------
# The command line


def test_new_with_a_schema_writes_a_valid_document(tmp_path: Path) -> None:
    schema = tmp_path / "person.json"
    schema.write_text(json.dumps(PERSON))
    result = dcode("new", "a person", "--schema", str(schema), "--length", "64", "-q", "--no-log")
    assert result.exit_code == 0, result.stderr
    assert result.stderr == "" and result.stdout.endswith("}\n")
    assert validate(Grammar.json_schema(PERSON), result.stdout)
    report = dcode("new", "a person", "--json-object", "--json", "-q", "--no-log", "--length", "32")
    assert report.exit_code == 0, report.stderr
    data = json.loads(report.stdout)
    assert (data["grammar"], data["grammar_kind"], data["language"]) == ("complete", "json_object", "json")
    assert isinstance(json.loads(data["code"]), dict) and data["forward_passes"] >= 1 and data["tokens_per_forward"] > 0


def test_bad_schemas_are_one_line_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text('{"type": 5}')
    (tmp_path / "text.json").write_text("nope")
    (tmp_path / "good.json").write_text(json.dumps(PERSON))
    out = tmp_path / "out.json"
    bad, text, none = (str(tmp_path / name) for name in ("bad.json", "text.json", "none.json"))
    cases = [
        (["--schema", bad], f"--schema {bad}: not a JSON Schema: 5 {NOT_VALID} (at type)"),
        (["--schema", text], f"--schema {text}: not JSON: Expecting value: line 1 column 1 (char 0)"),
        (["--schema", none], f"--schema {none}: cannot read it: No such file or directory"),
        (["--schema", str(tmp_path / "good.json"), "--json-object"], "give --schema or --json-object, not both"),
    ]
    for args, message in cases:
        result = dcode("new", "a person", *args, "-o", str(out), "--no-log")
        assert (result.exit_code, result.stdout, result.stderr) == (2, "", f"dcode: error: {message}\n")
        assert not out.exists()
    from_env = dcode("new", "a person", "--no-log", env={"DCODE_SCHEMA": str(tmp_path / "text.json")})
    assert from_env.exit_code == 2
    assert (
        from_env.stderr
        == f"dcode: error: DCODE_SCHEMA {tmp_path / 'text.json'}: not JSON: Expecting value: line 1 column 1 (char 0)\n"
    )


def test_an_answer_without_room_is_exit_1_and_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "person.json").write_text(json.dumps(PERSON))
    out = tmp_path / "out.json"
    result = dcode(
        "new", "a person", "--schema", str(tmp_path / "person.json"), "--length", "4", "-o", str(out), "-q", "--no-log"
    )
    assert (result.exit_code, result.stdout) == (1, "")
    assert (
        result.stderr
        == "dcode: error: the answer ran out of room before its JSON was complete (--length 4): raise --length\n"
    )
    assert not out.exists()


# ---------------------------------------------------------------------------------------------
# --endpoint: the grammar is sent as response_format, and the answer validated here


def test_an_endpoint_gets_response_format_and_an_invalid_answer_is_refused(replay: Any, tmp_path: Path) -> None:
    answers = iter(['{"name": "Ada", "age": 36, "tags": []}', '{"name": "Ada"}'])

    def server(seen: Seen) -> Reply:
        return Reply(chunks=sse_chunks([chat_chunk(next(answers))]))

    served = replay(server)
    (tmp_path / "person.json").write_text(json.dumps(PERSON))
    args = ["new", "a person", "--schema", str(tmp_path / "person.json"), "--endpoint", served.url, "--model", "m"]
    good = dcode(*args, "-q", "--no-log", "--stream-mode", "append")
    assert (good.exit_code, good.stdout) == (0, '{"name": "Ada", "age": 36, "tags": []}\n'), good.stderr
    sent = served.posts[0].body["response_format"]
    assert sent == {"type": "json_schema", "json_schema": {"name": "answer", "schema": PERSON, "strict": True}}
    bad = dcode(*args, "-q", "--no-log", "--stream-mode", "append")
    assert (bad.exit_code, bad.stdout, bad.stderr) == (
        1,
        "",
        "dcode: error: the answer is not valid against the schema; nothing written\n",
    )


def test_a_server_that_refuses_response_format_is_asked_without_it(replay: Any) -> None:
    def server(seen: Seen) -> Reply:
        if "response_format" in seen.body:
            return error(400, "response_format is not supported")
        return Reply(chunks=sse_chunks([chat_chunk("{}")]))

    served = replay(server)
    endpoint = Endpoint.parse(served.url, model="m")
    filler = EndpointFiller(endpoint, fill.Sampling(0), "append", grammar=Grammar.json_object())
    events = list(flows.new(replace(filler), "x", "json", 16, 0))
    assert isinstance(events[-1], Finished) and events[-1].code == "{}\n"
    assert [("response_format" in p.body) for p in served.posts] == [True, False]
