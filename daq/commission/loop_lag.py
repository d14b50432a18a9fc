"""How long the event loop was held up while a read was out: a busy PC is not a slow device.

A read's round trip includes the turns its event loop waits for. When the process gets no CPU, or other
work keeps the loop busy (on a simulated rig the devices answer from the same loop), every read looks
slow, and `hil devices` and preflight would name a healthy device "slower than its timeout". A ticker task
sleeps :data:`TICK` s again and again and adds up how late each wake-up came: the time the loop was not
free. A read's own time is its wall time less the held-up time that fell inside it. A device that is slow
by itself (an answer that comes late while the loop is free) keeps its whole latency."""

from __future__ import annotations

import asyncio
import contextlib
import time

#: s between the ticker's wake-ups: the resolution of the held-up time
TICK = 0.01


class LoopLag:
    """``async with LoopLag() as lag``: ``lag.held()`` is the loop's held-up time so far, in seconds."""

    def __init__(self, tick: float = TICK) -> None:
        self.tick = tick
        self._total = 0.0
        self._due: float | None = None  # perf_counter() the ticker's current sleep should end at
        self._task: asyncio.Task | None = None

    def held(self) -> float:
        """Seconds of wake-ups come late so far, the current overdue one included."""
        pending = 0.0 if self._due is None else max(0.0, time.perf_counter() - self._due)
        return self._total + pending

    async def _run(self) -> None:
        while True:
            self._due = time.perf_counter() + self.tick
            await asyncio.sleep(self.tick)
            self._total += max(0.0, time.perf_counter() - self._due)
            self._due = None

    async def __aenter__(self) -> LoopLag:
        self._task = asyncio.create_task(self._run(), name="loop lag")
        await asyncio.sleep(0)  # the ticker is running before the first read goes out
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
