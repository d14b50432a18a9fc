"""Store ingest: the fast path for a stream's steady frames stores exactly what full validation stores,
and new stores get the large page size while existing ones keep theirs. A block whose memory nobody can change
(a frame from the bus) is kept until the commit without a copy; any other is copied at append."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from daq.bus.frames import Frame
from daq.bus.pubsub import BusPublisher, BusSubscriber
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


def _read_only(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


#: Blocks a caller can still change after append, read-only or not, and how it changes each.
CHANGEABLE = {
    "a writeable array the caller reuses": (lambda d: d.copy(), lambda a: a.fill(0.0)),
    "a read-only view of a writeable array": (
        lambda d: _read_only(d.copy().view()), lambda a: a.base.fill(0.0)),
    "a read-only view of a bytearray": (
        lambda d: np.ndarray(d.shape, d.dtype, memoryview(bytearray(d.tobytes())).toreadonly()),
        lambda a: a.base.__setitem__(slice(None), bytes(len(a.base)))),
}


@pytest.mark.parametrize("kind", list(CHANGEABLE))
def test_a_block_whose_memory_can_still_change_is_stored_as_it_was_at_append(tmp_path, rng, kind):
    make, change = CHANGEABLE[kind]
    store = SessionStore(tmp_path / "s.sqlite")
    sid = store.create_session("t", {})
    sent = [rng.standard_normal((5, 3)) for _ in range(3)]
    for k, d in enumerate(sent):  # the first frame takes the full path, the others the steady one
        block = make(d)
        store.append(sid, Frame("s", k, 1.0 + k, 0.1, ["a", "b", "c"], ["m"] * 3, block))
        change(block)
        assert not block.any()  # the change reached the block's memory
    assert len(store.writer._steady) == 1
    store.finish(sid, "complete")
    assert np.array_equal(store.read_stream(sid, "s").data, np.concatenate(sent))


async def test_frames_from_the_bus_are_kept_without_a_copy_and_stored_exactly(tmp_path, rng):
    """Received below the zero-copy threshold, a frame's data is a read-only view of the ZeroMQ message:
    the store buffers that array itself; a larger frame's buffer is writable and is copied."""
    pub = BusPublisher()
    sub = BusSubscriber(pub.endpoint)
    store = SessionStore(tmp_path / "s.sqlite")
    sid = store.create_session("t", {})
    sent = [rng.standard_normal((n, 8)) for n in (100, 100, 100, 2000, 100)]  # 2000 x 8 x 8 B = 128 kB
    try:
        await pub.wait_for_subscribers(1, timeout=5.0)
        for k, d in enumerate(sent):
            await pub.publish(Frame("s", k, 1.0 + k, 1e-4, [f"c{i}" for i in range(8)], ["m"] * 8, d))
        kept = []
        for _ in sent:
            g = await sub.recv(timeout=5)
            store.append(sid, g)
            kept.append(store.writer._frames[-1][9] is g.data)
    finally:
        pub.close()
        sub.close()
    assert kept == [False, True, True, False, True]  # the first takes the full path
    store.finish(sid, "complete")
    assert np.array_equal(store.read_stream(sid, "s").data, np.concatenate(sent))
