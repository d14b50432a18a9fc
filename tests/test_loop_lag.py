"""A busy PC is not a slow device (daq/commission/loop_lag.py): the time the event loop was held up during a
read is the PC's share of its latency, and `hil devices` and preflight take it off before they compare a
device's reads with its timeout. Beside four busy processes, preflight refused 5 of 14 simulated press runs
as "slower than its timeout" while every device was healthy."""

from __future__ import annotations

import asyncio
import time

from daq.commission.causes import slow_reads
from daq.commission.loop_lag import LoopLag
from daq.commission.probe import _timed


async def _pc_busy() -> float:
    time.sleep(0.4)  # noqa: ASYNC251 - the point: the loop gets no turn, as on a PC with no CPU to spare
    await asyncio.sleep(0)
    return 1.0


async def _device_slow() -> float:
    await asyncio.sleep(1.0)  # the answer comes late while the loop is free
    return 1.0


async def test_a_read_held_up_by_the_pc_is_not_the_device_s_latency():
    _, lat, held = await _timed(3, _pc_busy)
    assert min(lat) >= 0.4 and min(held) >= 0.35  # the blocked 0.4 s, less the ticker's 10 ms resolution
    assert slow_reads(lat, 0.3) is not None  # wall time alone names the device slow
    assert slow_reads(lat, 0.3, held) is None  # it is not


async def test_a_device_slow_by_itself_keeps_its_latency():
    _, lat, held = await _timed(3, _device_slow)
    assert min(lat) >= 1.0
    said = slow_reads(lat, 0.3, held)  # a free loop: its ticks come on time, little is taken off
    assert said is not None and said.startswith("answers in ") and "slower than its timeout (0.3 s)" in said


async def test_the_held_up_time_counts_a_block_still_going_on():
    async with LoopLag() as lag:
        await asyncio.sleep(0.02)
        before = lag.held()
        time.sleep(0.3)  # noqa: ASYNC251 - blocked: the ticker cannot wake to add it up
        assert lag.held() - before >= 0.25  # the overdue wake-up is counted as it stands
