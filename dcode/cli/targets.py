"""Where a command reads and writes: the input file and its language, -o and FILE in place, each
checked before any model runs (a usage error in one line)."""

from __future__ import annotations

import os
from pathlib import Path

from dcode.cli.app import USAGE, fail


def language_for(explicit: str | None, output: Path | None) -> str:
    """--lang, else the -o suffix, else python."""
    from dcode import syntax

    try:
        found = syntax.detect_language(str(output) if output else None, None, explicit)
    except syntax.UnknownLanguage as error:
        fail(str(error), USAGE)
    return found or "python"


def output_target(raw: str | None, force: bool) -> Path | None:
    """-o as a Path after checking it can be written (a trailing slash names a folder: refused);
    None for stdout: no -o, or `-o -` (as `-` means stdin for a prompt)."""
    from dcode.files import FileProblem, check_writable

    if raw is None or raw == "-":
        return None
    if raw.endswith(("/", os.sep)):
        fail(f"{raw} names a folder; give a file name", USAGE)
    try:
        check_writable(Path(raw), force)
    except FileProblem as error:
        fail(str(error), USAGE)
    return Path(raw)


def result_target(file: Path, output: str | None, force: bool) -> tuple[Path | None, bool]:
    """Where an edit or a repair of FILE goes: (another file, False), (None, True) for `-o -`
    (stdout), or (None, False) for FILE in place, whose folder must then take the backup and the
    new file. `-o FILE` naming FILE itself (or a link to it) is in place, with the same guard."""
    from dcode.files import FileProblem, check_writable, same_file

    if output == "-":
        return None, True
    if output is not None and not same_file(Path(output), file):
        return output_target(output, force), False
    try:
        check_writable(file, True)
    except FileProblem as error:
        fail(str(error), USAGE)
    return None, False


def read_checkable(file: Path, lang: str | None) -> tuple[str, str]:
    """A readable UTF-8 file and its language (--lang, suffix or shebang), or a one-line usage error."""
    from dcode import syntax
    from dcode.files import FileProblem, read_source

    try:
        source = read_source(file)
        language = syntax.detect_language(str(file), source, lang)
    except (FileProblem, syntax.UnknownLanguage) as error:
        fail(str(error), USAGE)
    if language is None:
        fail(f"{file}: unknown language (use --lang)", USAGE)
    return source, language
