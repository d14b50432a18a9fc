"""Streaming, range and window reads of the session store, checked against the frames as written."""

from __future__ import annotations

import math
import sqlite3

import numpy as np
import pytest

from daq.bus.frames import Event, Frame
from daq.store.errors import StoreError
from daq.store.read_write import SessionStore


def write_session(store: SessionStore, rng) -> tuple[str, dict[str, list[Frame]]]:
    """Three streams: float64 with dt (frame sizes vary, one empty frame), int16 with explicit
    monotonic timestamps, bool with timestamps that go back (not monotonic)."""
    sid = store.create_session("press", {})
    frames: dict[str, list[Frame]] = {"a": [], "b": [], "c": []}
    t = 100.0
    for i, n in enumerate([5, 1, 0, 17, 3, 8, 12, 2, 9]):
        frames["a"].append(Frame("a", i, t, 0.01, ["x", "y"], ["m", "N"], rng.standard_normal((n, 2))))
        t += n * 0.01 if n else 0.0
    t = 100.0
    for i in range(7):
        n = int(rng.integers(1, 9))
        ts = t + np.sort(rng.uniform(0.0, 0.05, n))
        ts[0] = t  # t_min exactly on the frame start
        frames["b"].append(
            Frame(
                "b", i, t, None, ["k"], ["1"], rng.integers(-500, 500, (n, 1)).astype(np.int16), timestamps=ts
            )
        )
        t += 0.06
    for i in range(4):
        ts = 100.0 + rng.uniform(0.0, 1.0, 6)  # unordered: windows are not sample ranges
        frames["c"].append(
            Frame(
                "c",
                i,
                float(ts[0]),
                None,
                ["v"],
                ["1"],
                rng.integers(0, 2, (6, 1)).astype(bool),
                timestamps=ts,
            )
        )
    order = [
        f
        for group in zip(frames["a"], frames["b"], frames["c"] + [None] * 9, strict=False)
        for f in group
        if f
    ]
    order += frames["a"][len(frames["b"]) :]
    for k, f in enumerate(order):
        store.append(sid, f)
        if k % 5 == 0:
            store.append(sid, Event("a.plan", "step", k // 5, float(f.t0), {"k": k}))
    store.finish(sid, "complete")
    return sid, frames


def reference(frames: list[Frame]) -> tuple[np.ndarray, np.ndarray]:
    return (
        np.concatenate([f.time() for f in frames]),
        np.concatenate([f.data for f in frames]),
    )


@pytest.fixture
def stored(tmp_path, rng):
    store = SessionStore(tmp_path / "s.sqlite")
    sid, frames = write_session(store, rng)
    return store, sid, frames


def windows(t: np.ndarray, rng) -> list[tuple[float | None, float | None]]:
    """Boundary windows (exactly on sample times, on either side of them) and random ones."""
    out: list[tuple[float | None, float | None]] = [(None, None), (None, 100.1), (100.1, None), (0.0, 1.0)]
    ts = np.unique(t)
    for a, b in zip(ts[:-1], ts[1:], strict=True):
        out += [(a, b), (b, a), (a, np.nextafter(a, math.inf)), (np.nextafter(a, -math.inf), a)]
    out += [tuple(sorted(rng.uniform(t.min() - 0.1, t.max() + 0.1, 2))) for _ in range(30)]
    return out


@pytest.mark.parametrize("stream", ["a", "b", "c"])
def test_window_reads_match_the_written_samples(stored, rng, stream):
    store, sid, frames = stored
    t_all, d_all = reference(frames[stream])
    info = store.get_session(sid).streams[stream]
    assert info.monotonic == (stream != "c")
    for t0, t1 in windows(t_all, rng):
        keep = np.ones(t_all.shape, bool)
        if t0 is not None:
            keep &= t_all >= t0
        if t1 is not None:
            keep &= t_all < t1
        w = store.read_window(sid, stream, t0, t1)
        np.testing.assert_array_equal(w.t, t_all[keep])
        np.testing.assert_array_equal(w.data, d_all[keep])
        np.testing.assert_array_equal(w.sample_index(), np.flatnonzero(keep))
        assert w.data.dtype == d_all.dtype and store.count_samples(sid, stream, t0, t1) == keep.sum()
        chunks = list(store.iter_stream(sid, stream, chunk_samples=3, t_start=t0, t_stop=t1))
        assert all(len(c) == 3 for c in chunks[:-1])
        got_t = np.concatenate([c.t for c in chunks]) if chunks else np.empty(0)
        np.testing.assert_array_equal(got_t, t_all[keep])


@pytest.mark.parametrize("stream", ["a", "b", "c"])
def test_range_reads_and_chunks_at_every_frame_boundary(stored, stream):
    store, sid, frames = stored
    t_all, d_all = reference(frames[stream])
    n = len(t_all)
    bounds = np.cumsum([0] + [f.n_samples for f in frames[stream]])
    cuts = sorted({0, n, *bounds.tolist(), *(bounds[1:] - 1).tolist(), *(bounds[:-1] + 1).tolist()})
    for a in cuts:
        for b in cuts:
            r = store.read_range(sid, stream, a, b)
            lo, hi = min(a, n), max(min(a, n), min(b, n))
            np.testing.assert_array_equal(r.data, d_all[lo:hi])
            np.testing.assert_array_equal(r.t, t_all[lo:hi])
            assert r.start == lo
    whole = store.read_stream(sid, stream)
    np.testing.assert_array_equal(whole.data, d_all)
    for chunk in (1, 2, 7, 1000):
        parts = list(store.iter_stream(sid, stream, chunk_samples=chunk))
        assert [p.start for p in parts] == list(range(0, n, chunk))
        np.testing.assert_array_equal(np.concatenate([p.data for p in parts]), d_all)
        np.testing.assert_array_equal(np.concatenate([p.t for p in parts]), t_all)
        assert all(p.data.flags.writeable for p in parts)


def test_window_lookups_use_the_index(stored):
    """A window read is a few index seeks, never a scan of the session's frames."""
    store, sid, _ = stored
    db = sqlite3.connect(store.path)
    plans = [
        " ".join(r[3] for r in db.execute("EXPLAIN QUERY PLAN " + sql, args))
        for sql, args in [
            (
                "SELECT s0 FROM frames WHERE session_id=? AND stream=? AND t_min < ? "
                "ORDER BY t_min DESC, s0 DESC LIMIT 1",
                (sid, "a", 100.1),
            ),
            ("SELECT MAX(s0) FROM frames WHERE session_id=? AND stream=? AND s0 <= ?", (sid, "a", 10)),
            (
                "SELECT payload FROM frames WHERE session_id=? AND stream=? AND n > 0 AND s0 >= ? AND s0 < ? "
                "ORDER BY s0",
                (sid, "a", 10, 20),
            ),
        ]
    ]
    db.close()
    assert all("USING" in p and "INDEX" in p and "SCAN" not in p for p in plans), plans


def test_old_store_is_migrated_and_reads_the_same(tmp_path, rng):
    path = tmp_path / "old.sqlite"
    store = SessionStore(path)
    sid, frames = write_session(store, rng)
    store.close()
    db = sqlite3.connect(path)  # turn it back into a format-1 store
    for ddl in (
        "DROP INDEX frames_by_s0",
        "DROP INDEX frames_by_t",
        "ALTER TABLE frames DROP COLUMN s0",
        "ALTER TABLE frames DROP COLUMN t_min",
        "ALTER TABLE frames DROP COLUMN t_max",
        "ALTER TABLE streams DROP COLUMN monotonic",
        "UPDATE meta SET value='1' WHERE key='format'",
    ):
        db.execute(ddl)
    db.commit()
    db.close()
    store = SessionStore(path)
    assert store._db.execute("SELECT value FROM meta WHERE key='format'").fetchone()[0] == "2"
    info = store.get_session(sid)
    assert [info.streams[s].monotonic for s in "abc"] == [True, True, False]
    for stream in "abc":
        t_all, d_all = reference(frames[stream])
        w = store.read_window(sid, stream, 100.05, 100.2)
        keep = (t_all >= 100.05) & (t_all < 100.2)
        np.testing.assert_array_equal(w.data, d_all[keep])
        np.testing.assert_array_equal(store.read_range(sid, stream, 3, 11).data, d_all[3:11])


def test_appending_continues_the_index_after_reopening(tmp_path, rng):
    path = tmp_path / "s.sqlite"
    store = SessionStore(path)
    sid = store.create_session("crane", {}, session_id="cont")
    fs = [Frame("s", i, 10.0 + i, 0.25, ["x"], ["m"], rng.standard_normal((4, 1))) for i in range(6)]
    for f in fs[:3]:
        store.append(sid, f)
    store.flush()
    store2 = SessionStore(path)  # the same writer's session, continued through a new handle
    store2._owned.add(sid)
    for f in fs[3:]:
        store2.append(sid, f)
    store2.finish(sid, "complete")
    np.testing.assert_array_equal(store2.read_window(sid, "s", 13.0, 14.0).data, fs[3].data)
    np.testing.assert_array_equal(
        store2.read_range(sid, "s", 10, 14).data, np.concatenate([fs[2].data[2:], fs[3].data[:2]])
    )


BAD = [
    ("seq 2**63", lambda: Frame("s", 2**63, 1.0, 0.1, ["x"], ["m"], np.zeros((2, 1))), "seq"),
    ("seq -1", lambda: Frame("s", -1, 1.0, 0.1, ["x"], ["m"], np.zeros((2, 1))), "seq"),
    ("seq float", lambda: Frame("s", 1.5, 1.0, 0.1, ["x"], ["m"], np.zeros((2, 1))), "seq"),
    ("t0 nan", lambda: Frame("s", 1, math.nan, 0.1, ["x"], ["m"], np.zeros((2, 1))), "t0"),
    ("t0 inf", lambda: Frame("s", 1, math.inf, 0.1, ["x"], ["m"], np.zeros((2, 1))), "t0"),
    ("dt inf", lambda: Frame("s", 1, 1.0, math.inf, ["x"], ["m"], np.zeros((2, 1))), "dt"),
    (
        "timestamp nan",
        lambda: Frame("s", 1, 1.0, None, ["x"], ["m"], np.zeros((2, 1)), timestamps=np.array([1.0, np.nan])),
        "timestamps",
    ),
    ("event seq", lambda: Event("e", "step", 2**64, 1.0, {}), "seq"),
    ("event t", lambda: Event("e", "step", 0, math.inf, {}), "t must be"),
    ("event t nan", lambda: Event("e", "step", 0, math.nan, {}), "t must be"),
]


def test_bad_numbers_are_refused_alone_and_never_break_a_commit(tmp_path):
    store = SessionStore(tmp_path / "s.sqlite")
    sid = store.create_session("press", {})
    store.append(sid, Frame("s", 0, 1.0, 0.1, ["x"], ["m"], np.ones((2, 1))))
    for _label, make, fragment in BAD:
        with pytest.raises(StoreError, match=fragment):
            store.append(sid, make())
        store.flush()  # the buffer holds only good messages: commits keep working
    store.append(sid, Frame("s", 1, 1.2, 0.1, ["x"], ["m"], np.full((2, 1), 2.0)))
    store.append(sid, Event("e", "step", 0, 1.3, {"ok": True}))
    store.finish(sid, "complete")
    info = store.get_session(sid)
    assert set(info.streams) == {"s", "e"}  # no stream row left behind by a refused message
    assert (info.streams["s"].n_messages, info.streams["s"].n_samples) == (2, 4)
    np.testing.assert_array_equal(store.read_stream(sid, "s").data[:, 0], [1, 1, 2, 2])
    assert [e.seq for e in store.events(sid)] == [0]


def test_timing_reports_bursts(tmp_path):
    store = SessionStore(tmp_path / "s.sqlite")
    sid = store.create_session("press", {})
    for i in range(12):  # 10 readings 0.5 ms apart, one block every 0.25 s
        ts = 50.0 + 0.25 * i + np.arange(10) * 5e-4
        store.append(sid, Frame("z", i, ts[0], None, ["d"], ["m"], np.zeros((10, 1)), timestamps=ts))
        store.append(sid, Frame("f", i, 50.0 + 0.25 * i, 1e-3, ["q"], ["N"], np.zeros((250, 1))))
    store.finish(sid, "complete")
    z = store.stream_timing(sid, "z")
    assert z.spacing_s == pytest.approx(5e-4) and z.samples_per_frame == 10 and z.bursty
    assert z.frame_period_s == pytest.approx(0.25)
    assert z.describe().startswith("bursts of 10 at 2000 Hz every 0.25 s")
    assert store.get_session(sid).streams["z"].rate < 50  # the mean rate that used to be shown
    f = store.stream_timing(sid, "f")
    assert not f.bursty and f.describe() == "1000 Hz"


def test_bad_chunk_size_and_unknown_stream(stored):
    store, sid, _ = stored
    with pytest.raises(StoreError, match="chunk_samples"):
        next(store.iter_stream(sid, "a", chunk_samples=0))
    with pytest.raises(StoreError, match="no frame stream"):
        store.read_window(sid, "a.plan", 0, 1)
