"""The tests' own polling (tests/polling.py): a look that costs something is not repeated back to back."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.polling import MAX_PAUSE_S, pause, poll_until, wait_until


def test_the_pause_is_the_period_or_what_the_last_look_cost_up_to_a_cap():
    assert pause(0.005, 0.0) == 0.005  # a free look: every period
    assert pause(0.005, 0.04) == 0.04  # a look that took 40 ms: 40 ms before the next
    assert pause(0.005, 3.0) == MAX_PAUSE_S  # a slow look never stretches the pause beyond the cap
    assert pause(1.0, 0.04) == 1.0  # a longer period asked for is kept


def test_a_costly_look_is_taken_at_most_every_twice_its_cost():
    looks = []

    def costly() -> bool:
        looks.append(time.monotonic())
        time.sleep(0.05)  # as a request to a busy server
        return False

    with pytest.raises(AssertionError, match="not met in time"):
        poll_until(costly, timeout=0.5)
    gaps = [b - a for a, b in zip(looks, looks[1:], strict=False)]
    assert gaps and min(gaps) >= 0.1 - 1e-3  # the look (50 ms) and a pause as long (it was back to back)


def test_the_async_wait_pauses_the_same_way():
    looks = []

    async def costly() -> bool:
        looks.append(time.monotonic())
        await asyncio.sleep(0.05)
        return len(looks) >= 3

    asyncio.run(wait_until(costly, timeout=5.0))
    gaps = [b - a for a, b in zip(looks, looks[1:], strict=False)]
    assert len(looks) == 3 and min(gaps) >= 0.1 - 1e-3
