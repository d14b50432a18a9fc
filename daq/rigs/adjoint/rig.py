"""The two-mass oscillator and the cart pendulum of seed paper 002, and the stacker crane's mast, as rig
kinds: an input designed by the adjoint method (or a comparison input: F0, the full-amplitude sine, the
crane's shipped multisine) is pushed to an OPC UA drive as a trajectory, run, read back and recorded; the
analysis fits the identified parameters, with the effects the design model lacks (friction, dead time)
fitted alongside as nuisance parameters (``[fit.nuisance]``).

One package, three kinds (``oscillator``, ``pendulum``, ``crane-adjoint``): :class:`AdjointRig` is what
they share; each kind's module subclasses it with its ``kind`` and ``summary``.
Devices: the servo drive (:mod:`daq.rigs.drive`; for the oscillator and the pendulum its ``torque_limit``
is the force limit in N). Streams: ``<kind>.trace`` (command, applied input, output) at the drive's
cycle, one trajectory per run between ``trajectory_start``/``trajectory_end`` on ``<kind>.plan`` (a
sequential-design session records several; the analysis fits them together).

The package: :mod:`~daq.rigs.adjoint.config` (settings), :mod:`~daq.rigs.adjoint.design` (inputs),
:mod:`~daq.rigs.adjoint.online` (online identifier, sequential loop), :mod:`~daq.rigs.adjoint.plots`,
and this module (plan, session read-back, analysis, report).
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, cast

import numpy as np

from daq.rigs import drive, summary
from daq.rigs.adjoint import online
from daq.rigs.adjoint.checks import check_rig
from daq.rigs.adjoint.config import INPUTS, NUISANCE_TRUTH, OUTPUTS, PLANT_OF, AdjointRigConfig
from daq.rigs.adjoint.design import (
    fisher_std,
    lagged_mean,
    nominal_values,
    nuisance_starts,
    problem_of,
    signal_of,
    simulator_truth,
)
from daq.rigs.adjoint.plots import plot_analysis
from daq.rigs.analysis import AnalysisError
from daq.rigs.base import AnalysisProgress, RunContext
from daq.store.reads import SessionReads

if TYPE_CHECKING:  # annotations only: the adequacy check loads scipy
    from identification.estimation.residual_adequacy import AdequacyResult

__all__ = ["AdjointAnalysis", "AdjointRig", "Record", "Runs", "RobustChoice", "analyze", "robust_choice"]

Context = RunContext[AdjointRigConfig, drive.DriveRigDevices]


# ----------------------------------------------------------------------------------------- plan


def check_signal(ctx: Context, force: np.ndarray, info: dict) -> None:
    """The input against the drive's force limit and the driver's own checks, before anything is sent."""
    cfg = ctx.config
    drive = ctx.devices.drive
    assert cfg.devices is not None  # [devices] is required (the config's check)
    limit = min(cfg.devices.drive.torque_limit, drive.drive_limits.get("torque_limit", math.inf))
    if info["peak_force"] > limit:
        from drivers.servo_drive import LimitError  # lazy: asyncua, not needed to read or analyse a session

        what, unit = INPUTS[cfg.adjoint.plant]
        raise LimitError(drive.name, drive.url, f"peak {what} {info['peak_force']:.4g} {unit} of the "
                         f"{info['design']} input exceeds the drive's limit {limit:.4g} {unit}")
    drive.check_trajectory(info.get("input_dt", cfg.adjoint.dt), force)


def channels_of(kind: str) -> list[str]:
    plant = PLANT_OF.get(kind, kind)
    name = INPUTS[plant][0]
    return [f"{name}_cmd", name, OUTPUTS[plant][0]]


def units_of(kind: str) -> list[str]:
    plant = PLANT_OF.get(kind, kind)
    return [INPUTS[plant][1], INPUTS[plant][1], OUTPUTS[plant][1]]


# ----------------------------------------------------------------------------------------- analysis


@dataclass
class Record:
    """One recorded trajectory: command and measured output at the drive's cycle, and its design info."""

    t: np.ndarray
    force_cmd: np.ndarray
    force: np.ndarray
    output: np.ndarray
    dt: float
    info: dict
    truth: dict[str, float] | None = None


