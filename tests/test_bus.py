"""Bus over real ZeroMQ sockets on loopback: round trips, malformed input, lossless delivery, gaps."""

from __future__ import annotations

import asyncio
import json
import logging

import numpy as np
import pytest
import zmq
import zmq.asyncio

from daq.bus.frames import SUPPORTED_DTYPES, Event, Frame, encode
from daq.bus.pubsub import BusPublisher, BusSubscriber, BusTimeout, bind_endpoint
from tests.polling import wait_until


def make_data(dtype: str, rng: np.random.Generator, n: int, n_ch: int) -> np.ndarray:
    if dtype == "bool":
        return rng.integers(0, 2, size=(n, n_ch)).astype(bool)
    if dtype.startswith(("int", "uint")):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=(n, n_ch), dtype=dtype, endpoint=True)
    return rng.standard_normal((n, n_ch)).astype(dtype)


async def connected_pair(**sub_kwargs) -> tuple[BusPublisher, BusSubscriber]:
    pub = BusPublisher()
    sub = BusSubscriber(pub.endpoint, **sub_kwargs)
    await pub.wait_for_subscribers(1, timeout=5.0)
    return pub, sub


PROBE = "t.probe"


async def joined(pub: BusPublisher, sub: BusSubscriber, timeout: float = 10.0) -> None:
    """A plain (lossy) PUB cannot tell when a subscription arrived (slow joiner): publish probe events
    until the subscriber has received one. Every probe carries seq 0, so the probe stream never counts
    as a gap (a repeated seq is a restart); probes still in flight are skipped by the readers below."""
    async with asyncio.timeout(timeout):
        while True:
            await pub.publish(Event(PROBE, "probe", 0, 0.0, {}))
            try:
                if (await sub.recv(timeout=0.05)).stream == PROBE:
                    return
            except BusTimeout:
                pass


def frame(seq: int, data: np.ndarray, stream: str = "t.s") -> Frame:
    return Frame(
        stream, seq, 1000.0 + seq, 0.001, [f"c{i}" for i in range(data.shape[1])], ["m"] * data.shape[1], data
    )


async def test_round_trip_every_dtype_over_the_bus(rng):
    pub, sub = await connected_pair()
    try:
        sent = []
        for i, dtype in enumerate(SUPPORTED_DTYPES):
            f = frame(i, make_data(dtype, rng, n=50, n_ch=3))
            sent.append(f)
            await pub.publish(f)
        await pub.publish(Event("t.plan", "step", 0, 5.0, {"index": 1}))
        for f in sent:
            g = await sub.recv(timeout=5)
            assert g.seq == f.seq and g.data.dtype == f.data.dtype and g.data.tobytes() == f.data.tobytes()
        ev = await sub.recv(timeout=5)
        assert isinstance(ev, Event) and ev.body == {"index": 1}
        assert sub.stats.received == len(sent) + 1 and not sub.stats.gaps
    finally:
        pub.close()
        sub.close()


async def test_malformed_messages_are_counted_logged_once_and_dropped(caplog):
    ctx = zmq.asyncio.Context.instance()
    raw = ctx.socket(zmq.XPUB)
    raw.setsockopt(zmq.LINGER, 0)
    port = raw.bind_to_random_port("tcp://127.0.0.1")
    sub = BusSubscriber(f"tcp://127.0.0.1:{port}")
    try:
        await asyncio.wait_for(raw.recv(), 5)  # the subscription: no slow-joiner loss after this
        good = [bytes(p) for p in encode(frame(0, np.ones((4, 2))))]
        h = json.loads(good[1])
        bad = {
            "json": [good[0], b"{oops", good[2]],
            "schema": [good[0], json.dumps({**h, "v": 2}).encode(), good[2]],
            "size": [good[0], good[1], good[2] + b"\0"],
            "dtype": [good[0], json.dumps({**h, "dtype": "float16"}).encode(), good[2]],
            "parts": [good[0], good[1]],
        }
        with caplog.at_level(logging.WARNING, logger="daq.bus.pubsub"):
            for rep in range(3):
                for parts in bad.values():
                    await raw.send_multipart(parts)
                await raw.send_multipart([bytes(p) for p in encode(frame(rep, np.full((4, 2), rep)))])
            got = [await sub.recv(timeout=5) for _ in range(3)]
        assert [g.seq for g in got] == [0, 1, 2]
        assert got[2].data[0, 0] == 2
        assert sub.stats.malformed == {kind: 3 for kind in bad}
        assert sub.stats.received == 3
        warnings = [r for r in caplog.records if "malformed" in r.getMessage()]
        assert len(warnings) == len(bad)  # once per kind
    finally:
        raw.close(linger=0)
        sub.close()


