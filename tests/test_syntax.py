"""dcode.syntax: language detection, tree-sitter issues with byte spans, compile() for Python."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from dcode.syntax import (
    LANGUAGES,
    Issue,
    UnknownLanguage,
    decode_python,
    detect_language,
    find_issues,
    format_issue,
    line_span,
)

# (language, broken source, expected [(kind, line), ...] in start_byte order)
BROKEN = [
    ("python", "x = 1\nprint((1)\n", [("error", 2)]),
    ("python", "def f():\n    return 1 +\n", [("error", 2)]),
    ("javascript", "let x = (1;\n", [("missing", 1)]),
    ("javascript", "function f() {\n  return 1 +;\n}\n", [("missing", 2)]),
    ("typescript", "let x: number = ;\n", [("error", 1)]),
    ("typescript", "function f(a: string {\n  return a;\n}\n", [("missing", 1)]),
    ("tsx", "const a = <div>{x</div>;\n", [("error", 1)]),
    ("rust", 'fn main() {\n    let x = 1\n    println!("{}", x);\n}\n', [("error", 2)]),
    ("rust", "fn f( {}\n", [("missing", 1)]),
    ("go", "package main\n\nfunc main() {\n\tx := 1 +\n}\n", [("error", 4)]),
    ("c", "int main(void) {\n  int x = 1\n  return x;\n}\n", [("missing", 2)]),
    ("cpp", "class A {\n  int x\n};\n", [("missing", 2)]),
    ("java", "class A {\n  void f() {\n    int x = 1\n  }\n}\n", [("missing", 3)]),
    # The missing `fi` is parked after the final newline; the issue points at the last real token.
    ("bash", "if [ x ]; then\n  echo hi\n", [("missing", 2)]),
    ("bash", "echo $(ls\n", [("missing", 1)]),
    # tree-sitter-html accepts mismatched and unclosed tags (as browsers do); a tag broken inside
    # its own brackets is one of the few things it rejects.
    ("html", "<p>ok</p>\n<div <p>\n", [("error", 2)]),
    ("css", "a { color: red; }\nb { color: ; }\n", [("missing", 2)]),
    ("css", "a { color: red; }}\n", [("error", 1)]),
    ("json", '{"a": 1,}\n', [("error", 1)]),
    ("json", "[1,\n 2\n", [("missing", 2)]),
]

GOOD = {
    "python": (
        "from dataclasses import dataclass\n\n\n@dataclass(frozen=True)\nclass P:\n    x: int = 0\n\n"
        "    def norm(self) -> float:\n        return abs(self.x) ** 0.5\n\n\n"
        "async def main() -> None:\n    async with lock as held:\n        print(*[x async for x in it])\n\n"
        "match P(1):\n    case P(x=1):\n        print(f\"{'one'!r:>5}\")\n"
    ),
    "javascript": (
        "import fs from 'node:fs';\n\nexport async function read(path) {\n"
        "  const text = await fs.promises.readFile(path, 'utf8');\n"
        "  return text.split('\\n').map((l, i) => `${i}: ${l}`);\n}\n"
    ),
    "typescript": (
        "interface User {\n  id: number;\n  name?: string;\n}\n\n"
        "export function greet<T extends User>(u: T): string {\n  return `hi ${u.name ?? u.id}`;\n}\n"
    ),
    "tsx": (
        "type Props = { items: string[] };\n\nexport const List = ({ items }: Props) => (\n"
        "  <ul>\n    {items.map((i) => (\n      <li key={i}>{i}</li>\n    ))}\n  </ul>\n);\n"
    ),
    "rust": (
        "use std::collections::HashMap;\n\nfn count(words: &[&str]) -> HashMap<&str, usize> {\n"
        "    let mut m = HashMap::new();\n    for w in words {\n        *m.entry(*w).or_insert(0) += 1;\n"
        "    }\n    m\n}\n"
    ),
    "go": ('package main\n\nimport "fmt"\n\nfunc main() {\n\tfor i := 0; i < 3; i++ {\n\t\tfmt.Println(i)\n\t}\n}\n'),
    "c": (
        "#include <stdio.h>\n\nstatic int add(int a, int b) { return a + b; }\n\n"
        'int main(void) {\n  printf("%d\\n", add(1, 2));\n  return 0;\n}\n'
    ),
    "cpp": (
        "#include <vector>\n\ntemplate <typename T>\nT sum(const std::vector<T>& v) {\n  T s{};\n"
        "  for (const auto& x : v) s += x;\n  return s;\n}\n"
    ),
    "java": (
        "import java.util.List;\n\npublic class Main {\n  public static void main(String[] args) {\n"
        '    List<String> xs = List.of("a", "b");\n    xs.forEach(System.out::println);\n  }\n}\n'
    ),
    "bash": (
        '#!/usr/bin/env bash\nset -euo pipefail\nfor f in "$@"; do\n'
        '  if [[ -f "$f" ]]; then\n    echo "$(wc -l < "$f") $f"\n  fi\ndone\n'
    ),
    "html": (
        '<!DOCTYPE html>\n<html lang="en">\n<head><meta charset="utf-8"><title>t</title></head>\n'
        '<body>\n  <p class="x">Hello <b>world</b></p>\n</body>\n</html>\n'
    ),
    "css": (
        ":root { --gap: 4px; }\n\n.card > h2:hover {\n  margin: var(--gap) 0;\n  color: #333;\n}\n\n"
        "@media (max-width: 600px) {\n  .card { display: none; }\n}\n"
    ),
    "json": '{\n  "name": "dcode",\n  "tags": ["a", "b"],\n  "n": 1.5e3,\n  "ok": true,\n  "x": null\n}\n',
}


@pytest.mark.parametrize(("language", "source", "expected"), BROKEN)
def test_broken_snippets_report_kind_and_line(language: str, source: str, expected: list) -> None:
    issues = find_issues(source, language)
    assert [(i.kind, i.line) for i in issues] == expected
    size = len(source.encode())
    for issue in issues:
        assert 0 <= issue.start_byte < issue.end_byte <= size
        assert issue.column >= 1 and issue.message


@pytest.mark.parametrize("language", sorted(GOOD))
def test_good_snippets_have_no_issues(language: str) -> None:
    assert find_issues(GOOD[language], language) == []


def test_every_language_has_a_good_snippet() -> None:
    assert sorted(GOOD) == sorted(LANGUAGES)


def test_python_def_without_body_is_reported_by_compile() -> None:
    # tree-sitter-python accepts `def f():` with no body; only compile() rejects it.
    [issue] = find_issues("def f():\n", "python")
    assert (issue.kind, issue.line, issue.column, issue.node_type) == ("error", 1, 9, "IndentationError")
    assert "expected an indented block" in issue.message
    assert (issue.start_byte, issue.end_byte) == (0, 8)


def test_compile_issue_not_added_when_tree_sitter_covers_the_line() -> None:
    [issue] = find_issues("x = (\n", "python")
    assert issue.node_type == "ERROR"


def test_python_null_byte_is_an_issue() -> None:
    [issue] = find_issues("x = 1\n\x00\n", "python")
    assert (issue.kind, issue.line, issue.start_byte, issue.end_byte) == ("error", 2, 6, 7)


# After a UTF-8 BOM, CPython allows one declared encoding: utf-8, as its tokenizer normalises the
# name (the first 12 characters, lowercased, "_" as "-"; "utf-8" or "utf-8-..."). `utf8` is not it.
BOM_BYTES = b"\xef\xbb\xbf"
SPELLINGS = ["utf8", "UTF8", "utf-8", "UTF-8", "utf_8", "utf-8-sig", "UTF_8_whatever_follows", "latin-1", "ascii"]


@pytest.mark.parametrize("spelling", SPELLINGS)
@pytest.mark.parametrize("head", ["# coding: {}\n", "#!/usr/bin/env python\n# -*- coding: {} -*-\n"])
def test_a_declaration_after_a_bom_is_judged_as_python_judges_it(head: str, spelling: str) -> None:
    data = BOM_BYTES + head.format(spelling).encode() + "print('\u6211')\n".encode()
    try:
        compile(data, "x.py", "exec", dont_inherit=True)  # bytes: the interpreter's own source decoding
        expected = None
    except SyntaxError as error:
        expected = error.msg
    found = find_issues(data.decode("utf-8"), "python")
    assert [i.message for i in found] == ([] if expected is None else [expected])
    if found:
        assert (found[0].line, found[0].column) == (head.count("\n"), 1)  # the declaration's line


def test_bad_coding2_is_an_issue() -> None:
    """CPython's Lib/test/tokenizedata/bad_coding2.py, byte for byte."""
    data = BOM_BYTES + b"#coding: utf8\nprint('\xe6\x88\x91')\n"
    [issue] = find_issues(data.decode("utf-8"), "python")
    assert (issue.line, issue.column, issue.message) == (1, 1, "encoding problem: utf8 with BOM")
    assert decode_python(data)[1] == issue


