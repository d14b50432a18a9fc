"""Run a coroutine in another thread's event loop, the coroutine made only once that loop takes it.

``asyncio.run_coroutine_threadsafe(coro, loop)`` needs the coroutine made beforehand: when ``loop`` stops
and closes before it gets to the call (a run ending just as ``hil serve`` hands it a command), the coroutine
is never started and Python warns "coroutine ... was never awaited" when it is collected, long after, in
whatever test or request happens to be running. Here the coroutine is made by the loop itself: a loop that
never gets to it never makes it. Cancelling the returned future cancels the task (or keeps it from starting).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any


def submit(loop: asyncio.AbstractEventLoop,
           make: Callable[[], Coroutine[Any, Any, Any]]) -> concurrent.futures.Future:
    """``make()`` run as a task of ``loop`` (from another thread); its outcome in the returned future.
    RuntimeError when ``loop`` is already closed (``make`` is then never called)."""
    future: concurrent.futures.Future = concurrent.futures.Future()

    def start() -> None:
        if future.cancelled():  # given up before the loop got here: nothing is made
            return
        task = loop.create_task(make())

        def settle(done: asyncio.Task) -> None:
            if future.done():
                return
            try:
                if done.cancelled():
                    future.cancel()
                elif (exc := done.exception()) is not None:
                    future.set_exception(exc)
                else:
                    future.set_result(done.result())
            except concurrent.futures.InvalidStateError:  # cancelled meanwhile by the caller's thread
                pass

        def cancel_task(f: concurrent.futures.Future) -> None:
            if f.cancelled():
                with contextlib.suppress(RuntimeError):  # the loop has closed: the task went with it
                    loop.call_soon_threadsafe(task.cancel)

        task.add_done_callback(settle)
        future.add_done_callback(cancel_task)

    loop.call_soon_threadsafe(start)
    return future
