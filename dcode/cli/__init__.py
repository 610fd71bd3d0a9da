"""The command line: the only package that reads argv, the environment and stdin, and picks exit codes.

Exit codes: 0 ok, 1 runtime error (a write that failed, stdout included), 2 usage error (bad
input), 3 syntax errors remain, 130 interrupted (Ctrl-C), 143 terminated (SIGTERM, cleaned up as
Ctrl-C is). The answer goes to stdout; progress goes to stderr, and only to a terminal.
Heavy imports (torch, transformers) happen inside the commands that need a model.

`app` (from dcode.cli.common, with the shared helpers) gets its commands here: each module below
registers its own on import. The imports run one way, this package -> command modules ->
dcode.cli.common, so the graph has no circle.
"""

from __future__ import annotations

from dcode.cli import bench, checking, editing, fixing, generate, history, listing, serving
from dcode.cli.common import OneLineErrors, app, explicit_sampler_fields, main, version
from dcode.cli.generate import new

__all__ = [
    "OneLineErrors",
    "app",
    "bench",
    "checking",
    "editing",
    "explicit_sampler_fields",
    "fixing",
    "generate",
    "history",
    "listing",
    "main",
    "new",
    "serving",
    "version",
]