def test_missing_token_is_widened_to_its_statement() -> None:
    source = "let x = (1;\n"
    [issue] = find_issues(source, "javascript")
    assert (issue.kind, issue.node_type, issue.message) == ("missing", ")", "missing ')'")
    assert source.encode()[issue.start_byte : issue.end_byte] == b"let x = (1;"
    assert (issue.line, issue.column) == (1, 11)  # where the ')' belongs


def test_missing_token_without_statement_is_widened_to_its_line() -> None:
    source = "[1,\n 2\n"
    [issue] = find_issues(source, "json")
    assert issue.message == "missing ']'"
    assert issue.end_byte > issue.start_byte


def test_nested_errors_report_only_the_outermost() -> None:
    # tree-sitter-html nests three ERROR nodes here: <div <p>, <p and p.
    [issue] = find_issues("<div <p>\n", "html")
    assert (issue.start_byte, issue.end_byte, issue.message) == (0, 8, "syntax error near '<div <p>'")


def test_multibyte_text_before_an_error_gives_byte_offsets_and_char_columns() -> None:
    source = "s = 'héllo wörld ✓'\nprint('é' +)\n"
    [issue] = find_issues(source, "python")
    assert source.encode()[issue.start_byte : issue.end_byte] == b"+"
    assert (issue.line, issue.column) == (2, 11)

    source = "s = '✓'\ndef f():\n"  # through the compile() path, whose offsets count characters
    [issue] = find_issues(source, "python")
    assert source.encode()[issue.start_byte : issue.end_byte] == b"def f():"
    assert (issue.line, issue.column) == (2, 9)