async def test_lossless_mode_delivers_everything_in_order(rng):
    pub, sub = await connected_pair()
    n = 20000
    data = rng.standard_normal((32, 4))

    async def produce():
        for _ in range(n):
            await pub.publish(frame(pub.next_seq("t.s"), data))

    try:
        task = asyncio.create_task(produce())
        for i in range(n):
            g = await sub.recv(timeout=10)
            assert g.seq == i
        await task
        assert sub.stats.received == n and sub.stats.missing == 0
        assert g.data.tobytes() == data.tobytes()
    finally:
        pub.close()
        sub.close()


async def test_lossless_publisher_applies_back_pressure_to_a_slow_subscriber(rng):
    """A tiny queue and a subscriber that does not read yet: the publisher must wait, not drop."""
    pub = BusPublisher(hwm=5)
    sub = BusSubscriber(pub.endpoint, hwm=5)
    await pub.wait_for_subscribers(1, timeout=5)
    data = rng.standard_normal((1000, 8))  # 64 kB frames fill the kernel buffers quickly
    n = 300
    refused = asyncio.Event()  # set when a send was refused and the publisher starts waiting for room
    send_blocked = pub._send_blocked

    async def spy(parts, copy):
        refused.set()
        await send_blocked(parts, copy)

    pub._send_blocked = spy

    async def produce():
        for i in range(n):
            await pub.publish(frame(i, data))

    try:
        task = asyncio.create_task(produce())
        # until the publisher is held up (or, if it dropped instead of waiting, until it is done)
        await wait_until(lambda: refused.is_set() or task.done(), timeout=30)
        assert not task.done()  # blocked by back-pressure
        seqs = [(await sub.recv(timeout=10)).seq for _ in range(n)]
        await task
        assert seqs == list(range(n)) and pub.blocked_s > 0
    finally:
        pub.close()
        sub.close()


async def test_skipped_sequence_numbers_are_reported_as_gaps():
    pub, sub = await connected_pair()
    try:
        for seq in [0, 1, 2, 5, 6, 10]:
            await pub.publish(frame(seq, np.zeros((2, 1))))
        for seq in [0, 1, 3]:
            await pub.publish(frame(seq, np.zeros((2, 1)), stream="t.other"))
        for _ in range(9):
            await sub.recv(timeout=5)
        assert sub.stats.gaps == {"t.s": 2 + 3, "t.other": 1}
        assert sub.stats.gap_count == 3
        assert list(sub.stats.last_gaps) == [("t.s", 3, 5), ("t.s", 7, 10), ("t.other", 2, 3)]
    finally:
        pub.close()
        sub.close()


async def test_lossy_mode_drops_and_the_drops_are_detected_as_gaps(rng):
    pub = BusPublisher(lossless=False, hwm=2)
    sub = BusSubscriber(pub.endpoint, lossy=True, hwm=2)
    data = rng.standard_normal((2000, 8))  # 128 kB: the socket buffers hold only a few
    try:
        await joined(pub, sub)  # slow joiner: plain PUB cannot tell when the subscription arrived
        n = 400
        for i in range(n):
            await pub.publish(frame(i, data))  # never blocks in lossy mode
        seqs = []
        while True:
            try:
                msg = await sub.recv(timeout=0.5)
            except BusTimeout:
                break
            if msg.stream != PROBE:
                seqs.append(msg.seq)
        assert 0 < len(seqs) < n
        assert seqs == sorted(seqs)
        # every message between the first and last one received is either received or counted missing
        assert len(seqs) + sub.stats.missing == seqs[-1] - seqs[0] + 1
        assert sub.stats.missing > 0
    finally:
        pub.close()
        sub.close()


