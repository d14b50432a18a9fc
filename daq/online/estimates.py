"""What every online identifier shares: publishing estimate events, remembering them, waking waiters.

The press (:mod:`daq.rigs.press.online`), drive-rig (:mod:`daq.rigs.adjoint.online`) and crane
(:mod:`daq.rigs.crane.online`)
identifiers differ in what they collect and fit; the event side is the same and lives here once:
``emit(kind, body)`` publishes on the rig's ``<prefix>.online`` stream (live: ``RunContext.event``;
replays and tools: :func:`publisher_emit`), published ``estimate`` bodies are kept in order, and a
plan waits for the estimate it needs with :meth:`OnlineEstimates._wait`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, Protocol, TypeVar

from daq.bus.frames import Event, Frame
from daq.bus.pubsub import BusSubscriber, BusTimeout

Emit = Callable[[str, dict], Awaitable[None]]  # (event kind, body) -> publish


class OnlineIdentifier(Protocol):
    async def run(self, sub: BusSubscriber, idle_timeout: float | None = None) -> None: ...


class _Plan(Protocol):
    """The part of a run's context an online identifier starts from."""

    async def event(self, stream: str, kind: str, **body: Any) -> None: ...
    async def subscribe(self, *topics: str) -> BusSubscriber: ...
    def spawn(self, coro: Coroutine, name: str) -> asyncio.Task: ...


Ident = TypeVar("Ident", bound=OnlineIdentifier)


async def start_online(ctx: _Plan, online_stream: str, topics: Sequence[str], build: Callable[[Emit], Ident],
                       name: str) -> Ident:
    """Build an online identifier whose estimates go out as events on ``online_stream``, and run it beside
    the plan (``name``) on a subscriber of ``topics`` connected before this returns. An identifier with a
    ``ready()`` coroutine (one that loads something first) is awaited ready before it listens. The one way
    every rig kind starts its online estimation."""

    async def emit(kind: str, body: dict) -> None:
        await ctx.event(online_stream, kind, **body)

    ident = build(emit)
    ready = getattr(ident, "ready", None)
    if ready is not None:
        await ready()
    ctx.spawn(ident.run(await ctx.subscribe(*topics)), name)
    return ident


class OnlineEstimates:
    """Event side of an online identifier: ``estimates`` (bodies published, in order), ``latest``."""

    def __init__(self, emit: Emit):
        self.emit = emit
        self.estimates: list[dict] = []
        self.latest: dict | None = None
        self._changed = asyncio.Condition()

    async def _publish(self, kind: str, body: dict) -> None:
        """Publish one event; keep ``estimate`` bodies; wake everyone waiting in :meth:`_wait`."""
        await self.emit(kind, body)
        if kind == "estimate":
            self.estimates.append(body)
            self.latest = body
        await self._notify()

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def _wait(self, ready: Callable[[], bool], timeout: float) -> bool:
        """Wait until ``ready()`` holds (re-checked after every publish), at most ``timeout`` s."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout), self._changed:
                await self._changed.wait_for(ready)
        return ready()


    # -- consuming --------------------------------------------------------------------------------
    async def handle(self, msg: Frame | Event) -> None:
        raise NotImplementedError

    def _is_last(self, msg: Frame | Event) -> bool:
        """True after the message that ends the identifier's input (a replay ends there)."""
        raise NotImplementedError

    async def run(self, sub: BusSubscriber, idle_timeout: float | None = None) -> None:
        """Consume ``sub`` until cancelled, ``idle_timeout`` s without a message, or :meth:`_is_last`."""
        try:
            while True:
                try:
                    msg = await sub.recv(timeout=idle_timeout)
                except BusTimeout:
                    return
                await self.handle(msg)
                if self._is_last(msg):
                    return
        finally:
            self.close()

    def close(self) -> None:
        """Release the identifier's workers (called when :meth:`run` ends)."""


def publisher_emit(publisher, stream: str, session_id: str | None = None) -> Emit:
    """An ``emit`` publishing on ``stream`` through a BusPublisher (replays, tools)."""
    async def emit(kind: str, body: dict) -> None:
        await publisher.publish(Event(stream=stream, kind=kind, seq=publisher.next_seq(stream),
                                      t=time.time(), body=body, session_id=session_id))
    return emit
