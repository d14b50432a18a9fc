"""The local store's record of replication: which sessions a lab holds verified, and which blocks of an
unfinished push are already there. Two tables of their own in the store file, beside the recording's
tables (which they never touch), written through a connection of their own."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterable
from contextlib import closing
from urllib.parse import quote

from daq import json_codec

SCHEMA = """
CREATE TABLE IF NOT EXISTS lab_replicas (
    session_id TEXT NOT NULL,
    lab TEXT NOT NULL,
    replicated_at REAL NOT NULL,
    checks TEXT NOT NULL,
    PRIMARY KEY (session_id, lab)
);
CREATE TABLE IF NOT EXISTS lab_progress (
    session_id TEXT NOT NULL,
    lab TEXT NOT NULL,
    node TEXT NOT NULL,
    block INTEGER NOT NULL,
    PRIMARY KEY (session_id, lab, node, block)
);
"""


class Marks:
    """Replication marks in the store at ``path`` (the tables are made on first use)."""

    def __init__(self, path: str | os.PathLike):
        self.path = str(path)
        self._db = sqlite3.connect(self.path, isolation_level=None, timeout=30.0, check_same_thread=False)
        self._db.execute("PRAGMA busy_timeout=30000")
        self._db.executescript(SCHEMA)

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Marks:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ verified replicas

    def replicated(self, session_id: str, lab: str) -> dict | None:
        row = self._db.execute("SELECT checks FROM lab_replicas WHERE session_id=? AND lab=?",
                               (session_id, lab)).fetchone()
        return json_codec.loads(row[0]) if row else None

    def mark(self, session_id: str, lab: str, checks: dict, as_of: float | None = None) -> None:
        """Mark ``session_id`` as held verified by ``lab``; its push progress is no longer needed. ``as_of``:
        when the push read the rig's analysis it handed over (default now) - an analysis recorded after
        that makes the session pending again, however long the push took to finish."""
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute("INSERT OR REPLACE INTO lab_replicas VALUES (?, ?, ?, ?)",
                             (session_id, lab, time.time() if as_of is None else as_of,
                              json_codec.dumps(checks)))
            self._db.execute("DELETE FROM lab_progress WHERE session_id=? AND lab=?", (session_id, lab))

    def unmark(self, session_id: str, lab: str) -> None:
        """``lab`` no longer holds ``session_id`` verified (it was deleted there): it is pending again."""
        self._db.execute("DELETE FROM lab_replicas WHERE session_id=? AND lab=?", (session_id, lab))

    def labs_by_session(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for sid, lab in self._db.execute("SELECT session_id, lab FROM lab_replicas ORDER BY lab"):
            out.setdefault(sid, []).append(lab)
        return out

    # ------------------------------------------------------------------ progress of a push

    def done_blocks(self, session_id: str, lab: str, node: str) -> set[int]:
        rows = self._db.execute("SELECT block FROM lab_progress WHERE session_id=? AND lab=? AND node=?",
                                (session_id, lab, node))
        return {r[0] for r in rows}

    def block_done(self, session_id: str, lab: str, node: str, block: int) -> None:
        self._db.execute("INSERT OR IGNORE INTO lab_progress VALUES (?, ?, ?, ?)",
                         (session_id, lab, node, block))

    def forget(self, session_id: str, lab: str, nodes: Iterable[str]) -> None:
        for node in nodes:
            self._db.execute("DELETE FROM lab_progress WHERE session_id=? AND lab=? AND node=?",
                             (session_id, lab, node))


def replicas(path: str | os.PathLike) -> dict[str, list[str]]:
    """Session id -> the labs holding it verified, for listings (``hil sessions``, ``hil serve``); empty
    for a store that never pushed (nothing is created in it)."""
    try:
        with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10.0)) as db:
            rows = db.execute("SELECT session_id, lab FROM lab_replicas ORDER BY lab").fetchall()
    except sqlite3.Error:
        return {}
    out: dict[str, list[str]] = {}
    for sid, lab in rows:
        out.setdefault(sid, []).append(lab)
    return out


def session_link(lab: str, session_id: str) -> str | None:
    """Where a person sees ``session_id`` in ``lab``: the session's page on the lab's own page (it asks for
    the person's key in a form: the key is never in a URL); None for a lab URL that is not http(s)."""
    lab = lab.rstrip("/")
    if not lab.startswith(("http://", "https://")):
        return None
    return f"{lab}/lab/sessions/{quote(session_id, safe='')}"
