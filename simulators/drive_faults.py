"""Fault injection for the simulated OPC UA drive: method calls that are never answered (a hung controller).

:class:`MethodHangs` wraps each method of :class:`simulators.crane_drive.CraneDrive`: it counts the calls per
method (answered or not) and holds every call of a method named in :attr:`MethodHangs.hang` until
:meth:`MethodHangs.release`. The hold comes before the drive's own lock, so other methods still act (as
other requests, on the same session too, are still served).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

Method = Callable[..., Any]  # an async method of the drive (asyncua calls it with the parent node)


class MethodHangs:
    """Per-method call counts and the set of method names whose calls hang."""

    def __init__(self, busy_reply: Callable[[str], Any]) -> None:
        self.hang: set[str] = set()
        self.calls: dict[str, int] = {}
        self._busy = busy_reply  # what a held call answers once released (it did not act)
        self._released = asyncio.Event()

    def wrap(self, name: str, func: Any) -> Method:  # Any: the drive's methods of several signatures
        async def call(parent, *args):
            self.calls[name] = self.calls.get(name, 0) + 1
            if name in self.hang:
                await self._released.wait()
                return self._busy(f"{name} released after a hang")
            return await func(parent, *args)
        return call

    def release(self) -> None:
        """End the hang: held calls return "busy" (they did not act), new calls act again."""
        self.hang.clear()
        self._released.set()
        self._released = asyncio.Event()
