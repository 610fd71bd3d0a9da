"""Regions, diffs and safe in-place writes for `dcode edit`. No torch, no model.

Owns: turning `--lines A-B` or `--symbol NAME` into a byte span of whole lines of the source (the
symbol found with tree-sitter), the unified diff of an edit, and writing in place: the original is
copied to FILE.orig (FILE.orig.1, .2, ... when taken) before the new text replaces it atomically.
Generation is dcode.flows' job; reading files and atomic writes are dcode.files'; this module
knows nothing about tokens, the sampler, argv or the terminal.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dcode.files import atomic_write, target_of, temp_file
from dcode.syntax import language_of, normalize_language

if TYPE_CHECKING:
    from tree_sitter import Node


class RegionError(ValueError):
    """A --lines or --symbol that does not name a part of the file (one-line message)."""


# ---------------------------------------------------------------------------------------------
# Lines


def line_starts(data: bytes) -> list[int]:
    """Byte offset where each line starts; a final line ending starts no new line.
    Example: line_starts(b"a\\nb\\n") -> [0, 2]."""
    starts = [0, *(i + 1 for i, byte in enumerate(data) if byte == 0x0A)]
    if len(starts) > 1 and starts[-1] == len(data):
        starts.pop()
    return starts if data else []


def whole_lines(data: bytes, start: int, end: int) -> tuple[int, int]:
    """The lines holding [start, end), each with its line ending (the last one too, if it has one)."""
    first = data.rfind(b"\n", 0, start) + 1
    newline = data.find(b"\n", max(start, end - 1))
    return first, len(data) if newline < 0 else newline + 1


def lines_of(source: str, span: tuple[int, int]) -> tuple[int, int]:
    """1-based first and last line of a byte span (an empty span: the line it sits on, twice)."""
    data = source.encode()
    first = data.count(b"\n", 0, span[0]) + 1
    return first, max(first, data.count(b"\n", 0, max(span[0], span[1] - 1)) + 1)


_LINES = re.compile(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?")


def parse_lines(spec: str, source: str) -> tuple[int, int]:
    """`--lines A-B` (1-based, inclusive; `A` alone is one line) -> byte span of those whole lines,
    the last line's ending included. Example: parse_lines("2-3", "a\\nb\\nc\\nd\\n") -> (2, 6)."""
    match = _LINES.fullmatch(spec)
    if match is None:
        raise RegionError(f"--lines takes A-B or A (1-based line numbers), got {spec!r}")
    first = int(match[1])
    last = int(match[2]) if match[2] is not None else first
    if first < 1:
        raise RegionError(f"--lines {spec.strip()}: lines are counted from 1")
    if last < first:
        raise RegionError(f"--lines {spec.strip()} ends before it starts")
    data = source.encode()
    starts = line_starts(data)
    if last > len(starts):
        total = f"{len(starts)} line{'' if len(starts) == 1 else 's'}"
        raise RegionError(f"--lines {spec.strip()} is outside the file (it has {total})")
    return starts[first - 1], starts[last] if last < len(starts) else len(data)


# ---------------------------------------------------------------------------------------------
# Symbols: functions, methods and classes, found with tree-sitter

# language -> node types that define a symbol. Names come from the node's `name` field unless
# _NAMERS says otherwise; a symbol's children are named inside it ("Class.method").
_KINDS: dict[str, frozenset[str]] = {
    "python": frozenset({"function_definition", "class_definition"}),
    "javascript": frozenset(
        {
            "function_declaration",
            "generator_function_declaration",
            "method_definition",
            "class_declaration",
            "variable_declarator",  # const f = () => ... (only when the value is a function)
        }
    ),
    "rust": frozenset(
        {"function_item", "function_signature_item", "impl_item", "struct_item", "enum_item", "trait_item", "mod_item"}
    ),
    "go": frozenset({"function_declaration", "method_declaration", "type_spec"}),
    "c": frozenset({"function_definition", "struct_specifier"}),
    "cpp": frozenset({"function_definition", "class_specifier", "struct_specifier", "namespace_definition"}),
    "java": frozenset(
        {
            "method_declaration",
            "constructor_declaration",
            "class_declaration",
            "interface_declaration",
            "enum_declaration",
            "record_declaration",
        }
    ),
    "bash": frozenset({"function_definition"}),
}
_KINDS["typescript"] = _KINDS["tsx"] = _KINDS["javascript"] | {
    "abstract_class_declaration",
    "interface_declaration",
    "enum_declaration",
}

