"""Languages, tree-sitter parsing and find_issues(): source text in, byte-spanned issues out.

Owns the language table (names, file suffixes, aliases, shebangs), lazy loading of the per-language
grammar wheels, and the walk that turns ERROR / MISSING nodes (plus compile() for Python) into
`Issue` records. Knows nothing about tokens, models, the sampler, files on disk or the terminal;
imports nothing of dcode and never torch, so `dcode check` starts fast.
"""

from __future__ import annotations

import importlib
import os
import re
import warnings
from dataclasses import dataclass, replace
from functools import cache
from typing import TYPE_CHECKING, Literal, get_args

if TYPE_CHECKING:
    from tree_sitter import Language, Node

LanguageName = Literal[
    "python",
    "javascript",
    "typescript",
    "tsx",
    "rust",
    "go",
    "c",
    "cpp",
    "java",
    "bash",
    "html",
    "css",
    "json",
]
IssueKind = Literal["error", "missing"]

LANGUAGES: tuple[str, ...] = get_args(LanguageName)

# name -> (grammar module, function returning the language pointer); imported on first use only.
_GRAMMARS: dict[str, tuple[str, str]] = {
    **{name: (f"tree_sitter_{name}", "language") for name in LANGUAGES},
    "typescript": ("tree_sitter_typescript", "language_typescript"),
    "tsx": ("tree_sitter_typescript", "language_tsx"),
}

SUFFIXES: dict[str, str] = {
    **dict.fromkeys([".py", ".pyi"], "python"),
    **dict.fromkeys([".js", ".mjs", ".cjs", ".jsx"], "javascript"),
    **dict.fromkeys([".ts", ".mts", ".cts"], "typescript"),
    ".tsx": "tsx",
    ".rs": "rust",
    ".go": "go",
    # .h is shared by C and C++; C is the conventional reading and C++ parsers accept most of it.
    **dict.fromkeys([".c", ".h"], "c"),
    **dict.fromkeys([".cc", ".cpp", ".cxx", ".hpp", ".hh"], "cpp"),
    ".java": "java",
    **dict.fromkeys([".sh", ".bash"], "bash"),
    **dict.fromkeys([".html", ".htm"], "html"),
    ".css": "css",
    ".json": "json",
}

# What `--lang` accepts: every name, every suffix without its dot (rs, cc, htm...), a few habits.
ALIASES: dict[str, str] = {
    **{suffix[1:]: name for suffix, name in SUFFIXES.items()},
    **{name: name for name in LANGUAGES},
    **dict.fromkeys(["python3", "py3"], "python"),
    **dict.fromkeys(["node", "nodejs"], "javascript"),
    "golang": "go",
    "c++": "cpp",
    **dict.fromkeys(["shell", "zsh"], "bash"),
}

# Shebang interpreter (version digits stripped: python3.12 -> python) -> language.
_INTERPRETERS: dict[str, str] = {
    **dict.fromkeys(["python", "pypy"], "python"),
    **dict.fromkeys(["node", "nodejs"], "javascript"),
    "ts-node": "typescript",
    **dict.fromkeys(["sh", "bash", "dash"], "bash"),
}

# Node types that read as "a statement" in the bundled grammars: where a MISSING token is widened to.
STATEMENT_TYPES = re.compile(r"(statement|declaration|definition|_item|element|rule_set|pair|command)$")
# Node types that hold a body of statements: the third repair round re-masks the enclosing one.
BLOCK_TYPES = re.compile(r"(block|body|compound_statement|declaration_list|do_group|switch_body)$")


class UnknownLanguage(ValueError):
    """An explicit language name that is neither a supported name nor an alias."""


@dataclass(frozen=True)
class Issue:
    kind: IssueKind  # "error": text the grammar could not place; "missing": a token it had to invent
    start_byte: int  # half-open span [start_byte, end_byte) in source.encode(); never empty
    end_byte: int
    line: int  # 1-based position of the problem (for "missing": just after the last real token)
    column: int  # 1-based, counted in characters, not bytes
    node_type: str  # "ERROR", the missing node's type (")", "identifier"), or the Python exception name
    message: str  # short and human: "syntax error near 'foo'", "missing ')'", compile()'s message


