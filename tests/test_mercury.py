"""Inception's editing paths: `dcode serve`'s /v1/apply/completions and /v1/edit/completions in
Mercury Edit's shapes, and `dcode edit --endpoint` through a server's apply path.

The server is test_serve's in-process uvicorn with dcode-tiny (a real dcode serve on a loopback
port); answers are checked against the same edit flow run locally, token for token. The fake
Mercury is test_endpoint's ReplayServer (a test fake, named as one) answering in Mercury's shapes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("uvicorn")

import test_serve  # noqa: E402
from openai.types.chat import ChatCompletion, ChatCompletionChunk  # noqa: E402
from test_endpoint import ReplayServer, Reply, Seen, chat_chunk, dcode, sse_chunks, text_chunk  # noqa: E402
from test_serve import KEY, Served, post  # noqa: E402

from dcode import flows, snippets  # noqa: E402
from dcode.events import Edited  # noqa: E402
from dcode.localfill import LocalFiller  # noqa: E402
from dcode.remote import Endpoint  # noqa: E402
from dcode.remote import apply as applying  # noqa: E402
from dcode.remote.fill import Sampling  # noqa: E402
from dcode.remote.filler import EndpointFiller, fill_budget  # noqa: E402
from dcode.serve import mercury  # noqa: E402

server = test_serve.server  # the module's in-process dcode serve (its own instance here)

CALC = "class Calc:\n    def add(self, a, b):\n        return a - b\n\n    def neg(self, a):\n        return -a\n"
# Inception's layout of an update snippet: the changed method between "existing code" markers
SNIPPET = "# ... existing code ...\n    def add(self, a, b):\n        return a + b\n# ... existing code ..."


def apply_content(original: str, snippet: str) -> str:
    return f"<|original_code|>\n{original}\n<|/original_code|>\n\n<|update_snippet|>\n{snippet}\n<|/update_snippet|>"


# Continue's next-edit prompt (core/nextEdit/templating/mercuryCoderNextEdit.ts): the region's
# lines between the tags, each tag on its own line, the cursor inside
NEXT_EDIT = (
    "<|recently_viewed_code_snippets|>\n<|recently_viewed_code_snippet|>\ncode_snippet_file_path: util.py\n"
    "def twice(x):\n    return 2 * x\n<|/recently_viewed_code_snippet|>\n<|/recently_viewed_code_snippets|>\n\n"
    "<|current_file_content|>\ncurrent_file_path: calc.py\ndef add(a, b):\n<|code_to_edit|>\n"
    "    return a -<|cursor|> b\n<|/code_to_edit|>\n\nprint(add(1, 2))\n\n<|/current_file_content|>\n\n"
    "<|edit_diff_history|>\n--- calc.py\n+++ calc.py\n@@ -1 +1 @@\n-def sub(a, b):\n+def add(a, b):\n"
    "<|/edit_diff_history|>"
)
NEXT_FILE = "def add(a, b):\n    return a - b\n\nprint(add(1, 2))\n"


def local_edits(
    served: Served, path: mercury.Path, content: str, **body: Any
) -> tuple[mercury.Plan, str, tuple[int, int]]:
    """What the edit flow writes locally for a request's plan (its settings over the server's, no repair)."""
    raw = json.dumps({"messages": [{"role": "user", "content": content}], **body}).encode()
    prepared, plan = mercury.prepare(served.engine, path, raw)
    code, new_region = plan.source, (0, 0)
    for region in reversed(plan.regions):
        filler = LocalFiller(served.engine.model, prepared.config)
        span = (region.start, region.end)
        *_, done = flows.edit(filler, code, span, region.instruction, plan.language, region.length, 0, plan.name)
        assert isinstance(done, Edited)
        code, new_region = done.code, done.new_region
    return plan, code, new_region


# ---------------------------------------------------------------------------------------------
# Update snippets: where each part lands


@pytest.mark.parametrize(
    ("line", "marker"),
    [
        ("// ... existing code ...", True),
        ("    # ... keep the imports ...", True),
        ("<!-- ... rest of code ... -->", True),
        ("/* ... existing code ... */", True),
        ("…existing code…", True),
        ("    ...", False),  # a Python stub's body
        ("x = ...", False),
        ("# existing code", False),
    ],
)
def test_marker_lines_are_told_from_code(line: str, marker: bool) -> None:
    assert snippets.is_marker(line) is marker


def test_a_part_is_placed_by_its_first_and_last_lines_and_an_unchanged_one_is_left_out() -> None:
    changed = snippets.place(CALC, SNIPPET)
    start = CALC.index("    def add")
    assert changed == [
        snippets.Placed(start, CALC.index("\n    def neg"), "    def add(self, a, b):\n        return a + b\n")
    ]
    unchanged = "// ... existing code ...\n    def neg(self, a):\n        return -a\n// ... existing code ...\n"
    assert snippets.place(CALC, unchanged) == []


def test_a_part_that_cannot_be_placed_makes_the_whole_file_the_region() -> None:
    new_method = "# ... existing code ...\n    def mul(self, a, b):\n        return a * b\n"
    assert snippets.place(CALC, new_method) == [snippets.Placed(0, len(CALC), new_method)]
    assert not snippets.is_snippet("return the sum, not the difference")


@pytest.mark.parametrize(
    ("layout", "current", "marked"),
    [
        # Continue: each tag on its own line
        ("continue", "a = 1\n<|code_to_edit|>\nb = 2<|cursor|>\nc = 3\n<|/code_to_edit|>\nd = 4\n", None),
        # Zed (crates/edit_prediction/src/mercury.rs): the closing tag right after the region's last line
        ("zed", "a = 1\n<|code_to_edit|>\nb = 2<|cursor|>\nc = 3<|/code_to_edit|>\n\nd = 4\n", None),
        # Inception's OpenAPI example: the file whole, the region repeated after it
        ("openapi", "a = 1\nb = 2\nc = 3\nd = 4\n", "b = 2<|cursor|>\nc = 3"),
        # no region: the cursor's line and the WINDOW after it
        ("cursor", "a = 1\nb<|cursor|> = 2\nc = 3\nd = 4\n", None),
    ],
)
def test_next_edit_layouts_give_the_file_and_its_region(layout: str, current: str, marked: str | None) -> None:
    source, a, b, open_end = mercury.file_and_region(current, marked)
    assert source == "a = 1\nb = 2\nc = 3\nd = 4\n"
    assert mercury.whole_lines(source, a, b) == ((6, 18) if layout != "cursor" else (6, 24))
    assert open_end is (layout == "zed")


# ---------------------------------------------------------------------------------------------
# dcode serve, with the openai client's low-level post (its documented way to call other paths)


def test_apply_rewrites_the_placed_region_as_the_local_edit_flow_does(server: Served) -> None:
    content = apply_content(CALC, SNIPPET)
    answer = server.client().post(
        "/apply/completions",
        body={"model": "dcode-tiny", "messages": [{"role": "user", "content": content}]},
        cast_to=ChatCompletion,
    )
    plan, local, _ = local_edits(server, "apply", content)
    merged = answer.choices[0].message.content
    assert answer.object == "chat.completion" and answer.choices[0].finish_reason == "stop"
    assert merged == local
    start = CALC.index("    def add")
    assert merged.startswith(CALC[:start]) and merged.endswith(CALC[CALC.index("\n    def neg") :])
    assert [(r.start, r.end) for r in plan.regions] == [(start, CALC.index("\n    def neg"))]
    assert answer.usage is not None and answer.usage.completion_tokens > 0


def test_apply_of_a_snippet_already_in_the_file_answers_the_file_without_a_pass(server: Served) -> None:
    snippet = "# ... existing code ...\n    def neg(self, a):\n        return -a\n"
    answer = post(
        server.url, "/v1/apply/completions", {"messages": [{"role": "user", "content": apply_content(CALC, snippet)}]}
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["choices"][0]["message"]["content"] == CALC
    assert body["dcode"]["forward"] == 0 and body["dcode"]["regions"] == []


def test_next_edit_streams_the_fenced_region_as_the_local_edit_flow_writes_it(server: Served) -> None:
    stream = server.client().post(
        "/edit/completions",
        body={"model": "dcode-tiny", "messages": [{"role": "user", "content": NEXT_EDIT}], "stream": True},
        cast_to=ChatCompletion,
        stream=True,
        stream_cls=openai.Stream[ChatCompletionChunk],
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    plan, local, new_region = local_edits(server, "edit", NEXT_EDIT)
    assert plan.source == NEXT_FILE and plan.name == "calc.py" and plan.language == "python"
    assert chunks[0].choices[0].delta.role == "assistant" and chunks[-1].choices[0].finish_reason == "stop"
    region = local.encode()[new_region[0] : new_region[1]].decode()
    assert text == f"```\n{region}\n```"
    assert local.startswith("def add(a, b):\n") and local.endswith("\nprint(add(1, 2))\n")
    whole = post(server.url, "/v1/edit/completions", {"messages": [{"role": "user", "content": NEXT_EDIT}]})
    assert whole.json()["object"] == "edit.completion" and whole.json()["choices"][0]["message"]["content"] == text


@pytest.mark.parametrize(
    ("path", "content", "extra", "language"),
    [
        ("edit", NEXT_EDIT.replace("calc.py", "calc.js"), {}, "javascript"),
        ("edit", NEXT_EDIT, {"dcode": {"language": "ruby"}}, "ruby"),  # the dcode object names it
        ("apply", apply_content("#!/bin/sh\necho a\n", "#!/bin/sh\necho b\n"), {}, "bash"),  # a shebang
        ("apply", apply_content(CALC, SNIPPET), {}, "python"),  # the default
    ],
)
def test_the_language_comes_from_the_request_the_path_or_a_shebang(
    server: Served, path: mercury.Path, content: str, extra: dict[str, Any], language: str
) -> None:
    raw = json.dumps({"messages": [{"role": "user", "content": content}], **extra}).encode()
    assert mercury.prepare(server.engine, path, raw)[1].language == language


def test_next_edit_tells_the_model_the_recent_edits() -> None:
    said = mercury.next_edit_instruction("calc.py", "-def sub(a, b):\n+def add(a, b):", "def twice(x): ...", 2)
    assert said.startswith("Make the next edit the developer would make in calc.py")
    assert "+def add(a, b):" in said and "def twice(x)" in said
    assert "twice" not in mercury.next_edit_instruction("calc.py", "-x", "def twice(x): ...", 1)


NO_CLOSE = "<|current_file_content|>\na<|code_to_edit|>\nb\n<|/current_file_content|>"
COPY_ELSEWHERE = "<|current_file_content|>\na\n<|/current_file_content|>\n<|code_to_edit|>\nb\n<|/code_to_edit|>"
LONG = "".join(f"value_{i} = compute_{i}(alpha_{i}, beta_{i}, gamma_{i})\n" for i in range(400))
LONG_REGION = f"<|current_file_content|>\n<|code_to_edit|>\n{LONG}<|/code_to_edit|>\n<|/current_file_content|>"


@pytest.mark.parametrize(
    ("path", "content", "said"),
    [
        ("/v1/apply/completions", "merge this", "must hold <|original_code|>"),
        ("/v1/apply/completions", "<|original_code|>\nx = 1\n<|/original_code|>", "must hold <|update_snippet|>"),
        ("/v1/apply/completions", apply_content("x = 1", "  \n"), "<|update_snippet|> is empty"),
        ("/v1/apply/completions", apply_content("", "x = 2"), "<|original_code|> is empty"),
        ("/v1/apply/completions", apply_content(LONG, "y = 1\n"), "does not fit the model's context of 2048"),
        ("/v1/edit/completions", "<|code_to_edit|>\nx\n<|/code_to_edit|>", "must hold <|current_file_content|>"),
        ("/v1/edit/completions", "<|current_file_content|>\nx = 1\n<|/current_file_content|>", "marks no place"),
        ("/v1/edit/completions", COPY_ELSEWHERE, "is not in"),
        ("/v1/edit/completions", NO_CLOSE, "has no <|/code_to_edit|>"),
        ("/v1/edit/completions", LONG_REGION, "does not fit"),
    ],
)  # fmt: skip
def test_bad_edit_requests_get_400_naming_the_message(server: Served, path: str, content: str, said: str) -> None:
    for stream in (False, True):  # refused before any stream starts
        answer = post(server.url, path, {"messages": [{"role": "user", "content": content}], "stream": stream})
        assert answer.status_code == 400, answer.text
        error = answer.json()["error"]
        assert said in error["message"] and error["param"] == "messages" and error["type"] == "invalid_request_error"
    if "fit" in said:
        assert error["code"] == "context_length_exceeded"


def test_a_file_longer_than_the_context_still_gets_its_next_edit(server: Served) -> None:
    """Only the region and the instruction must fit: the file around it is windowed, as in `dcode edit`."""
    content = f"<|current_file_content|>\n{LONG}x = 1<|cursor|>\n{LONG}<|/current_file_content|>"
    answer = post(server.url, "/v1/edit/completions", {"messages": [{"role": "user", "content": content}]})
    assert answer.status_code == 200, answer.text
    at = len(LONG)
    assert answer.json()["dcode"]["regions"] == [[at, at + len("x = 1\n") + len("".join(LONG.splitlines(True)[:5]))]]


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({}, 400, "messages"),
        ({"messages": []}, 400, "messages"),
        ({"messages": [{"role": "user", "content": ""}]}, 400, "messages"),
        ({"messages": [{"role": "user", "content": apply_content("x", "y")}], "model": "mercury-edit"}, 404, "model"),
        ({"messages": [{"role": "user", "content": apply_content("x", "y")}], "max_tokens": 0}, 400, "max_tokens"),
    ],
)
def test_missing_fields_and_another_model_are_refused_as_openai_does(
    server: Served, body: dict[str, Any], status: int, param: str
) -> None:
    answer = post(server.url, "/v1/apply/completions", body)
    assert answer.status_code == status, answer.text
    assert answer.json()["error"]["param"] == param


@pytest.mark.parametrize("path", ["/v1/apply/completions", "/v1/edit/completions"])
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("response_format", {"type": "json_object"}),
        ("response_format", {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}),
        ("tools", [{"type": "function", "function": {"name": "f"}}]),
        ("tool_choice", "required"),
        ("parallel_tool_calls", False),
    ],
)
def test_a_shaped_answer_is_refused_naming_the_field_not_ignored(
    server: Served, path: str, field: str, value: Any
) -> None:
    content = apply_content(CALC, SNIPPET) if "apply" in path else NEXT_EDIT
    for stream in (False, True):  # refused before any stream starts
        body = {"messages": [{"role": "user", "content": content}], field: value, "stream": stream}
        answer = post(server.url, path, body)
        assert answer.status_code == 400, answer.text
        error = answer.json()["error"]
        assert error["param"] == field and error["type"] == "invalid_request_error"
        assert f"'{field}' is not supported here" in error["message"]


def test_a_text_response_format_is_what_an_editing_path_answers_anyway(server: Served) -> None:
    snippet = "# ... existing code ...\n    def neg(self, a):\n        return -a\n"  # already there: no pass
    messages = [{"role": "user", "content": apply_content(CALC, snippet)}]
    body = {"messages": messages, "response_format": {"type": "text"}}
    answer = post(server.url, "/v1/apply/completions", body)
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"]["content"] == CALC


# ---------------------------------------------------------------------------------------------
# dcode edit --endpoint: the apply path where the server has one


def test_edit_with_an_update_snippet_goes_to_a_dcode_servers_apply_path(server: Served, tmp_path: Path) -> None:
    path = tmp_path / "calc.py"
    path.write_text(CALC)
    done = dcode(
        "edit", str(path), "--instruct", SNIPPET, "--endpoint", server.url, "--no-repair", "-o", "-", "-q",
        env={"DCODE_ENDPOINT_KEY": KEY},
    )  # fmt: skip
    assert done.exit_code == 0, done.stderr
    asked = {"max_tokens": fill_budget(CALC, 32), "temperature": 0.0}  # what the client sends for the region
    _, local, _ = local_edits(server, "apply", apply_content(CALC, SNIPPET), **asked)
    assert done.stdout == local and path.read_text() == CALC


# two parts, each a changed method: two regions, the class line and the blank line between them kept
TWO_PARTS = (
    "# ... existing code ...\n    def add(self, a, b):\n        return a + b\n# ... existing code ...\n"
    "    def neg(self, a):\n        return 0 - a\n"
)


@pytest.mark.parametrize("where", ["local", "endpoint"])
def test_edit_with_a_snippet_writes_what_dcode_serves_apply_path_writes(
    server: Served, tmp_path: Path, where: str
) -> None:
    """One flow whatever fills the masks: the local model places the parts and regenerates only
    those regions (dcode.merge), as the server's apply path does for the same file and snippet."""
    path = tmp_path / "calc.py"
    path.write_text(CALC)
    remote = ["--endpoint", server.url] if where == "endpoint" else []
    done = dcode(
        "edit", str(path), "--instruct", TWO_PARTS, *remote, "--no-repair", "-o", "-", "-q",
        env={"DCODE_ENDPOINT_KEY": KEY},
    )  # fmt: skip
    assert done.exit_code == 0, done.stderr
    body = {"messages": [{"role": "user", "content": apply_content(CALC, TWO_PARTS)}], "dcode": {"repair": False}}
    applied = post(server.url, "/v1/apply/completions", body).json()
    merged = applied["choices"][0]["message"]["content"]
    placed = [[p.start, p.end] for p in snippets.place(CALC, TWO_PARTS)]
    assert applied["dcode"]["regions"] == placed and len(placed) == 2
    (a0, b0), (a1, b1) = placed  # the class line, the blank line between the methods, the end: kept
    assert merged.startswith(CALC[:a0]) and merged.endswith(CALC[b1:]) and CALC[b0:a1] in merged[a0:]
    assert done.stdout == merged and path.read_text() == CALC


