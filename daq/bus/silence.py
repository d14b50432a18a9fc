"""How long a stream has been silent, counted in time the event loop was free to hear it.

A wall-clock limit on a stream's silence ("no force samples for 1 s") misreads a busy machine as a silent
device: when the process gets no CPU, or its event loop is held up by other work, the waiting timer fires
late and before the producer task (in the same loop, or a device answering over loopback) has had a turn,
so the limit trips although nothing is wrong with the device. The meter waits in short slices; a slice
that overran by more than ``grace`` counts as one slice only. A device that is really silent still trips
the limit after ``limit`` s of a responsive loop; a loop that is late all the time trips it later, never
falsely."""

from __future__ import annotations

import time

#: s of one wait: short enough that a held-up loop costs at most this much silence
SLICE = 0.1
#: s a slice may overrun and still count whole (timer and scheduling jitter of a loaded machine)
GRACE = 0.05


class SilenceMeter:
    """Silence since the last arrival, in loop-responsive seconds (see the module's docstring)."""

    def __init__(self, limit: float, slice_s: float = SLICE, grace: float = GRACE):
        self.limit, self.slice, self.grace = limit, slice_s, grace
        self.silent = 0.0

    def heard(self) -> None:
        """A sample of the stream arrived: the silence starts again."""
        self.silent = 0.0

    def next_wait(self) -> float:
        """s to wait for the next message; 0 when the limit is reached (the caller gives up)."""
        return max(0.0, min(self.slice, self.limit - self.silent))

    def waited(self, asked: float, started: float) -> None:
        """Count a wait of ``asked`` s begun at ``started`` (time.monotonic()) that brought no sample."""
        self.silent += min(time.monotonic() - started, asked + self.grace)

    @property
    def exceeded(self) -> bool:
        return self.silent >= self.limit