def normalize_language(name: str) -> str:
    """Map a language name or alias to its canonical name, or raise UnknownLanguage."""
    key = name.strip().lower().lstrip(".")
    if key not in ALIASES:
        raise UnknownLanguage(f"unknown language {name!r}; supported: {', '.join(LANGUAGES)}")
    return ALIASES[key]


def detect_language(path: str | None, source: str | None, explicit: str | None) -> str | None:
    """Pick the language: explicit name first, then the file suffix, then a shebang; None if unknown."""
    if explicit:
        return normalize_language(explicit)
    if path:
        suffix = os.path.splitext(path)[1].lower()
        if suffix in SUFFIXES:
            return SUFFIXES[suffix]
    if source and source.startswith("#!"):
        return _shebang_language(source.split("\n", 1)[0][2:])
    return None


def _shebang_language(command: str) -> str | None:
    """Language of a shebang command line such as '/usr/bin/env -S python3 -u'."""
    words = command.split()
    if words and os.path.basename(words[0]) == "env":
        # env takes options (-S, -i) and NAME=value assignments before the program.
        words = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
    if not words:
        return None
    program = re.sub(r"[\d.]+$", "", os.path.basename(words[0]))
    return _INTERPRETERS.get(program)


@cache
def language_of(name: str) -> Language:
    """The tree-sitter Language for a canonical name, importing its grammar wheel on first use."""
    from tree_sitter import Language

    module, function = _GRAMMARS[name]
    return Language(getattr(importlib.import_module(module), function)())


def line_span(source: str | bytes, byte_index: int) -> tuple[int, int]:
    """Byte span [start, end) of the line holding byte_index, without its line ending."""
    data = source.encode() if isinstance(source, str) else source
    i = min(max(byte_index, 0), len(data))
    start = data.rfind(b"\n", 0, i) + 1
    end = data.find(b"\n", i)
    end = len(data) if end < 0 else end
    if end > start and data[end - 1 : end] == b"\r":
        end -= 1
    return start, end


def format_issue(path: str, issue: Issue) -> str:
    """Linter-style one-liner: 'path:line:col: message'."""
    return f"{path}:{issue.line}:{issue.column}: {issue.message}"


BOM = "\ufeff"  # a UTF-8 byte order mark: valid at the start of a file, 3 bytes, never checked as code


def _shifted(issue: Issue, by: int) -> Issue:
    """issue with its byte span moved `by` bytes on (its line and column stay: a BOM is no column)."""
    return replace(issue, start_byte=issue.start_byte + by, end_byte=issue.end_byte + by)


def find_issues(source: str, language: str) -> list[Issue]:
    """Syntax issues of source in language (tree-sitter, plus compile() and Python's own source
    decoding rules for Python), by start_byte. A leading BOM is valid, as Python and browsers have it."""
    name = normalize_language(language)
    data = source.encode()
    if name == "python" and (declared := encoding_issue(data)) is not None:
        return [declared]  # checked before a BOM goes: after one, only a utf-8 declaration is valid
    if source.startswith(BOM):
        return [_shifted(i, len(BOM.encode())) for i in find_issues(source[1:], name)]
    if not source:
        return []
    from tree_sitter import Parser

    tree = Parser(language_of(name)).parse(data)
    issues = _tree_issues(data, tree.root_node)
    if name == "python":
        extra = compile_issue(source, data)
        if extra is not None and not any(_overlaps(i, line_span(data, extra.start_byte)) for i in issues):
            issues.append(extra)
    # Several MISSING tokens in one statement widen to the same record; keep one.
    return sorted(dict.fromkeys(issues), key=lambda i: (i.start_byte, i.end_byte))


def _tree_issues(data: bytes, root: Node) -> list[Issue]:
    """Outermost ERROR nodes and MISSING tokens under root, depth first."""
    issues: list[Issue] = []
    stack = [root] if root.has_error else []
    while stack:
        node = stack.pop()
        if node.is_error:
            # Report the outermost ERROR only: the ones nested inside repeat the same region.
            text = data[node.start_byte : node.end_byte].decode(errors="replace").strip()
            near = text.split("\n", 1)[0].strip()
            near = near if len(near) <= 24 else near[:21] + "..."
            message = f"syntax error near {near!r}" if near else "syntax error"
            issues.append(_issue(data, "error", node.start_byte, node.end_byte, node.start_byte, "ERROR", message))
            continue
        children = [c for c in node.children if c.has_error or c.is_missing]
        if node.is_missing or not children:
            # A MISSING leaf, or a node whose missing token is a hidden child the API does not expose
            # (CSS `color: ;` -> integer_value with a hidden MISSING integer_value_token1).
            issues.append(_missing_issue(data, node))
        stack.extend(reversed(children))
    return issues


