"""Polling helper for tests: wait for a condition with a generous cap (never a wall-clock assertion)."""

from __future__ import annotations

import asyncio
import time


async def wait_until(cond, timeout: float = 3.0, period: float = 0.01) -> None:
    """Poll an async or plain predicate until it holds; AssertionError if it does not within ``timeout``."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while True:
        res = cond()
        if asyncio.iscoroutine(res):
            res = await res
        if res:
            return
        if loop.time() > end:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(period)


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


#: poll_until without a period: the first wait, how it grows after each miss, and the longest
FIRST_WAIT, GROWTH, LONGEST_WAIT = 0.005, 1.5, 0.1


def poll_until(cond, timeout: float = 3.0, period: float | None = None) -> None:
    """:func:`wait_until` for code without an event loop: poll a plain predicate (blocking) until it holds;
    AssertionError if it does not within ``timeout``. Without ``period`` the waits start at 5 ms and grow
    by half after each miss up to 0.1 s: a condition that holds soon is seen soon, and a long wait on a
    probe that costs something (an HTTP request, a browser's DOM through the WebDriver) does not keep a
    core busy asking."""
    end = time.monotonic() + timeout
    wait = FIRST_WAIT if period is None else period
    while not cond():
        if time.monotonic() > end:
            raise AssertionError("condition not met in time")
        time.sleep(wait)
        if period is None:
            wait = min(wait * GROWTH, LONGEST_WAIT)
