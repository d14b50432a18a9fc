"""A command handed to a run's event loop (daq/serve/cross_loop.py): it runs there when the loop takes it,
and a loop that stops without taking it leaves no half-made coroutine behind ("coroutine ... was never
awaited", which CI's warnings showed for `hil serve`'s commands)."""

from __future__ import annotations

import asyncio
import gc
import threading
import warnings

import pytest

from daq.serve import cross_loop
from daq.serve.run_queue import RunQueue
from daq.serve.runner import NotRunning, Runner
from tests.polling import poll_until


class _Context:
    """What the runner asks of a run's context here: a command that answers with the run's status."""

    def __init__(self) -> None:
        self.commands: list[tuple[str, str | None]] = []

    async def command(self, action: str, by: str | None) -> dict:
        self.commands.append((action, by))
        return {"state": action}


def _loop_in_thread() -> tuple[asyncio.AbstractEventLoop, threading.Thread]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    return loop, thread


def _stop(loop: asyncio.AbstractEventLoop, thread: threading.Thread) -> None:
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


def _unawaited(record: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in record if "never awaited" in str(w.message)]


async def test_a_command_the_run_loop_never_takes_leaves_no_unawaited_coroutine(tmp_path):
    runner = Runner(RunQueue.open(tmp_path), None, tmp_path / "store.sqlite", None)  # type: ignore[arg-type]
    runner.queue.current = object()  # type: ignore[assignment]
    ctx = _Context()
    run_loop = asyncio.new_event_loop()  # the run's loop, stopped: it never gets to the command
    runner.ctx, runner._run_loop = ctx, run_loop  # type: ignore[assignment]
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        try:
            await runner.command("pause", by="token t", timeout=0.2)
        except NotRunning as exc:  # caught here, not kept: its traceback would hold the command's frame
            refusal = str(exc)
        run_loop.close()  # the run ends: what it had not run is dropped
        for _ in range(3):  # this loop's own callbacks let go of the refused command's future
            await asyncio.sleep(0)
        gc.collect()
    assert refusal == "the run did not take the pause command within 0.2 s"
    assert _unawaited(record) == []
    assert ctx.commands == []


async def test_a_command_reaches_a_running_loop_and_returns_its_answer(tmp_path):
    runner = Runner(RunQueue.open(tmp_path), None, tmp_path / "store.sqlite", None)  # type: ignore[arg-type]
    runner.queue.current = object()  # type: ignore[assignment]
    ctx = _Context()
    loop, thread = _loop_in_thread()
    runner.ctx, runner._run_loop = ctx, loop  # type: ignore[assignment]
    try:
        assert await runner.command("stop", by="token t", timeout=5) == {"state": "stop"}
        assert ctx.commands == [("stop", "token t")]
    finally:
        _stop(loop, thread)
    with pytest.raises(NotRunning, match="the run has just ended"):  # closed: refused at once
        await runner.command("stop", timeout=5)


def test_cancelled_before_the_loop_takes_it_nothing_is_made():
    loop = asyncio.new_event_loop()
    made: list[int] = []

    async def work() -> int:
        return 1

    def make():
        made.append(1)
        return work()

    future = cross_loop.submit(loop, make)
    assert future.cancel()
    loop.run_until_complete(asyncio.sleep(0))  # the loop now gets to the call
    loop.close()
    assert made == []


def test_cancelling_a_started_call_cancels_its_task():
    loop, thread = _loop_in_thread()
    started, cancelled = threading.Event(), threading.Event()

    async def wait_forever() -> None:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    try:
        future = cross_loop.submit(loop, wait_forever)
        assert started.wait(5)
        future.cancel()
        poll_until(cancelled.is_set, timeout=5)
    finally:
        _stop(loop, thread)


def test_an_error_in_the_loop_reaches_the_caller():
    loop, thread = _loop_in_thread()

    async def fail() -> None:
        raise ValueError("refused by the run")

    try:
        future = cross_loop.submit(loop, fail)
        with pytest.raises(ValueError, match="refused by the run"):
            future.result(5)
    finally:
        _stop(loop, thread)
    made: list[int] = []
    with pytest.raises(RuntimeError):  # a closed loop: refused, and nothing made
        cross_loop.submit(loop, lambda: made.append(1) or fail())
    assert made == []