def _missing_issue(data: bytes, node: Node) -> Issue:
    """A MISSING token has no width: widen it to the enclosing statement, else its line."""
    # Point at the end of the last real token: the parser may park the token after trailing
    # whitespace, e.g. bash's missing `fi` sits at end of file, after the final newline.
    point = node.end_byte
    while point > 0 and data[point - 1 : point].isspace():
        point -= 1
    start, end = (node.start_byte, node.end_byte) if node.end_byte > node.start_byte else (point, point)
    parent = node.parent
    while parent is not None and parent.parent is not None:  # stop below the root: it is the file
        if STATEMENT_TYPES.search(parent.type) and parent.end_byte > parent.start_byte:
            start, end = parent.start_byte, parent.end_byte
            break
        parent = parent.parent
    label = f"'{node.type}'" if not node.is_named else node.type
    message = f"missing {label}" if node.end_byte == node.start_byte else f"incomplete {node.type}"
    return _issue(data, "missing", start, end, point, node.type, message)


def compile_issue(source: str, data: bytes | None = None) -> Issue | None:
    """What compile() rejects that tree-sitter-python's more lenient grammar may accept. Its line
    is often more precise than tree-sitter's ERROR node, which can span a whole function."""
    data = source.encode() if data is None else data
    if source.startswith(BOM):
        found = compile_issue(source[1:], data[len(BOM.encode()) :])
        return None if found is None else _shifted(found, len(BOM.encode()))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SyntaxWarnings (e.g. invalid escapes) are not our report
            compile(source, "<dcode>", "exec", dont_inherit=True)
    except SyntaxError as exc:
        if exc.lineno is None:  # e.g. "source code string cannot contain null bytes" (3.11)
            return _null_byte_issue(data, type(exc).__name__, str(exc.msg))
        first = line_start(data, exc.lineno)
        line_end = line_span(data, first)[1]
        text = data[first:line_end].decode(errors="replace")
        # offset counts characters from 1; it may be None, -1 or just past the line.
        point = first + len(text[: max((exc.offset or 1) - 1, 0)].encode())
        end = line_span(data, line_start(data, max(exc.end_lineno or exc.lineno, exc.lineno)))[1]
        return _issue(data, "error", first, end, point, type(exc).__name__, str(exc.msg))
    except ValueError as exc:  # null bytes on some Python versions
        return _null_byte_issue(data, type(exc).__name__, str(exc))
    except (RecursionError, MemoryError):
        return None  # too deeply nested for this interpreter: not a syntax verdict
    return None


# PEP 263: a coding declaration is a comment on line 1 or 2 matching this
_COOKIE = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")


def decode_python(data: bytes) -> tuple[str, Issue | None]:
    """Python source bytes as the interpreter decodes them (PEP 3120 / 263: a BOM, else a coding
    declaration on line 1 or 2, else UTF-8): the text, or "" and the SyntaxError Python would raise
    (line and column of the declaration or of the first byte that does not decode)."""
    import io
    import tokenize

    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError:
        encoding = None
    declared = _declaration(data)
    if encoding is None and declared is not None:  # an unknown or mismatched declaration
        return "", _issue(data, "error", *line_span(data, declared[0]), declared[0], "SyntaxError", declared[1])
    try:
        return data.decode(encoding or "utf-8"), None
    except (UnicodeDecodeError, LookupError) as error:
        at = getattr(error, "start", 0)
        line = data.count(b"\n", 0, at) + 1
        if declared is not None:
            message = declared[1]
        else:
            byte = data[at] if at < len(data) else 0
            message = f"Non-UTF-8 code starting with '\\x{byte:02x}' on line {line}, but no encoding declared (PEP 263)"
        return "", _issue(data, "error", *line_span(data, at), at, "SyntaxError", message)


