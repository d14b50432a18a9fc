"""Session store on real SQLite files: round trips, layout checks, concurrent readers, crash safety."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from daq.bus.frames import Event, Frame
from daq.bus.pubsub import BusPublisher
from daq.store.errors import StoreError, UnknownSession
from daq.store.read_write import SessionStore
from tests.polling import poll_until


def frames_of(rng, n_frames: int, n: int = 100, stream: str = "press.sensors") -> list[Frame]:
    return [
        Frame(
            stream,
            i,
            10.0 + i * n * 1e-3,
            1e-3,
            ["D_vertical", "F_horizontal", "B0_vertical"],
            ["m", "m", "m"],
            rng.standard_normal((n, 3)),
        )
        for i in range(n_frames)
    ]


def test_round_trip_streams_events_and_metadata(tmp_path, rng):
    store = SessionStore(tmp_path / "s.sqlite")
    sid = store.create_session("press", {"rig": {"kind": "press"}}, devices={"lc": {"serial": "A1"}})
    fs = frames_of(rng, 5)
    ints = Frame(
        "press.counts",
        0,
        10.0,
        None,
        ["n"],
        ["1"],
        np.arange(4, dtype=np.uint16).reshape(4, 1),
        timestamps=np.array([10.0, 10.5, 11.25, 12.0]),
    )
    for f in fs[:3]:
        store.append(sid, f)
    store.append(sid, Event("press.plan", "step", 0, 10.2, {"series": 0, "index": 1, "q_desired": 200.0}))
    for f in fs[3:]:
        store.append(sid, f)
    store.append(sid, ints)
    store.finish(sid, "complete")

    info = store.get_session(sid[:6])
    assert (info.id, info.kind, info.status, info.config, info.devices) == (
        sid,
        "press",
        "complete",
        {"rig": {"kind": "press"}},
        {"lc": {"serial": "A1"}},
    )
    assert info.software_version.startswith("hil-lab") and info.ended >= info.started
    s = info.streams["press.sensors"]
    assert (s.n_messages, s.n_samples, s.units, s.dtype, s.rate) == (5, 500, ["m"] * 3, "float64", 1000.0)
    sd = store.read_stream(sid, "press.sensors")
    np.testing.assert_array_equal(sd.data, np.concatenate([f.data for f in fs]))
    np.testing.assert_allclose(sd.t, 10.0 + np.arange(500) * 1e-3)
    np.testing.assert_array_equal(sd.column("B0_vertical"), sd.data[:, 2])
    sc = store.read_stream(sid, "press.counts")
    assert sc.data.dtype == np.uint16 and sc.t.tolist() == [10.0, 10.5, 11.25, 12.0]
    assert [e.body["index"] for e in store.events(sid, kind="step")] == [1]
    order = [(type(m).__name__, m.seq) for m in store.messages(sid)]
    assert order == [
        ("Frame", 0),
        ("Frame", 1),
        ("Frame", 2),
        ("Event", 0),
        ("Frame", 3),
        ("Frame", 4),
        ("Frame", 0),
    ]
    store.close()


def test_errors_are_clear_and_nothing_bad_gets_stored(tmp_path, rng):
    store = SessionStore(tmp_path / "s.sqlite")
    sid = store.create_session("press", {})
    store.append(sid, frames_of(rng, 1)[0])
    other_units = Frame(
        "press.sensors",
        1,
        0.0,
        1e-3,
        ["D_vertical", "F_horizontal", "B0_vertical"],
        ["mm", "m", "m"],
        np.zeros((2, 3)),
    )
    with pytest.raises(StoreError, match="changed its layout"):
        store.append(sid, other_units)
    with pytest.raises(StoreError, match="refusing frame"):
        store.append(sid, Frame("x", 0, 0.0, 1e-3, ["a"], ["m"], np.zeros((2, 2))))
    with pytest.raises(UnknownSession):
        store.get_session("nope")
    with pytest.raises(UnknownSession):
        store.append("nope", frames_of(rng, 1)[0])
    with pytest.raises(StoreError, match="final status"):
        store.finish(sid, "done")
    store.finish(sid, "aborted", "operator stop")
    with pytest.raises(StoreError, match="aborted"):
        store.append(sid, frames_of(rng, 1)[0])
    assert store.get_session(sid).reason == "operator stop"
    assert store.read_stream(sid, "press.sensors").data.shape == (100, 3)
    with pytest.raises(StoreError, match="no session store"):
        SessionStore(tmp_path / "missing.sqlite", create=False)
    (tmp_path / "junk.sqlite").write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="not a usable session store"):
        SessionStore(tmp_path / "junk.sqlite")


def test_ambiguous_prefix(tmp_path):
    store = SessionStore(tmp_path / "s.sqlite")
    store.create_session("press", {}, session_id="abc1")
    store.create_session("press", {}, session_id="abc2")
    with pytest.raises(UnknownSession, match="ambiguous"):
        store.get_session("abc")
    assert store.get_session("abc2").id == "abc2"


def test_reader_sees_commits_while_the_writer_is_running(tmp_path, rng):
    path = tmp_path / "s.sqlite"
    writer = SessionStore(path, flush_interval=0.05)
    sid = writer.create_session("press", {})
    fs = frames_of(rng, 3)
    writer.append(sid, fs[0])
    reader = SessionStore(path)
    assert reader.get_session(sid).streams == {}  # buffered, not committed yet
    poll_until(lambda: time.monotonic() - writer._oldest >= writer.flush_interval)
    writer.append(sid, fs[1])  # the oldest buffered message is now older than flush_interval
    info = reader.get_session(sid)
    assert info.status == "running"  # the writer is alive: recovery leaves it alone
    assert info.streams["press.sensors"].n_messages == 2
    assert reader.read_stream(sid, "press.sensors").data.shape == (200, 3)


def test_stale_heartbeat_marks_session_incomplete(tmp_path):
    path = tmp_path / "s.sqlite"
    writer = SessionStore(path)
    sid = writer.create_session("press", {})
    writer._db.execute(
        "UPDATE sessions SET writer_host='elsewhere', heartbeat=? WHERE id=?", (time.time() - 5, sid)
    )
    assert SessionStore(path).get_session(sid).status == "running"  # other host, fresh enough
    writer._db.execute("UPDATE sessions SET heartbeat=? WHERE id=?", (time.time() - 3600, sid))
    info = SessionStore(path).get_session(sid)
    assert info.status == "incomplete" and "heartbeat" in info.reason


CHILD = """
import asyncio, sys
from daq.bus.pubsub import BusSubscriber
from daq.run.recorder import Recorder
from daq.store.read_write import SessionStore