# Parents whose text belongs to the symbol they wrap: Python decorators, C++ templates.
_WRAPPERS = frozenset({"decorated_definition", "template_declaration"})
_FUNCTION_VALUES = frozenset({"arrow_function", "function_expression", "function", "generator_function"})


@dataclass(frozen=True)
class Symbol:
    name: str  # dotted: "Class.method", "Stack.Push" (Go receiver), "impl Foo" (a Rust impl block)
    start_byte: int  # whole lines of the definition (decorators, attributes, template <...> included)
    end_byte: int
    line: int  # 1-based line where the definition starts


def _text(node: Node | None) -> str:
    return node.text.decode(errors="replace") if node is not None and node.text is not None else ""


def _c_name(node: Node) -> str | None:
    """Name of a C/C++ function_definition: down the declarator chain to the function_declarator."""
    declarator = node.child_by_field_name("declarator")
    while declarator is not None and declarator.type != "function_declarator":
        inner = declarator.child_by_field_name("declarator")
        if inner is None:  # reference_declarator names no field
            inner = next((c for c in declarator.named_children if c.type.endswith("declarator")), None)
        declarator = inner
    if declarator is None:
        return None
    return _text(declarator.child_by_field_name("declarator")).replace("::", ".") or None


def _go_method_name(node: Node) -> str | None:
    receiver = _text(node.child_by_field_name("receiver"))
    types = re.findall(r"[A-Za-z_]\w*", receiver.split("[", 1)[0])  # (s *Stack[T]) -> s, Stack
    name = _text(node.child_by_field_name("name"))
    return f"{types[-1]}.{name}" if types and name else name or None


def _rust_impl_name(node: Node) -> str | None:
    kind = _text(node.child_by_field_name("type"))
    trait = _text(node.child_by_field_name("trait"))
    return f"impl {trait} for {kind}" if trait else f"impl {kind}" if kind else None


_NAMERS: dict[str, Callable[[Node], str | None]] = {
    "function_definition@c": _c_name,
    "function_definition@cpp": _c_name,
    "method_declaration@go": _go_method_name,
    "impl_item@rust": _rust_impl_name,
}


def _scope_of(node: Node, name: str) -> str:
    """The prefix a symbol gives the symbols inside it: an impl block lends its type's name."""
    if node.type == "impl_item":
        return re.split(r"[<\s]", _text(node.child_by_field_name("type")), maxsplit=1)[0]
    return name


def _name(node: Node, language: str) -> str | None:
    namer = _NAMERS.get(f"{node.type}@{language}")
    if namer is not None:
        return namer(node)
    if node.type == "variable_declarator":
        value = node.child_by_field_name("value")
        if value is None or value.type not in _FUNCTION_VALUES:
            return None
    if node.type.endswith(("struct_specifier", "class_specifier")) and node.child_by_field_name("body") is None:
        return None  # `struct S *p`: a use of the type, not its definition
    return _text(node.child_by_field_name("name")) or None


def _extent(node: Node) -> Node:
    """The node whose text is the symbol's: itself, or a wrapper (decorators, template <...>,
    `const f = ...;`) that holds nothing else."""
    parent = node.parent
    if parent is not None and parent.type in _WRAPPERS:
        return parent
    lone = ("type_declaration", "lexical_declaration", "variable_declaration")
    if parent is not None and parent.type in lone and len(parent.named_children) == 1:
        return parent  # `type T struct{}`, `const f = () => 1;`
    return node


def _span(data: bytes, node: Node) -> tuple[int, int]:
    """Whole lines of node, extended up over a Rust symbol's #[attributes]."""
    outer = _extent(node)
    start = outer.start_byte
    sibling = outer.prev_named_sibling
    while sibling is not None and sibling.type == "attribute_item":
        start = sibling.start_byte
        sibling = sibling.prev_named_sibling
    return whole_lines(data, start, outer.end_byte)


def find_symbols(source: str, language: str) -> list[Symbol]:
    """Every function, method and class of source, in text order, with dotted names."""
    name = normalize_language(language)
    kinds = _KINDS.get(name)
    if kinds is None:
        raise RegionError(f"--symbol is not supported for {name} files (use --lines)")
    from tree_sitter import Parser

    data = source.encode()
    found: list[Symbol] = []
    stack: list[tuple[Node, str]] = [(Parser(language_of(name)).parse(data).root_node, "")]
    while stack:
        node, scope = stack.pop()
        inner = scope
        if node.type in kinds and (own := _name(node, name)) is not None:
            qualified = f"{scope}.{own}" if scope else own
            start, end = _span(data, node)
            found.append(Symbol(qualified, start, end, data.count(b"\n", 0, start) + 1))
            inner = f"{scope}.{_scope_of(node, own)}" if scope else _scope_of(node, own)
        stack.extend((child, inner) for child in reversed(node.named_children))
    return found


