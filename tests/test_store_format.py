"""A store's format is checked on open (issue 33 item 5): a newer format is refused in one line and never
written, an older one is migrated explicitly, a renamed column gives one clear line instead of a sqlite3
traceback, and a store this process cannot write (another user's, an archive on read-only media) is read
by `sessions`, `show`, `export` and `analyze`. Real SQLite files; the read-only case as a second OS user
made by the test (root writes through any file mode)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import shutil
import sqlite3
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from daq.cli.main import main
from daq.run.demo import run_demo
from daq.store.read_write import SessionStore
from daq.store.reader import SessionReader
from daq.store.store_format import StoreFormatError
from tests.other_user import as_user, other_user  # noqa: F401 - the fixture of a second OS user


def demo_store(folder: Path) -> tuple[Path, str]:
    path = folder / "s.sqlite"
    with SessionStore(path) as store:
        summary = asyncio.run(run_demo(store, duration=0.2, rate=500.0, block=50))
    return path, summary["session"]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def one_error(res) -> str:
    assert res.exit_code == 1 and "Traceback" not in res.output, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), res.output
    return lines[0]


def test_a_newer_store_is_refused_in_one_line_and_never_written(tmp_path):
    path, sid = demo_store(tmp_path)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value='99' WHERE key='format'")
    db.close()
    before = digest(path)
    for args in (["sessions"], ["show", sid], ["demo", "--duration", "0.1"]):
        line = one_error(CliRunner().invoke(main, ["--store", str(path), *args]))
        assert "format 99, newer than" in line, line
    with pytest.raises(StoreFormatError):
        SessionStore(path)
    assert digest(path) == before
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT count(*) FROM sessions").fetchone()[0] == 1


def test_a_renamed_column_is_one_clear_line(tmp_path):
    path, sid = demo_store(tmp_path)
    with sqlite3.connect(path) as db:
        db.execute("ALTER TABLE sessions RENAME COLUMN reason TO why")
    db.close()
    for args in (["show", sid], ["export", sid, "--format", "csv", "-o", str(tmp_path / "x")]):
        line = one_error(CliRunner().invoke(main, ["--store", str(path), *args]))
        assert "table sessions has no column reason" in line and "sqlite3" not in line, line


def test_an_older_store_is_migrated_explicitly(tmp_path, caplog):
    path, sid = demo_store(tmp_path)
    with SessionReader(path) as r:
        frames = r.read_stream(sid, "demo.signals")
    with sqlite3.connect(path) as db:  # back to format 1: no frame index columns
        db.executescript("DROP INDEX frames_by_s0; DROP INDEX frames_by_t; "
                         "ALTER TABLE frames DROP COLUMN s0; ALTER TABLE frames DROP COLUMN t_min; "
                         "ALTER TABLE frames DROP COLUMN t_max; ALTER TABLE streams DROP COLUMN monotonic; "
                         "UPDATE meta SET value='1' WHERE key='format'")
    db.close()
    with caplog.at_level(logging.WARNING, logger="daq.store.store_format"):
        with SessionReader(path) as r:
            info = r.get_session(sid)
            again = r.read_stream(sid, "demo.signals")
    assert any("from format 1 to 2" in m for m in caplog.messages)
    assert info.id == sid and again.data.tobytes() == frames.data.tobytes() and len(frames.data) == 100
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT value FROM meta WHERE key='format'").fetchone()[0] == "2"
    db.close()


def test_a_store_this_user_cannot_write_is_read_by_every_reading_command(other_user):  # noqa: F811
    shared = Path(tempfile.mkdtemp(prefix="hil-archive-", dir="/tmp"))
    try:
        path, sid = demo_store(shared)
        os.chmod(shared, 0o755)  # the other user: a read-only file in a read-only folder
        os.chmod(path, 0o644)
        before = digest(path)
        out = Path(tempfile.mkdtemp(prefix="hil-out-", dir="/tmp"))
        shutil.chown(out, other_user.pw_uid, other_user.pw_gid)
        hil = ["-c", "from daq.cli.main import main; main()", "--store", str(path)]
        res = as_user(other_user, *hil, "sessions", "--json")
        assert res.returncode == 0, res.stderr
        assert [s["id"] for s in json.loads(res.stdout)] == [sid]
        res = as_user(other_user, *hil, "show", sid, "--json")
        assert res.returncode == 0 and json.loads(res.stdout)["id"] == sid, res.stderr
        res = as_user(other_user, *hil, "export", sid, "--format", "csv", "-o", str(out / "csv"))
        assert res.returncode == 0 and list((out / "csv").glob("*.csv")), res.stderr
        res = as_user(other_user, *hil, "analyze", sid)  # the demo has no analysis: it says so, not the store
        assert "readonly" not in res.stderr and "Traceback" not in res.stderr, res.stderr
        assert "analysis" in res.stderr or res.returncode == 0, res.stderr
        res = as_user(other_user, *hil, "demo", "--duration", "0.1")  # a write: one clear line
        assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
        assert digest(path) == before
        shutil.rmtree(out)
    finally:
        shutil.rmtree(shared)