def test_issues_are_sorted_by_start_byte() -> None:
    issues = find_issues("int main(void) {\n  int x = 1\n  int y = 2\n  return x;\n}\n", "c")
    assert [i.line for i in issues] == [2, 3]
    assert [i.start_byte for i in issues] == sorted(i.start_byte for i in issues)


def test_empty_source_has_no_issues() -> None:
    assert find_issues("", "python") == []
    assert find_issues("", "json") == []


def test_find_issues_accepts_aliases_and_rejects_unknown_names() -> None:
    assert find_issues("let x = (1;\n", "js") == find_issues("let x = (1;\n", "javascript")
    with pytest.raises(UnknownLanguage):
        find_issues("x", "cobol")


def test_issue_is_frozen() -> None:
    [issue] = find_issues("x = (\n", "python")
    with pytest.raises(dataclasses.FrozenInstanceError):
        issue.line = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("path", "language"),
    [
        ("a.py", "python"),
        ("a.pyi", "python"),
        ("src/x.mjs", "javascript"),
        ("x.jsx", "javascript"),
        ("x.cts", "typescript"),
        ("App.tsx", "tsx"),
        ("lib.rs", "rust"),
        ("main.go", "go"),
        ("x.h", "c"),
        ("X.HPP", "cpp"),
        ("a.cc", "cpp"),
        ("Main.java", "java"),
        ("run.sh", "bash"),
        ("index.htm", "html"),
        ("s.css", "css"),
        ("package.json", "json"),
        ("Makefile", None),
        ("notes.txt", None),
    ],
)
def test_detect_by_suffix(path: str, language: str | None) -> None:
    assert detect_language(path, None, None) == language


@pytest.mark.parametrize(
    ("shebang", "language"),
    [
        ("#!/usr/bin/env python3\n", "python"),
        ("#!/usr/bin/python3.12 -u\n", "python"),
        ("#!/usr/bin/env -S pypy3 -O\n", "python"),
        ("#!/bin/bash\n", "bash"),
        ("#!/bin/sh -e\n", "bash"),
        ("#!/usr/bin/env node\n", "javascript"),
        ("#!/usr/bin/env ts-node\n", "typescript"),
        ("#!/usr/bin/env ruby\n", None),
        ("#!\n", None),
        ("print(1)\n", None),
    ],
)
def test_detect_by_shebang(shebang: str, language: str | None) -> None:
    assert detect_language("script", shebang + "body\n", None) == language


@pytest.mark.parametrize(
    ("explicit", "language"),
    [("py", "python"), ("JS", "javascript"), ("ts", "typescript"), ("sh", "bash"), ("c++", "cpp")]
    + [("golang", "go"), (".rs", "rust"), ("tsx", "tsx"), (" json ", "json")],
)
def test_detect_by_explicit_alias(explicit: str, language: str) -> None:
    assert detect_language(None, None, explicit) == language


def test_explicit_wins_over_suffix_and_suffix_over_shebang() -> None:
    assert detect_language("a.py", "#!/bin/bash\n", "rust") == "rust"
    assert detect_language("a.py", "#!/bin/bash\n", None) == "python"


def test_unknown_explicit_language_raises_and_lists_names() -> None:
    with pytest.raises(UnknownLanguage, match="cobol.*python, javascript") as info:
        detect_language("a.py", None, "cobol")
    assert isinstance(info.value, ValueError)


def test_line_span_excludes_the_line_ending() -> None:
    source = "ab\r\nçd\nef"
    assert line_span(source, 0) == (0, 2)
    assert line_span(source, 3) == (0, 2)  # the \n belongs to the line it ends
    assert line_span(source, 5) == (4, 7)  # ç is two bytes
    assert line_span(source, 100) == (8, 10)
    assert line_span("", 0) == (0, 0)


def test_format_issue_is_linter_style() -> None:
    issue = Issue("missing", 0, 11, 1, 11, ")", "missing ')'")
    assert format_issue("src/a.js", issue) == "src/a.js:1:11: missing ')'"


def test_import_does_not_load_torch_or_grammars() -> None:
    code = (
        "import sys, dcode.syntax\n"
        "loaded = {'torch', 'transformers', 'tree_sitter_python', 'tree_sitter_cpp'} & set(sys.modules)\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
