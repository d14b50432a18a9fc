"""The run lifecycle's side of a dry run (`hil run --dry-run`, or ``[rig].dry_run = true``).

The run's drivers get recording backends (:mod:`drivers.recording`) that hold every command in this run's
:class:`~drivers.outputs.OutputHold`; this module owns the hold and records what it held: every command
as a ``command_held`` event on ``<kind>.dry_run`` (in order, with the value, the limit checks it passed and
the phase: set-up, plan or the safe-state action), one ``safe_state`` event after the safe state, and the
counts in the session's summary (``summary["dry_run"]``). The session's config snapshot carries
``[rig].dry_run = true``, which `hil sessions` and `hil show` display.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import msgspec

from drivers.outputs import HeldCommand, OutputHold
from drivers.safe_state import SafeAction, SafeStep

STREAM_SUFFIX = ".dry_run"


def as_dry_run(cfg: Any, dry_run: bool) -> Any:
    """``cfg`` with ``[rig].dry_run`` set when ``dry_run`` asks for it (the config may already say so)."""
    if dry_run and not cfg.rig.dry_run:
        return msgspec.structs.replace(cfg, rig=msgspec.structs.replace(cfg.rig, dry_run=True))
    return cfg


class DryRun:
    """The hold of one dry run, the phase its commands belong to, and their record on the run's bus."""

    def __init__(self, kind: str) -> None:
        self.hold = OutputHold()
        self.stream = kind + STREAM_SUFFIX
        self.phase = "set-up"
        self._phases: dict[int, str] = {}  # held command number -> phase
        self._safe: list[tuple[str, str, int, int]] = []  # (action, step, first command, end) per step run

    async def record_on(self, ctx: Any) -> None:
        """From now on every held command (those of the set-up first) goes onto the bus as an event."""
        async def sink(cmd: HeldCommand) -> None:
            await ctx.event(self.stream, "command_held", **cmd.to_dict(), phase=self._phase_of(cmd))

        await self.hold.attach(sink)

    def _phase_of(self, cmd: HeldCommand) -> str:
        return self._phases.setdefault(cmd.n, self.phase)

    def safe_actions(self, actions: list[tuple[str, SafeAction]]) -> list[tuple[str, SafeAction]]:
        """``actions`` with each step's held commands marked as that safe-state action's (same steps, same
        budgets)."""
        return [(name, dataclasses.replace(fn, steps=tuple(self._marked(name, s) for s in fn.steps)))
                for name, fn in actions]

    def _marked(self, name: str, step: SafeStep) -> SafeStep:
        async def run() -> Any:
            self.phase = f"safe state: {name}"
            first = len(self.hold.commands)
            try:
                return await step.run()
            finally:
                self._safe.append((name, step.name, first, len(self.hold.commands)))
        return dataclasses.replace(step, run=run)

    async def record_safe_state(self, ctx: Any, safe: bool, errors: list[str]) -> None:
        """One ``safe_state`` event: each action's steps with the commands they held, and whether it was
        confirmed."""
        actions = [{"action": name, "step": step, "commands": [c.to_dict() for c in self.hold.commands[a:b]]}
                   for name, step, a, b in self._safe]
        await ctx.event(self.stream, "safe_state", safe=safe, errors=list(errors), actions=actions)

    def summary(self) -> dict[str, Any]:
        return {**self.hold.summary(), "sent": 0}
