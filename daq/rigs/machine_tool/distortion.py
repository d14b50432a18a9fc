"""The machine tool's nonlinear-distortion stage: is the structure linear enough for the modal model?

Plan: after the modal tests, ``[distortion].n_realisations`` odd random-phase multisines with detection
lines (the front end's ``SOUR:DET``) at one position and input DOF, published on the force and
acceleration streams between ``distortion_start``/``distortion_end`` events (after every modal run, so
the modal analysis reads its runs as before). Analysis: the robust BLA force -> driving-point
acceleration and one verdict (identification/frequency/nonlinear_distortion.py); the excited lines are
read from the measured force, not from the front end's seed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from identification.frequency.nonlinear_distortion import BLAEstimate, DistortionVerdict

__all__ = ["DistortionRecords", "MTDistortionOutcome", "analyze", "read", "record"]

START, END = "distortion_start", "distortion_end"


def _where(cfg: Any) -> tuple[float, str]:
    d = cfg.distortion
    return (d.position if d.position is not None else cfg.plan.positions[0],
            d.input if d.input is not None else cfg.plan.inputs[0])


async def record(ctx: Any, streams: tuple[str, str, str], unit: str, frame: int, t_end: float) -> None:
    """Run and publish the realisations (nothing when ``[distortion]`` is off). ``streams``: the plan,
    force and acceleration streams; ``unit``: the accelerations' unit."""
    cfg = ctx.config
    d, e, fe = cfg.distortion, cfg.excitation, ctx.devices.frontend
    if not d.enabled:
        return
    plan, force_stream, accel_stream = streams
    position, dof = _where(cfg)
    await ctx.checkpoint(f"before the distortion runs at {position} m")
    await fe.move_to(position)
    for m in range(1, d.n_realisations + 1):
        await ctx.checkpoint(f"before distortion run {m}")
        await fe.configure(dof=dof, amplitude=e.amplitude, f_start=e.f_min, f_stop=e.f_max, period=e.period,
                           seed=d.seed + m, dt=e.dt, periods=d.n_periods, settle=d.n_settle,
                           detection=d.group)
        force, accel, labels = await fe.measure()
        n, t0 = int(force.size), max(ctx.clock.time(), t_end)
        await ctx.event(plan, START, position=position, input=dof, realisation=m, dt=e.dt, n=n,
                        period=e.period, t0=t0)
        await ctx.publish_blocks(force_stream, force[:, None], t0, e.dt, ["force"], ["N"], frame)
        await ctx.publish_blocks(accel_stream, accel, t0, e.dt, list(labels), [unit] * len(labels), frame)
        t_end = t0 + n * e.dt
        await ctx.event(plan, END, position=position, input=dof, realisation=m, n=n)
        ctx.summary["runs"] += 1
        ctx.advance(1, f"distortion run {m} ({n} samples)")
    await fe.write("SOUR:DET 0")  # the full multisine again for whatever runs next


def n_runs(cfg: Any) -> int:
    return cfg.distortion.n_realisations if cfg.distortion.enabled else 0


@dataclass
class DistortionRecords:
    """Force and driving-point acceleration per completed realisation, as recorded."""

    force: list[np.ndarray]
    accel: list[np.ndarray]
    dt: float
    period: int
    input: str


def read(store: Any, sid: str, streams: tuple[str, str, str]) -> DistortionRecords | None:
    """The session's distortion runs (None: none recorded). They follow every modal run on the streams."""
    plan, force_stream, accel_stream = streams
    starts = store.events(sid, kind=START)
    if not starts:
        return None
    done = {int(e.body["realisation"]) for e in store.events(sid, kind=END)}
    offset = sum(int(e.body["n"]) for e in store.events(sid, kind="run_start"))
    force, accel = [], []
    for ev in starts:
        b, n = ev.body, int(ev.body["n"])
        if int(b["realisation"]) in done:
            a = store.read_range(sid, accel_stream, offset, offset + n)
            force.append(store.read_range(sid, force_stream, offset, offset + n).data[:, 0].astype(float))
            accel.append(a.data[:, list(a.channels).index(b["input"])].astype(float))
        offset += n
    b = starts[0].body
    return DistortionRecords(force, accel, float(b["dt"]), int(b["period"]), str(b["input"]))


@dataclass
class MTDistortionOutcome:
    bla: BLAEstimate | None
    verdict: DistortionVerdict | None
    note: str
    input: str = ""

    def to_dict(self) -> dict | None:
        if self.bla is None or self.verdict is None:
            return None
        return {**self.verdict.to_dict(), "realisations": self.bla.n_realisations,
                "periods": self.bla.n_periods, "input": f"force at {self.input}",
                "output": f"acceleration at {self.input}"}

    def text(self) -> str:
        if self.bla is None or self.verdict is None:
            return self.note
        return (f"is a linear model enough? ({self.bla.n_realisations} odd random-phase multisines x "
                f"{self.bla.n_periods} periods, force -> acceleration at {self.input})\n"
                f"{self.verdict.statement()}")


def analyze(rec: DistortionRecords | None, cfg: Any) -> MTDistortionOutcome:
    """BLA and verdict (the periods were settled by the front end already)."""
    from identification.frequency.nonlinear_distortion import (  # lazy: scipy
        best_linear_approximation,
        distortion_verdict,
        excited_lines,
    )

    if rec is None or len(rec.force) < 2:
        why = ("[distortion] was off when the session was recorded" if rec is None else
               "fewer than two distortion runs completed")
        return MTDistortionOutcome(None, None, f"nonlinear distortions not measured: {why}")
    N = rec.period
    P = min(f.size for f in rec.force) // N
    u = np.array([f[: P * N].reshape(P, N) for f in rec.force])
    y = np.array([a[: P * N].reshape(P, N) for a in rec.accel])
    bla = best_linear_approximation(u, y, rec.dt, excited_lines(u))
    return MTDistortionOutcome(bla, distortion_verdict(bla, alpha=cfg.distortion.alpha), "", rec.input)


def plots(outcome: MTDistortionOutcome | None, folder: Path) -> list[Path]:
    if outcome is None or outcome.bla is None or outcome.verdict is None:
        return []
    from daq.plots.distortion import plot_distortion  # lazy: scipy (matplotlib when it draws)

    return [plot_distortion(outcome.bla, outcome.verdict, Path(folder) / "nonlinear_distortion.png",
                            output=f"acceleration at {outcome.input}", unit="m/s^2", input_unit="N")]