def test_local_edit_with_a_snippet_already_in_the_file_changes_nothing_without_a_pass(tmp_path: Path) -> None:
    path = tmp_path / "calc.py"
    path.write_text(CALC)
    unchanged = "# ... existing code ...\n    def neg(self, a):\n        return -a\n"
    done = dcode("edit", str(path), "--instruct", unchanged, "--json", "-q")
    assert done.exit_code == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["changed"] is False and report["forward_passes"] == 0 and report["snippet_regions"] == []
    assert path.read_text() == CALC and not (tmp_path / "calc.py.orig").exists()


def mercury_fake(merged: str) -> Any:
    """A test fake of Mercury Edit: /v1/apply/completions answers one chat.completion (not
    streamed, as ProxyAI's Inception client reads it); other paths are not there."""

    def script(seen: Seen) -> Reply:
        if seen.path != "/v1/apply/completions":
            return Reply(404, body=json.dumps({"error": {"message": "Not Found", "type": "invalid_request_error"}}))
        answer = {
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": seen.body["model"],
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": merged}}],
            "usage": {"prompt_tokens": 40, "completion_tokens": 12, "total_tokens": 52},
        }  # fmt: skip
        return Reply(body=json.dumps(answer))

    return script


def test_edit_of_lines_with_a_snippet_sends_the_region_to_mercurys_apply(tmp_path: Path) -> None:
    region = "    def add(self, a, b):\n        return a - b\n"
    fixed = "    def add(self, a, b):\n        return a + b\n"
    fake = ReplayServer(mercury_fake(fixed))
    try:
        path = tmp_path / "calc.py"
        path.write_text(CALC)
        done = dcode(
            "edit",
            str(path),
            "--lines",
            "2-3",
            "--instruct",
            SNIPPET,
            "--endpoint",
            fake.url,
            "--model",
            "mercury-edit",
            "--no-repair",
        )
        assert done.exit_code == 0, done.stderr
        assert path.read_text() == CALC.replace(region, fixed)
        (asked,) = fake.posts
        assert asked.path == "/v1/apply/completions" and asked.body["model"] == "mercury-edit"
        assert asked.body["messages"] == [{"role": "user", "content": apply_content(region, SNIPPET)}]
    finally:
        fake.close()


