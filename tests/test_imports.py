"""Fast start-up and the dependency arrows of STYLE.md, checked on the real package.

Start-up runs in fresh interpreters (the test process has long since imported torch). The arrows
are read with `ast` from dcode/*.py, including imports inside functions and under TYPE_CHECKING.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import dcode

PACKAGE = Path(dcode.__file__).resolve().parent
HEAVY = ("torch", "transformers")
REPORT = "DCODE-IMPORTS:"  # marks the line a child prints about its sys.modules


def python(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DCODE_")}
    env.update(OMP_NUM_THREADS="1", NO_COLOR="1")
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=120, env=env, cwd=cwd or PACKAGE.parent
    )


def heavy_modules_after(
    statements: str, argv: list[str] | None = None, cwd: Path | None = None, roots: tuple[str, ...] = HEAVY
):
    """Run `statements` in a fresh interpreter; at exit it reports which modules under `roots`
    (default: the heavy ones) were loaded."""
    code = (
        "import atexit, json, sys\n"
        f"atexit.register(lambda: sys.__stderr__.write({REPORT!r} + json.dumps("
        f"sorted(m for m in sys.modules if m.split('.')[0] in {roots!r})) + '\\n'))\n"
        + (f"sys.argv = {argv!r}\n" if argv else "")
        + statements
    )
    done = python("-c", code, cwd=cwd)
    lines = [line for line in done.stderr.splitlines() if line.startswith(REPORT)]
    assert len(lines) == 1, done.stderr
    return done, json.loads(lines[0][len(REPORT) :])


def test_the_probe_sees_heavy_imports() -> None:
    """The check below can fail: importing the local filler does pull torch in."""
    done, heavy = heavy_modules_after("import dcode.localfill")
    assert done.returncode == 0, done.stderr
    assert "torch" in heavy


def test_importing_the_cli_imports_no_torch_or_transformers() -> None:
    done, heavy = heavy_modules_after("import dcode.cli")
    assert done.returncode == 0, done.stderr
    assert heavy == []


@pytest.mark.parametrize("argv", [["dcode", "--help"], ["dcode", "new", "--help"]])
def test_help_imports_no_torch(argv: list[str]) -> None:
    done, heavy = heavy_modules_after("from dcode.cli import main\nmain()", argv=argv)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"Usage: dcode {'new ' if 'new' in argv else ''}[OPTIONS]")
    assert heavy == []


def test_check_imports_no_torch(tmp_path: Path) -> None:
    (tmp_path / "ok.py").write_text("def f(x):\n    return x + 1\n")
    done, heavy = heavy_modules_after(
        "from dcode.cli import main\nmain()", argv=["dcode", "check", "ok.py"], cwd=tmp_path
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert heavy == []


def test_the_family_registry_imports_no_torch() -> None:
    """Every family module is imported to build the registry (`dcode models`, name resolution):
    torch and transformers stay inside their loaders and writers."""
    done, heavy = heavy_modules_after("import dcode.models, dcode.models.catalogue, dcode.testing.checkpoints")
    assert done.returncode == 0, done.stderr
    assert heavy == []


def test_generating_without_a_view_imports_no_textual() -> None:
    """A pipe or -q draws nothing, so the Textual app (dcode.tui_app) is never loaded."""
    argv = ["dcode", "new", "a function that adds two numbers", "--length", "16", "--no-repair", "-q"]
    done, loaded = heavy_modules_after("from dcode.cli import main\nmain()", argv=argv, roots=("textual", "dcode"))
    assert done.returncode == 0 and done.stdout.strip(), done.stderr
    assert "dcode.tui" in loaded and "dcode.tui_app" not in loaded
    assert not [m for m in loaded if m.startswith("textual")]


def test_module_entry_point_help() -> None:
    done = python("-m", "dcode.cli", "--help")
    assert done.returncode == 0, done.stderr
    assert "Usage:" in done.stdout
    assert "new" in done.stdout


def imported_by_importtime(stderr: str) -> set[str]:
    """Top-level names of the modules listed by `python -X importtime`."""
    names = set()
    for line in stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    return names


def test_console_script_help_imports_no_torch() -> None:
    script = Path(sys.executable).parent / "dcode"
    if not script.exists():
        pytest.skip(f"no console script next to {sys.executable}")
    done = python("-X", "importtime", str(script), "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Usage: dcode [OPTIONS] COMMAND [ARGS]...")
    seen = imported_by_importtime(done.stderr)
    assert {"dcode", "typer"} <= seen  # the listing is real
    assert seen.isdisjoint(HEAVY)


# ---------------------------------------------------------------------------------------------
# Dependency arrows, read with ast


def modules() -> dict[str, Path]:
    """'dcode.x.y' -> file, for every module of the package."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


