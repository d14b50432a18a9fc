"""Replay: a recorded session replayed onto the bus and re-recorded is identical frame for frame."""

from __future__ import annotations

import asyncio

import numpy as np

from daq.bus.frames import Event, Frame
from daq.bus.pubsub import BusPublisher, BusSubscriber
from daq.run.demo import same_message
from daq.run.recorder import Recorder
from daq.run.replay import replay_session
from daq.store.read_write import SessionStore


async def record(store: SessionStore, kind: str, produce) -> str:
    """Publish with ``produce(pub)`` while a Recorder writes a new session; returns its id."""
    sid = store.create_session(kind, {})
    pub = BusPublisher()
    sub = BusSubscriber(pub.endpoint)
    rec = Recorder(store, sid, sub, flush_interval=0.05)
    try:
        await pub.wait_for_subscribers(1, timeout=5)
        rec.start()
        await produce(pub)
        await rec.stop(drain=0.1)
    finally:
        pub.close()
        sub.close()
    store.finish(sid, "complete")
    return sid


async def test_burst_replay_rerecorded_is_identical(tmp_path, rng):
    store = SessionStore(tmp_path / "s.sqlite")

    async def live(pub):
        for i in range(30):
            await pub.publish(
                Frame(
                    "press.force",
                    pub.next_seq("press.force"),
                    100.0 + i * 0.05,
                    5e-4,
                    ["force_cmd", "force", "pressure"],
                    ["N", "N", "Pa"],
                    rng.standard_normal((100, 3)),
                )
            )
            await pub.publish(
                Frame(
                    "press.flags",
                    pub.next_seq("press.flags"),
                    100.0 + i * 0.05,
                    None,
                    ["valve"],
                    ["1"],
                    rng.integers(0, 2, (5, 1)).astype(bool),
                    timestamps=100.0 + i * 0.05 + np.arange(5) * 0.01,
                )
            )
            if i % 10 == 0:
                await pub.publish(
                    Event(
                        "press.plan",
                        "step",
                        pub.next_seq("press.plan"),
                        100.0 + i * 0.05,
                        {"series": 0, "index": i},
                    )
                )

    original = await record(store, "press", live)

    async def replayed(pub):
        stats = await replay_session(store, original, pub, burst=True)
        assert (stats.frames, stats.events) == (60, 3)

    copy = await record(store, "press", replayed)
    a, b = list(store.messages(original)), list(store.messages(copy))
    assert len(a) == len(b) == 63
    assert all(same_message(x, y) for x, y in zip(a, b, strict=True))
    assert not any(m.replay for m in a) and all(m.replay for m in b)
    assert store.get_session(copy).stats["gaps"] == {}


async def test_timed_replay_follows_recorded_timing(tmp_path):
    store = SessionStore(tmp_path / "s.sqlite")
    sid = store.create_session("press", {})
    for i in range(5):
        store.append(sid, Frame("s", i, 50.0 + 0.1 * i, 0.01, ["a"], ["m"], np.full((10, 1), float(i))))
    store.finish(sid, "complete")
    pub = BusPublisher()
    sub = BusSubscriber(pub.endpoint)
    try:
        await pub.wait_for_subscribers(1, timeout=5)
        stats = await replay_session(store, sid, pub, speed=2.0)
        got = [await sub.recv(timeout=5) for _ in range(5)]
    finally:
        pub.close()
        sub.close()
    assert stats.span_s == 0.4 or abs(stats.span_s - 0.4) < 1e-9
    assert stats.duration_s >= 0.4 / 2.0 * 0.95  # paced, not burst
    assert [g.data[0, 0] for g in got] == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert all(g.replay and g.session_id == sid for g in got)
    await asyncio.sleep(0)


async def test_burst_replay_reports_progress_up_to_the_total(tmp_path, monkeypatch):
    import daq.run.replay

    monkeypatch.setattr(daq.run.replay, "PROGRESS_EVERY", 4)
    store = SessionStore(tmp_path / "s.sqlite")
    sid = store.create_session("press", {})
    for i in range(10):
        store.append(sid, Frame("s", i, 5.0 + i, 0.5, ["a"], ["m"], np.full((2, 1), float(i))))
    store.append(sid, Event("p", "step", 0, 7.0, {}))
    store.finish(sid, "complete")
    calls: list[tuple[int, int]] = []
    pub = BusPublisher()
    try:
        stats = await replay_session(store, sid, pub, burst=True, progress=lambda d, t: calls.append((d, t)))
    finally:
        pub.close()
    assert (stats.frames, stats.events) == (10, 1)
    assert calls == [(4, 11), (8, 11), (11, 11)]
