"""Cancellation survives protocol libraries that swallow it (Python 3.11 ``wait_for`` race)."""

from __future__ import annotations

import asyncio

import pytest

from drivers.cancellation import checked


async def _swallows_cancel(started: asyncio.Event) -> str:
    """Behaves like a library call whose response arrived as the cancellation hit: returns anyway."""
    started.set()
    try:
        await asyncio.sleep(10)
    except asyncio.CancelledError:
        pass
    return "response"


async def test_plain_await_loses_the_cancellation_checked_keeps_it():
    started = asyncio.Event()
    plain = asyncio.ensure_future(_swallows_cancel(started))
    await started.wait()
    plain.cancel()
    assert await plain == "response"  # the failure mode: the caller never learns it was cancelled

    started.clear()
    guarded = asyncio.ensure_future(checked(_swallows_cancel(started)))
    await started.wait()
    guarded.cancel()
    with pytest.raises(asyncio.CancelledError):
        await guarded


async def test_checked_passes_results_and_errors_through():
    async def ok() -> int:
        return 7

    async def bad() -> None:
        raise ValueError("device said no")

    assert await checked(ok()) == 7
    with pytest.raises(ValueError, match="device said no"):
        await checked(bad())


async def test_a_polling_loop_through_checked_stops_when_cancelled():
    """A loop that catches Exception around each call (as the acquisition does) still ends."""
    started = asyncio.Event()

    async def poll_forever() -> None:
        while True:
            try:
                await checked(_swallows_cancel(started))
            except Exception:  # noqa: BLE001 - the acquisition loop tolerates device errors
                pass

    task = asyncio.ensure_future(poll_forever())
    await asyncio.wait_for(started.wait(), 5.0)  # the loop is inside a call: the cancellation hits it there
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=5.0)
    assert done and task.cancelled()
