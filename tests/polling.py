"""Polling helper for tests: wait for a condition with a generous cap (never a wall-clock assertion)."""

from __future__ import annotations

import asyncio


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
