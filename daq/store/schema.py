"""The SQLite schema of a session store, how a connection is opened, and the format migrations.

Layout (one row per *block* of samples, never one row per sample):

* ``sessions``  id, kind, status, times, config snapshot, software version, device identities,
  writer identity (host, pid) and a heartbeat;
* ``streams``   per session and stream: channels, units, dtype, sample period, counts;
* ``frames``    the raw little-endian payload of every frame plus its header fields;
* ``events``    events with their JSON body.

A global ordinal ``ord`` (per session) keeps frames and events in arrival order for replay.

Index for window reads (store format 2): every frame row carries ``s0``, the index of its first
sample in the stream (cumulative count), and ``t_min``/``t_max``, the times of its earliest and
latest sample. Two SQL indexes on (session, stream, s0) and (session, stream, t_min, s0) turn a
sample range or a time window into a few index seeks, so reading one second of a long session
never scans it. A stream is *monotonic* when its sample times never go back (within and across
frames, the normal case); its time windows are contiguous sample ranges. Other streams are read
by filtering the frames whose [t_min, t_max] overlaps the window. Stores written in format 1 are
migrated (columns added and filled) the first time this code opens them.
"""

from __future__ import annotations

import math
import os
import sqlite3

import numpy as np

from daq import json_codec
from daq.bus.frames import SUPPORTED_DTYPES
from daq.store.payload import frame_span

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    status TEXT NOT NULL,
    reason TEXT,
    started REAL NOT NULL,
    ended REAL,
    config TEXT NOT NULL,
    software_version TEXT NOT NULL,
    devices TEXT NOT NULL,
    writer_host TEXT,
    writer_pid INTEGER,
    heartbeat REAL,
    stats TEXT
);
CREATE TABLE IF NOT EXISTS streams (
    session_id TEXT NOT NULL REFERENCES sessions(id),
    stream TEXT NOT NULL,
    type TEXT NOT NULL,
    channels TEXT,
    units TEXT,
    dtype TEXT,
    dt REAL,
    n_messages INTEGER NOT NULL DEFAULT 0,
    n_samples INTEGER NOT NULL DEFAULT 0,
    t_first REAL,
    t_last REAL,
    monotonic INTEGER NOT NULL DEFAULT 1,
    PRIMARY KEY (session_id, stream)
);
CREATE TABLE IF NOT EXISTS frames (
    session_id TEXT NOT NULL,
    ord INTEGER NOT NULL,
    stream TEXT NOT NULL,
    seq INTEGER NOT NULL,
    t0 REAL NOT NULL,
    dt REAL,
    n INTEGER NOT NULL,
    has_ts INTEGER NOT NULL,
    replay INTEGER NOT NULL,
    payload BLOB NOT NULL,
    s0 INTEGER,
    t_min REAL,
    t_max REAL
);
CREATE INDEX IF NOT EXISTS frames_by_ord ON frames (session_id, ord);
CREATE TABLE IF NOT EXISTS events (
    session_id TEXT NOT NULL,
    ord INTEGER NOT NULL,
    stream TEXT NOT NULL,
    kind TEXT NOT NULL,
    seq INTEGER NOT NULL,
    t REAL NOT NULL,
    replay INTEGER NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_by_ord ON events (session_id, ord);
"""
INDEXES = """
CREATE INDEX IF NOT EXISTS frames_by_s0 ON frames (session_id, stream, s0);
CREATE INDEX IF NOT EXISTS frames_by_t ON frames (session_id, stream, t_min, s0);
DROP INDEX IF EXISTS frames_by_stream;
"""
#: Every frame row pays for each index on every insert (about 1 us apiece for a 100-row block, a quarter
#: of what a small block costs beyond plain SQLite): the frames table keeps only the indexes a query uses -
#: frames_by_ord (replay and the next ordinal: session, ord), frames_by_s0 (sample ranges) and frames_by_t
#: (time windows). frames_by_stream (session, stream, ord), which format 1 and 2 stores had, served no
#: query - reads of a stream go by s0 - and is dropped when a writable store is opened (issue 44; an older
#: hil-lab creates it again, which is harmless). tests/test_store_indexes.py checks both directions.
STORE_FORMAT = "2"
FRAME_COLS = "session_id, ord, stream, seq, t0, dt, n, has_ts, replay, payload, s0, t_min, t_max"
SESSION_COLS = (
    "id, kind, status, reason, started, ended, config, software_version, devices, "
    "writer_host, writer_pid, heartbeat, stats"
)


#: Page size of new stores, bytes. A frame row is a blob of KBs to MBs: with SQLite's default 4 KiB
#: pages a 6.4 kB block spans two pages and a 640 kB one a chain of 160, each page written to the WAL
#: and again to the file at checkpoints, two system calls apiece. 32 KiB pages cut ingest time 1.6-3x
#: (100 to 10000-row blocks of 8 doubles, ``benchmarks/bench_store.py``) and store 100-row blocks
#: in 1.07x their bytes instead of 1.31x. The cost: a commit writes whole pages, so a commit that only
#: refreshes the heartbeat writes 32 KiB instead of 4 KiB to the WAL. Crash safety is unchanged (WAL
#: and ``synchronous`` as before). Only a new file takes it: SQLite fixes the page size when the first
#: page is written, and existing stores keep theirs.
PAGE_SIZE = 32768


def connect(path: str | os.PathLike) -> sqlite3.Connection:
    """The long-lived connection of a store handle (autocommit, WAL, shared across threads)."""
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=10.0)
    db.execute(f"PRAGMA page_size={PAGE_SIZE}")  # before WAL mode, which writes the first page
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("PRAGMA busy_timeout=10000")
    return db


def prepare(db: sqlite3.Connection) -> None:
    """Create what is missing (tables, format mark, indexes) and migrate an older store."""
    db.executescript(SCHEMA)
    db.execute("INSERT OR IGNORE INTO meta VALUES ('format', ?)", (STORE_FORMAT,))
    if not has_index_columns(db):
        migrate_to_format_2(db)
    db.executescript(INDEXES)


def has_index_columns(db: sqlite3.Connection) -> bool:
    return "s0" in {row[1] for row in db.execute("PRAGMA table_info(frames)")}


def migrate_to_format_2(db: sqlite3.Connection) -> None:
    """Add and fill the frame index columns (s0, t_min, t_max) and the monotonic flag of a
    store written in format 1; one transaction, payloads read only for timestamped frames."""
    db.execute("BEGIN IMMEDIATE")
    try:
        if not has_index_columns(db):  # another process may have migrated meanwhile
            for ddl in (
                "ALTER TABLE frames ADD COLUMN s0 INTEGER",
                "ALTER TABLE frames ADD COLUMN t_min REAL",
                "ALTER TABLE frames ADD COLUMN t_max REAL",
                "ALTER TABLE streams ADD COLUMN monotonic INTEGER NOT NULL DEFAULT 1",
            ):
                db.execute(ddl)
            streams = db.execute(
                "SELECT session_id, stream, channels, dtype FROM streams WHERE type='frame'"
            ).fetchall()
            for sid, stream, channels, dtype in streams:
                row_bytes = len(json_codec.loads(channels or "[]")) * SUPPORTED_DTYPES[dtype].itemsize
                cur = db.execute(
                    "SELECT rowid, t0, dt, n, has_ts, CASE WHEN has_ts THEN substr(payload, n * ? + 1) "
                    "END FROM frames WHERE session_id=? AND stream=? ORDER BY ord",
                    (row_bytes, sid, stream),
                )
                s0, prev, mono, updates = 0, -math.inf, True, []
                for rowid, t0, dt, n, has_ts, tail in cur:
                    ts = np.frombuffer(tail, dtype="<f8", count=n) if has_ts else None
                    t_min, t_max, inside = frame_span(t0, dt, n, ts)
                    updates.append((s0, t_min, t_max, rowid))
                    s0 += n
                    if n:
                        mono = mono and inside and t_min >= prev
                        prev = t_max
                db.executemany("UPDATE frames SET s0=?, t_min=?, t_max=? WHERE rowid=?", updates)
                if not mono:
                    db.execute(
                        "UPDATE streams SET monotonic=0 WHERE session_id=? AND stream=?", (sid, stream)
                    )
            db.execute("UPDATE meta SET value=? WHERE key='format'", (STORE_FORMAT,))
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