MODULES = modules()
# The command-line layer: the dcode.cli package (its __init__ and one module per command group).
CLI = sorted(m for m in MODULES if m == "dcode.cli" or m.startswith("dcode.cli."))


def in_cli(name: str) -> bool:
    return name == "dcode.cli" or name.startswith("dcode.cli.")


def dcode_imports(name: str) -> set[str]:
    """Every dcode module that module `name` imports, anywhere in its body."""
    path = MODULES[name]
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # `from dcode import syntax` names a module; `from dcode.config import X` does not
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute | ast.Name)
            and getattr(node.func, "attr", getattr(node.func, "id", None)) in ("import_module", "__import__")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            targets = [node.args[0].value]
        else:
            continue
        out.update(t for t in targets if t == "dcode" or t.startswith("dcode."))
    return out


def all_imports(name: str) -> set[str]:
    """Top-level packages module `name` imports (any depth in its body)."""
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module.split(".")[0])
    return out


def test_the_walker_sees_the_package() -> None:
    assert {"dcode.cli", "dcode.config", "dcode.sampler", "dcode.localfill", "dcode.models.base"} <= set(MODULES)
    # lazy imports inside functions count: the CLI loads these only in its commands
    cli_imports = set().union(*(dcode_imports(m) for m in CLI))
    assert {"dcode.config", "dcode.localfill", "dcode.files", "dcode.syntax", "dcode.models"} <= cli_imports
    assert {"dcode.cli", "dcode.cli.generate", "dcode.cli.checking", "dcode.cli.editing"} <= set(CLI)
    assert "typer" in all_imports("dcode.cli.app")


@pytest.mark.parametrize(
    ("module", "allowed"),
    [
        ("dcode.config", set()),
        ("dcode.syntax", set()),
        ("dcode.linediff", set()),
        ("dcode.spans", {"dcode.syntax"}),
        ("dcode.fixes", {"dcode.syntax", "dcode.linediff", "dcode.spans"}),
        ("dcode.rules", set()),
        ("dcode.constrained", set()),  # the grammar's protocol: the tokenizer side is dcode.constrain's
        ("dcode.events", {"dcode.syntax"}),  # Issue, for type checking only
        ("dcode.option", {"dcode.config"}),
        ("dcode.options", {"dcode.config", "dcode.option"}),
        ("dcode.forward", {"dcode.config", "dcode.models.base"}),
        ("dcode.passes", {"dcode.config", "dcode.constrained", "dcode.forward", "dcode.models.base", "dcode.rules"}),
        (
            "dcode.sampler",
            {
                "dcode.config",
                "dcode.constrained",
                "dcode.events",
                "dcode.forward",
                "dcode.models.base",
                "dcode.passes",
                "dcode.rules",
            },
        ),  # fmt: skip
    ],
)
def test_bottom_modules_import_nothing_above_them(module: str, allowed: set[str]) -> None:
    assert dcode_imports(module) <= allowed


