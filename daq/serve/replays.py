"""Replays of stored sessions on the dashboard: ``POST /api/replays`` plays a session of the server's store
onto a bus of its own (loopback, port 0), through :func:`daq.run.replay.replay_session` - the code of
``hil replay`` - and the live relay follows that bus as it follows a run's tap. Browsers get the replayed
frames and the recorded events (estimates, verdicts, setpoint corrections, the plan outcome) as the same
``/ws/live`` messages, marked ``replay: true`` with the replayed session's id.

One thing is shown live at a time, and a run matters more than a replay: a replay is refused while a run is
in progress, and a queued run that becomes due stops the playing replay first. ``loop`` plays the session
again and again until it is stopped (a dashboard on a wall; the memory benchmark); every pass starts at the
recorded times again, which the relay and the page take as a new pass of their plots.

The replay runs in a thread with an event loop of its own (as a run does): reading the store and pacing the
messages never delays the web server. Its publisher is lossless and waits for the relay: a replay has no
real-time duty, so it slows down rather than loses a message when the server is busy.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from daq.bus.frames import Event
from daq.bus.pubsub import BusPublisher
from daq.errors import ConflictError
from daq.run.replay import replay_session
from daq.serve import cross_loop
from daq.serve.relay import REPLAY_PASS as PASS_STREAM
from daq.store.errors import UnknownSession
from daq.store.reader import SessionReader

log = logging.getLogger(__name__)

MAX_SPEED = 1000.0      # times the recorded pace, at most
SUBSCRIBER_WAIT_S = 5.0  # s the replay waits for the relay's subscription before it publishes
STOP_WAIT_S = 10.0       # s a stop request waits for the replay to end
RUN_END_WAIT_S = 3.0     # s a replay request waits for a run that just ended to leave the live view


class ReplayConflict(ConflictError):
    """A replay cannot start or stop now (HTTP 409)."""


@dataclass
class ReplayEntry:
    """One replay asked for through the API."""

    id: str
    session: str          # the replayed session (full id)
    kind: str
    speed: float
    loop: bool
    by: str               # the token's name
    started_at: float
    ended_at: float | None = None
    status: str = "playing"   # playing | stopping | ended (played through) | stopped | failed
    reason: str | None = None
    passes: int = 0           # passes begun (loop: one more each time the session starts again)
    done: int = 0             # messages published in this pass
    total: int = 0            # messages of the session

    def to_dict(self) -> dict:
        return asdict(self)


def check_speed(value: object) -> float:
    """The replay speed of a request body: a number in (0, MAX_SPEED]; ValueError otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or not 0 < value <= MAX_SPEED:
        raise ValueError(f"speed must be a number above 0 and at most {MAX_SPEED:g} (times the recorded "
                         "pace)")
    return float(value)


