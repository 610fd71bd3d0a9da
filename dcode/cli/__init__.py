"""The command line: the only package that reads argv, the environment and stdin, and picks exit codes.

Exit codes: 0 ok, 1 runtime error (a write that failed, stdout included), 2 usage error (bad
input), 3 syntax errors remain, 130 interrupted (Ctrl-C), 143 terminated (SIGTERM, cleaned up as
Ctrl-C is). The answer goes to stdout; progress goes to stderr, and only to a terminal.
Heavy imports (torch, transformers) happen inside the commands that need a model.

`app` (from dcode.cli.app) gets its commands here: each module below registers its own on import.
The shared parts are modules named for what they do: app (the app, exit codes, signals), resolve
(a command's options as one typed record), stdio
(prompt, live view or not), targets (input and output files), loading (a local model), running
(the filler and its flow under the live view), delivery (results, reports, the summary line).
The imports run one way, this package -> command modules -> shared modules, so the graph has no circle.
"""

from __future__ import annotations

from dcode.cli import bench, checking, editing, fixing, generate, history, listing, repairing, serving
from dcode.cli.app import OneLineErrors, app, main, version
from dcode.cli.generate import new
from dcode.cli.resolve import explicit_sampler_fields

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
    "repairing",
    "serving",
    "version",
]
