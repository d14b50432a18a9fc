"""Held outputs: in a dry run (`hil run --dry-run`) every command a driver would send is logged here instead.

The drivers know nothing of a dry run: the run gives them recording backends (:mod:`drivers.recording`),
which hand every write to one :class:`OutputHold` - after the driver's own limit checks, which sit above
the backend, so a command that violates a limit is refused exactly as in a real run. Reads go through to
the real transport: the devices are connected and read.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

#: commands kept alive by the link, not by the plan: counted, not logged one by one
KEEPALIVE = frozenset({"heartbeat"})


@dataclass(frozen=True)
class HeldCommand:
    """One command a dry run did not send: which device, what, with which value, after which limit checks."""

    n: int                      # 0, 1, 2, ... in the order they would have been sent
    t: float                    # unix s
    device: str
    address: str
    command: str
    value: Any                  # JSON-able: a number, a word, or a summary (a trajectory's dt, n, peak)
    limits: tuple[str, ...] = ()  # the limit checks it passed before it was held

    def to_dict(self) -> dict[str, Any]:
        return {"n": self.n, "t": self.t, "device": self.device, "address": self.address,
                "command": self.command, "value": self.value, "limits": list(self.limits)}


Sink = Callable[[HeldCommand], Awaitable[None]]


class OutputHold:
    """Collects the commands of one dry run in order; a ``sink`` (the run's recorder) gets each one as well,
    those held before it was attached included."""

    def __init__(self) -> None:
        self.commands: list[HeldCommand] = []
        self.keepalives = 0
        self._sink: Sink | None = None
        self._sent_to_sink = 0

    async def hold(self, device: str, address: str, command: str, value: Any = None,
                   limits: Sequence[str] = ()) -> None:
        """Log ``command`` instead of sending it."""
        if command in KEEPALIVE:
            self.keepalives += 1
            return
        self.commands.append(HeldCommand(len(self.commands), time.time(), device, address, command, value,
                                         tuple(limits)))
        await self._flush()

    async def attach(self, sink: Sink | None) -> None:
        """Hand every command (those held so far first) to ``sink``; None detaches."""
        self._sink = sink
        await self._flush()

    async def _flush(self) -> None:
        while self._sink is not None and self._sent_to_sink < len(self.commands):
            cmd = self.commands[self._sent_to_sink]
            self._sent_to_sink += 1
            await self._sink(cmd)

    def summary(self) -> dict[str, Any]:
        """Counts for the session's outcome: commands held (by device), keep-alive writes held."""
        by_device: dict[str, int] = {}
        for c in self.commands:
            by_device[c.device] = by_device.get(c.device, 0) + 1
        return {"commands_held": len(self.commands), "by_device": by_device,
                "keepalives_held": self.keepalives}
