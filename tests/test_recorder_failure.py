"""A recorder whose store cannot commit (disk full) stops cleanly and tells its owner; what was
committed before stays readable. The full disk is SQLite's own quota (PRAGMA max_page_count)."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3

import numpy as np

from daq.bus.frames import Frame
from daq.bus.pubsub import BusPublisher, BusSubscriber
from daq.run.recorder import Recorder, RecorderError
from daq.store.read_write import SessionStore
from tests.polling import wait_until


async def test_a_full_disk_stops_the_recorder_and_reports_it(tmp_path, rng):
    path = tmp_path / "s.sqlite"
    store = SessionStore(path)
    sid = store.create_session("test", {})
    pages = store._db.execute("PRAGMA page_count").fetchone()[0]
    store._db.execute(f"PRAGMA max_page_count = {pages + 40}")  # ~160 kB more, then "disk full"
    pub = BusPublisher(send_timeout=None)
    sub = BusSubscriber(pub.endpoint)
    errors: list[RecorderError] = []
    rec = Recorder(store, sid, sub, flush_interval=0.02, on_error=errors.append)
    try:
        await pub.wait_for_subscribers(1, timeout=5)
        rec.start()
        failed = rec.failed
        data = rng.standard_normal((1000, 1))  # 8 kB per frame
        sent = 0
        async with asyncio.timeout(60):
            while not failed.done():
                await pub.publish(Frame("t.s", sent, float(sent), 1e-3, ["x"], ["m"], data))
                sent += 1
                await asyncio.sleep(0.002)
        err = failed.result()
        assert isinstance(err, RecorderError) and "full" in str(err) and str(path) in str(err)
        assert errors == [err] and rec.error is err
        with contextlib.suppress(AssertionError):  # not in time: the assertion below reports it
            await wait_until(lambda: not rec.running, timeout=10.0)
        assert not rec.running  # it stopped by itself, without an exception escaping the task
        await rec.stop()  # stopping a failed recorder is harmless
        assert errors == [err]
    finally:
        pub.close()
        sub.close()
        with contextlib.suppress(sqlite3.OperationalError):  # the buffer that did not fit is lost
            store.close()
    # what was committed before the failure is intact and readable
    with SessionStore(path) as again:
        frames = again.read_stream(sid, "t.s")
        n = frames.data.shape[0] // 1000
        assert 0 < n < sent and rec.recorded >= n
        np.testing.assert_array_equal(frames.data[:1000, 0], data[:, 0])


async def test_failed_resolves_for_a_waiter_created_after_the_failure(tmp_path):
    store = SessionStore(tmp_path / "s.sqlite")
    sid = store.create_session("test", {})
    pub = BusPublisher()
    sub = BusSubscriber(pub.endpoint)
    rec = Recorder(store, sid, sub)
    try:
        store.close()  # every commit now fails
        await pub.wait_for_subscribers(1, timeout=5)
        await pub.publish(Frame("t.s", 0, 0.0, 1e-3, ["x"], ["m"], np.zeros((2, 1))))
        await asyncio.wait_for(rec.run(), 30)  # returns instead of raising
        assert rec.error is not None
        assert (await asyncio.wait_for(rec.failed, 1)) is rec.error
    finally:
        pub.close()
        sub.close()
