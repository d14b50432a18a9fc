"""The frames table keeps the indexes its queries use and no other (issue 44): every frame row pays for each
index on insert. Checked with SQLite's own query plans of the statements the store really runs (writes,
reads by range, by time window of a monotonic and of a non-monotonic stream, chunked reads, replay)."""

from __future__ import annotations

import re
import sqlite3

import numpy as np

from daq.bus.frames import Event, Frame
from daq.store.read_write import SessionStore

CH, UNITS = ["a", "b"], ["m", "N"]


def frame(stream: str, seq: int, t0: float, n: int = 10) -> Frame:
    return Frame(stream, seq, t0, 0.01, CH, UNITS, np.full((n, 2), float(seq)))


def traced(db: sqlite3.Connection, seen: list[str]) -> sqlite3.Connection:
    db.set_trace_callback(seen.append)
    return db


def run_the_store(store: SessionStore, seen: list[str]) -> str:
    """Write two streams (one whose times go back) and read them every way the reader offers."""
    traced(store._file.db, seen)
    second = store._file.second_connection
    store._file.second_connection = lambda: traced(second(), seen)  # type: ignore[method-assign]
    sid = store.create_session("test", {})
    for k in range(20):
        store.append(sid, frame("s.mono", k, 0.1 * k))
        store.append(sid, frame("s.back", k, 0.1 * (k % 7)))
        store.append(sid, Event("s.ev", "tick", k, 0.1 * k, {"k": k}))
    store.flush()
    for stream in ("s.mono", "s.back"):
        store.read_stream(sid, stream)
        store.read_range(sid, stream, 35, 120)
        store.read_window(sid, stream, 0.45, 1.3)
        store.count_samples(sid, stream, 0.2, 0.9)
        store.frame_index(sid, stream)
        store.stream_timing(sid, stream)
        for _ in store.iter_stream(sid, stream, 16, t_start=0.3, t_stop=1.1):
            pass
        for _ in store.iter_stream(sid, stream, 16, start=5, stop=77):
            pass
    store.events(sid, t_start=0.2, kind="tick")
    assert sum(1 for _ in store.messages(sid)) == 60
    store.finish(sid, "complete")
    return sid


def plans(db: sqlite3.Connection, statements: list[str]) -> dict[str, list[str]]:
    """Query plan of every SELECT/UPDATE on the frames table that was run (with its own values)."""
    out = {}
    for sql in statements:
        head = sql.lstrip().upper()
        if "FRAMES" in head and head.startswith(("SELECT", "UPDATE", "DELETE")):
            out[sql] = [row[3] for row in db.execute("EXPLAIN QUERY PLAN " + sql)]
    return out


def frame_indexes(db: sqlite3.Connection) -> set[str]:
    sql = "SELECT name FROM sqlite_master WHERE type='index' AND tbl_name='frames' AND sql IS NOT NULL"
    return {r[0] for r in db.execute(sql)}


def test_every_index_of_the_frames_table_serves_a_query_and_no_query_scans_it(tmp_path):
    seen: list[str] = []
    path = tmp_path / "s.sqlite"
    with SessionStore(path) as store:
        run_the_store(store, seen)
    with SessionStore(path) as store:  # what a writer that appends to a stored session looks up
        sid = store.list_sessions()[0].id
        traced(store._file.db, seen)
        store.writer._max_ord(sid)
        store.writer._stream_tail(sid, "s.mono")
    db = sqlite3.connect(path)
    try:
        found = plans(db, seen)
        used = {m for plan in found.values() for step in plan for m in re.findall(r"INDEX (\w+)", step)}
        scans = {sql: plan for sql, plan in found.items() if any(s.startswith("SCAN frames") for s in plan)}
        indexes = frame_indexes(db)
    finally:
        db.close()
    assert len(found) >= 8, f"too few frame queries seen: {list(found)}"
    assert not scans, f"queries that scan the frames table: {scans}"
    assert indexes == used, f"indexes no query uses: {sorted(indexes - used)}"


def test_opening_an_older_store_drops_the_unused_index_and_reads_the_same(tmp_path):
    path = tmp_path / "s.sqlite"
    with SessionStore(path) as store:
        sid = store.create_session("test", {})
        for k in range(5):
            store.append(sid, frame("s.mono", k, 0.1 * k))
        store.finish(sid, "complete")
        before = store.read_window(sid, "s.mono", 0.15, 0.37).data.copy()
    with sqlite3.connect(path) as db:  # what stores written before issue 44 have
        db.execute("CREATE INDEX frames_by_stream ON frames (session_id, stream, ord)")
    db.close()
    with SessionStore(path) as store:
        after = store.read_window(sid, "s.mono", 0.15, 0.37).data
        with sqlite3.connect(path) as db:
            assert "frames_by_stream" not in frame_indexes(db)
            assert frame_indexes(db) == {"frames_by_ord", "frames_by_s0", "frames_by_t"}
        db.close()
    assert np.array_equal(before, after) and len(after) == 22
