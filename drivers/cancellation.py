"""Keep task cancellation intact across protocol libraries that lose it.

On Python 3.11 ``asyncio.wait_for`` returns the inner result when the outer task is cancelled
at the moment the inner future completes (CPython gh-86296, fixed in 3.12). pymodbus and asyncua
await every response that way, so a plan that cancels a polling task right when an answer
arrives would see the task carry on as if nothing happened - and never stop. Every protocol call
of the drivers goes through :func:`checked`, which re-raises such a swallowed cancellation.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def checked(aw: Awaitable[T]) -> T:
    """Await ``aw``; raise CancelledError if the current task was cancelled meanwhile but ``aw``
    returned normally (the library swallowed the cancellation)."""
    task = asyncio.current_task()
    before = task.cancelling() if task is not None else 0
    result = await aw
    if task is not None and task.cancelling() > before:
        raise asyncio.CancelledError("cancellation swallowed by a protocol library; re-raised")
    return result
