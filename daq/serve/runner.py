"""Runs the queued runs one at a time, each through the one run lifecycle (:func:`daq.run.lifecycle.run`,
as ``hil run`` does), and controls the running one through the :class:`RunContext` the lifecycle hands it
(in-process, in the run's own event loop): the command channel is for other processes (``hil ctl``).

A run executes in a thread with an event loop of its own, so the web server's work never delays the plan
and the lifecycle is exactly the one of ``hil run`` (its own ``asyncio.run``). The server owns the signals:
the lifecycle installs no handlers; SIGTERM/SIGINT of the server abort the current run through its context
(the lifecycle's path to the safe state, the reason naming the signal) before the server exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec

from daq.errors import ConflictError, one_line
from daq.lab.live import start_live
from daq.lab.replicate import push_after_run
from daq.rigs.config import load
from daq.run.lifecycle import RunContext, run
from daq.serve import cross_loop
from daq.serve.configs import ConfigFolder
from daq.serve.relay import LiveRelay
from daq.serve.run_queue import RunEntry, RunQueue

log = logging.getLogger(__name__)

COMMAND_WAIT_S = 3.0      # s a command waits for the run's event loop to take it
RELAY_JOIN_S = 2.0        # s a run waits at its start for the live relay's subscription to reach its tap
SHUTDOWN_WAIT_S = 120.0   # s the server waits for an aborted run to end, besides its safe state's budget
ACTIONS = ("pause", "resume", "stop", "abort")


class NotRunning(ConflictError):
    """The run asked for is not the one running (HTTP 409)."""


class Runner:
    def __init__(self, queue: RunQueue, configs: ConfigFolder, store_path: Path, relay: LiveRelay):
        self.queue, self.configs, self.store_path, self.relay = queue, configs, Path(store_path), relay
        self.ctx: RunContext | None = None
        self._run_loop: asyncio.AbstractEventLoop | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self.closing = False
        self.before_run: Callable[[], Awaitable[Any]] | None = None  # the server: stop a playing replay
        self.active = False  # from taking a run until the relay has let go of it
        self.may_start: Callable[[RunEntry], bool] = lambda entry: True  # the server: the rig's lock

    def start(self) -> Runner:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="runner")
        return self

    def poke(self) -> None:
        """Something was queued."""
        self._wake.set()

    async def _loop(self) -> None:
        while not self.closing:
            entry = self.queue.take(self.may_start)
            if entry is None:
                self._wake.clear()
                await self._wake.wait()
                continue
            self.active = True
            try:
                await self._execute(entry)
            except Exception:  # a bug here must not stop the queue
                log.exception("run %s", entry.id)
                self.queue.finish("failed", "hil serve failed to run it (see its log)")
            finally:
                self.active = False

    async def _execute(self, entry: RunEntry) -> None:
        loop = asyncio.get_running_loop()
        if self.before_run is not None:  # a run matters more than a replay on the live view
            await self.before_run()
        path = self.configs.folder / entry.config
        try:
            _, cfg = load(path)
        except Exception as exc:  # noqa: BLE001 - the config changed since it was queued
            self.queue.finish("failed", one_line(exc))
            self.relay.broadcast({"type": "run", "state": "ended", "run": entry.to_dict()})
            return
        if not cfg.bus.tap:  # the relay listens on the lossy tap: a slow browser never holds up the bus
            cfg = msgspec.structs.replace(cfg, bus=msgspec.structs.replace(cfg.bus, tap="tcp://127.0.0.1:0"))
        self.queue.update(kind=cfg.rig.kind)

        def on_context(ctx: RunContext) -> None:  # in the run's thread
            self.ctx, self._run_loop = ctx, asyncio.get_running_loop()
            loop.call_soon_threadsafe(self._attach, ctx)
            ctx.publisher.wait_for_tap_subscriber(RELAY_JOIN_S)  # the live view sees the run from its start

        def on_session(session_id: str) -> None:  # in the run's thread
            start_live(self.store_path, session_id, cfg)  # [lab]: streamed to the lab while it records
            loop.call_soon_threadsafe(self._session, session_id)

        def work():
            return asyncio.run(run(cfg, self.store_path, file=path, show_progress=False, handle_sigint=False,
                                   handle_term=False, on_session=on_session, on_context=on_context,
                                   started_by=entry.by, sim_speed=entry.sim_speed))

        try:
            result = await asyncio.to_thread(work)
        except Exception as exc:  # noqa: BLE001 - before a session existed (config, unreachable devices)
            done = self.queue.finish("failed", one_line(exc))
        else:
            done = self.queue.finish(result.status, result.reason, result.to_dict(), result.safe)
            push_after_run(self.store_path, cfg)  # [lab]: replicate in the background, never waited for
        finally:
            self.ctx, self._run_loop = None, None
        await self.relay.detach(done.to_dict() if done else None)

    def _attach(self, ctx: RunContext) -> None:
        entry = self.queue.current
        if entry is None or ctx.publisher.tap_endpoint is None:
            return
        self.relay.attach(entry.to_dict(), ctx.publisher.tap_endpoint, ctx.keys,
                          lambda: self.command("status"))

    def _session(self, session_id: str) -> None:
        self.queue.update(session=session_id)
        if self.relay.run is not None:
            self.relay.run["session"] = session_id

    # ------------------------------------------------------------------------------- commands

    async def command(self, action: str, by: str | None = None, timeout: float = COMMAND_WAIT_S) -> dict:
        """Apply ``action`` (status, pause, resume, stop, abort) to the running run through the context the
        lifecycle handed us (in the run's own event loop); recorded with ``by``. Its status after."""
        ctx, loop = self.ctx, self._run_loop
        if ctx is None or loop is None or self.queue.current is None:
            raise NotRunning("no run is in progress")
        try:
            future = cross_loop.submit(loop, lambda: ctx.command(action, by))
        except RuntimeError:  # the run's loop has just closed: the command never runs
            raise NotRunning("the run has just ended") from None
        try:
            async with asyncio.timeout(timeout):  # never wait_for (docs/contracts.md, "Stopping")
                return await asyncio.wrap_future(future)
        except TimeoutError:
            future.cancel()
            raise NotRunning(f"the run did not take the {action} command within {timeout:g} s") from None

    async def control(self, run_id: str, action: str, by: str | None = None) -> dict:
        """``action`` for the run ``run_id`` (its id or its session's), which must be the running one;
        ``by``: who asked (the API's token name)."""
        found = self.queue.find(run_id)
        if found is None:
            raise KeyError(run_id)
        where, entry = found
        if where != "current":
            raise NotRunning(f"run {entry.id} is {entry.status}, not running")
        return await self.command(action, by=f"token {by}" if by else None)

    # ------------------------------------------------------------------------------- shutdown

    async def shutdown(self, why: str = "shutdown") -> dict[str, Any] | None:
        """Take no more runs; abort the current one (``why``: the signal or cause, in its reason) and wait
        until it has reached the safe state and finished its session. Queued runs stay queued."""
        self.closing = True
        self._wake.set()
        outcome = None
        start = time.monotonic()
        limit = SHUTDOWN_WAIT_S  # grows by the run's safe-state budget once its devices are open
        aborted = False
        reason = f"hil serve stopped ({why}) and aborted the run"
        while self._task is not None and not self._task.done() and time.monotonic() < start + limit:
            ctx, loop = self.ctx, self._run_loop
            if ctx is not None:
                limit = max(limit, SHUTDOWN_WAIT_S + ctx.safe_state_budget)
            if self.queue.current is not None and not aborted and ctx is not None and loop is not None:
                with contextlib.suppress(RuntimeError):  # a run still setting up is aborted too
                    loop.call_soon_threadsafe(ctx.abort, reason)
                outcome = ctx.status()
                aborted = True
            await asyncio.wait({self._task}, timeout=0.2)
        if self._task is not None and not self._task.done():
            log.error("the current run did not end within %.0f s of its abort", limit)
            self._task.cancel()
        return outcome
