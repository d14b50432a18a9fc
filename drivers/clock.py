"""The one clock of a run: what its plan waits on, what its recorded times are, what simulated physics
runs on.

On real hardware it is the wall clock, always (``Clock()``, :data:`WALL`). On a simulated rig it runs
``speed`` times faster than real time while the plan waits on it (:meth:`Clock.sleep`, :meth:`Clock.waiting`:
settle times, sample periods, measuring windows, a trajectory played, an axis moving), and at the real pace
while the plan talks to its devices: the protocols cannot go faster, and a block of readings then spans the
same simulated time at any speed, so the simulated plant does not drift further during it and a run gives the
same answers at any speed. :meth:`Clock.time` counts simulated seconds (what a session records) and the
simulated devices run their physics on it. Protocol timeouts (a request's deadline, a reconnect budget, a
device watchdog) are not the clock's: they guard the link and stay real seconds.

A simulator whose physics falls behind the clock by more than it can bear calls :meth:`Clock.behind`; the
run lifecycle watches :meth:`Clock.overrun` and stops the plan safe with that one line, rather than record
data of a plant that did not keep up. It lives on the floor (``drivers/``) because the drivers, the
simulators and the service all see the same clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Iterator

MAX_SPEED = 1000.0  #: the fastest a simulated rig may be asked to run
LAG_WEIGHT = 0.05   #: weight of the newest lag in a task's running mean (about the last 20 ticks)
LAG_CAP = 4.0       #: a lag counts in that mean with at most this many bounds (one stall is no overload)


class Clock:
    """Wall time (``speed`` 1) or simulated time that runs ``speed`` times faster than real time while the
    plan waits on it, and at the real pace while the plan talks to its devices (see the module docstring)."""

    def __init__(self, speed: float = 1.0) -> None:
        if not (math.isfinite(speed) and 0 < speed <= MAX_SPEED):
            raise ValueError(f"clock speed must be > 0 and <= {MAX_SPEED:g}, got {speed!r}")
        self.speed = float(speed)
        self._wall0 = time.time()
        self._anchor_real = time.monotonic()  # real and clock time of the last change of pace
        self._anchor = 0.0
        self._waits = 0                       # plan waits in progress: the clock runs fast while any is
        self._overrun: str | None = None
        self._overrun_seen: asyncio.Event | None = None
        self._armed_at: float | None = None  # clock time the recording began (None: not recording)
        self.worst_lag = 0.0  # the largest lag reported while armed (clock seconds), for benchmarks
        self._mean_lag: dict[str, float] = {}  # what -> running mean of its lags (clock seconds)

    @property
    def simulated(self) -> bool:
        """Whether this clock runs at another speed than the wall clock."""
        return self.speed != 1.0

    @property
    def pace(self) -> float:
        """Clock seconds per real second now: ``speed`` while the plan waits, else 1."""
        return self.speed if self._waits else 1.0

    def time(self) -> float:
        """Seconds since the epoch on this clock: the wall clock at speed 1, else the wall time the clock was
        made plus the clock seconds since."""
        if self.speed == 1.0:
            return time.time()
        return self._wall0 + self.monotonic()

    def monotonic(self) -> float:
        """Clock seconds from an arbitrary origin, never going back (for spans and schedules)."""
        return self._anchor + (time.monotonic() - self._anchor_real) * self.pace

    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        """A wait of the plan (a settle time, a sample period, a measuring window, a trajectory or an axis
        move played by a simulated device): the clock runs ``speed`` times faster while it lasts."""
        self._repace(+1)
        try:
            yield
        finally:
            self._repace(-1)

    def _repace(self, step: int) -> None:
        now = time.monotonic()
        self._anchor, self._anchor_real = self._anchor + (now - self._anchor_real) * self.pace, now
        self._waits += step

    async def sleep(self, seconds: float) -> None:
        """A wait of the plan of ``seconds`` on this clock (``seconds / speed`` real seconds)."""
        with self.waiting():
            await asyncio.sleep(max(0.0, seconds) / self.speed)

    async def tick(self, seconds: float) -> None:
        """Sleep about ``seconds`` of clock time at the present pace, without making the clock run fast (a
        simulator's physics task, a poll of its own): it may wake early or late if the pace changes."""
        await asyncio.sleep(max(0.0, seconds) / self.pace)

    def timeout(self, seconds: float | None) -> asyncio.Timeout:
        """``asyncio.timeout`` of about ``seconds`` on this clock at the present pace (None: none)."""
        return asyncio.timeout(None if seconds is None else max(0.0, seconds) / self.pace)

    # -- too fast for this machine ----------------------------------------------------------------------
    @property
    def armed(self) -> bool:
        """Whether a plan records now: only then does falling behind stop the run."""
        return self._armed_at is not None

    @armed.setter
    def armed(self, on: bool) -> None:
        self._armed_at = self.monotonic() if on else None

    def note_lag(self, what: str, lag: float, bound: float) -> None:
        """A simulation's periodic task ran ``lag`` clock seconds late. When the running mean of its lags
        (each capped at :data:`LAG_CAP` bounds, weighted :data:`LAG_WEIGHT`: about the last 20 ticks) exceeds
        ``bound``, :meth:`behind`: the task is late tick after tick, the machine cannot keep up.
        One stall of the whole process (the OS, a busy neighbour) does not stop a run: the simulators bring
        their state up to date on every request, so a stall delays data without making them wrong. Only the
        part of a lag after the recording began counts."""
        if self._armed_at is None:
            return
        lag = min(max(lag, 0.0), self.monotonic() - self._armed_at)
        self.worst_lag = max(self.worst_lag, lag)
        mean = self._mean_lag[what] = ((1 - LAG_WEIGHT) * self._mean_lag.get(what, 0.0)
                                       + LAG_WEIGHT * min(lag, LAG_CAP * bound))
        if mean > bound:
            self.behind(what, mean, bound)

    def behind(self, what: str, lag: float, bound: float) -> None:
        """Say that ``what`` fell ``lag`` clock seconds behind its schedule, more than the ``bound`` it bears
        (the first report while armed is kept: it is the one line the run stops with)."""
        if not self.armed:  # nothing is recorded yet (start-up, imports): a late tick harms no data
            return
        if self._overrun is None:
            self._overrun = (f"simulation too slow for speed {self.speed:g} on this machine: {what} ran "
                             f"{lag:.3g} s behind its schedule on average (bound {bound:g} s, simulated); "
                             "run at a lower --sim-speed")
        if self._overrun_seen is not None:
            self._overrun_seen.set()

    @property
    def overrun_reason(self) -> str | None:
        """The line :meth:`behind` made, if anything fell behind."""
        return self._overrun

    async def overrun(self) -> str:
        """Wait until something falls behind; returns its line (a run watches this beside its plan)."""
        if self._overrun_seen is None:
            self._overrun_seen = asyncio.Event()
        if self._overrun is None:
            await self._overrun_seen.wait()
        assert self._overrun is not None  # set before the event
        return self._overrun


class Schedule:
    """The ticks of a periodic task on a clock: :meth:`wait` sleeps until the next tick and says how late the
    task is (clock seconds past the tick it should have run at), so a simulator can tell when it cannot keep
    up. A late tick is not caught up: the schedule moves on from now.

    ``min_real``: the shortest real period (s) of a task whose state is exact for any step (it is brought up
    to date on every request anyway): a fast clock then ticks it coarser in clock time, not faster in real
    time, and the event loop is left for the drivers."""

    def __init__(self, clock: Clock, period: float, min_real: float = 0.0) -> None:
        self.clock, self.period = clock, max(float(period), min_real * clock.speed)
        self._next = clock.monotonic() + self.period

    async def wait(self) -> float:
        """Sleep until the next tick; the lag (>= 0) at which this tick runs."""
        await self.clock.tick(self._next - self.clock.monotonic())
        now = self.clock.monotonic()
        lag = max(0.0, now - self._next)
        self._next = now + self.period if lag > 0 else self._next + self.period
        return lag


WALL = Clock()  #: the wall clock (real hardware, and every simulator not given another clock)