@dataclass
class Runs:
    """Every completed trajectory of a session (a sequential-design session has several), in run order;
    ``recorded``: trajectories started (an aborted last one is left out of ``runs``)."""

    runs: list[Record]
    recorded: int

    def joined(self) -> Record:
        """The runs one after the other on one time axis (plots)."""
        if len(self.runs) == 1:
            return self.runs[0]
        t, t0 = [], 0.0
        for r in self.runs:
            t.append(t0 + r.t)
            t0 += r.t.size * r.dt
        cat = lambda name: np.concatenate([getattr(r, name) for r in self.runs])  # noqa: E731
        return Record(np.concatenate(t), cat("force_cmd"), cat("force"), cat("output"), self.runs[0].dt,
                      self.runs[0].info)


@dataclass
class AdjointAnalysis:
    """Identified parameters of a session's runs, fitted jointly (the design's, then the nuisances), with
    predicted (design noise, marginal over the nuisances) and residual-based standard deviations."""

    plant: str
    design: str
    names: list[str]                  # the design's parameters
    estimate: np.ndarray
    truth: np.ndarray | None          # from the session's [simulator.truth], if simulated
    design_point: np.ndarray
    predicted_std: np.ndarray         # marginal std from the full covariance (design sigma, samples used)
    residual_std: np.ndarray          # fit Jacobian and residual variance of this record, marginal
    residual_rms: float               # output units
    n_sigma: float
    fit_success: bool
    nfev: int
    t: np.ndarray
    y_fit: np.ndarray
    design_std: np.ndarray | None = None   # the design model's prediction (no nuisances, design grid)
    nuisance: list[str] = field(default_factory=list)
    nuisance_estimate: np.ndarray = field(default_factory=lambda: np.zeros(0))
    nuisance_std: np.ndarray = field(default_factory=lambda: np.zeros(0))   # predicted, marginal
    nuisance_truth: list[float | None] = field(default_factory=list)
    n_used: int = 0                   # samples in the cost, all runs
    elapsed_s: float = 0.0
    n_runs: int = 1                   # runs fitted together
    n_recorded: int = 1               # trajectories the session started (an aborted one is not fitted)
    robust_std: np.ndarray | None = None   # Newey-West sandwich (HAC over time), marginal
    intervals: RobustChoice | None = None  # which std the 95 % intervals use, and the adequacy check
    noise_std: np.ndarray | None = None    # the record's noise alone, model error taken out (precision)
    noise_explained: float = math.nan      # share of the residual the input's response took out

    @property
    def noise_statement(self) -> str:
        """What the noise std says, and (adequacy failed) what it does not."""
        text = ("noise std: how much the estimate would scatter between repeated runs, from this record's "
                "noise alone (the residual's part the input explains, "
                f"{100 * self.noise_explained:.0f} % of it, taken out as model error)")
        if self.intervals is not None and not self.intervals.adequacy.intervals_valid:
            text += ("; the model check failed: the model error biases the estimate, and that bias is NOT in "
                     "the noise std - estimate -+ 2 noise std is not an interval for the true value")
        return text

    @property
    def reported_std(self) -> np.ndarray:
        """The std of the intervals (``ci95``): the robust one when the residuals are coloured, else the
        residual-based one (both at the estimate)."""
        if self.intervals is not None and self.intervals.robust and self.robust_std is not None:
            return self.robust_std
        return self.residual_std

    @property
    def ci95(self) -> dict[str, list[float | None]]:
        """95 % interval per design parameter, ``estimate -+ 1.96 reported_std``."""
        z = 1.959963984540054
        return {n: [_finite(v - z * s), _finite(v + z * s)]
                for n, v, s in zip(self.names, self.estimate, self.reported_std, strict=True)}

    @property
    def compare_std(self) -> np.ndarray:
        """The std the truth is compared against: the larger of predicted and residual-based."""
        return np.maximum(self.predicted_std, self.residual_std)

    @property
    def within(self) -> list[bool] | None:
        if self.truth is None:
            return None
        return [bool(v) for v in np.abs(self.estimate - self.truth) <= self.n_sigma * self.compare_std]

    def text(self) -> str:
        unit = OUTPUTS[self.plant][1]
        lines = [f"{self.plant}: {self.design} input, fit {'converged' if self.fit_success else 'FAILED'} "
                 f"({self.nfev} evaluations, {self.n_used} samples, {self.runs_text}), "
                 f"residual rms {self.residual_rms:.3g} {unit}",
                 f"{'parameter':<24} {'estimate':>12} {'pred. std':>10} {'resid. std':>10} {'truth':>12} "
                 f"{'|err|/std':>9}  within {self.n_sigma:g} std"]
        within = self.within
        for j, name in enumerate(self.names):
            if self.truth is None:
                tail = f"{'-':>12} {'-':>9}  -"
            else:
                assert within is not None  # computed with the truth
                z = abs(self.estimate[j] - self.truth[j]) / self.compare_std[j]
                tail = f"{self.truth[j]:>12.6g} {z:>9.2f}  {'yes' if within[j] else 'NO'}"
            lines.append(f"{name:<24} {self.estimate[j]:>12.6g} {self.predicted_std[j]:>10.3g} "
                         f"{self.residual_std[j]:>10.3g} {tail}")
        for j, name in enumerate(self.nuisance):
            tv = self.nuisance_truth[j] if j < len(self.nuisance_truth) else None
            tail = "-" if tv is None else f"{tv:.6g}"
            lines.append(f"{name + ' (nuisance)':<24} {self.nuisance_estimate[j]:>12.6g} "
                         f"{self.nuisance_std[j]:>10.3g} {'':>10} {tail:>12}")
        lines.append("std compared: the larger of the predicted (design noise, marginal over the nuisance "
                     "parameters) and the residual-based one")
        if self.intervals is not None:
            rob = self.robust_std if self.robust_std is not None else np.full(len(self.names), np.nan)
            noise = self.noise_std if self.noise_std is not None else np.full(len(self.names), np.nan)
            lines.append("95 % intervals (" + self.intervals.statement + "):")
            for j, (name, (lo, hi)) in enumerate(self.ci95.items()):
                lines.append(f"  {name:<22} [{_g(lo)}, {_g(hi)}]  resid. std {self.residual_std[j]:.3g}, "
                             f"robust std {rob[j]:.3g}, noise std {noise[j]:.3g}")
        if self.noise_std is not None:
            lines.append(self.noise_statement)
        return "\n".join(lines)

    @property
    def runs_text(self) -> str:
        text = f"{self.n_runs} run{'s' if self.n_runs != 1 else ''}"
        return text + (f" of {self.n_recorded} recorded" if self.n_recorded != self.n_runs else "")

    def to_dict(self) -> dict:
        def named(v, names=None):
            names = self.names if names is None else names
            return None if v is None else dict(zip(names, np.asarray(v, float).tolist(), strict=True))

        return {"plant": self.plant, "design": self.design, "estimate": named(self.estimate),
                "truth": named(self.truth), "design_point": named(self.design_point),
                "predicted_std": named(self.predicted_std), "residual_std": named(self.residual_std),
                "compared_std": named(self.compare_std), "design_std": named(self.design_std),
                "n_sigma": self.n_sigma,
                "within": None if self.within is None else dict(zip(self.names, self.within, strict=True)),
                "nuisance": {n: {"estimate": float(self.nuisance_estimate[j]),
                                 "predicted_std": float(self.nuisance_std[j]),
                                 "truth": self.nuisance_truth[j] if j < len(self.nuisance_truth) else None}
                             for j, n in enumerate(self.nuisance)},
                "residual_rms": self.residual_rms, "n_used": self.n_used, "n_runs": self.n_runs,
                "n_recorded": self.n_recorded, "fit_success": self.fit_success,
                "nfev": self.nfev, "elapsed_s": self.elapsed_s,
                "robust_std": named(self.robust_std), "reported_std": named(self.reported_std),
                "ci95": self.ci95, "noise_std": named(self.noise_std),
                "noise_std_statement": None if self.noise_std is None else self.noise_statement,
                "adequacy": None if self.intervals is None else self.intervals.to_dict()}


