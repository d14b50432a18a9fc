"""Safe-state guard and operator interrupts shared by every plan that moves a machine.

A plan runs inside :class:`SafeStateGuard`: whatever ends the plan (normal end, exception, Ctrl-C,
device fault, lost connection) the guard runs the rig's safe-state actions (force to zero, drive
disabled) and remembers why the plan ended, so the session can be marked with that reason.

:class:`OperatorStop` turns Ctrl-C into two levels: the first asks the plan to finish the current
step and stop cleanly, the second cancels the plan at once (still through the guard). SIGTERM (a
service manager or ``docker stop``) and SIGHUP (the terminal went away) act like the second Ctrl-C.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from daq.errors import PlanError
from drivers.errors import SafeStateError
from drivers.safe_state import SafeAction

log = logging.getLogger(__name__)


class PlanAborted(PlanError):
    """A plan stopped before its end; ``reason`` says why (it ends up in the session)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass
class SafeStateGuard:
    """Run ``actions`` (in order, each with retries) on every exit of the ``async with`` block.

    Each action is a :class:`drivers.safe_state.SafeAction`: its steps, each with its own budget. An attempt
    gets the action's whole budget (the sum of its steps') plus ``slack`` - the guard never cuts a step
    short; the slack is only a backstop for a step that does not end when its own budget cuts it.
    ``outcome`` is "complete" after a normal exit and "aborted" otherwise; ``reason`` holds the cause.
    Safe-state failures are logged and collected in ``errors`` (one line per action) and ``failed_steps``
    (device, step and cause of each step that failed in the last attempt); they never hide the original
    exception. ``safe`` is True only when every action's every step succeeded.
    """

    actions: list[tuple[str, SafeAction]]
    attempts: int = 3
    retry_delay: float = 0.3
    slack: float = 1.0
    outcome: str = "running"
    reason: str | None = None
    errors: list[str] = field(default_factory=list)
    failed_steps: list[dict[str, str]] = field(default_factory=list)
    safe: bool = False

    def __post_init__(self) -> None:
        for name, action in self.actions:
            if not isinstance(action, SafeAction):
                raise TypeError(f"safe action {name!r} is a {type(action).__name__}, not a "
                                "drivers.safe_state.SafeAction (steps with budgets)")

    def attempt_time(self, action: SafeAction) -> float:
        """Seconds one attempt of ``action`` gets: its declared budget plus the slack."""
        return action.budget + self.slack

    @property
    def budget(self) -> float:
        """Seconds the whole safe state may take: every attempt of every action and the delays between."""
        return sum(self.attempts * self.attempt_time(a) + (self.attempts - 1) * self.retry_delay
                   for _, a in self.actions)

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
                failed = await self._attempt(name, action)
                if not failed:
                    break
                text, steps = failed
                msg = f"safe state: {name} failed (attempt {attempt}/{self.attempts}): {text}"
                log.warning(msg)
                if attempt == self.attempts:
                    self.errors.append(msg)
                    self.failed_steps.extend({"action": name, "device": action.device, **step}
                                             for step in steps)
                    ok = False
                else:
                    await asyncio.sleep(self.retry_delay)
        self.safe = ok
        return ok

    async def _attempt(self, name: str, action: SafeAction) -> tuple[str, list[dict[str, str]]] | None:
        """One run of ``action``: None when every step succeeded, else the text and the failed steps."""
        limit = self.attempt_time(action)
        try:
            async with asyncio.timeout(limit):
                await action()
            return None
        except SafeStateError as exc:
            steps = [{"step": f.step, "cause": f.cause} for f in exc.failures]
            return str(exc), steps or [{"step": "(unnamed)", "cause": exc.message}]
        except TimeoutError:
            why = f"did not end within {limit:g} s (its steps' budgets plus {self.slack:g} s)"
            return f"{action.device}: {why}", [{"step": "(whole action)", "cause": why}]
        except Exception as exc:  # noqa: BLE001 - safe state must try everything
            why = str(exc) or type(exc).__name__
            return why, [{"step": "(whole action)", "cause": why}]


class OperatorStop:
    """Two-level Ctrl-C: the first press requests a clean stop after the current step, the second
    cancels ``target`` (the running plan task). Presses while no plan runs (set-up, safe state,
    clean-up) are only logged, so Ctrl-C never interrupts the way to the safe state.

    With ``terminate=True`` SIGTERM and SIGHUP stop at once, like the second press: the stop is
    requested (so a plan still being set up stops before its first step) and ``target`` is cancelled;
    :attr:`terminated` keeps the name of the signal that stopped the plan (the session's reason; a
    signal after :attr:`plan_over` was set only hurries the clean-up). The handlers that were there
    before :meth:`install` are put back by :meth:`uninstall`.
    """

    TERMINATE = ("SIGTERM", "SIGHUP")

    def __init__(self, target: asyncio.Future | None = None, on_first: Callable[[], object] | None = None):
        self.requested = False
        self.terminated: str | None = None
        self.plan_over = False  # set by the owner once the plan has ended (a signal no longer stops it)
        self.target = target
        self._on_first = on_first
        self._installed: dict[int, Callable[[int, FrameType | None], Any] | int | None] = {}  # old handlers

    def install(self, sigint: bool = True, terminate: bool = False) -> OperatorStop:
        wanted: list[tuple[int, Callable[..., None]]] = []  # ...: a lambda binding a default
        if sigint:
            wanted.append((signal.SIGINT, self._on_sigint))
        if terminate:
            for name in self.TERMINATE:
                sig = getattr(signal, name, None)
                if sig is not None:
                    wanted.append((sig, lambda name=name: self._on_terminate(name)))
        loop = asyncio.get_running_loop()
        for sig, callback in wanted:
            try:
                previous = signal.getsignal(sig)
                loop.add_signal_handler(sig, callback)
            except (NotImplementedError, RuntimeError, ValueError):  # not the main thread, or no signals
                continue
            self._installed[sig] = previous
        return self

    def uninstall(self) -> None:
        loop = asyncio.get_running_loop()
        for sig, previous in self._installed.items():
            try:
                loop.remove_signal_handler(sig)
                if previous is not None:
                    signal.signal(sig, previous)
            except (NotImplementedError, RuntimeError, ValueError, TypeError) as exc:
                log.warning("could not restore the handler of signal %s: %s", sig, exc)
        self._installed = {}

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

    def _on_terminate(self, name: str) -> None:
        running = self.target is not None and not self.target.done()
        if self.terminated is None and (running or not self.plan_over):
            self.terminated = name
        first = not self.requested
        self.requested = True
        if first and self._on_first is not None:
            self._on_first()
        if running:
            assert self.target is not None  # running
            log.warning("%s: stopping now", name)
            self.target.cancel()
        else:
            log.warning("%s: stopping; bringing the rig to the safe state, please wait", name)