class Replayer:
    """Plays at most one replay at a time into the live relay."""

    def __init__(self, store_path: Path, relay, runner):
        self.store_path, self.relay, self.runner = Path(store_path), relay, runner
        self.current: ReplayEntry | None = None
        self.last: ReplayEntry | None = None
        self._task: asyncio.Task | None = None
        self._stop = threading.Event()
        self._thread_loop: asyncio.AbstractEventLoop | None = None
        self._pass_task: asyncio.Task | None = None

    def snapshot(self) -> dict:
        return {"current": self.current.to_dict() if self.current else None,
                "last": self.last.to_dict() if self.last else None}

    def find(self, replay_id: str) -> ReplayEntry | None:
        for entry in (self.current, self.last):
            if entry is not None and replay_id in (entry.id, entry.session):
                return entry
        return None

    # ------------------------------------------------------------------------------- start

    def _lookup(self, session: str) -> tuple[str, str, int]:
        if not self.store_path.exists():
            raise UnknownSession(f"no session {session!r} (the store is empty)")
        with SessionReader(self.store_path, create=False) as reader:
            info = reader.get_session(session)
            return info.id, info.kind, sum(s.n_messages for s in info.streams.values())

    async def start(self, session: str, speed: float, loop: bool, by: str) -> ReplayEntry:
        """Start replaying ``session`` (id or unique prefix); ReplayConflict while a run is in progress or
        another replay plays, UnknownSession for no such session."""
        if self.runner.queue.current is not None:
            raise ReplayConflict("a run is in progress and the live view shows it: replay when it has ended")
        deadline = time.monotonic() + RUN_END_WAIT_S
        while self.runner.active and time.monotonic() < deadline:  # a run just ended: the relay drains it
            await asyncio.sleep(0.05)
        if self.runner.active:
            raise ReplayConflict("a run is ending: replay when it has ended")
        if self.current is not None:
            raise ReplayConflict(f"replay {self.current.id} of session {self.current.session} is playing: "
                                 "stop it first")
        sid, kind, total = await asyncio.to_thread(self._lookup, session)
        if self.current is not None or self.runner.active:  # started meanwhile
            raise ReplayConflict("the live view became busy meanwhile: try again")
        entry = ReplayEntry(uuid.uuid4().hex[:12], sid, kind, speed, loop, by, time.time(), total=total)
        self.current = entry
        self._stop.clear()
        self._task = asyncio.get_running_loop().create_task(self._play(entry), name=f"replay {entry.id}")
        return entry

    # ------------------------------------------------------------------------------- stop

    async def stop(self, reason: str = "stopped by the operator") -> ReplayEntry | None:
        """Stop the playing replay and wait until the relay has let go of it; the entry (None: none)."""
        entry, task = self.current, self._task
        if entry is None or task is None:
            return None
        if entry.status == "playing":
            entry.status, entry.reason = "stopping", reason
        self._stop.set()
        loop, inner = self._thread_loop, self._pass_task
        if loop is not None and inner is not None:
            with contextlib.suppress(RuntimeError):  # that loop just ended: nothing left to cancel
                loop.call_soon_threadsafe(inner.cancel)
        await asyncio.wait({task}, timeout=STOP_WAIT_S)
        return entry

    # ------------------------------------------------------------------------------- playing

    async def _play(self, entry: ReplayEntry) -> None:
        main = asyncio.get_running_loop()
        try:
            await asyncio.to_thread(lambda: asyncio.run(self._publish(entry, main)))
        except Exception as exc:  # noqa: BLE001 - the replay's one-line reason; the server goes on
            log.warning("replay %s: %s", entry.id, exc)
            entry.status, entry.reason = "failed", " ".join(str(exc).split()) or type(exc).__name__
        else:
            entry.status = "stopped" if self._stop.is_set() else "ended"
        finally:
            entry.ended_at = time.time()
            self._thread_loop = self._pass_task = None
            if self.relay.replay is not None and self.relay.replay.get("id") == entry.id:
                await self.relay.detach(entry.to_dict())
            else:  # stopped or failed before it reached the relay: the browsers hear of its end all the same
                self.relay.broadcast({"type": "replay", "state": "ended", "replay": entry.to_dict()})
            self.current, self.last = None, entry

    async def _attach(self, entry: ReplayEntry, endpoint: str) -> None:  # in the server's loop
        if self._stop.is_set():
            return

        async def status() -> dict:
            state = "replaying" if entry.status == "playing" else entry.status
            return {"session": entry.session, "kind": entry.kind, "state": state,
                    "summary": {"replay": entry.id, "pass": entry.passes, "speed": entry.speed,
                                "loop": entry.loop},
                    "progress": {"done": entry.done, "total": entry.total,
                                 "label": f"replay pass {entry.passes}"}}

        self.relay.attach(entry.to_dict(), endpoint, None, status, what="replay")

    async def _publish(self, entry: ReplayEntry, main: asyncio.AbstractEventLoop) -> None:  # its thread
        self._thread_loop = asyncio.get_running_loop()
        reader = SessionReader(self.store_path, create=False)
        pub = BusPublisher("tcp://127.0.0.1:0", send_timeout=None)
        try:
            attached = cross_loop.submit(main, lambda: self._attach(entry, pub.endpoint))
            await asyncio.wrap_future(attached)
            if self._stop.is_set():  # stopped before it reached the relay: no subscriber will come
                return
            with contextlib.suppress(Exception):  # the relay subscribes in milliseconds; else publish anyway
                await pub.wait_for_subscribers(1, SUBSCRIBER_WAIT_S)
                await asyncio.sleep(0.05)
            while not self._stop.is_set():
                entry.passes, entry.done = entry.passes + 1, 0
                if entry.passes > 1:  # on the bus itself: the relay says so exactly between the two passes
                    await pub.publish(Event(PASS_STREAM, "pass", pub.next_seq(PASS_STREAM), time.time(),
                                            entry.to_dict(), session_id=entry.session, replay=True))

                def progress(done: int, total: int) -> None:
                    entry.done, entry.total = done, total

                self._pass_task = asyncio.get_running_loop().create_task(replay_session(
                    reader, entry.session, pub, speed=entry.speed, progress=progress, total=entry.total))
                try:
                    await self._pass_task
                except asyncio.CancelledError:
                    if self._stop.is_set():
                        break
                    raise
                if not entry.loop:
                    break
            await asyncio.sleep(0.1)  # the last messages leave before the socket closes
        finally:
            pub.close()
            reader.close()
