"""A subscriber that stops reading: on the tap it loses messages and never slows the run; on the
lossless endpoint it makes publish raise BusStalled within the send timeout (never an endless freeze)."""

from __future__ import annotations

import asyncio
import time
import uuid

import numpy as np
import pytest
import zmq
import zmq.asyncio

from daq.bus.frames import Event, Frame, decode
from daq.bus.pubsub import BusPublisher, BusStalled, BusSubscriber, BusTimeout
from daq.run.recorder import Recorder
from daq.store.read_write import SessionStore

N_FRAMES = 400
ROWS = 1024  # 1024 x 8 float64 = 64 kB per frame, 26 MB in all: far more than socket buffers hold


def big_frame(pub: BusPublisher, data: np.ndarray) -> Frame:
    seq = pub.next_seq("t.big")
    return Frame("t.big", seq, 100.0 + seq, 1e-3, [f"c{i}" for i in range(8)], ["m"] * 8, data)


def stuck_subscriber(endpoint: str) -> zmq.Socket:
    """A plain SUB with a tiny queue that the test never reads from (after one probe)."""
    sock = zmq.asyncio.Context.instance().socket(zmq.SUB)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVHWM, 2)
    sock.setsockopt(zmq.RCVBUF, 64 * 1024)
    sock.setsockopt(zmq.SUBSCRIBE, b"")
    sock.connect(endpoint)
    return sock


async def test_a_tap_subscriber_that_never_reads_does_not_slow_the_recorder(tmp_path, rng):
    store = SessionStore(tmp_path / "s.sqlite")
    sid = store.create_session("test", {})
    # the run's own consumers on an in-process lossless endpoint, outsiders on the tap
    pub = BusPublisher(
        f"inproc://bus-{uuid.uuid4().hex}", tap_endpoint="tcp://127.0.0.1:0", tap_hwm=8, send_timeout=5.0
    )
    sub = BusSubscriber(pub.endpoint)
    stuck = stuck_subscriber(pub.tap_endpoint)
    rec = Recorder(store, sid, sub, flush_interval=0.05)
    try:
        await pub.wait_for_subscribers(1, timeout=5)
        # make sure the stuck subscriber is really connected: it reads one probe, then never again
        probe_seq = 0
        async with asyncio.timeout(10):
            while not await stuck.poll(50):
                await pub.publish(Event("t.probe", "probe", probe_seq, 1.0, {}))
                probe_seq += 1
        decode(await stuck.recv_multipart())
        rec.start()
        data = rng.standard_normal((ROWS, 8))
        for _ in range(N_FRAMES):
            await pub.publish(big_frame(pub, data))
        async with asyncio.timeout(60):
            while rec.recorded < probe_seq + N_FRAMES:
                await asyncio.sleep(0.02)
        await rec.stop()
        assert rec.error is None and pub.stalls == 0
        stored = store.read_stream(sid, "t.big")
        assert stored.data.shape == (N_FRAMES * ROWS, 8)
        np.testing.assert_array_equal(stored.data[-ROWS:], data)
        # the stuck subscriber lost most of the run (its queue and socket buffers hold a few frames)
        n_stuck = 0
        while await stuck.poll(200):
            decode(await stuck.recv_multipart())
            n_stuck += 1
        assert n_stuck < N_FRAMES // 2
    finally:
        stuck.close(linger=0)
        pub.close()
        sub.close()
        store.close()


async def test_a_tap_reader_sees_the_frames_it_lost_as_gaps(rng):
    pub = BusPublisher(tap_endpoint="tcp://127.0.0.1:0", tap_hwm=2)
    own = BusSubscriber(pub.endpoint)
    tap = BusSubscriber(pub.tap_endpoint, hwm=2)
    try:
        await pub.wait_for_subscribers(1, timeout=5)
        async with asyncio.timeout(10):  # the tap subscription is in when a probe comes through
            while True:
                await pub.publish(Event("t.probe", "probe", pub.next_seq("t.probe"), 1.0, {}))
                try:
                    await tap.recv(timeout=0.05)
                    break
                except BusTimeout:
                    pass
        n_probes = pub.next_seq("t.probe")
        data = rng.standard_normal((ROWS, 8))
        publish = asyncio.create_task(_publish_all(pub, data))  # the tap is not read meanwhile
        seen = [await own.recv(timeout=10) for _ in range(n_probes + N_FRAMES)]
        await publish
        got = []
        while True:
            try:
                msg = await tap.recv(timeout=0.5)
            except BusTimeout:
                break
            if msg.stream == "t.big":
                got.append(msg.seq)
        assert [m.seq for m in seen if m.stream == "t.big"] == list(range(N_FRAMES))  # lossless: all
        assert 0 < len(got) < N_FRAMES and got == sorted(got)
        # every frame between the first and the last one the tap got is either received or a counted gap
        assert tap.stats.gaps["t.big"] > 0
        assert len(got) + tap.stats.gaps["t.big"] == got[-1] - got[0] + 1
    finally:
        pub.close()
        own.close()
        tap.close()


async def _publish_all(pub: BusPublisher, data: np.ndarray) -> None:
    for _ in range(N_FRAMES):
        await pub.publish(big_frame(pub, data))


async def test_a_stuck_subscriber_on_the_lossless_endpoint_raises_bus_stalled_within_the_bound(tmp_path, rng):
    store = SessionStore(tmp_path / "s.sqlite")
    sid = store.create_session("test", {})
    timeout = 0.5
    pub = BusPublisher(send_timeout=timeout, hwm=4)
    sub = BusSubscriber(pub.endpoint)
    stuck = stuck_subscriber(pub.endpoint)
    rec = Recorder(store, sid, sub, flush_interval=0.05).start()
    try:
        await pub.wait_for_subscribers(2, timeout=5)
        data = rng.standard_normal((ROWS, 8))
        sent = 0
        with pytest.raises(BusStalled, match="stopped reading") as info:
            async with asyncio.timeout(60):  # never an endless freeze
                while True:
                    t_last_ok = time.monotonic()
                    await pub.publish(big_frame(pub, data))
                    sent += 1
        assert time.monotonic() - t_last_ok >= timeout  # it waited the bound before giving up
        assert pub.endpoint in str(info.value) and pub.stalls == 1
        assert 0 < sent < N_FRAMES
        # everything published before the stall reached the recorder and is committed
        async with asyncio.timeout(30):
            while rec.recorded < sent:
                await asyncio.sleep(0.02)
        await rec.stop()
        assert rec.error is None
        assert store.read_stream(sid, "t.big").data.shape == (sent * ROWS, 8)
    finally:
        stuck.close(linger=0)
        pub.close()
        sub.close()
        store.close()
