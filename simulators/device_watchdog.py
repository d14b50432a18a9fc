"""A simulated device's watchdog: no feed (a write, a heartbeat) for ``timeout`` s while enabled trips it.

A real device counts on a CPU of its own; a simulated one shares the CPU, often the very process and event
loop, with the rig software it guards against. When that process gets no turn for a moment (a loaded CI
machine), every timer is late at once and a wall-clock watchdog trips on waking, before the driver's
heartbeat task has had its turn: a fault the rig never had. So the time between two looks of the device is
counted at most ``held_up`` s: a client that stops feeding it still trips it after ``timeout`` s of a
simulator that runs, as a real device would; a simulator that did not run does not count time it slept."""

from __future__ import annotations

#: s an interval between two looks counts at most (the device looks every few ms when it gets its turns)
HELD_UP = 0.25


class DeviceWatchdog:
    """Silence since the last feed, in time the simulated device was running (see the module docstring)."""

    def __init__(self, timeout: float, held_up: float = HELD_UP):
        self.timeout, self.held_up = timeout, held_up
        self.silent = 0.0
        self._looked: float | None = None

    def fed(self, now: float) -> None:
        """A feed arrived at ``now`` (loop time, s)."""
        self.silent, self._looked = 0.0, now

    def expired(self, now: float) -> bool:
        """Look at ``now`` (loop time, s): has the silence passed the timeout?"""
        if self._looked is not None:
            self.silent += min(max(0.0, now - self._looked), self.held_up)
        self._looked = now
        return self.silent > self.timeout