def test_a_server_without_the_apply_path_is_asked_once_then_no_more(tmp_path: Path) -> None:
    """A 404 for the path falls back to fill in the middle silently, and the Endpoint remembers it."""

    def script(seen: Seen) -> Reply:
        if seen.path == "/v1/apply/completions":
            return Reply(404, body=json.dumps({"detail": "Not Found"}))
        if seen.path == "/v1/completions":
            return Reply(chunks=sse_chunks([text_chunk("x = 10\n")]))
        return Reply(chunks=sse_chunks([chat_chunk("x = 10\n")]))

    fake = ReplayServer(script)
    try:
        told: list[str] = []
        endpoint = Endpoint.parse(fake.url, model="m", tell=told.append)
        filler = EndpointFiller(endpoint, Sampling(max_tokens=16))
        for _ in range(2):
            *_, done = flows.edit(filler, "x = 1\n", (0, 6), "make x ten", "python", None, 0)
            assert isinstance(done, Edited) and done.code == "x = 10\n"
        assert [s.path for s in fake.posts] == ["/v1/apply/completions", "/v1/chat/completions", "/v1/chat/completions"]
        assert told == [] and endpoint.missing == {applying.PATH}
    finally:
        fake.close()


def test_a_404_for_the_model_is_an_error_not_a_fallback(tmp_path: Path) -> None:
    def script(seen: Seen) -> Reply:
        error = {
            "message": "model `nope` not found",
            "type": "invalid_request_error",
            "param": "model",
            "code": "model_not_found",
        }
        return Reply(404, body=json.dumps({"error": error}))

    fake = ReplayServer(script)
    try:
        path = tmp_path / "calc.py"
        path.write_text(CALC)
        done = dcode("edit", str(path), "--instruct", SNIPPET, "--endpoint", fake.url, "--model", "nope")
        assert done.exit_code == 2 and "model 'nope' not found" in done.stderr
        assert [s.path for s in fake.posts] == ["/v1/apply/completions"] and path.read_text() == CALC
    finally:
        fake.close()


def test_which_edits_go_to_the_apply_path() -> None:
    mercury_host = Endpoint.parse("https://api.inceptionlabs.ai/v1")
    other = Endpoint.parse("http://127.0.0.1:8000/v1")
    assert applying.wanted(mercury_host, "x = 1\n", SNIPPET, whole=False)
    assert not applying.wanted(mercury_host, "x = 1\n", "make x ten", whole=True)  # its model merges code, not prose
    assert applying.wanted(
        other, "x = 1\n", "make x ten", whole=True
    )  # a dcode server edits with it as a local edit does
    assert not applying.wanted(other, "x = 1\n", "make x ten", whole=False)  # fill in the middle keeps the code around
    assert not applying.wanted(other, "\n", SNIPPET, whole=True)  # nothing to merge into
