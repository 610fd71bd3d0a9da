"""Training corpus for dcode-tiny: offline Python code split into prompt -> code units.

Owns: finding source files (the standard library and permissively licensed installed packages),
the train / validation / held-out split, de-duplication, and cutting files into units (a module,
class or function with a prompt taken from its docstring, leading comment or name).
Knows nothing about tokenizers or models.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.metadata as metadata
import re
import sysconfig
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

Split = Literal["train", "valid", "heldout"]

# Licences whose code we may learn from and ship weights of, matched as whole words in the licence
# text and classifiers ("MIT" must not match inside "LIMITED").
PERMISSIVE = re.compile(r"\b(MIT|BSD|Apache|PSF|Python Software Foundation|ISC|0BSD|Zlib)\b")
# Licences that exclude a distribution even when a permissive one is also named.
COPYLEFT = re.compile(r"\b[AL]?GPL|General Public License|\bMPL|Mozilla|\bEPL|Eclipse Public|\bCDDL")
# Path components that mark test code: always held out, never trained on.
TEST_DIRS = frozenset({"test", "tests"})
# Share of the remaining files kept for validation, chosen by a stable hash of the path.
VALID_PERCENT = 2
# Files larger than this are generated tables or vendored blobs, not code worth learning.
MAX_FILE_BYTES = 400_000


@dataclass(frozen=True)
class Source:
    path: Path
    package: str  # "stdlib" or the distribution name
    license: str
    split: Split


@dataclass(frozen=True)
class Unit:
    prompt: str
    code: str
    kind: Literal["module", "class", "function"]
    origin: str  # "path:line"


def split_of(relative: str) -> Split:
    """Held out if under a test folder, else valid for a fixed 2% of paths, else train."""
    parts = set(Path(relative).parts[:-1])
    if parts & TEST_DIRS:
        return "heldout"
    bucket = int(hashlib.sha1(relative.encode()).hexdigest(), 16) % 100
    return "valid" if bucket < VALID_PERCENT else "train"


def license_of(dist: metadata.Distribution) -> str | None:
    """The distribution's licence if it is permissive, else None."""
    meta: Any = dist.metadata  # an email.message.Message at run time
    text = " ".join(
        [meta.get("License-Expression") or "", (meta.get("License") or "")[:200]]
        + [c for c in meta.get_all("Classifier") or [] if c.startswith("License")]
    )
    if COPYLEFT.search(text) or not PERMISSIVE.search(text):
        return None
    expression = meta.get("License-Expression") or (meta.get("License") or "").split("\n")[0]
    return expression.strip()[:60] or "permissive (classifier)"


def find_sources(include_packages: bool = True) -> Iterator[Source]:
    """Yield the standard library's .py files, then those of permissively licensed packages."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for path in sorted(stdlib.rglob("*.py")):
        relative = path.relative_to(stdlib)
        if relative.parts[0] in ("site-packages", "dist-packages") or relative.parts[0].startswith("idlelib"):
            continue
        yield Source(path, "stdlib", "PSF-2.0", split_of(f"stdlib/{relative}"))
    if not include_packages:
        return
    for dist in sorted(metadata.distributions(), key=lambda d: d.metadata["Name"] or ""):
        licence = license_of(dist)
        name = dist.metadata["Name"] or "?"
        if licence is None or name.lower() == "dcode":
            continue
        for file in sorted(dist.files or [], key=str):
            if file.suffix != ".py":
                continue
            path = Path(str(dist.locate_file(file)))
            if path.is_file():
                yield Source(path, name, licence, split_of(f"{name}/{file}"))


def normalized_hash(code: str) -> str:
    """Hash that ignores trailing whitespace, so copies vendored twice count once."""
    lines = [line.rstrip() for line in code.strip().splitlines()]
    return hashlib.sha1("\n".join(lines).encode()).hexdigest()


def words_of(name: str) -> str:
    """Split snake_case and CamelCase names into words. Example: parseHTTPDate_v2 -> parse http date v2."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name.strip("_"))
    spaced = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1 \2", spaced)
    return " ".join(w.lower() for w in re.split(r"[_\s]+", spaced) if w)


def summary_of(docstring: str | None) -> str | None:
    """First paragraph of a docstring, one line, at most 200 characters."""
    if not docstring:
        return None
    paragraph = docstring.strip().split("\n\n")[0]
    line = " ".join(paragraph.split())
    if len(line) < 8 or len(line) > 200:
        return None
    return line


def leading_comment(lines: list[str], lineno: int) -> str | None:
    """The block of '#' comment lines right above line `lineno` (1-based), joined."""
    comments: list[str] = []
    index = lineno - 2
    while index >= 0 and lines[index].strip().startswith("#"):
        comments.insert(0, lines[index].strip().lstrip("#").strip())
        index -= 1
    text = " ".join(c for c in comments if c)
    return text if 8 <= len(text) <= 200 else None


# First words of a docstring summary that are not an imperative verb ("The ...", "Helper for ..."),
# so "a function that <verb>s ..." cannot be made from it.
# fmt: off
NOT_VERBS = frozenset({
    "a", "an", "the", "this", "that", "these", "those", "it", "its", "is", "are", "was", "if", "for", "in",
    "on", "of", "with", "when", "while", "as", "at", "by", "to", "all", "each", "any", "some", "one", "two",
    "no", "not", "only", "also", "just", "here", "there", "given", "used", "called", "raised", "same", "like",
    "see", "note", "helper", "internal", "private", "public", "base", "abstract", "mixin", "simple", "generic",
    "default", "deprecated", "alias", "shortcut", "wrapper", "decorator", "class", "function", "method",
    "module", "utility", "convenience", "hook", "callback", "backport", "legacy", "compatibility", "python",
    "pure", "low", "high", "fast", "lazy", "new", "old", "main", "entry", "dummy", "fake", "mock", "custom",
    "special", "common", "standard", "basic", "minimal", "either", "neither", "whether", "script", "enum",
    "context",
})
# fmt: on
# Endings of nouns, adjectives and participles rather than imperative verbs.
NOT_VERB_ENDINGS = ("ing", "ion", "ions", "ed", "ly", "al", "ous", "ic", "ity", "ness", "ment", "or", "ers", "ive")
IRREGULAR = {"be": "is", "have": "has", "do": "does", "go": "goes"}


