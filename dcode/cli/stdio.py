"""The terminal's streams: the prompt or instruction from an argument or stdin, and whether a live
view draws (only on a terminal's stderr)."""

from __future__ import annotations

import os
import sys
from typing import Literal

from dcode.cli.app import USAGE, fail


def read_prompt(
    value: str | None, what: str = "prompt", hint: str = "pass it as an argument, or pipe it on stdin"
) -> str:
    """The argument's text, or stdin's when the argument is '-' or absent and stdin is piped."""
    if value is not None and value != "-":
        text = value
    elif sys.stdin is None:
        fail(f"no {what}: stdin is closed; {hint}", USAGE)
    elif value is None and sys.stdin.isatty():
        fail(f"no {what}: {hint}", USAGE)
    else:
        try:
            raw = sys.stdin.buffer.read()
        except OSError as error:
            fail(f"cannot read the {what} from stdin: {error.strerror or error}", USAGE)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            fail(f"stdin is not UTF-8 text (bad byte at offset {error.start})", USAGE)
    if not text.strip():
        fail(f"the {what} is empty", USAGE)
    return text


def view_mode(quiet: bool, live: bool | None) -> Literal["auto", "none"]:
    """'auto' (Textual, or Rich Live when stdin is piped) when a view will draw, else 'none'."""
    return "auto" if show_progress(quiet, live) else "none"


def show_progress(quiet: bool, live: bool | None) -> bool:
    """The live view only on a terminal's stderr, never with -q, --no-live or TERM=dumb."""
    if quiet or live is False or os.environ.get("TERM") == "dumb":
        return False
    return sys.stderr.isatty()
