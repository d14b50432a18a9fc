"""Polling helper for tests: wait for a condition with a generous cap (never a wall-clock assertion)."""

from __future__ import annotations

import asyncio
import time

#: Longest pause between two looks that the cost of a look can set (s).
MAX_PAUSE_S = 0.25


def pause(period: float, cost: float) -> float:
    """The pause before the next look: ``period``, or as long as the last look took when that is longer (up
    to :data:`MAX_PAUSE_S`). A look that asks a server or a browser (an HTTP request, a selenium round trip)
    costs that server 10-100 ms of CPU; polled every 5 ms it would keep a core busy answering the test
    instead of doing what the test waits for. Pausing as long as the look took keeps the poller at half the
    time at most, and a look that costs nothing is still repeated every ``period``."""
    return max(period, min(cost, MAX_PAUSE_S))


async def wait_until(cond, timeout: float = 3.0, period: float = 0.01) -> None:
    """Poll an async or plain predicate until it holds; AssertionError if it does not within ``timeout``."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while True:
        asked = loop.time()
        res = cond()
        if asyncio.iscoroutine(res):
            res = await res
        if res:
            return
        if loop.time() > end:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(pause(period, loop.time() - asked))


async def finished(task: asyncio.Future, timeout: float):
    """The result of ``task``; AssertionError (and the task cancelled) if it has not ended within ``timeout``.

    Unlike ``asyncio.wait_for`` this cannot pass when the task swallows the cancellation it gets on
    the timeout: a task that has to be cancelled is a failure here.
    """
    done, _ = await asyncio.wait({task}, timeout=timeout)
    if not done:
        task.cancel()
        await asyncio.wait({task}, timeout=10.0)
        raise AssertionError(f"{task!r} did not end within {timeout} s")
    return task.result()


def poll_until(cond, timeout: float = 3.0, period: float = 0.005) -> None:
    """:func:`wait_until` for code without an event loop: poll a plain predicate (blocking) until it holds;
    AssertionError if it does not within ``timeout``."""
    end = time.monotonic() + timeout
    while True:
        asked = time.monotonic()
        if cond():
            return
        if time.monotonic() > end:
            raise AssertionError("condition not met in time")
        time.sleep(pause(period, time.monotonic() - asked))