def _finite(x) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def _g(x: float | None) -> str:
    return "-" if x is None else f"{x:.6g}"


@dataclass
class RobustChoice:
    """Which std the rig's intervals use, and why (issue 21).

    ``whiteness``: Ljung-Box on every fitted residual - coloured residuals (e.g. the MA(1) quantisation
    error of a speed differenced from encoder counts) make the classic ``s2 (J^T J)^-1`` wrong, and the
    robust (Newey-West) covariance is used. ``adequacy``: the model check on residuals thinned to
    ``ADEQUACY_STEP`` (whiteness and independence of the input, as the crane kind does): a sensor's
    sample-to-sample noise does not survive the thinning, a structure error does; it decides
    ``intervals_valid``."""

    robust: bool
    p_white: float          # Ljung-Box p-value on all residuals
    bandwidth: float        # of the robust covariance, samples
    adequacy: AdequacyResult

    @property
    def statement(self) -> str:
        use = (f"robust Newey-West std, bandwidth {self.bandwidth:.1f} samples: residuals coloured, "
               f"Ljung-Box p = {self.p_white:.2g}" if self.robust else
               f"residual-based std: residuals white, Ljung-Box p = {self.p_white:.2g}")
        return use + "; adequacy: " + self.adequacy.statement

    def to_dict(self) -> dict:
        d = self.adequacy.to_dict()
        d.update(residuals_white=not self.robust, p_white_all_samples=self.p_white, std_used="robust"
                 if self.robust else "residual", hac_bandwidth=self.bandwidth, statement=self.statement)
        return d


