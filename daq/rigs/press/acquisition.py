"""Force acquisition of the press: poll the force source and publish ``press.force`` frames.

Runs as a companion of the press plan: a failure (device fault bit, lost connection, repeated bad
readings) ends the plan through the lifecycle. :meth:`ForceAcquisition.finish` ends it between two
polls, so no request is left in flight when the devices close (a cancelled Modbus read would answer
into a closed client and log "received pdu without a corresponding request").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time

import numpy as np

from daq.bus.frames import Frame
from daq.bus.pubsub import BusPublisher
from drivers.clock import WALL, Clock
from drivers.errors import DeviceFault

log = logging.getLogger(__name__)

FORCE_STREAM = "press.force"


def _where(source) -> tuple[str, str]:
    """(device, address) of the force source for :class:`DeviceFault`."""
    return str(getattr(source, "name", "force source")), str(getattr(source, "address", "?"))


class ForceAcquisition:
    """Polls the force source at ``rate`` Hz and publishes blocks of (command, force, pressure): ``block``
    samples, or fewer when the polls fall behind the rate (a frame never spans more than a full block would).

    A poll may fail once or twice on a busy line; ``max_failures`` failures in a row end the plan. The
    device's watchdog is fed by a task of its own every ``heartbeat_interval`` s; the status (fault bits)
    is read after every frame.
    """

    def __init__(self, source, publisher: BusPublisher, session_id: str, rate: float = 200.0,
                 block: int = 10, max_failures: int = 3, clock: Clock = WALL, max_gap: float = math.inf):
        self.source = source
        self.publisher = publisher
        self.session_id = session_id
        self.period = 1.0 / rate
        self.block = block
        self.command = 0.0
        self.max_failures = max_failures
        self.clock = clock          # the run's clock: the poll period and the samples' times are its seconds
        self.max_gap = max_gap      # clock seconds between two polls beyond which the clock is told it is
                                    # too fast for this machine (inf: never)
        self._last = math.inf       # clock time of the last poll (none yet)
        self.answered_at = -math.inf  # time.monotonic() of the source's last answer (a poll, its status):
                                      # the correction asks whether a slow stream's source still answers
        # a frame goes out when it holds ``block`` samples or spans the time a full block spans at ``rate``,
        # whichever comes first: on a slow line (a loaded machine, a busy device) frames keep their pace
        # instead of waiting for ``block`` slow polls (ten 0.1 s polls made a 1 s silence, which the
        # correction's max_stall takes for a dead source)
        self._block_span = (block - 1) * self.period
        self._finish = asyncio.Event()
        self._finished = asyncio.Event()

    async def run(self) -> None:
        rows: list[tuple[float, float, float]] = []
        stamps: list[float] = []
        next_t = self.clock.monotonic()
        failures = 0
        beats = asyncio.create_task(self._heartbeats(), name="force source heartbeat")
        try:
            await self._loop(rows, stamps, next_t, failures, beats)
        finally:
            self._finish.set()  # the heartbeat ends after the write in flight (none is left hanging)
            await asyncio.gather(beats, return_exceptions=True)
            self._finished.set()

    async def _heartbeats(self) -> None:
        """Feed the device's watchdog every ``heartbeat_interval`` s of real time (the watchdog counts real
        time), on its own schedule: a frame held up on the bus (a recorder lagging on a loaded PC) must not
        starve a healthy source of its heartbeat; a stalled process still does, and the output goes off."""
        interval = float(getattr(getattr(self.source, "settings", None), "heartbeat_interval", 0.2))
        while not self._finish.is_set():
            try:
                await self.source.heartbeat()
            except Exception as exc:
                raise DeviceFault(*_where(self.source), f"force source lost: {exc}") from exc
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval):
                    await self._finish.wait()

    async def finish(self, timeout: float = 2.0) -> None:
        """Stop after the poll in flight (no request is left hanging); publishes what was read."""
        self._finish.set()
        try:
            async with asyncio.timeout(timeout):
                await self._finished.wait()
        except TimeoutError:
            log.warning("force acquisition did not finish within %.1f s", timeout)

    async def _loop(self, rows, stamps, next_t, failures, beats: asyncio.Task) -> None:
        while not self._finish.is_set():
            if beats.done():
                beats.result()  # the heartbeat's DeviceFault ends the plan
            try:
                asked = self.clock.time()
                force = await self.source.read_force()
                answered = self.clock.time()
                self.answered_at = time.monotonic()
                pressure = await self.source.read_pressure()
                self.answered_at = time.monotonic()
                failures = 0
            except Exception as exc:  # repeated failures of the source end the plan
                failures += 1
                if failures >= self.max_failures:
                    raise DeviceFault(*_where(self.source), f"force source lost: {exc}") from exc
                log.warning("force source poll failed (%d/%d): %s", failures, self.max_failures, exc)
                next_t = self.clock.monotonic() + self.period
                continue
            # the force was sampled while its request was out: stamped half way (on a fast clock a poll's
            # round trip is many clock milliseconds; stamped at its end, the force would look younger)
            now = asked + 0.5 * (answered - asked)
            self._check_gap(now)
            stamps.append(now)
            rows.append((self.command, force, pressure))
            if len(rows) >= self.block or now - stamps[0] >= self._block_span:
                await self._publish(rows, stamps)
                rows, stamps = [], []
                await self._check_status()
            next_t += self.period
            with contextlib.suppress(TimeoutError):
                async with self.clock.timeout(next_t - self.clock.monotonic()):
                    await self._finish.wait()
        if rows:
            await self._publish(rows, stamps)

    def _check_gap(self, now: float) -> None:
        """Tell the clock when two polls lie further apart than the period plus ``max_gap``: the drivers
        cannot keep up with the clock's speed, and the force would be sampled too thinly to be measured."""
        if self._last < now:
            self.clock.note_lag("the force acquisition's polls", now - self._last - self.period, self.max_gap)
        self._last = now

    async def _check_status(self) -> None:
        try:
            status = await self.source.read_status()
        except Exception as exc:
            raise DeviceFault(*_where(self.source), f"force source lost: {exc}") from exc
        self.answered_at = time.monotonic()
        fault = getattr(status, "fault_code", 0)
        if fault or getattr(status, "fault", False):
            raise DeviceFault(*_where(self.source), f"force source fault code {fault}: "
                              f"{getattr(status, 'fault_text', '')}".strip(), int(fault or 0))

    async def _publish(self, rows, stamps) -> None:
        await self.publisher.publish(Frame(
            stream=FORCE_STREAM, seq=self.publisher.next_seq(FORCE_STREAM), t0=stamps[0], dt=None,
            channels=["force_cmd", "force", "pressure"], units=["N", "N", "Pa"],
            data=np.asarray(rows, dtype=np.float64), timestamps=np.asarray(stamps),
            session_id=self.session_id))