async def test_recv_latest_returns_the_newest_message():
    pub, sub = await connected_pair(hwm=1000)
    try:
        for i in range(50):
            await pub.publish(frame(i, np.full((1, 1), i)))
        # The 50 messages reach the subscriber's queue in their own time (nothing tells when the last one
        # is in without taking it): take the newest until it is the last one. Each call returns the
        # newest message taken so far, and drains what is queued: one message per call would take 50.
        calls = 0
        while sub.stats.received < 50 and calls < 50:
            g = await sub.recv_latest(timeout=5)
            calls += 1
            assert g.seq == sub.stats.received - 1
        assert g.seq == 49 and sub.stats.received == 50
        assert calls < 50
    finally:
        pub.close()
        sub.close()


async def test_recv_times_out_and_topics_filter():
    pub, sub = await connected_pair(topics=("event/",))
    try:
        await pub.publish(frame(0, np.zeros((1, 1))))
        await pub.publish(Event("t.plan", "plan_end", 0, 1.0, {}))
        ev = await sub.recv(timeout=5)
        assert isinstance(ev, Event)
        with pytest.raises(BusTimeout):
            await sub.recv(timeout=0.05)
    finally:
        pub.close()
        sub.close()


async def test_a_tap_subscriber_that_joins_with_the_run_gets_its_first_event():
    """`hil serve`'s relay subscribes to a run's tap as the run starts; the run waits for that subscription
    (wait_for_tap_subscriber) so that its first events (run `started`) reach the live view. With a plain PUB
    tap nothing told the run, and the first event was lost whenever it beat the subscription."""
    pub = BusPublisher(lossless=True, tap_endpoint="tcp://127.0.0.1:0")
    assert pub.tap_endpoint is not None
    assert not pub.wait_for_tap_subscriber(0.05)  # nobody there yet
    sub = BusSubscriber(pub.tap_endpoint)
    try:
        assert pub.wait_for_tap_subscriber(5.0)
        await pub.publish(Event("t.run", "started", 0, 1.0, {}))  # the very first message, no probes
        got = await sub.recv(timeout=5.0)
        assert (got.stream, got.kind) == ("t.run", "started")
    finally:
        sub.close()
        pub.close()


def test_a_fixed_endpoint_closed_in_this_process_binds_again_at_once():
    """``hil serve`` runs one run after another in one process; a config with a fixed bus port
    binds what the previous run just closed. ZeroMQ lets go of it in its I/O thread, after close():
    without the retry about 1 in 20 quick rebinds here failed with "Address already in use"."""
    ctx = zmq.Context.instance()
    probe = ctx.socket(zmq.XPUB)
    fixed = bind_endpoint(probe, "tcp://127.0.0.1:0")
    probe.close(linger=0)
    for _ in range(1000):
        sock = ctx.socket(zmq.XPUB)
        try:
            assert bind_endpoint(sock, fixed) == fixed
        finally:
            sock.close(linger=0)


def test_an_endpoint_another_socket_holds_is_one_clear_error_after_the_wait():
    ctx = zmq.Context.instance()
    holder = ctx.socket(zmq.XPUB)
    other = ctx.socket(zmq.XPUB)
    try:
        fixed = bind_endpoint(holder, "tcp://127.0.0.1:0")
        with pytest.raises(OSError, match=f"cannot bind {fixed}: Address already in use"):
            bind_endpoint(other, fixed)
    finally:
        holder.close(linger=0)
        other.close(linger=0)