def third_person(verb: str) -> str:
    """The form after "a function that". Examples: return -> returns, match -> matches,
    copy -> copies, returns -> returns."""
    if verb in IRREGULAR:
        return IRREGULAR[verb]
    if verb.endswith("s") and not verb.endswith(("ss", "us", "is")):
        return verb  # already "Returns ..."
    if verb.endswith(("s", "sh", "ch", "x", "z", "o")):
        return verb + "es"
    if verb.endswith("y") and len(verb) > 1 and verb[-2] not in "aeiou":
        return verb[:-1] + "ies"
    return verb + "s"


def as_request(noun: str, summary: str) -> str | None:
    """A docstring summary phrased the way users ask: "Return the sum." -> "a function that returns
    the sum"; a class's "A cache of ..." -> "a class representing a cache of ...". None when the
    summary starts with neither a verb (for a class, one already ending in -s) nor, for a class, an article."""
    first, _, rest = summary.rstrip(".").partition(" ")
    word = first.lower()
    if noun == "a class" and word in ("a", "an", "the"):
        return f"a class representing {word} {rest}".rstrip()
    if not re.fullmatch(r"[A-Z][a-z]+", first) or word in NOT_VERBS or word.endswith(NOT_VERB_ENDINGS):
        return None
    if noun == "a class" and third_person(word) != word:
        return None  # a class's docstring starting "Enum where ..." is a noun; "Represents ..." is a verb
    return f"{noun} that {third_person(word)} {rest}".rstrip()


def prompt_for(kind: str, name: str, docstring: str | None, comment: str | None, salt: str, noun: str = "") -> str:
    """A request in the style users type: the docstring summary as written, phrased as a request
    ("a function that returns ..."), or kind + name words. `noun` is what the unit is ("a function",
    "a generator", "a context manager", "a class"; default from kind)."""
    described = summary_of(docstring) or comment
    noun = noun or ("a class" if kind == "class" else "a function")
    named = f"{'class' if kind == 'class' else 'a function'} {words_of(name)}"
    if described is None:
        return named
    # A stable draw: a quarter of the documented units learn the name-based phrasing as well, half
    # the request phrasing where the summary allows it (users write "a function that ...", while
    # docstrings say "Return ..."), the rest the summary as written.
    draw = int(hashlib.sha1(salt.encode()).hexdigest(), 16) % 4
    if draw == 0:
        return f"{named}: {described}"
    if draw in (1, 2):
        return as_request(noun, described) or described
    return described


def noun_of(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> str:
    """What a user would call the unit: a class, a context manager, a generator, or a function."""
    if isinstance(node, ast.ClassDef):
        return "a class"
    decorators = {ast.unparse(d).rsplit(".", 1)[-1] for d in node.decorator_list}
    if decorators & {"contextmanager", "asynccontextmanager"}:
        return "a context manager"
    own = [n for n in ast.walk(node) if isinstance(n, ast.Yield | ast.YieldFrom)]
    nested = [
        n
        for inner in ast.walk(node)
        if inner is not node and isinstance(inner, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        for n in ast.walk(inner)
        if isinstance(n, ast.Yield | ast.YieldFrom)
    ]
    if len(own) > len(nested):
        return "a generator"
    return "an async function" if isinstance(node, ast.AsyncFunctionDef) else "a function"


def units_of(source: str, origin: str) -> Iterator[Unit]:
    """Cut one Python file into units: the module, then every class and function in it."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return
    lines = source.splitlines()
    module_doc = summary_of(ast.get_docstring(tree))
    if module_doc:
        yield Unit(module_doc, source.strip() + "\n", "module", f"{origin}:1")
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        first = min([node.lineno] + [d.lineno for d in node.decorator_list])
        segment = "\n".join(lines[first - 1 : node.end_lineno])
        code = textwrap.dedent(segment).strip() + "\n"
        kind: Literal["class", "function"] = "class" if isinstance(node, ast.ClassDef) else "function"
        comment = leading_comment(lines, first)
        prompt = prompt_for(kind, node.name, ast.get_docstring(node), comment, f"{origin}:{first}", noun_of(node))
        yield Unit(prompt, code, kind, f"{origin}:{first}")


def read_source(path: Path) -> str | None:
    """The file's text, or None if it is too large, binary or not UTF-8."""
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            return None
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def iter_units(split: Split, include_packages: bool = True, seen: set[str] | None = None) -> Iterator[Unit]:
    """De-duplicated units of every source file in `split`. Pass the same `seen` set to later
    splits so a unit already yielded (e.g. a vendored copy in train) is not yielded again."""
    seen = set() if seen is None else seen
    for src in find_sources(include_packages):
        if src.split != split:
            continue
        text = read_source(src.path)
        if text is None:
            continue
        for unit in units_of(text, f"{src.package}:{src.path.name}"):
            key = normalized_hash(unit.code)
            if key not in seen:
                seen.add(key)
                yield unit
