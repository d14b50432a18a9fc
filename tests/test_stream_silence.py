"""A stream's silence is counted in time the event loop was free to hear it (daq/bus/silence.py): the
press correction's ``max_stall`` once tripped in CI when the test process got no CPU for a moment (a
"force source silent" abort of a healthy simulated press). Over a real bus on loopback."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import numpy as np
import pytest

from daq.bus.frames import Frame
from daq.bus.pubsub import BusPublisher, BusSubscriber
from daq.bus.silence import SilenceMeter
from daq.rigs.press.setpoint_correction import CorrectionSettings, ForceStreamStalled, SetpointCorrector

FORCE = 5000.0  # N, what the stream carries


async def _publish_forever(pub: BusPublisher, period: float = 0.02) -> None:
    for seq in range(10**9):
        t = time.time()
        data = np.array([[FORCE, FORCE, 6e5]])
        await pub.publish(Frame("press.force", seq, t, None, ["force_cmd", "force", "pressure"],
                                ["N", "N", "Pa"], data, timestamps=np.array([t])))
        await asyncio.sleep(period)


async def _nothing(_f: float) -> None:
    return None


async def _measure_with(producer: bool, hold_up: float | None, window: float, period: float = 0.02,
                        max_stall: float = 1.0, source_answered: Callable[[], float] | None = None,
                        ) -> tuple[float | None, str]:
    """Measure ``window`` s of the force stream (published every ``period`` s when ``producer``) while the
    event loop is held up once for ``hold_up`` s (a blocking call: the process gets no turn), 0.3 s in."""
    pub = BusPublisher("tcp://127.0.0.1:0")
    sub = BusSubscriber(pub.endpoint, topics=("data/press.force",))
    tasks = []
    try:
        await pub.wait_for_subscribers(1)
        if producer:
            tasks.append(asyncio.ensure_future(_publish_forever(pub, period)))
        if hold_up is not None:
            async def hold() -> None:
                await asyncio.sleep(0.3)
                time.sleep(hold_up)  # noqa: ASYNC251 - the point: the loop gets no turn
            tasks.append(asyncio.ensure_future(hold()))
        corrector = SetpointCorrector(sub, _nothing, CorrectionSettings(max_stall=max_stall),
                                      source_answered=source_answered)
        try:
            return await corrector.measure(window, since=time.time()), ""
        except ForceStreamStalled as exc:
            return None, str(exc)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        sub.close()
        pub.close()


async def test_a_loop_held_up_longer_than_max_stall_is_not_a_silent_source():
    value, why = await _measure_with(producer=True, hold_up=1.6, window=1.0)
    assert why == "" and value == pytest.approx(FORCE)


async def test_a_silent_source_still_trips_max_stall_and_a_held_up_loop_does_not_hide_it():
    started = time.monotonic()
    value, why = await _measure_with(producer=False, hold_up=None, window=1.0)
    took = time.monotonic() - started
    assert value is None and "silent: no press.force samples for 1.0 s" in why
    assert took >= 1.0  # never before the limit
    value, why = await _measure_with(producer=False, hold_up=1.6, window=1.0)
    assert value is None and "max_stall" in why  # still trips, counted in the loop's free time


def test_the_meter_counts_a_held_up_wait_as_one_slice():
    meter = SilenceMeter(1.0, slice_s=0.1, grace=0.05)
    meter.waited(0.1, time.monotonic() - 5.0)  # the wait took 5 s: the process had no turn
    assert meter.silent == pytest.approx(0.15) and not meter.exceeded
    for _ in range(6):
        meter.waited(0.1, time.monotonic() - 0.1)
    assert meter.silent >= 0.75 and not meter.exceeded
    meter.waited(0.1, time.monotonic() - 0.15)
    meter.waited(0.1, time.monotonic() - 0.15)  # 0.15 + 0.6 + 0.3 s of a loop on time
    assert meter.exceeded and meter.next_wait() == 0.0
    meter.heard()
    assert meter.silent == 0.0 and meter.next_wait() == pytest.approx(0.1)


async def test_a_slow_stream_from_a_source_that_still_answers_is_not_a_silent_source():
    """A machine too busy to carry the stream at its pace (a loaded CI runner, a lowest-versions venv) made
    frames a second apart while the force source answered every poll: the run was aborted as "force source
    silent". The acquisition now tells the correction when the source last answered."""
    value, why = await _measure_with(producer=True, hold_up=None, window=2.5, period=2.0)
    assert value is None and "silent: no press.force samples for 1.0 s" in why  # nothing to say otherwise
    value, why = await _measure_with(producer=True, hold_up=None, window=2.5, period=2.0,
                                     source_answered=time.monotonic)  # the source answers all along
    assert why == "" and value == pytest.approx(FORCE)


async def test_a_source_that_answers_but_whose_frames_never_come_still_stops_the_correction():
    started = time.monotonic()
    value, why = await _measure_with(producer=False, hold_up=None, window=1.0, max_stall=0.3,
                                     source_answered=time.monotonic)
    took = time.monotonic() - started
    assert value is None and "answers, but no press.force samples reached the correction" in why, why
    assert took >= 3.0 and "10 x [correction].max_stall" in why  # SLOW_STREAM_FACTOR x max_stall, not before
    value, why = await _measure_with(producer=False, hold_up=None, window=1.0, max_stall=0.3,
                                     source_answered=lambda: time.monotonic() - 0.5)  # last answer too old
    assert value is None and "silent: no press.force samples for 0.3 s" in why
