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


def poll_until(cond, timeout: float = 3.0, period: float = 0.005) -> None:
    """:func:`wait_until` for code without an event loop: poll a plain predicate (blocking) until it holds;
    AssertionError if it does not within ``timeout``."""
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError("condition not met in time")
        time.sleep(period)