def symbols(source: str, language: str) -> list[str]:
    """Dotted names of source's functions, methods and classes, in text order, each once."""
    return list(dict.fromkeys(s.name for s in find_symbols(source, language)))


def _listing(names: list[str], most: int = 20) -> str:
    shown = ", ".join(names[:most])
    return shown + (f", ... ({len(names) - most} more)" if len(names) > most else "")


def find_symbol(source: str, language: str, name: str, where: str = "the file") -> tuple[int, int]:
    """Byte span of the whole lines defining symbol `name`: a dotted name ("Class.method",
    "Stack.Push"; "::" works too) or its last parts ("method"), which must then be unique."""
    wanted = name.strip().replace("::", ".")
    found = find_symbols(source, language)
    hits = [s for s in found if s.name == wanted] or [s for s in found if s.name.endswith(f".{wanted}")]
    if len(hits) == 1:
        return hits[0].start_byte, hits[0].end_byte
    if hits:
        listed = ", ".join(f"{s.name} (line {s.line})" for s in hits[:10])
        raise RegionError(f"--symbol {name!r} is ambiguous in {where}: {listed}; use a dotted name or --lines")
    if not found:
        raise RegionError(f"no symbol {name!r} in {where}; it defines no functions or classes")
    raise RegionError(f"no symbol {name!r} in {where}; symbols: {_listing(symbols(source, language))}")


def select(
    source: str, language: str, lines: str | None = None, symbol: str | None = None, where: str = "the file"
) -> tuple[int, int]:
    """The region an edit rewrites: --lines, --symbol, or the whole file (after a BOM)."""
    if lines is not None and symbol is not None:
        raise RegionError("--lines and --symbol cannot be used together")
    if lines is not None:
        start, end = parse_lines(lines, source)
    elif symbol is not None:
        start, end = find_symbol(source, language, symbol, where)
    else:
        start, end = 0, len(source.encode())
    bom = len("\ufeff".encode()) if source.startswith("\ufeff") else 0
    return max(start, min(bom, end)), end  # a byte order mark is kept as it is, never regenerated


def describe(source: str, span: tuple[int, int]) -> str:
    """'line 4' or 'lines 4-9' for a region's byte span."""
    first, last = lines_of(source, span)
    return f"line {first}" if first == last else f"lines {first}-{last}"


# ---------------------------------------------------------------------------------------------
# Diffs and writes


def unified_diff(old: str, new: str, path: str | Path) -> str:
    """`diff -u` of old -> new with a/ b/ labels; "" when they are equal. A last line without a
    line ending is marked as git does, so the diff applies with `patch` / `git apply`."""
    out = []
    for line in difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{path}", f"b/{path}"
    ):
        out.append(line if line.endswith("\n") else f"{line}\n\\ No newline at end of file\n")
    return "".join(out)


def backup_path(path: Path) -> Path:
    """FILE.orig next to path; FILE.orig.1, FILE.orig.2, ... when that is taken."""
    first = path.with_name(f"{path.name}.orig")
    candidate, number = first, 0
    while os.path.lexists(candidate):
        number += 1
        candidate = first.with_name(f"{first.name}.{number}")
    return candidate


def write_backup(path: Path) -> Path:
    """Copy path (content, mode, times) to backup_path(path) without ever leaving half a copy:
    the copy is made under a temporary name and linked into place, never over an existing file."""
    temp = temp_file(path)
    try:
        shutil.copy2(path, temp)
        while True:
            backup = backup_path(path)
            try:
                os.link(temp, backup)  # fails if the name was taken meanwhile: no clobbering
                return backup
            except FileExistsError:
                continue
            except OSError:  # a filesystem without hard links
                os.replace(temp, backup)
                return backup
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)


def write_in_place(path: Path, text: str) -> Path:
    """Back path up, then replace it with text atomically (keeping its mode); returns the backup.
    A symlink is written through. If the write fails or is interrupted, the original stays and
    the backup, now redundant, is removed."""
    target = target_of(path)
    original = target.read_bytes()
    backup = write_backup(path)
    try:
        atomic_write(target, text)
    except BaseException:
        with contextlib.suppress(OSError):
            if target.read_bytes() == original:
                backup.unlink()
        raise
    return backup
