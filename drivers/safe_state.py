"""The one contract of a safe action: a device's way to its safe state as named steps, each with its own
time budget.

A driver that can move a machine offers a :class:`SafeAction` (force to zero then output off; stop then
disable then read back). Running it tries every step in order: a step that fails or does not end within
its budget is cut there and the next step is still tried - a disable is worth sending after a stop that
hung, and a read-back is worth trying after a failed disable while the device is still reachable. Only when a
step found no way to the device at all (:class:`~drivers.errors.DeviceUnreachable`: every connect try failed)
are the steps after it not tried in that run - they would wait for the same; the guard runs the action again.
Failure has one form: :class:`~drivers.errors.SafeStateError` naming the device and each failed step with its
cause (``failures``); success returns None. The action's :attr:`~SafeAction.budget` is the sum of its
steps' budgets, so whoever runs it (``daq.run.safety.SafeStateGuard``) can give it that time and never
cut a step short. It lives in drivers/ because drivers import nothing of the service.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from drivers.errors import DeviceError, DeviceUnreachable, SafeStateError, StepFailure

__all__ = ["SafeAction", "SafeStateError", "SafeStep", "StepFailure"]

log = logging.getLogger(__name__)


def _always() -> bool:
    return True


@dataclass(frozen=True)
class SafeStep:
    """One step to the safe state: ``run`` gets ``budget`` seconds, then it is cut.

    ``check(result)`` names what the step's result shows to be wrong (None: fine), e.g. a read-back that
    still says "enabled". ``needs_link``: after an earlier failed step, this step is tried only while the
    device is reachable (a read-back gains nothing from a reconnect; a disable does, so it has False).
    """

    name: str
    budget: float
    run: Callable[[], Awaitable[object]]
    check: Callable[[object], str | None] | None = None
    needs_link: bool = False

    def __post_init__(self) -> None:
        if not self.budget > 0:
            raise ValueError(f"safe step {self.name!r}: budget {self.budget!r} s must be > 0")


@dataclass(frozen=True)
class SafeAction:
    """A device's safe action: its steps in order, tried one after the other, each within its budget.

    ``linked()`` says whether the device is still reachable (for the steps that need it); ``error`` is
    the SafeStateError subclass the driver raises (e.g. the servo drive's own).
    """

    device: str
    address: str
    steps: tuple[SafeStep, ...]
    linked: Callable[[], bool] = _always
    error: type[SafeStateError] = field(default=SafeStateError)

    @property
    def budget(self) -> float:
        """Seconds one run of the action may take: the sum of its steps' budgets."""
        return sum(step.budget for step in self.steps)

    async def __call__(self) -> None:
        """Try every step; raise :attr:`error` naming each failed step (and why) when any failed."""
        failures: list[StepFailure] = []
        unreachable: str | None = None  # the step that found no way to the device at all
        for step in self.steps:
            if unreachable is not None:
                why = f"not tried: no connection could be made in {unreachable!r}"
                failures.append(StepFailure(step.name, why))
                continue
            if step.needs_link and failures and not self.linked():
                failures.append(StepFailure(step.name, "not tried: no connection after the failed step"))
                continue
            cause, lost = await _try(step)
            if cause is not None:
                failures.append(StepFailure(step.name, cause))
                unreachable = step.name if lost else None
        if failures:
            msg = "safe state not reached: " + "; ".join(f"{f.step}: {f.cause}" for f in failures)
            log.warning("%s (%s): %s", self.device, self.address, msg)
            raise self.error(self.device, self.address, msg, failures=failures)


async def _try(step: SafeStep) -> tuple[str | None, bool]:
    """Run one step within its budget: the cause of its failure in words (None: it succeeded), and whether
    the device could not be reached at all (then the next steps would only wait for the same)."""
    cut = asyncio.timeout(step.budget)
    try:
        async with cut:
            result = await step.run()
    except TimeoutError:
        if cut.expired():
            return f"no answer within its budget of {step.budget:g} s (cut)", False
        return "no answer (timed out)", False
    except DeviceError as exc:
        return exc.message, isinstance(exc, DeviceUnreachable)
    except Exception as exc:  # noqa: BLE001 - a safe action names any failure and goes on
        return repr(exc), False
    return (step.check(result) if step.check is not None else None), False
