"""Replay: publish a stored session onto the bus so consumers run unchanged on recorded data.

Replayed messages keep their stream, sequence number, time base, channels, units and payload;
only ``replay`` is set to True and ``session_id`` names the session being replayed.
Timing follows the recorded times (``t0`` of frames, ``t`` of events) divided by ``speed``,
or ``burst=True`` sends as fast as the (lossless) bus accepts.

Messages are read from the store one at a time through a cursor (:meth:`SessionStore.messages`),
so a replay's memory does not grow with the session; ``progress(done, total)`` reports long ones.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass

from daq.bus.frames import Event, Frame
from daq.bus.pubsub import BusPublisher
from daq.store.reads import SessionReads

#: Messages between two progress reports.
PROGRESS_EVERY = 256


@dataclass
class ReplayStats:
    session_id: str
    frames: int = 0
    events: int = 0
    samples: int = 0
    duration_s: float = 0.0  # wall time of the replay
    span_s: float = 0.0  # recorded time span covered


def _time_of(msg: Frame | Event) -> float:
    return msg.t0 if isinstance(msg, Frame) else msg.t


async def replay_session(
    store: SessionReads,
    session_id: str,
    publisher: BusPublisher,
    *,
    speed: float = 1.0,
    burst: bool = False,
    streams: list[str] | None = None,
    progress: Callable[[int, int], None] | None = None,
    total: int | None = None,
) -> ReplayStats:
    """Publish every stored message of a session in original order (see module docstring).

    ``progress(messages sent, total)`` is called every :data:`PROGRESS_EVERY` messages and at the
    end; ``total`` defaults to the number of stored messages of the replayed streams.
    """
    if not burst and not speed > 0:
        raise ValueError(f"replay speed must be > 0, got {speed}")
    info = store.get_session(session_id)
    if total is None:
        total = sum(s.n_messages for name, s in info.streams.items() if streams is None or name in streams)
    stats = ReplayStats(session_id=info.id)
    sent = 0
    start_wall = time.monotonic()
    t_first: float | None = None
    t_prev = None
    for msg in store.messages(info.id, streams=streams):
        t = _time_of(msg)
        if t_first is None:
            t_first = t
        if not burst:
            # Recorded times are monotonic per stream, not necessarily across streams: never go back.
            t_prev = t if t_prev is None else max(t_prev, t)
            delay = start_wall + (t_prev - t_first) / speed - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
        await publisher.publish(dataclasses.replace(msg, replay=True, session_id=info.id))
        if isinstance(msg, Frame):
            stats.frames += 1
            stats.samples += msg.n_samples
        else:
            stats.events += 1
        stats.span_s = max(stats.span_s, t - (t_first or t))
        sent += 1
        if progress is not None and sent % PROGRESS_EVERY == 0:
            progress(sent, max(total, sent))
    if progress is not None:
        progress(sent, max(total, sent))
    stats.duration_s = time.monotonic() - start_wall
    return stats
