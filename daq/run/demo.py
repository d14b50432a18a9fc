"""Self-contained bus + recorder + replay demonstration on loopback (no hardware needed).

A synthetic 3-channel "oscillator" stream is published in real time, recorded into a new
session, then the session is replayed (burst) to a fresh subscriber that checks every replayed
message against the store, frame for frame.
"""

from __future__ import annotations

import asyncio
import time

import numpy as np

from daq.bus.frames import Event, Frame
from daq.bus.pubsub import BusPublisher, BusSubscriber
from daq.run.recorder import Recorder
from daq.run.replay import replay_session
from daq.store.read_write import SessionStore

CHANNELS = ["x", "v", "f"]
UNITS = ["m", "m/s", "N"]


def synthetic_block(rng: np.random.Generator, t: np.ndarray) -> np.ndarray:
    """Damped-oscillator-like signals plus seeded noise, shape (len(t), 3)."""
    w = 2 * np.pi * 2.0
    x = 0.01 * np.sin(w * t) + 1e-4 * rng.standard_normal(t.size)
    v = 0.01 * w * np.cos(w * t) + 1e-3 * rng.standard_normal(t.size)
    f = 50.0 * np.sign(np.sin(2 * np.pi * 0.5 * t)) + 0.5 * rng.standard_normal(t.size)
    return np.column_stack([x, v, f])


def same_message(a: Frame | Event, b: Frame | Event) -> bool:
    """Equal apart from session id and replay flag (payload compared byte for byte)."""
    if type(a) is not type(b) or a.stream != b.stream or a.seq != b.seq:
        return False
    if isinstance(a, Event):
        assert isinstance(b, Event)  # same type
        return (a.kind, a.t, a.body) == (b.kind, b.t, b.body)
    assert isinstance(b, Frame)  # same type
    ts_a = None if a.timestamps is None else a.timestamps.tobytes()
    ts_b = None if b.timestamps is None else b.timestamps.tobytes()
    return (a.t0, a.dt, a.channels, a.units, a.data.dtype, a.data.shape, ts_a) == (
        b.t0,
        b.dt,
        b.channels,
        b.units,
        b.data.dtype,
        b.data.shape,
        ts_b,
    ) and a.data.tobytes() == b.data.tobytes()


async def run_demo(
    store: SessionStore, duration: float = 3.0, rate: float = 1000.0, block: int = 100, seed: int = 0
) -> dict:
    """Run the demonstration; returns a summary dict."""
    rng = np.random.default_rng(seed)
    n_frames = max(1, int(round(duration * rate / block)))
    config = {
        "rig": {"kind": "demo", "name": "loopback-demo", "simulated": True},
        "demo": {"duration": duration, "rate": rate, "block": block, "seed": seed},
    }
    sid = store.create_session("demo", config, devices={"synthetic": {"model": "daq.run.demo", "seed": seed}})

    pub = BusPublisher()
    sub = BusSubscriber(pub.endpoint)
    recorder = Recorder(store, sid, sub)
    try:
        await pub.wait_for_subscribers(1, timeout=5.0)
        recorder.start()
        events = await _publish_in_real_time(pub, rng, n_frames, rate, block)
        await recorder.stop(drain=0.2)
    except BaseException:
        await recorder.stop()
        store.finish(sid, "aborted", "demo interrupted")
        raise
    finally:
        pub.close()
        sub.close()
    store.finish(sid, "complete")
    identical, rstats = await _replay_matches_store(store, sid)
    info = store.get_session(sid)
    sd = store.read_stream(sid, "demo.signals")
    return {
        "session": sid,
        "status": info.status,
        "published_frames": n_frames,
        "published_events": events,
        "recorded_frames": info.streams["demo.signals"].n_messages,
        "recorded_samples": int(sd.data.shape[0]),
        "gaps": sub.stats.missing,
        "malformed": sub.stats.n_malformed,
        "replayed_frames": rstats.frames,
        "replay_wall_s": rstats.duration_s,
        "replay_identical": identical,
    }


async def _publish_in_real_time(pub: BusPublisher, rng: np.random.Generator, n_frames: int, rate: float,
                                block: int) -> int:
    """The synthetic stream, ``n_frames`` blocks paced at ``rate``, with plan events; the events sent."""
    dt = 1.0 / rate
    per_step = max(1, int(rate / block))
    t_start = time.time()
    wall0 = time.monotonic()
    await pub.publish(Event("demo.plan", "plan_start", pub.next_seq("demo.plan"), t_start,
                            {"frames": n_frames, "rate_hz": rate}))
    events = 1
    for i in range(n_frames):
        t = t_start + (i * block + np.arange(block)) * dt
        seq = pub.next_seq("demo.signals")
        await pub.publish(Frame("demo.signals", seq, float(t[0]), dt, CHANNELS, UNITS,
                                synthetic_block(rng, t - t_start)))
        if (i + 1) % per_step == 0:
            await pub.publish(Event("demo.plan", "step", pub.next_seq("demo.plan"), float(t[-1]),
                                    {"index": (i + 1) // per_step}))
            events += 1
        delay = wall0 + (i + 1) * block * dt - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
    await pub.publish(Event("demo.plan", "plan_end", pub.next_seq("demo.plan"), time.time(), {"ok": True}))
    return events + 1


async def _replay_matches_store(store: SessionStore, sid: str):
    """Replay (burst) the session to a fresh subscriber and compare with the store, message by message;
    (all identical, the replay's stats)."""
    pub = BusPublisher()
    check = BusSubscriber(pub.endpoint)
    try:
        await pub.wait_for_subscribers(1, timeout=5.0)
        stored = list(store.messages(sid))
        task = asyncio.create_task(replay_session(store, sid, pub, burst=True))
        identical = True
        for expected in stored:
            got = await check.recv(timeout=5.0)
            identical &= got.replay and same_message(expected, got)
        rstats = await task
    finally:
        pub.close()
        check.close()
    return bool(identical and len(stored) > 0), rstats
