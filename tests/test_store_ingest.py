"""Store ingest: the fast path for a stream's steady frames stores exactly what full validation stores,
and new stores get the large page size while existing ones keep theirs."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from daq.bus.frames import Frame
from daq.store.errors import StoreError
from daq.store.read_write import SessionStore
from daq.store.schema import PAGE_SIZE


def mixed_frames(rng) -> list[Frame]:
    """Steady frames with the odd ones a recorder meets: numpy and int times, empty frames, a step back
    in time (non-monotonic), explicit timestamps, replayed frames, and a second stream interleaved."""
    ch, un = ["a", "b"], ["m", "N"]
    out = []
    for i in range(12):
        t0 = 5.0 + i * 0.04
        data = rng.standard_normal((4, 2))
        if i == 3:
            t0 = np.float64(t0)
        if i == 4:
            t0 = 5  # an int: stored as a float like the full path does
        if i == 6:
            data = np.zeros((0, 2))
        if i == 8:
            t0 -= 0.5  # goes back in time: the stream is no longer monotonic
        ts = 7.0 + np.arange(4) * 0.01 if i == 10 else None
        out.append(Frame("s", i, t0, None if ts is not None else 0.01, ch, un, data, timestamps=ts,
                         replay=i == 11))
        counts = rng.integers(0, 9, (3, 1)).astype("<i4")
        out.append(Frame("r", i, 1.0 + i, np.float64(0.25), ["x"], ["V"], counts))
    return out


def stored_rows(store: SessionStore, sid: str) -> tuple[list, list]:
    frames = store._db.execute(
        "SELECT ord, stream, seq, t0, dt, n, has_ts, replay, payload, s0, t_min, t_max FROM frames "
        "WHERE session_id=? ORDER BY ord", (sid,)
    ).fetchall()
    streams = store._db.execute(
        "SELECT stream, type, channels, units, dtype, dt, n_messages, n_samples, t_first, t_last, monotonic "
        "FROM streams WHERE session_id=? ORDER BY stream", (sid,)
    ).fetchall()
    return frames, streams


def test_steady_frames_are_stored_as_the_full_validation_stores_them(tmp_path, rng):
    frames = mixed_frames(rng)
    fast = SessionStore(tmp_path / "fast.sqlite")
    full = SessionStore(tmp_path / "full.sqlite")
    a, b = fast.create_session("t", {}, session_id="x"), full.create_session("t", {}, session_id="x")
    for k, f in enumerate(frames):
        fast.append(a, f)
        full.writer._steady.clear()  # every frame through full validation
        full.append(b, f)
        if k % 7 == 6:
            fast.flush()
            full.flush()
    assert len(fast.writer._steady) == 2  # the fast path was in use
    fast.finish(a, "complete")
    full.finish(b, "complete")
    got, want = stored_rows(fast, a), stored_rows(full, b)
    assert got == want
    assert [type(r[3]) for r in got[0]] == [float] * len(frames)
    assert dict((r[0], r[-1]) for r in got[1]) == {"r": 1, "s": 0}


@pytest.mark.parametrize(
    "change, fragment",
    [
        ({"channels": ["a", "c"]}, "changed its layout"),
        ({"units": ["m", "m"]}, "changed its layout"),
        ({"data": np.zeros((4, 2), dtype="<f4")}, "changed its layout"),
        ({"data": np.zeros((4, 3))}, "refusing frame"),
        ({"dt": 0.0}, "dt"),
        ({"dt": float("nan")}, "dt"),
        ({"t0": float("-inf")}, "t0"),
        ({"seq": True}, None),  # a bool is an int to the full path: taken, not refused
    ],
)
def test_steady_stream_refuses_what_full_validation_refuses(tmp_path, change, fragment):
    store = SessionStore(tmp_path / "s.sqlite")
    sid = store.create_session("t", {})
    base = dict(stream="s", seq=0, t0=1.0, dt=0.1, channels=["a", "b"], units=["m", "N"])
    base["data"] = np.ones((4, 2))
    store.append(sid, Frame(**base))
    store.append(sid, Frame(**{**base, "seq": 1, "t0": 1.4}))
    bad = Frame(**{**base, "seq": 2, "t0": 1.8, **change})
    if fragment is None:
        store.append(sid, bad)
        n = 3
    else:
        with pytest.raises(StoreError, match=fragment):
            store.append(sid, bad)
        n = 2
    store.finish(sid, "complete")
    assert store.get_session(sid).streams["s"].n_messages == n
    assert store.read_stream(sid, "s").data.shape == (4 * n, 2)


def test_new_stores_take_the_large_page_size_and_old_ones_keep_theirs(tmp_path):
    SessionStore(tmp_path / "new.sqlite").close()
    old = tmp_path / "old.sqlite"
    db = sqlite3.connect(old)
    db.execute("CREATE TABLE x (a)")  # an existing file with SQLite's default pages
    db.commit()
    db.close()
    SessionStore(old).close()
    paths = (tmp_path / "new.sqlite", old)
    sizes = [sqlite3.connect(p).execute("PRAGMA page_size").fetchone()[0] for p in paths]
    assert sizes == [PAGE_SIZE, 4096]