ABOVE_MODELS = ("dcode.localfill", "dcode.flows", "dcode.cli", "dcode.tui", "dcode.render", "dcode.repair")


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("dcode.models")))
def test_models_never_import_their_consumers(module: str) -> None:
    bad = {m for m in dcode_imports(module) if m.startswith(ABOVE_MODELS) or m.startswith("dcode.train")}
    assert bad == set()


@pytest.mark.parametrize("module", ["dcode.models.native", "dcode.models.plain_tokenizer", "dcode.models.facts"])
def test_the_native_path_never_imports_transformers(module: str) -> None:
    """dcode-tiny's load runs on these (and qwen2.py, whose transformers imports are its fallback)."""
    assert "transformers" not in all_imports(module)
    assert all("transformers" not in all_imports(m) for m in dcode_imports(module))


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """A circle of imports in `graph` (module -> modules it imports), as [a, b, ..., a]; [] if none."""
    state: dict[str, str] = {}  # "open" while on the current path, "done" once fully explored
    path: list[str] = []

    def visit(module: str) -> list[str]:
        state[module] = "open"
        path.append(module)
        for target in sorted(graph.get(module, ())):
            if state.get(target) == "open":
                return [*path[path.index(target) :], target]
            if target not in state and (found := visit(target)):
                return found
        path.pop()
        state[module] = "done"
        return []

    for module in sorted(graph):
        if module not in state and (found := visit(module)):
            return found
    return []


def test_the_cycle_finder_finds_a_circle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "d": {"a", "c"}}) == []


def test_the_import_graph_has_no_circles() -> None:
    """Every import counts (inside functions and under TYPE_CHECKING too), including a command
    module's import of its own package: no module can be half-initialised when another reads it."""
    graph = {module: {t for t in dcode_imports(module) if t in MODULES} for module in MODULES}
    assert find_cycle(graph) == []


def runtime_imports(name: str) -> set[str]:
    """Top-level packages module `name` imports when it runs: all_imports less those under
    `if TYPE_CHECKING:`."""
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    guarded = {
        id(node)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and ast.unparse(block.test) == "TYPE_CHECKING"
        for node in ast.walk(block)
    }
    return {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import) and id(node) not in guarded
        for alias in node.names
    } | {
        (node.module or "").split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and id(node) not in guarded and not node.level
    }


def test_the_event_types_import_no_torch() -> None:
    """dcode.events mentions torch only for type checking, so a view or a server can read the
    stream's types without loading it."""
    assert "torch" in all_imports("dcode.events")  # the type-checking import is there...
    assert runtime_imports("dcode.events").isdisjoint(HEAVY)  # ...and only there
    done, heavy = heavy_modules_after("import dcode.events, dcode.options, dcode.render")
    assert done.returncode == 0, done.stderr
    assert heavy == []


def reachable(module: str) -> set[str]:
    """module and every dcode module it imports, directly or through others."""
    seen, todo = set(), [module]
    while todo:
        name = todo.pop()
        if name in MODULES and name not in seen:
            seen.add(name)
            todo += dcode_imports(name)
    return seen


REMOTE = sorted(m for m in MODULES if m == "dcode.remote" or m.startswith("dcode.remote."))


# What `--endpoint` runs: the remote package, and the one flow (with the span rules and the judging
# it shares with a local run) over its filler.
ENDPOINT_PATH = [*REMOTE, "dcode.flows", "dcode.filler"]


@pytest.mark.parametrize("module", ENDPOINT_PATH)
def test_the_endpoint_path_imports_no_torch(module: str) -> None:
    """`--endpoint` loads no model: no module the endpoint's flow reaches imports torch or
    transformers, even inside a function; type-checking imports do not run."""
    assert {"dcode.spans", "dcode.fixes", "dcode.flows"} <= set().union(*(reachable(m) for m in ENDPOINT_PATH))
    heavy = {m: runtime_imports(m) & set(HEAVY) for m in reachable(module)}
    assert {m: found for m, found in heavy.items() if found} == {}


