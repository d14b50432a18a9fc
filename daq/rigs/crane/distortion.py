"""The crane's nonlinear-distortion stage: "is a linear model enough?" answered from the data, before the
model selection fits its 96 candidates.

Plan: after the training and validation multisines, ``[distortion].n_realisations`` trajectories of odd
random-phase multisines with detection lines (daq/rigs/crane/distortion_config.py), role
``distortion <m>``. Analysis: the robust BLA with its noise and nonlinear-distortion variances per line
and one verdict (identification/frequency/nonlinear_distortion.py) on torque command -> motor speed.
The crane rig calls :func:`record`, :func:`analyze`, :func:`attach`, :func:`report_text`,
:func:`report_dict` and :func:`plots`; the verdict travels on the selection result as the attribute
``nonlinear_distortion`` (a :class:`DistortionOutcome`, or absent for a session recorded without it).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from daq.rigs import drive
from daq.rigs.crane.distortion_config import DistortionTable, design_realisations, excited_bins

if TYPE_CHECKING:
    from identification.frequency.nonlinear_distortion import BLAEstimate, DistortionVerdict

__all__ = ["ROLE", "DistortionOutcome", "analyze", "attach", "plots", "record", "report_dict",
           "report_text"]

ROLE = "distortion"
FIELD = "nonlinear_distortion"


def role_name(m: int) -> str:
    """The trajectory role of realisation ``m`` (from 1)."""
    return f"{ROLE} {m}"


# ----------------------------------------------------------------------------------------- plan


async def record(ctx: Any, streams: Any, dt: float, not_before: float) -> float:
    """Run and publish the realisations (nothing when ``[distortion]`` is off), scaled to the lower of
    the configured and the drive's own torque limit; returns the end of the last published trace's time
    base."""
    table: DistortionTable = ctx.config.distortion
    if not table.enabled:
        return not_before
    torque_limit = min(ctx.config.devices.drive.torque_limit,
                       ctx.devices.drive.drive_limits.get("torque_limit", np.inf))
    loop = asyncio.get_running_loop()
    runs = await loop.run_in_executor(None, design_realisations, table, dt, torque_limit)
    for m, torque in enumerate(runs, start=1):
        info = {"f_min": table.f_min, "f_max": table.f_max, "period": table.period,
                "n_settle": table.n_settle, "n_periods": table.n_periods, "realisation": m,
                "peak_torque": float(np.abs(torque).max())}
        not_before = await drive.record_trajectory(
            ctx, streams, dt, torque, info, role=role_name(m), before=f"before distortion run {m}",
            recorded=f"distortion run {m} recorded", not_before=not_before,
            label=f"distortion run {m}: ")
    return not_before


def n_runs(table: DistortionTable) -> int:
    """Trajectories the stage adds to the plan (for the progress bar)."""
    return table.n_realisations if table.enabled else 0


# ----------------------------------------------------------------------------------------- analysis


@dataclass
class DistortionOutcome:
    """The stage's result: the BLA and its verdict, or why there is none (``note``)."""

    bla: BLAEstimate | None
    verdict: DistortionVerdict | None
    note: str
    seconds: float
    cpu_seconds: float

    def to_dict(self) -> dict | None:
        if self.verdict is None or self.bla is None:
            return None
        return {**self.verdict.to_dict(), "realisations": self.bla.n_realisations,
                "periods": self.bla.n_periods, "input": "torque_cmd", "output": "speed"}


def analyze(arrays: Mapping[str, tuple[np.ndarray, np.ndarray, np.ndarray, float]],
            table: DistortionTable) -> DistortionOutcome:
    """BLA and verdict from the session's ``distortion <m>`` trajectories (torque command -> motor speed).

    Uses only what the run recorded and the plan's own settings (the excited lines are the design's).
    """
    from identification.frequency.nonlinear_distortion import distortion_from_records  # lazy: scipy

    w0, c0 = time.perf_counter(), time.process_time()
    runs = [arrays[r] for m in range(1, 101) if (r := role_name(m)) in arrays]

    def outcome(bla, verdict, note: str) -> DistortionOutcome:
        return DistortionOutcome(bla, verdict, note, time.perf_counter() - w0, time.process_time() - c0)

    if len(runs) < 2:
        why = ("[distortion] was off when the session was recorded" if not runs else
               "only one distortion run completed; the method needs two realisations or more")
        return outcome(None, None, f"nonlinear distortions not measured: {why}")
    dt = runs[0][3]
    n_per = round(table.period / dt)
    bla, verdict = distortion_from_records(
        [r[1] for r in runs], [r[2] for r in runs], dt, n_per, excited_bins(table, dt),
        settle=table.n_settle, alpha=table.alpha, trend_degree=table.trend_degree)
    return outcome(bla, verdict, "")


def attach(result: Any, outcome: DistortionOutcome) -> Any:
    """Hang ``outcome`` on the selection result and put its time first in ``result.stages``."""
    setattr(result, FIELD, outcome)
    result.stages = {FIELD: {"seconds": outcome.seconds, "cpu_seconds": outcome.cpu_seconds},
                     **result.stages}
    return result


def _outcome(result: Any) -> DistortionOutcome | None:
    return getattr(result, FIELD, None)


def report_text(result: Any) -> str:
    """The verdict's paragraph, which the report puts before the selection table."""
    out = _outcome(result)
    if out is None:
        return ""
    if out.verdict is None or out.bla is None:
        return out.note + "\n\n"
    b = out.bla
    return (f"is a linear model enough? ({b.n_realisations} odd random-phase multisines x {b.n_periods} "
            f"periods, torque command -> motor speed)\n{out.verdict.statement()}\n\n")


def report_dict(result: Any, base: dict) -> dict:
    """``base`` (the selection's dict) with the field ``nonlinear_distortion`` first (None: not measured)."""
    out = _outcome(result)
    return {FIELD: out.to_dict() if out is not None else None, **base}


def plots(result: Any, folder: Path) -> list[Path]:
    """``nonlinear_distortion.png`` in ``folder`` when the session measured it."""
    out = _outcome(result)
    if out is None or out.bla is None or out.verdict is None:
        return []
    from daq.plots.distortion import plot_distortion  # lazy: scipy (matplotlib when it draws)

    return [plot_distortion(out.bla, out.verdict, Path(folder) / "nonlinear_distortion.png",
                            output="motor speed", unit="rad/s", input_unit="N*m")]