def _declaration(data: bytes) -> tuple[int, str] | None:
    """(byte offset, 'encoding problem: NAME') of a PEP 263 declaration on line 1 or 2, if any.
    After a BOM, CPython allows only utf-8 (as normal_encoding() names it): any other declaration
    is 'encoding problem: NAME with BOM' (Parser/tokenizer/helpers.c, check_coding_spec)."""
    bom = data.startswith(BOM.encode())
    lines = data[len(BOM.encode()) if bom else 0 :].split(b"\n", 2)[:2]
    at = 0  # line 1 starts at 0, its BOM included
    for number, line in enumerate(lines):
        if number == 1 and not re.match(rb"^[ \t\f]*(#|\r?$)", lines[0]):
            break  # a declaration on line 2 counts only after a blank or comment line
        match = _COOKIE.match(line)
        if match is not None:
            name = match[1].decode("ascii", "replace")
            if bom and normal_encoding(name) != "utf-8":
                return at, f"encoding problem: {normal_encoding(name)} with BOM"
            return at, f"encoding problem: {name}"
        at += len(line) + 1 + (len(BOM.encode()) if bom and number == 0 else 0)
    return None


def normal_encoding(name: str) -> str:
    """A declared encoding as CPython's tokenizer names it (get_normal_name): its first 12
    characters lowercased, "_" as "-"; "utf-8" and "utf-8-*" are "utf-8", the latin-1 spellings
    "iso-8859-1", anything else as written (so "utf8" stays "utf8").
    Example: normal_encoding("UTF_8") -> "utf-8"; normal_encoding("Latin-1") -> "iso-8859-1"."""
    short = name[:12].lower().replace("_", "-")
    if short == "utf-8" or short.startswith("utf-8-"):
        return "utf-8"
    latin = ("latin-1", "iso-8859-1", "iso-latin-1")
    if short in latin or short.startswith(tuple(f"{n}-" for n in latin)):
        return "iso-8859-1"
    return name


def encoding_issue(data: bytes) -> Issue | None:
    """The SyntaxError Python raises for these bytes before it parses them (a declared encoding it
    does not know or the text does not match, or non-UTF-8 text with no declaration), else None."""
    if _declaration(data) is None and data.isascii():
        return None
    return decode_python(data)[1]


def _null_byte_issue(data: bytes, node_type: str, message: str) -> Issue:
    """An issue on the first NUL byte (or line 1 if compile() complained without one)."""
    at = data.find(b"\0")
    start, end = (at, at + 1) if at >= 0 else line_span(data, 0)
    return _issue(data, "error", start, end, start, node_type, message)


def line_start(data: bytes, lineno: int) -> int:
    """Byte offset where 1-based line lineno starts (clamped to the last line)."""
    start = 0
    for _ in range(lineno - 1):
        nl = data.find(b"\n", start)
        if nl < 0:
            break
        start = nl + 1
    return start


def _issue(data: bytes, kind: IssueKind, start: int, end: int, point: int, node_type: str, msg: str) -> Issue:
    """Build an Issue with a non-empty span and the 1-based line/column of point inside it."""
    if end <= start:
        start, end = line_span(data, start)
    if end <= start:  # a blank line: fall back to the line of the last text before it
        back = len(data[:start].rstrip())
        start, end = line_span(data, back - 1) if back else (0, len(data))
    point = min(max(point, start), end)
    line_start = data.rfind(b"\n", 0, point) + 1
    line = data.count(b"\n", 0, point) + 1
    column = len(data[line_start:point].decode(errors="replace")) + 1
    return Issue(kind, start, end, line, column, node_type, msg)


def _overlaps(issue: Issue, span: tuple[int, int]) -> bool:
    """Whether the issue's span touches the (inclusive-ended) byte span."""
    return issue.start_byte <= span[1] and issue.end_byte >= span[0]


def is_real_code(code: str) -> bool:
    """Python that is worth calling code: at least two non-blank lines that compile() accepts (an
    empty output compiles but is no answer). The benchmarks' "real code" and the filter on the
    model's own answers in self-distillation (dcode.train.distill).
    Example: is_real_code("x = 1\ny = 2\n") -> True; is_real_code("x = 1\n") -> False."""
    if sum(1 for line in code.splitlines() if line.strip()) < 2:
        return False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(code, "<real code>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return False
    return True