def test_the_remote_package_never_imports_the_flows() -> None:
    """The flows take a filler; the endpoint's filler never reaches back into them."""
    assert all("dcode.flows" not in reachable(m) for m in REMOTE)


def test_nothing_imports_the_cli() -> None:
    assert [m for m in MODULES if not in_cli(m) and any(in_cli(i) for i in dcode_imports(m))] == []


@pytest.mark.parametrize("module", ["dcode.localfill", "dcode.flows"])
def test_the_flows_and_the_local_filler_do_not_import_the_layers_above_them(module: str) -> None:
    assert not {m for m in dcode_imports(module) if m.startswith(("dcode.cli", "dcode.tui", "dcode.render"))}


def test_only_the_cli_imports_typer_or_click() -> None:
    users = sorted(m for m in MODULES if all_imports(m) & {"typer", "click"})
    assert users and all(in_cli(m) for m in users)


def environment_reads(source: str) -> list[str]:
    """Places that read argv or the environment: os.environ / os.getenv / sys.argv and friends."""
    tree = ast.parse(source)
    aliases = {"os": "os", "sys": "sys"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in ("os", "sys"):
                    aliases[alias.asname or alias.name] = alias.name
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            owner = aliases.get(node.value.id)
            if (owner, node.attr) in {
                ("os", "environ"),
                ("os", "environb"),
                ("os", "getenv"),
                ("os", "getenvb"),
                ("os", "putenv"),
                ("sys", "argv"),
                ("sys", "orig_argv"),
            }:
                found.append(f"{owner}.{node.attr} (line {node.lineno})")
        elif isinstance(node, ast.ImportFrom) and node.module in ("os", "sys"):
            for alias in node.names:
                if alias.name in ("environ", "environb", "getenv", "getenvb", "putenv", "argv", "orig_argv"):
                    found.append(f"from {node.module} import {alias.name} (line {node.lineno})")
    return found


def test_the_environment_scanner_finds_reads() -> None:
    sample = "import os\nimport sys as s\nfrom os import getenv\nx = os.environ.get('A')\ny = s.argv\n"
    assert len(environment_reads(sample)) == 3
    assert any(environment_reads(MODULES[m].read_text(encoding="utf-8")) for m in CLI)  # the CLI does read them


@pytest.mark.parametrize("module", sorted(m for m in MODULES if not in_cli(m) and not m.startswith("dcode.train")))
def test_only_the_cli_reads_argv_or_the_environment(module: str) -> None:
    assert environment_reads(MODULES[module].read_text(encoding="utf-8")) == []


# ---------------------------------------------------------------------------------------------
# Size: a function a reader can hold in their head

LONGEST_FUNCTION = 60  # lines, from `def` to the last line of its body


def long_functions(source: str, module: str, limit: int = LONGEST_FUNCTION) -> dict[str, int]:
    """'module.function' -> lines, for every function (nested ones and methods too) over `limit`."""
    return {
        f"{module}.{node.name}": node.end_lineno - node.lineno + 1
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > limit
    }


def test_the_length_scan_counts_lines() -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(3))
    assert long_functions(f"def f():\n{body}", "m", limit=3) == {"m.f": 4}
    assert long_functions(f"def f():\n{body}", "m", limit=4) == {}


def test_no_function_in_the_package_is_over_sixty_lines() -> None:
    found: dict[str, int] = {}
    for module, path in MODULES.items():
        found |= long_functions(path.read_text(encoding="utf-8"), module)
    assert found == {}


LONGEST_MODULE = 500  # lines: a module a reader holds in their head (the house style aims under ~400)


def test_no_module_in_the_package_is_over_five_hundred_lines() -> None:
    found = {
        m: n for m, p in MODULES.items() if (n := len(p.read_text(encoding="utf-8").splitlines())) > LONGEST_MODULE
    }
    assert found == {}