async def main():
    store = SessionStore(sys.argv[1])
    sid = store.create_session("press", {"test": "crash"})
    sub = BusSubscriber(sys.argv[2])
    print(sid, flush=True)
    await Recorder(store, sid, sub).run()

asyncio.run(main())
"""


async def test_recorder_killed_with_sigkill_leaves_committed_frames_and_incomplete_session(tmp_path, rng):
    path = tmp_path / "crash.sqlite"
    pub = BusPublisher()
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path), pub.endpoint],
        stdout=subprocess.PIPE,
        text=True,
        cwd=os.getcwd(),
    )
    try:
        sid = (await asyncio.wait_for(asyncio.to_thread(child.stdout.readline), 30)).strip()
        await pub.wait_for_subscribers(1, timeout=30)
        sent: list[Frame] = []

        def next_frame() -> Frame:
            n = len(sent)
            data = rng.standard_normal((100, 2))
            return Frame("press.sensors", n, n * 0.1, 1e-3, ["a", "b"], ["m", "N"], data)

        reader = SessionStore(path)
        committed = 0
        while committed < 40:  # keep publishing until the recorder has committed a good part
            for _ in range(10):
                f = next_frame()
                sent.append(f)
                await pub.publish(f)
            await asyncio.sleep(0.02)
            info = reader.get_session(sid)
            committed = info.streams["press.sensors"].n_messages if "press.sensors" in info.streams else 0
            assert len(sent) < 100000, "the recorder never committed"
        for _ in range(20):  # more data in flight at the moment of the kill
            f = next_frame()
            sent.append(f)
            await pub.publish(f)
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=30) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        pub.close()

    store = SessionStore(path)  # opens cleanly and recovers
    info = store.get_session(sid)
    assert info.status == "incomplete" and "gone" in info.reason
    stored = list(store.messages(sid))
    assert len(stored) >= committed
    assert [m.seq for m in stored] == list(range(len(stored)))  # a clean prefix, nothing torn
    for m in stored:
        assert m.data.tobytes() == sent[m.seq].data.tobytes()
    assert store.read_stream(sid, "press.sensors").data.shape == (100 * len(stored), 2)
    with pytest.raises(StoreError):
        store.append(sid, sent[0])  # an incomplete session is closed for writing


def test_latest_selects_the_newest_session(tmp_path):
    from daq.store.errors import UnknownSession
    from daq.store.read_write import SessionStore

    with SessionStore(tmp_path / "s.sqlite") as store:
        with pytest.raises(UnknownSession):
            store.get_session("latest")
        first = store.create_session("press", {})
        store.finish(first, "complete")
        second = store.create_session("crane", {})
        assert store.get_session("latest").id == second != first
