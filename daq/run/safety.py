"""Safe-state guard and operator interrupts shared by every plan that moves a machine.

A plan runs inside :class:`SafeStateGuard`: whatever ends the plan (normal end, exception, Ctrl-C,
device fault, lost connection) the guard runs the rig's safe-state actions (force to zero, drive
disabled) and remembers why the plan ended, so the session can be marked with that reason.

:class:`OperatorStop` turns Ctrl-C into two levels: the first asks the plan to finish the current
step and stop cleanly, the second cancels the plan at once (still through the guard).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from daq.errors import PlanError

log = logging.getLogger(__name__)

SafeAction = Callable[[], Awaitable[object]]


class PlanAborted(PlanError):
    """A plan stopped before its end; ``reason`` says why (it ends up in the session)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass
class SafeStateGuard:
    """Run ``actions`` (in order, each with retries) on every exit of the ``async with`` block.

    ``outcome`` is "complete" after a normal exit and "aborted" otherwise; ``reason`` holds the cause.
    Safe-state failures are logged and collected in ``errors``; they never hide the original exception.
    """

    actions: list[tuple[str, SafeAction]]
    attempts: int = 3
    timeout: float = 3.0
    retry_delay: float = 0.3
    outcome: str = "running"
    reason: str | None = None
    errors: list[str] = field(default_factory=list)
    safe: bool = False

    async def __aenter__(self) -> SafeStateGuard:
        return self

    async def __aexit__(self, exc_type, exc, tb) -> bool:
        if exc_type is None:
            self.outcome = "complete" if self.reason is None else "aborted"
        else:
            self.outcome = "aborted"
            if isinstance(exc, PlanAborted):
                self.reason = exc.reason
            elif issubclass(exc_type, asyncio.CancelledError):
                self.reason = self.reason or "cancelled (operator stop or shutdown)"
            elif issubclass(exc_type, KeyboardInterrupt):
                self.reason = "interrupted (Ctrl-C)"
            else:
                self.reason = f"{exc_type.__name__}: {exc}"
        await asyncio.shield(self.reach_safe_state())
        return False

    async def reach_safe_state(self) -> bool:
        """Run every safe action; True when all succeeded."""
        ok = True
        for name, action in self.actions:
            for attempt in range(1, self.attempts + 1):
                try:
                    async with asyncio.timeout(self.timeout):
                        confirmed = await action()
                    if confirmed is False:  # an action that reports instead of raising
                        raise RuntimeError("the device did not confirm the safe state")
                    break
                except Exception as exc:  # noqa: BLE001 - safe state must try everything
                    timed_out = isinstance(exc, TimeoutError)
                    text = str(exc) or (f"no answer within {self.timeout:g} s" if timed_out
                                        else type(exc).__name__)
                    msg = f"safe state: {name} failed (attempt {attempt}/{self.attempts}): {text}"
                    log.warning(msg)
                    if attempt == self.attempts:
                        self.errors.append(msg)
                        ok = False
                    else:
                        await asyncio.sleep(self.retry_delay)
        self.safe = ok
        return ok


class OperatorStop:
    """Two-level Ctrl-C: the first press requests a clean stop after the current step, the second
    cancels ``target`` (the running plan task). Presses while no plan runs (set-up, safe state,
    clean-up) are only logged, so Ctrl-C never interrupts the way to the safe state.
    """

    def __init__(self, target: asyncio.Future | None = None, on_first: Callable[[], object] | None = None):
        self.requested = False
        self.target = target
        self._on_first = on_first
        self._installed = False

    def install(self) -> OperatorStop:
        loop = asyncio.get_running_loop()
        try:
            loop.add_signal_handler(signal.SIGINT, self._on_sigint)
            self._installed = True
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread, or no signals here
            self._installed = False
        return self

    def uninstall(self) -> None:
        if self._installed:
            asyncio.get_running_loop().remove_signal_handler(signal.SIGINT)
            self._installed = False

    def _on_sigint(self) -> None:
        if not self.requested:
            self.requested = True
            log.warning("stop requested: finishing the current step (Ctrl-C again to stop now)")
            if self._on_first is not None:
                self._on_first()
        elif self.target is not None and not self.target.done():
            log.warning("stopping now")
            self.target.cancel()
        else:
            log.warning("already stopping: bringing the rig to the safe state, please wait")