#: the grid (s) the adequacy check judges residuals on: the crane kind's (its chosen_intervals)
ADEQUACY_STEP = 5e-4
#: how far back (share of the record) the input's response reaches in the noise std's clean-up: the
#: plants' slowest modes (the crane's mast, 15 Hz at 2 % damping: ~0.5 s) within half a record
NOISE_MEMORY = 0.5


def noise_std(fit, u: np.ndarray, dt: float, input_dt: float) -> tuple[np.ndarray | None, float]:
    """The noise std of a fit (:func:`identification.estimation.residual_adequacy.noise_covariance`,
    marginal) and
    the share of the residual the input explained; (None, nan) without residuals or sensitivities."""
    from identification.estimation.residual_adequacy import noise_covariance  # lazy: scipy

    if fit.residuals is None or fit.jacobian is None or fit.jacobian.shape[0] != fit.residuals.size:
        return None, math.nan
    try:
        nc = noise_covariance(fit.jacobian, fit.residuals, np.asarray(u, float)[: fit.residuals.size],
                              hold=max(1, int(round(input_dt / dt))), memory=NOISE_MEMORY,
                              runs=fit.run_sizes or None)
    except (np.linalg.LinAlgError, ValueError):
        return None, math.nan
    return nc.std, nc.explained


def robust_choice(residuals: np.ndarray | None, u: np.ndarray, dt: float, bandwidth: float,
                  level: float = 0.05, lags: int = 25) -> RobustChoice | None:
    """The choice of :class:`RobustChoice` from the fit's residuals and the input on the same samples."""
    from identification.estimation.residual_adequacy import ljung_box, residual_adequacy  # lazy: scipy

    if residuals is None or residuals.size < 3 * lags or not math.isfinite(bandwidth):
        return None
    e = np.asarray(residuals, float).ravel()
    _, p = ljung_box(e[np.isfinite(e)], lags)
    stride = max(1, int(round(ADEQUACY_STEP / dt)))
    return RobustChoice(robust=p < level, p_white=p, bandwidth=float(bandwidth),
                        adequacy=residual_adequacy(e, np.asarray(u, float)[: e.size], lags=lags, level=level,
                                                   stride=stride))


