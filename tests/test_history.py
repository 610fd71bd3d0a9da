"""The history (dcode.history, `dcode log`): a record per command, `dcode log --json` exactly, no
secret stored, and a database that is locked, corrupt or cannot be made costing one warning line."""

from __future__ import annotations

import json
import sqlite3
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dcode import history
from dcode.cli import app
from dcode.cli.history import remember
from dcode.history import Entry, HistoryError, Touched

NOON = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "logs.db"
    for name in ("DCODE_LOG", "DCODE_LOG_PATH", "XDG_DATA_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DCODE_LOG_PATH", str(path))
    return path


def dcode(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(app, list(args), env=env, prog_name="dcode")


EDIT = Entry(
    "edit",
    prompt="add type hints",
    model="dcode-tiny",
    dtype="float32",
    device="cpu",
    settings={"seed": 0, "api_key": "sk-secret", "auth_token": "t", "client_secret": "s"},
    files=(Touched("app.py", ((9, 10),)),),
    answer="def add(a: int, b: int) -> int:\n    return a + b\n",
    tokens=18,
    passes=6,
    seconds=0.25,
    exit_code=0,
)


def test_an_endpoint_is_kept_without_user_password_or_query_ipv6_too() -> None:
    assert history.clean_url("http://u:p@[::1]:8000/v1?k=1#f") == "http://[::1]:8000/v1"


def test_a_record_round_trips_without_its_secrets(db: Path) -> None:
    first = history.record(db, EDIT, now=lambda: NOON)
    served = Entry("new", prompt="p", model="m", endpoint="https://me:sk-1@api.example.com/v1?api_key=sk-2")
    second = history.record(db, served, now=lambda: NOON)
    assert (first, second) == (1, 2)
    got = history.get(db, 1)
    assert got is not None and got.settings == {"seed": 0}
    assert got == Entry(**{**EDIT.__dict__, "settings": {"seed": 0}, "id": 1, "time": "2026-12-02T12:00:00Z"})
    assert [e.id for e in history.latest(db, 5)] == [2, 1]
    assert history.latest(db, 1)[0].endpoint == "https://api.example.com/v1"
    assert "sk-" not in db.read_bytes().decode("latin-1")
    assert history.get(db, 3) is None


def test_log_json_is_exact(db: Path) -> None:
    history.record(db, EDIT, now=lambda: NOON)
    result = dcode("log", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == [
        {
            "id": 1,
            "time": "2026-12-02T12:00:00Z",
            "command": "edit",
            "prompt": "add type hints",
            "model": "dcode-tiny",
            "dtype": "float32",
            "device": "cpu",
            "endpoint": None,
            "settings": {"seed": 0},
            "files": [{"path": "app.py", "regions": [[9, 10]]}],
            "answer": "def add(a: int, b: int) -> int:\n    return a + b\n",
            "tokens": 18,
            "passes": 6,
            "seconds": 0.25,
            "exit_code": 0,
            "round": None,
            "verdict": None,
        }
    ]
    assert result.stdout == json.dumps(json.loads(result.stdout), indent=2) + "\n"


def test_log_lists_the_latest_and_shows_one(db: Path) -> None:
    for n in range(3):
        history.record(
            db, Entry("new", prompt=f"request {n}", model="dcode-tiny", answer=f"x = {n}\n", exit_code=0), lambda: NOON
        )
    listed = dcode("log", "-n", "2")
    assert listed.exit_code == 0
    assert listed.stdout == (
        "   3  2026-12-02T12:00:00Z  new       dcode-tiny  -  'request 2' (exit 0)\n"
        "   2  2026-12-02T12:00:00Z  new       dcode-tiny  -  'request 1' (exit 0)\n"
    )
    assert dcode("log", "show", "2").stdout == "x = 1\n"
    missing = dcode("log", "show", "9")
    assert (missing.exit_code, missing.stderr) == (2, f"dcode: error: no record 9 in the history ({db})\n")
    assert dcode("log", "path").stdout == f"{db}\n"


def test_where_the_history_lives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DCODE_LOG_PATH", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert dcode("log", "path").stdout == f"{tmp_path / 'data' / 'dcode' / 'logs.db'}\n"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert dcode("log", "path").stdout == f"{tmp_path / '.local' / 'share' / 'dcode' / 'logs.db'}\n"
    assert dcode("log").stdout == ""  # no history yet: nothing, and nothing created
    assert not (tmp_path / ".local").exists()


def test_a_locked_database_costs_one_warning_line(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    history.record(db, EDIT)
    holder = sqlite3.connect(db)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        began = time.perf_counter()
        assert remember(EDIT) is None
        assert time.perf_counter() - began < 3
    finally:
        holder.rollback()
        holder.close()
    err = capsys.readouterr().err
    assert err == f"dcode: warning: not recorded in the history: history {db}: database is locked\n"
    assert remember(EDIT) == 2  # free again


def test_a_corrupt_database_or_a_folder_that_cannot_be_made(db: Path, capsys, monkeypatch) -> None:
    db.write_bytes(b"this is not a database" * 100)
    assert remember(EDIT) is None
    assert (
        capsys.readouterr().err
        == f"dcode: warning: not recorded in the history: history {db}: file is not a database\n"
    )
    blocked = db.parent / "a-file"
    blocked.write_text("")
    monkeypatch.setenv("DCODE_LOG_PATH", str(blocked / "logs.db"))
    assert remember(EDIT) is None
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(
        f"dcode: warning: not recorded in the history: cannot open the history {blocked / 'logs.db'}:"
    )
    with pytest.raises(HistoryError):
        history.latest(db)


def test_no_log_records_nothing(db: Path) -> None:
    assert remember(EDIT, log=False) is None
    assert not db.exists()


PYTEST = f"{sys.executable} -m pytest -q -p no:cacheprovider"


def test_a_fix_records_each_round(db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dcode.cli import fixing

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    (tmp_path / "calc.py").write_text("def add(a, b):\n    return a + b + 1\n")
    (tmp_path / "test_calc.py").write_text("from calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n")

    def fill(path: Path, source: str, region: tuple[int, int], instruction: str) -> str:  # a scripted fake filler
        return source.replace(" + 1", "")

    scripted = fixing.Fills(model="scripted", device="cpu")
    monkeypatch.setattr(fixing, "regenerator", lambda run, **_: (fill, scripted))
    result = dcode("fix", "calc.py", "--test", PYTEST, "-q", "--endpoint-key", "sk-never")
    assert result.exit_code == 0, result.stderr
    (entry,) = history.latest(db)
    assert (entry.command, entry.round, entry.verdict, entry.exit_code, entry.model) == (
        "fix",
        1,
        "1 passed",
        0,
        "scripted",
    )
    assert entry.files == (Touched("calc.py", ((1, 2),)),)
    assert entry.prompt is not None and entry.prompt.startswith("Fix `add` so that")
    assert (
        entry.answer
        == "--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a + b + 1\n+    return a + b\n"
    )
    assert entry.settings["test"] == PYTEST and "endpoint_key" not in entry.settings
    assert "sk-never" not in db.read_bytes().decode("latin-1")
    again = dcode("fix", "calc.py", "--test", PYTEST, "-q", env={"DCODE_LOG": "0"})
    assert again.exit_code == 0 and len(history.latest(db)) == 1


def test_new_edit_and_repair_results_are_recorded_as_they_come(db: Path) -> None:
    """What `new`, `edit` and `repair` hand to remember_result: their result records as they are."""
    from dcode.cli.history import remember_result
    from dcode.events import Edited, Finished, Repaired

    source = "def add(a, b):\n    return a - b\n"
    code = "def add(a, b):\n    return a + b\n"
    edited = Edited(code, (15, 32), (15, 32), 20, 5, 6, 6, 22, 4, 0.5, 0, 0)
    remember_result("edit", edited, log=True, exit_code=0, prompt="use plus", path=Path("m.py"), model="dcode-tiny")
    repair = Repaired(code, 1, 0, (), 1, 1, 1, 6, 3, 0.2)
    finished = Finished(code, 12, 14, 32, 8, 1.25, repair=repair)
    remember_result("new", finished, log=True, exit_code=0, prompt="add two numbers", path=None, model="dcode-tiny")
    remember_result("repair", Repaired(code, 1, 0, (), 1, 1, 1, 6, 3, 0.2), log=True, exit_code=0, path=Path("m.py"))
    repaired, new, edit = history.latest(db)
    assert (edit.command, edit.files, edit.tokens, edit.passes, edit.seconds) == (
        "edit", (Touched("m.py", ((2, 2),)),), 6, 4, 0.5,
    )  # fmt: skip
    assert (new.command, new.files, new.tokens, new.passes, new.seconds, new.answer) == ("new", (), 14, 11, 1.25, code)
    assert (repaired.command, repaired.tokens, repaired.passes, repaired.seconds) == ("repair", 6, 3, 0.2)
    assert source != code


SUM = "def add(a, b):\n    return a + b\n"


def records(db: Path) -> list[Entry]:
    return history.latest(db, 20)[::-1]  # oldest first


def test_new_edit_and_repair_each_leave_a_record(db: Path, tmp_path: Path, monkeypatch, scripted) -> None:
    """Through the real commands, the conftest's scripted model writing: one record each, with
    what was asked, the model, the files and lines, the answer, the counters and the exit code;
    the key sent to an endpoint never stored."""
    monkeypatch.chdir(tmp_path)
    scripted(SUM)
    new = dcode("new", "add two numbers", "-o", "m.py", "--length", "20", "-q", "--seed", "3")
    assert new.exit_code == 0, new.stderr
    edit = dcode("edit", "m.py", "--symbol", "add", "--instruct", "keep it", "-q", "--endpoint-key", "sk-never")
    assert edit.exit_code == 0, edit.stderr
    (tmp_path / "broken.py").write_text("def add(a, b:\n    return a + b\n")
    repair = dcode("repair", "broken.py", "--diff", "-q")
    made, edited, repaired = records(db)
    assert (made.command, made.prompt, made.model, made.device, made.endpoint) == (
        "new", "add two numbers", "scripted", "cpu", None,
    )  # fmt: skip
    assert (made.answer, made.files, made.exit_code) == (SUM, (Touched("m.py"),), 0)
    assert made.settings == {"length": 20, "seed": 3} and made.tokens and made.passes and made.seconds is not None
    assert (edited.command, edited.prompt, edited.files, edited.exit_code) == (
        "edit", "keep it", (Touched("m.py", ((1, 2),)),), 0,
    )  # fmt: skip
    assert edited.answer == (tmp_path / "m.py").read_text() and edited.settings == {"symbol": "add"}
    assert (repaired.command, repaired.prompt, repaired.exit_code) == ("repair", None, repair.exit_code)
    assert repaired.files == (Touched("broken.py"),) and repaired.answer is not None
    assert "sk-never" not in db.read_bytes().decode("latin-1")


def test_no_log_and_dcode_log_0_record_nothing(db: Path, tmp_path: Path, monkeypatch, scripted) -> None:
    monkeypatch.chdir(tmp_path)
    scripted(SUM)
    assert dcode("new", "add", "-o", "m.py", "--length", "20", "-q", "--no-log").exit_code == 0
    edit = dcode("edit", "m.py", "--instruct", "keep it", "-q", env={"DCODE_LOG": "0"})
    assert edit.exit_code == 0, edit.stderr
    assert dcode("repair", "m.py", "-q", "--no-log").exit_code == 0
    assert not db.exists()
    assert dcode("new", "add", "--length", "20", "-q").exit_code == 0 and len(records(db)) == 1


def test_a_history_that_cannot_be_written_costs_the_command_one_line(tmp_path: Path, monkeypatch, scripted) -> None:
    """The answer and the exit code are the command's; the history's failure is one warning line."""
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setenv("DCODE_LOG_PATH", str(blocked / "logs.db"))
    monkeypatch.delenv("DCODE_LOG", raising=False)
    scripted(SUM)
    result = dcode("new", "add", "--length", "20", "-q")
    assert (result.exit_code, result.stdout) == (0, SUM)
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"dcode: warning: not recorded in the history: cannot open the history {blocked}")


def test_an_endpoint_run_records_its_address_never_its_key(db: Path, tmp_path: Path, monkeypatch) -> None:
    from test_endpoint import ReplayServer, fim_server

    monkeypatch.chdir(tmp_path)
    two = "\n\ndef two():\n    return 2\n"
    (tmp_path / "m.py").write_text("def add(a, b):\n    return a - b\n" + two)
    server = ReplayServer(fim_server(SUM))  # fills the middle: the region has code after it
    try:
        args = ["edit", "m.py", "--symbol", "add", "--instruct", "use plus", "--endpoint", server.url, "--model", "m"]
        result = dcode(*args, "--no-repair", "-q", "--endpoint-key", "sk-never")
    finally:
        server.close()
    assert result.exit_code == 0, result.stderr
    (entry,) = records(db)
    assert (entry.command, entry.model, entry.endpoint, entry.device, entry.dtype) == (
        "edit", "m", server.url, None, None,
    )  # fmt: skip
    assert entry.answer == SUM + two and "sk-never" not in db.read_bytes().decode("latin-1")
