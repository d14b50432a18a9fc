"""Analyses made on the rig (``hil run --analyze``, ``hil analyze`` of a local store, the ``hil serve``
page's analyse) kept in the local store until a push carries them to the lab: a table of its own in the
store file (``lab_analyses``: the session's ``analysis`` metadata as JSON and when it was recorded),
beside the replication marks (:mod:`daq.lab.marks`), written through a connection of its own.

A session whose analysis was recorded after the lab got it verified is pending again
(:func:`analysed_after_push`), so ``hil lab push --pending`` hands the newer analysis over."""

from __future__ import annotations

import os
import sqlite3
import time
from contextlib import closing

from daq import json_codec

SCHEMA = """
CREATE TABLE IF NOT EXISTS lab_analyses (
    session_id TEXT PRIMARY KEY,
    analysis TEXT NOT NULL,
    recorded_at REAL NOT NULL
);
"""


def _connect(path: str | os.PathLike) -> sqlite3.Connection:
    db = sqlite3.connect(str(path), isolation_level=None, timeout=30.0)
    db.execute("PRAGMA busy_timeout=30000")
    db.executescript(SCHEMA)
    return db


def record_analysis(path: str | os.PathLike, session_id: str, analysis: dict) -> None:
    """Keep ``analysis`` (the lab's ``analysis`` metadata shape) as the session's latest analysis."""
    with closing(_connect(path)) as db:
        db.execute("INSERT OR REPLACE INTO lab_analyses VALUES (?, ?, ?)",
                   (session_id, json_codec.dumps_strict(analysis), time.time()))


def local_analysis(path: str | os.PathLike, session_id: str) -> dict | None:
    """The session's latest analysis made on the rig; None when there is none (nothing is created)."""
    try:
        with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10.0)) as db:
            row = db.execute("SELECT analysis FROM lab_analyses WHERE session_id=?", (session_id,)).fetchone()
    except sqlite3.Error:  # no such table: the store never recorded an analysis
        return None
    return json_codec.loads(row[0]) if row else None


def local_analyses(path: str | os.PathLike) -> dict[str, dict]:
    """Every session's latest analysis made on the rig (for searching a local store)."""
    try:
        with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10.0)) as db:
            rows = db.execute("SELECT session_id, analysis FROM lab_analyses").fetchall()
    except sqlite3.Error:
        return {}
    return {sid: json_codec.loads(text) for sid, text in rows}


def analysed_after_push(path: str | os.PathLike, lab: str) -> set[str]:
    """Sessions that ``lab`` holds verified but whose analysis was recorded after that push."""
    try:
        with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10.0)) as db:
            rows = db.execute("SELECT a.session_id FROM lab_analyses a JOIN lab_replicas r "
                              "ON r.session_id = a.session_id AND r.lab = ? "
                              "WHERE a.recorded_at > r.replicated_at", (lab.rstrip("/"),)).fetchall()
    except sqlite3.Error:
        return set()
    return {r[0] for r in rows}


def newer(a: dict | None, b: dict | None) -> dict | None:
    """The later of two analyses (by their ``at``); either may be None."""
    if a is None or b is None:
        return a if b is None else b
    return a if float(a.get("at") or 0.0) >= float(b.get("at") or 0.0) else b