def analyze(recs: Runs | None, cfg: AdjointRigConfig,
            progress: AnalysisProgress | None = None) -> AdjointAnalysis:
    """Least-squares fit of the design's parameters (and ``[fit.nuisance]``) on the recorded command and
    output of every completed run together; the predicted std is the design noise's, marginal over the
    nuisance parameters. A session of the sequential loop is fitted as its online identifier fits (a scan
    over the design's parameters, then Levenberg-Marquardt), so the analysis ends at its last estimate; a
    single plain run as before (from ``[fit].start`` times the design point). The crane is fitted on its
    first run only (its friction and dead-time model fits one record)."""
    from identification.analyses.adjoint_plants import fit_record, fit_records  # lazy: scipy
    from identification.design.sequential_design import Record as FitRecord  # lazy: scipy

    if recs is None:
        raise AnalysisError("no trajectory recorded")
    pb = problem_of(cfg)
    names = list(pb.model.param_names)
    plant = cfg.adjoint.plant
    runs = recs.runs[:1] if plant == "crane" else recs.runs
    if progress is not None:
        progress(0, 1, f"fitting {len(runs)} run{'s' if len(runs) != 1 else ''}")
    t0 = time.perf_counter()
    skip = int(round(cfg.fit.skip / (runs[0].dt * cfg.fit.decimate)))
    values = nominal_values(cfg)  # prior knowledge only, never the simulator truth
    nuisance = nuisance_starts(cfg, values)
    if plant == "crane" or (len(runs) == 1 and not cfg.sequential.enabled):
        rec = runs[0]
        u = lagged_mean(rec.force_cmd, cfg.fit.input_lag, rec.dt)
        fit = fit_record(plant, values, names, nuisance, u, rec.dt, rec.output, cfg.adjoint.sigma,
                         start=cfg.fit.start, skip=skip, decimate=cfg.fit.decimate,
                         friction_eps=cfg.fit.friction_speed_eps)
        u_fit = u[::max(1, cfg.fit.decimate)][skip:] if plant == "crane" else u[skip:]
        dt_fit = rec.dt * (max(1, cfg.fit.decimate) if plant == "crane" else 1)
    else:
        data = [FitRecord(lagged_mean(r.force_cmd, cfg.fit.input_lag, r.dt), r.output, r.dt,
                          int(round(cfg.fit.skip / r.dt))) for r in runs]
        fit = fit_records(plant, values, names, nuisance, data, cfg.adjoint.sigma, start=cfg.fit.start,
                          scan=cfg.sequential.enabled, friction_eps=cfg.fit.friction_speed_eps)
        u_fit = np.concatenate([d.u[d.skip:, 0] for d in data])
        dt_fit = runs[0].dt
    choice = robust_choice(fit.residuals, u_fit, dt_fit, fit.hac_bandwidth)
    precision, explained = noise_std(fit, u_fit, dt_fit, float(runs[0].info.get("input_dt", cfg.adjoint.dt)))
    k = fit.n_design
    truth = nuisance_truth = None
    sim = simulator_truth(cfg)
    if sim is not None:
        truth = np.array([sim[n] for n in names])
        alias = NUISANCE_TRUTH.get(plant, {})
        nuisance_truth = [sim.get(alias.get(n, n)) for n in fit.names[k:]]
    if progress is not None:
        progress(1, 1, "fitted")
    designs = list(dict.fromkeys(str(r.info.get("design", "?")) for r in runs))
    return AdjointAnalysis(plant, ", ".join(designs), names, fit.estimate[:k],
                           truth, fit.design_point[:k], fit.predicted_std[:k], fit.residual_based_std[:k],
                           fit.residual_std, cfg.fit.n_sigma, fit.success, fit.nfev, fit.t, fit.y_fit,
                           design_std=_design_std(runs), nuisance=fit.names[k:],
                           nuisance_estimate=fit.estimate[k:], nuisance_std=fit.predicted_std[k:],
                           nuisance_truth=nuisance_truth or [], n_used=fit.n_used,
                           elapsed_s=time.perf_counter() - t0, n_runs=len(runs), n_recorded=recs.recorded,
                           robust_std=None if fit.robust_cov is None else fit.robust_std[:k],
                           intervals=choice, noise_std=None if precision is None else precision[:k],
                           noise_explained=explained)


def _design_std(runs: list[Record]) -> np.ndarray | None:
    """The design model's predicted std for the runs together: from the sum of the Fisher matrices
    their trajectory events carry (each at its own design point); one run: its ``predicted_std``."""
    if len(runs) == 1:
        std = runs[0].info.get("predicted_std")
        return None if std is None else np.asarray(std, float)
    if not all("fisher" in r.info for r in runs):
        return None
    return fisher_std(cast(np.ndarray, sum(np.asarray(r.info["fisher"], float) for r in runs)))  # >= 2 runs


# ----------------------------------------------------------------------------------------- the rigs


