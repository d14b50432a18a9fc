"""Recorder: writes everything a bus subscriber receives into a session of the store.

A message the store refuses (a :class:`StoreError` from ``append``, e.g. a stream changing its
layout) is counted as ``rejected`` and skipped. A failure to *commit* (disk full, database locked
for too long, a read-only file, any error from ``flush``) is fatal: the recorder stops, keeps the
error in :attr:`Recorder.error`, resolves :attr:`Recorder.failed` and calls ``on_error``, so the
run that owns it can stop its plan through the safe state. What was committed before stays readable.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import sqlite3
import time
from collections.abc import Callable

import zmq

import daq.errors
from daq.bus.frames import Event, FrameError, event_header
from daq.bus.pubsub import BusSubscriber, BusTimeout
from daq.store.errors import StoreError
from daq.store.read_write import SessionStore
from daq.store.writer import FLUSH_INTERVAL_S

log = logging.getLogger(__name__)


class RecorderError(daq.errors.StoreError, RuntimeError):
    """The recorder stopped because the store could not commit; ``__cause__`` is the store's error.
    ``disk_full``: the file system (or a quota) had no room left for the commit."""

    disk_full = False


def is_disk_full(exc: BaseException | None) -> bool:
    """True when ``exc`` (or what caused it) is SQLite's SQLITE_FULL or the OS's ENOSPC / EDQUOT."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, sqlite3.Error) and getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL:
            return True
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


class Recorder:
    """Append every received frame/event to ``session_id`` until :meth:`stop` (or a commit fails).

    The store is flushed at least every ``flush_interval`` even when no data arrives, which also
    refreshes the session heartbeat used for crash detection.

    ``on_error(exc)`` is called once (from the event loop) when the recorder stops on a failure;
    :attr:`failed` is a future that resolves to that :class:`RecorderError` (it stays pending while
    the recorder is healthy, so ``asyncio.wait([plan, recorder.failed], return_when=FIRST_COMPLETED)``
    works).
    """

    def __init__(
        self,
        store: SessionStore,
        session_id: str,
        subscriber: BusSubscriber,
        flush_interval: float = FLUSH_INTERVAL_S,
        on_error: Callable[[RecorderError], object] | None = None,
    ):
        self.store = store
        self.session_id = session_id
        self.subscriber = subscriber
        self.flush_interval = flush_interval
        self.on_error = on_error
        self.recorded = 0
        self.rejected = 0
        self.error: RecorderError | None = None
        self._failed: asyncio.Future | None = None
        self._stop = asyncio.Event()
        self._task: asyncio.Task | None = None

    @property
    def failed(self) -> asyncio.Future:
        """Resolves to the :class:`RecorderError` when the recorder stops on a failure."""
        if self._failed is None:
            self._failed = asyncio.get_running_loop().create_future()
            if self.error is not None:
                self._failed.set_result(self.error)
        return self._failed

    def failure(self) -> str | None:
        """Why the recorder stopped, if it failed: its store error, else the exception its task ended with."""
        if self.error is not None:
            return str(self.error)
        task = self._task
        if task is None or not task.done() or task.cancelled() or task.exception() is None:
            return None
        exc = task.exception()
        return f"{type(exc).__name__}: {exc}"

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def run(self, until_idle: float | None = None) -> None:
        """Record until :meth:`stop` is called, nothing arrived for ``until_idle`` s, or a commit failed.

        Never raises for a store failure: it ends with :attr:`error` set (see the class docstring).
        """
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
                        if isinstance(msg, Event):
                            event_header(msg)  # the store checks frames itself, events only loosely
                        self.store.append(self.session_id, msg)  # may commit when due: errors are fatal
                        self.recorded += 1
                    except (StoreError, FrameError) as exc:  # this message was refused, nothing else
                        self.rejected += 1
                        if self.rejected <= 10:
                            log.warning("recorder: %s", exc)
                elif until_idle is not None and now - last_msg >= until_idle:
                    break
                if now - last_flush >= self.flush_interval:
                    self.store.flush()
                    last_flush = now
            self.store.flush()
        except asyncio.CancelledError:
            self._final_flush()
            raise
        except Exception as exc:  # noqa: BLE001 - a commit (or the bus socket) failed: stop, report it
            self._fail(exc)
        finally:
            self._save_stats()

    def _final_flush(self) -> None:
        try:
            self.store.flush()
        except Exception as exc:  # noqa: BLE001 - kept in .error and reported
            self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        if self.error is not None:
            return
        what = (
            f"cannot receive from the bus at {self.subscriber.endpoint}"
            if isinstance(exc, zmq.ZMQError)
            else f"cannot commit session {self.session_id} to {self.store.path}"
        )
        if is_disk_full(exc):
            err = RecorderError(f"disk full: no room left to commit session {self.session_id} to "
                                f"{self.store.path} after {self.recorded} messages "
                                f"({type(exc).__name__}: {exc})")
            err.disk_full = True
        else:
            err = RecorderError(f"recorder stopped: {what}: {type(exc).__name__}: {exc}")
        err.__cause__ = exc
        self.error = err
        log.error("%s (%d messages recorded before)", err, self.recorded)
        if self._failed is not None and not self._failed.done():
            self._failed.set_result(err)
        if self.on_error is not None:
            try:
                self.on_error(err)
            except Exception:
                log.exception("recorder: on_error callback failed")

    def _save_stats(self) -> None:
        try:
            self.store.set_stats(self.session_id, self.stats())
        except Exception as exc:  # noqa: BLE001 - the store may be the thing that failed
            log.warning("recorder: could not save the session stats: %s", exc)

    def start(self) -> Recorder:
        """Run in a background task of the running loop."""
        self._task = asyncio.get_running_loop().create_task(self.run())
        return self

    async def stop(self, drain: float = 0.0, max_drain: float = 10.0) -> None:
        """Stop recording; with ``drain`` > 0 first keep recording until the bus is quiet that long
        (but for at most ``max_drain`` s: a producer that never stops must not keep us here).

        Does not raise for a store failure; check :attr:`error` afterwards.
        """
        if drain > 0 and self.running:
            give_up = time.monotonic() + max_drain
            while time.monotonic() < give_up and self.running:
                before = self.recorded + self.rejected
                await asyncio.sleep(drain)
                if self.recorded + self.rejected == before:
                    break
            else:
                if self.running:
                    log.warning("recorder: the bus was still busy after %.0f s; stopping anyway", max_drain)
        self._stop.set()
        if self._task is not None:
            await self._task
            self._task = None

    def stats(self) -> dict:
        stats = {"recorded": self.recorded, "rejected": self.rejected, **self.subscriber.stats.as_dict()}
        if self.error is not None:
            stats["error"] = str(self.error)
        return stats
