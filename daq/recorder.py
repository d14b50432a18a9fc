"""Recorder: writes everything a bus subscriber receives into a session of the store."""

from __future__ import annotations

import asyncio
import logging
import time

from daq.bus import BusSubscriber, BusTimeout
from daq.store import FLUSH_INTERVAL_S, SessionStore, StoreError

log = logging.getLogger(__name__)


class Recorder:
    """Append every received frame/event to ``session_id`` until :meth:`stop`.

    The store is flushed at least every ``FLUSH_INTERVAL_S`` even when no data arrives, which
    also refreshes the session heartbeat used for crash detection.
    """

    def __init__(
        self,
        store: SessionStore,
        session_id: str,
        subscriber: BusSubscriber,
        flush_interval: float = FLUSH_INTERVAL_S,
    ):
        self.store = store
        self.session_id = session_id
        self.subscriber = subscriber
        self.flush_interval = flush_interval
        self.recorded = 0
        self.rejected = 0
        self._stop = asyncio.Event()
        self._task: asyncio.Task | None = None

    async def run(self, until_idle: float | None = None) -> None:
        """Record until :meth:`stop` is called (or nothing arrived for ``until_idle`` s)."""
        last_flush = time.monotonic()
        last_msg = time.monotonic()
        try:
            while not self._stop.is_set():
                try:
                    msg = await self.subscriber.recv(timeout=self.flush_interval / 2)
                except BusTimeout:
                    msg = None
                now = time.monotonic()
                if msg is not None:
                    last_msg = now
                    try:
                        self.store.append(self.session_id, msg)
                        self.recorded += 1
                    except StoreError as exc:
                        self.rejected += 1
                        if self.rejected <= 10:
                            log.warning("recorder: %s", exc)
                elif until_idle is not None and now - last_msg >= until_idle:
                    break
                if now - last_flush >= self.flush_interval:
                    self.store.flush()
                    last_flush = now
        finally:
            self.store.flush()
            self.store.set_stats(self.session_id, self.stats())

    def start(self) -> Recorder:
        """Run in a background task of the running loop."""
        self._task = asyncio.get_running_loop().create_task(self.run())
        return self

    async def stop(self, drain: float = 0.0, max_drain: float = 10.0) -> None:
        """Stop recording; with ``drain`` > 0 first keep recording until the bus is quiet that long
        (but for at most ``max_drain`` s: a producer that never stops must not keep us here)."""
        if drain > 0 and self._task is not None:
            give_up = time.monotonic() + max_drain
            while time.monotonic() < give_up:
                before = self.recorded + self.rejected
                await asyncio.sleep(drain)
                if self.recorded + self.rejected == before:
                    break
            else:
                log.warning("recorder: the bus was still busy after %.0f s; stopping anyway", max_drain)
        self._stop.set()
        if self._task is not None:
            await self._task
            self._task = None

    def stats(self) -> dict:
        return {"recorded": self.recorded, "rejected": self.rejected, **self.subscriber.stats.as_dict()}