class AdjointRig(drive.DriveRig[AdjointRigConfig, Runs | None, AdjointAnalysis]):
    """What the oscillator, the pendulum and the crane-adjoint kinds share; a kind's subclass sets ``kind``
    and ``summary``, and its trace streams and channels follow from the kind (``<kind>.plan``,
    ``<kind>.trace``). Devices and simulator: the servo drive (:class:`daq.rigs.drive.DriveRig`)."""

    schema = AdjointRigConfig
    trace: drive.TraceStreams  # where the kind's trajectories are published (set per kind)

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if "kind" in cls.__dict__:
            cmd, inp, out = channels_of(cls.kind)
            in_unit, _, unit = units_of(cls.kind)
            cls.trace = drive.TraceStreams(f"{cls.kind}.plan", f"{cls.kind}.trace", [cmd, inp, out],
                                           units_of(cls.kind))
            cls.streams = {cls.trace.trace: f"{cmd}, {inp} [{in_unit}], {out} [{unit}] at the drive's cycle",
                           cls.trace.plan: "events"}

    def check(self, cfg: AdjointRigConfig, config_dir: Path) -> None:
        check_rig(cfg, config_dir)  # design model, trajectory file, fit names, drive files, simulated drive

    def describe_simulator(self, sim) -> list[dict]:
        return drive.describe_simulator(sim, f", plant {sim.plant}")

    def progress_total(self, cfg: AdjointRigConfig) -> int:
        return cfg.sequential.max_runs if cfg.sequential.enabled else 1

    async def prepare(self, ctx: Context) -> None:
        """Load (or design, off the loop) the input and check it against the drive's force limit."""
        cfg = ctx.config
        loop = asyncio.get_running_loop()
        force, info = await loop.run_in_executor(None, signal_of, cfg)
        check_signal(ctx, force, info)
        ctx.prepared["signal"] = (info.get("input_dt", cfg.adjoint.dt), force, info)

    async def _run_once(self, ctx: Context, dt: float, force: np.ndarray, info: dict) -> None:
        await drive.record_trajectory(ctx, self.trace, dt, force, info, role="identification",
                                      before="before the run", recorded=f"{info['design']} input recorded")

    async def plan(self, ctx: Context) -> None:
        """One run of the prepared input; with ``[sequential]`` enabled, run - refit - stop or redesign -
        run until the confidence target or a budget (daq/rigs/adjoint/online.py)."""
        ctx.summary.update(runs=0)
        dt, force, info = ctx.prepared["signal"]
        seq = ctx.config.sequential
        if not seq.enabled or ctx.dry_run:  # a dry run: one run's commands, nothing to refit on
            await self._run_once(ctx, dt, force, info)
            return
        ident = await online.start(ctx)
        t_plan = ctx.clock.monotonic()
        loop = asyncio.get_running_loop()
        ran: list[np.ndarray] = []  # every input run so far: a redesign adds to their information
        while True:
            await self._run_once(ctx, dt, force, dict(info, run=ctx.summary["runs"]))
            ran.append(force)
            n = ctx.summary["runs"]
            reason, est = await online.decide(ctx, ident, n, ctx.clock.monotonic() - t_plan)
            if reason is not None:
                return
            if seq.redesign and est is not None:
                values = dict(zip(est["parameters"], est["values"], strict=True))
                force, info = await loop.run_in_executor(None, online.redesigned_signal, ctx.config,
                                                         values, force, n, tuple(ran))
                check_signal(ctx, force, info)
                ctx.advance(0, f"redesigned at {values} in {info['design_s']:.1f} s")

    def arrays(self, reader: SessionReads, session_id: str) -> Runs | None:
        """The session's completed trajectories: each ``trajectory_start`` .. ``trajectory_end`` pair
        of ``<kind>.plan`` owns the next ``n`` samples of the trace stream, in run order."""
        done, recorded = drive.read_trajectories(reader, session_id, self.trace.plan, self.trace.trace,
                                                 lambda index, start: f"run {index}")
        runs = [Record(np.arange(tr.rows.shape[0]) * tr.dt, tr.rows[:, 0], tr.rows[:, 1], tr.rows[:, 2],
                       tr.dt, tr.start) for tr in done]
        return Runs(runs, recorded) if runs else None

    def analyze(self, arrays: Runs | None, cfg: AdjointRigConfig,
                progress: AnalysisProgress | None = None) -> AdjointAnalysis:
        return analyze(arrays, cfg, progress)

    def report_text(self, result: AdjointAnalysis) -> str:
        return result.text()

    def analysis_summary(self, report: dict) -> dict:
        """The fitted parameters and nuisance parameters, their 95 % intervals, and whether the adequacy
        check lets the intervals stand (the verdict)."""
        nuisance = report.get("nuisance") or {}
        fitted = {**summary.estimates_of(report.get("estimate")),
                  **summary.estimates_of({n: d.get("estimate") for n, d in nuisance.items()
                                          if isinstance(d, dict)})}
        return summary.adequacy_summary(report, fitted)

    def parameter_units(self) -> dict[str, str]:
        return dict(online.PARAM_UNITS)

    def plots(self, result: AdjointAnalysis, arrays: Runs | None, folder: Path) -> list[Path]:
        assert arrays is not None  # a result exists
        runs = arrays.runs[:result.n_runs]
        return plot_analysis(result, Runs(runs, len(runs)).joined(), folder)
