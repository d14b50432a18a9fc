"""The two-mass oscillator and the cart pendulum of seed paper 002, and the stacker crane's mast, as rig
kinds: an input designed by the adjoint method (or a comparison input: F0, the full-amplitude sine, the
crane's shipped multisine) is pushed to an OPC UA drive as a trajectory, run, read back and recorded; the
analysis fits the identified parameters, with the effects the design model lacks (friction, dead time)
fitted alongside as nuisance parameters (``[fit.nuisance]``).

One module, three kinds (``oscillator``, ``pendulum``, ``crane-adjoint``): :func:`make_rig` builds each.
Devices: the servo drive of the crane rig (same driver and nodes; for the oscillator and the pendulum its
``torque_limit`` is the force limit in N). Streams: ``<kind>.trace`` (command, applied input, output) at
the drive's cycle, one trajectory per run between ``trajectory_start``/``trajectory_end`` on ``<kind>.plan``
(a sequential-design session records several; the analysis fits them together).
"""

from __future__ import annotations

import asyncio
import csv
import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from msgspec import field as sfield

from daq.config.load import Invalid
from daq.config.schema import Count, NonNegative, Positive, RigConfig, Table
from daq.rigs.base import Report, Rig
from daq.rigs.crane.rig import FRAME_SAMPLES, DriveDevice, ExcitationTable, open_devices, simulated_devices

#: plant -> (measured output name, unit)
OUTPUTS = {"oscillator": ("x2", "m"), "pendulum": ("phi", "rad"), "crane": ("w1", "rad/s")}
#: plant -> (input name, unit)
INPUTS = {"oscillator": ("force", "N"), "pendulum": ("force", "N"), "crane": ("torque", "N*m")}
#: rig kind -> the plant it moves
PLANT_OF = {"oscillator": "oscillator", "pendulum": "pendulum", "crane-adjoint": "crane"}
#: the driven body's speed state of each plant (its design limit may not exceed the drive's speed limit)
SPEED_STATE = {"oscillator": "v1", "pendulum": "v_c", "crane": "w1"}
#: nuisance parameter -> the simulator truth key it estimates (where the names differ)
NUISANCE_TRUTH = {"pendulum": {"f_c": "cart_coulomb", "f_p": "joint_coulomb"}}
DESIGNS = ("adjoint", "F0", "sine", "multisine")


# ----------------------------------------------------------------------------------------- config


class Devices(Table, kw_only=True):
    drive: DriveDevice


class Simulator(Table, kw_only=True):
    plant: str | None = None
    truth: dict[str, float] = sfield(default_factory=dict)
    drive: dict[str, Any] = sfield(default_factory=dict)

    def check(self) -> None:
        from simulators.crane_drive import DriveSettings, get_plant

        try:
            plant = get_plant(self.plant)
        except ValueError as exc:
            raise Invalid("plant", str(exc)) from None
        for key, build in (("truth", plant.truth.from_config), ("drive", DriveSettings.from_config)):
            try:
                build(dict(getattr(self, key)))
            except (TypeError, ValueError) as exc:
                why = re.sub(r"^(\[[^\]]*\]|\w+ truth):?\s*", "", str(exc))
                raise Invalid(key, why, table=True) from None


class AdjointTable(Table, kw_only=True):
    """The design (``identification.adjoint_plants.design_problem`` spec plus optimiser settings)."""

    plant: str
    parameters: list[str]
    criterion: Literal["A", "D", "E"] = "D"
    scaling: Literal["relative", "none"] = "relative"
    t_f: Positive
    dt: Positive                      # s, input sample time
    n_sub: Count = 2
    u_max: Positive                   # N (N*m for the crane), |u| <= u_max
    start: float = 0.5                # F0 = start * F_max
    sigma: Positive                   # measurement noise std (output units)
    meas_dt: Positive                 # s, measurement sample time assumed by the design
    method: Literal["lbfgs", "gradient"] = "lbfgs"
    max_iter: Count = 300
    rounds: Count = 6
    end_tol: Positive = 1e-3
    end_weight: Positive = 1000.0
    limit_weight: Positive = 1000.0
    end: dict[str, Positive] = sfield(default_factory=dict)
    limits: dict[str, Positive] = sfield(default_factory=dict)
    nominal: dict[str, float] = sfield(default_factory=dict)  # design point; default: simulator truth

    def check(self) -> None:
        if self.plant not in OUTPUTS:
            raise Invalid("plant", f"must be one of {sorted(OUTPUTS)}, got {self.plant!r}")
        n = round(self.t_f / self.dt)
        if n < 1 or abs(n * self.dt - self.t_f) > 1e-9 * self.t_f:
            raise Invalid("t_f", f"{self.t_f} s is not a whole number of input samples dt = {self.dt} s")
        if not -1 <= self.start <= 1:
            raise Invalid("start", f"must be within [-1, 1] (a fraction of u_max), got {self.start}")

    def spec(self) -> dict:
        keys = ("parameters", "criterion", "scaling", "t_f", "dt", "n_sub", "u_max", "start", "sigma",
                "meas_dt", "end", "limits", "end_weight", "limit_weight")
        return {k: getattr(self, k) for k in keys}


class PlanTable(Table, kw_only=True):
    design: Literal["adjoint", "F0", "sine", "multisine"] = "adjoint"
    trajectory: str = "trajectory.csv"   # CSV written by `hil design adjoint` (t [s], force [N])
    design_if_missing: bool = True       # no file: design on the fly (off the event loop)


class FitTable(Table, kw_only=True):
    start: Positive = 1.05      # the fit starts at start * the design point
    skip: NonNegative = 0.0     # s left out at the beginning of the record
    n_sigma: Positive = 3.0     # |estimate - truth| <= n_sigma * std counts as "within"
    input_lag: NonNegative = 0.0  # s, known time constant of the force actuator (the model has none)
    # nuisance parameters fitted alongside the design's (name -> start and nominal value, SI): pendulum
    # d_c, f_c, f_p; crane viscous, coulomb, stribeck_torque, stribeck_speed, dead_time; oscillator d1, ...
    nuisance: dict[str, float] = sfield(default_factory=dict)
    friction_speed_eps: Positive | None = None  # smooth sign tanh(v/eps) of the fitted Coulomb terms
    decimate: Count = 1         # crane: the model runs on decimate * cycle, every decimate-th sample used


class SequentialTable(Table, kw_only=True):
    """Online estimate after every run and the sequential design loop (issue 10); off by default.

    Loop: run, refit over all runs, stop when every relative std <= ``target_rel_std`` (or a budget is
    spent), else re-solve the adjoint design at the estimate (``redesign``; else repeat the input) and run.
    """

    enabled: bool = False
    target_rel_std: Positive = 1e-3   # stop when every relative std of the estimate is <= this
    max_runs: Count = 5               # budget, runs (the first, [plan] input, included)
    max_seconds: Positive | None = None  # budget from the plan start, s (wall clock)
    redesign: bool = True             # re-solve the adjoint design at each new estimate
    shrink: Positive = 0.25           # warm start = shrink * previous input (off the bounds)
    cold_start: bool = True           # also design from F0 and keep the better (a far-off old design traps
                                      # the warm start: see identification.sequential_design.redesign)
    alpha: Positive = 0.05            # level of the confidence ellipsoid in the estimate events
    wait_timeout: Positive = 120.0    # s the plan waits for a run's estimate

    def check(self) -> None:
        if self.shrink > 1:
            raise Invalid("shrink", f"must be in (0, 1], got {self.shrink}")
        if self.alpha >= 1:
            raise Invalid("alpha", f"must be in (0, 1), got {self.alpha}")


def lagged_mean(force: np.ndarray, lag: float, dt: float) -> np.ndarray:
    """Per-sample mean of a held command seen through a first-order lag ``lag`` << dt: the input the
    model's held-sample integration should get (each sample borrows ``w`` of the previous one)."""
    if lag <= 0:
        return np.asarray(force, float)
    w = lag / dt * (1.0 - math.exp(-dt / lag))
    prev = np.concatenate([[0.0], force[:-1]])
    return force + w * (prev - force)


class AdjointRigConfig(RigConfig, kw_only=True):
    simulator: Simulator | None = None
    devices: Devices | None = None
    adjoint: AdjointTable
    excitation: ExcitationTable | None = None   # crane: the shipped multisine ([plan] design = "multisine")
    plan: PlanTable = sfield(default_factory=PlanTable)
    fit: FitTable = sfield(default_factory=FitTable)
    sequential: SequentialTable = sfield(default_factory=SequentialTable)

    def check(self) -> None:
        kind = self.rig.kind
        plant = PLANT_OF.get(kind, kind)
        if self.sequential.enabled and self.sequential.redesign and self.plan.design != "adjoint":
            raise Invalid("sequential.redesign", f"re-designs the adjoint input; [plan].design is "
                                                 f"{self.plan.design!r} (set redesign = false to repeat it)")
        if self.devices is None:
            raise Invalid("devices", "missing required table", table=True)
        if self.adjoint.plant != plant:
            raise Invalid("adjoint.plant", f"{self.adjoint.plant!r} in a {kind!r} rig (plant {plant!r})")
        if self.simulator is not None and (self.simulator.plant or "crane") != plant:
            raise Invalid("simulator.plant", f"the simulated drive must host the {plant!r} plant, "
                                             f"got {self.simulator.plant!r}")
        drive = self.devices.drive
        unit = INPUTS[plant][1]
        if self.adjoint.u_max > drive.torque_limit:
            raise Invalid("adjoint.u_max", f"{self.adjoint.u_max} {unit} exceeds [devices.drive]."
                                           f"torque_limit ({drive.torque_limit} {unit})")
        speed = SPEED_STATE[plant]
        if self.adjoint.limits.get(speed, 0.0) > drive.speed_limit:
            raise Invalid(f"adjoint.limits.{speed}", f"{self.adjoint.limits[speed]} exceeds "
                                                     f"[devices.drive].speed_limit ({drive.speed_limit})")
        if self.plan.design == "multisine" and plant != "crane":
            raise Invalid("plan.design", "'multisine' is the crane's shipped multisine ([excitation])")
        n = round(self.adjoint.t_f / self.adjoint.dt)
        if n > drive.max_samples:
            raise Invalid("adjoint.t_f", f"{n} samples exceed [devices.drive].max_samples "
                                         f"({drive.max_samples})")


# ----------------------------------------------------------------------------------------- design


def nominal_values(cfg: AdjointRigConfig) -> dict[str, float]:
    """The design point: the plant's default values, the simulator truth, then ``[adjoint.nominal]``."""
    from simulators.crane_drive import get_plant

    truth_type = get_plant(cfg.adjoint.plant).truth
    values = _model_values(truth_type())
    if cfg.simulator is not None:
        values.update(_model_values(truth_type.from_config(dict(cfg.simulator.truth))))
    values.update(cfg.adjoint.nominal)
    return values


def _model_values(truth) -> dict[str, float]:
    """The physical values a model may use: ``model_values()`` where the truth has it (oscillator,
    pendulum), else every number of the truth (the crane's drive-model kit knows friction and dead time)."""
    if hasattr(truth, "model_values"):
        return dict(truth.model_values())
    return {k: float(v) for k, v in truth.to_dict().items()}


def simulator_truth(cfg: AdjointRigConfig) -> dict[str, float] | None:
    """Every number of the simulator truth (None for a real rig)."""
    if cfg.simulator is None:
        return None
    from simulators.crane_drive import get_plant

    truth = get_plant(cfg.adjoint.plant).truth.from_config(dict(cfg.simulator.truth))
    return {k: float(v) for k, v in truth.to_dict().items()}


def problem_of(cfg: AdjointRigConfig):
    from identification.adjoint_plants import design_problem

    return design_problem(cfg.adjoint.plant, nominal_values(cfg), cfg.adjoint.spec())


def run_design(cfg: AdjointRigConfig):
    """The adjoint design of the config (``identification.adjoint_design.optimize_input`` from F0)."""
    from identification.adjoint_design import optimize_input
    from identification.adjoint_plants import reference_inputs

    a = cfg.adjoint
    pb = problem_of(cfg)
    u0 = reference_inputs(pb, a.start)["F0"]
    return optimize_input(pb, u0, method=a.method, max_iter=a.max_iter, rounds=a.rounds, end_tol=a.end_tol)


def write_trajectory(path: str | Path, dt: float, force: np.ndarray, column: str = "force [N]") -> Path:
    """CSV with header ``t [s],<column>`` (``force [N]`` or ``torque [N*m]``), one row per held sample."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["t [s]", column])
        for k, v in enumerate(np.asarray(force, float).ravel()):
            w.writerow([f"{k * dt:.9g}", f"{v:.17g}"])
    return path


def read_trajectory(path: str | Path) -> tuple[float, np.ndarray]:
    """(dt, force samples) of a trajectory CSV; ValueError when it is not one."""
    table = np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)
    if table.shape[1] != 2 or table.shape[0] < 2:
        raise ValueError(f"{path}: expected two columns (t [s], force [N]) and at least two rows")
    steps = np.diff(table[:, 0])
    dt = float(steps.mean())
    if not (dt > 0 and np.allclose(steps, dt, rtol=1e-6, atol=1e-9)):
        raise ValueError(f"{path}: t is not evenly spaced")
    return dt, table[:, 1].copy()


def signal_of(cfg: AdjointRigConfig, design: str | None = None) -> tuple[np.ndarray, dict]:
    """The input of ``[plan].design`` on the design grid: (force samples N, info about it).

    ``adjoint`` reads ``[plan].trajectory`` (designs on the fly when it is absent and
    ``design_if_missing``); ``F0`` and ``sine`` are the paper's comparison inputs, ``multisine`` the
    crane's shipped training multisine at its own sample time (``[excitation]``). The predicted
    standard deviations come from the design model's Fisher matrix for this very signal.
    """
    from identification.adjoint_plants import reference_inputs

    design = design or cfg.plan.design
    pb = problem_of(cfg)
    info: dict = {"design": design}
    if design == "multisine":
        return multisine_of(cfg, pb, info)
    if design == "adjoint":
        path = Path(cfg.plan.trajectory)
        if path.exists():
            dt, force = read_trajectory(path)
            if abs(dt - pb.dt) > 1e-9 * pb.dt or force.size != pb.n_samples:
                raise ValueError(f"{path}: {force.size} samples at {dt:g} s do not match [adjoint] "
                                 f"({pb.n_samples} samples at {pb.dt:g} s); run `hil design adjoint` again")
            info["trajectory"] = str(path)
        elif cfg.plan.design_if_missing:
            res = run_design(cfg)
            force = res.u[:, 0].copy()
            info.update(trajectory=None, iterations=res.iterations, design_success=res.success)
        else:
            raise FileNotFoundError(f"{path} not found: run `hil design adjoint` first")
    else:
        force = reference_inputs(pb, cfg.adjoint.start)["F0" if design == "F0" else "sine"][:, 0].copy()
    info.update(_predicted(pb, force, pb.dt))
    return force, info


def multisine_of(cfg: AdjointRigConfig, pb, info: dict) -> tuple[np.ndarray, dict]:
    """The crane's training multisine (``[excitation]``, built as the crane rig builds it) at its own
    sample time, scaled to the peak ``u_max``: the same duration and peak torque as the adjoint design."""
    from daq.rigs.crane.rig import design_excitation
    from identification.adjoint_design import DesignProblem

    if cfg.excitation is None:
        raise ValueError("[plan] design = 'multisine' needs an [excitation] table")
    dt, torque, _, _, _ = design_excitation(cfg.excitation, "training", cfg.devices.drive.torque_limit)
    torque = np.asarray(torque, float) / np.abs(torque).max() * cfg.adjoint.u_max
    if abs(torque.size * dt - pb.t_f) > 1e-9 * pb.t_f:
        raise ValueError(f"[excitation]: {torque.size} samples of {dt:g} s do not last t_f = {pb.t_f:g} s")
    fine = DesignProblem(pb.model, pb.b, dt, torque.size, -cfg.adjoint.u_max * (1 + 1e-9),
                         cfg.adjoint.u_max * (1 + 1e-9), n_sub=1, criterion=pb.criterion, scaling=pb.scaling,
                         sigma=pb.sigma, meas_dt=pb.meas_dt, end_conditions=pb.end_conditions)
    info.update(_predicted(fine, torque, dt))
    return torque, info


def _predicted(pb, u: np.ndarray, dt: float) -> dict:
    """What the design model predicts for input ``u`` (sample time ``dt``): Fisher matrix, standard
    deviations at the design point, end-condition residuals, peak."""
    from identification.adjoint_design import evaluate

    ev = evaluate(pb, u[:, None], gradient=False)
    names = list(pb.model.state_names)
    return dict(parameters=list(pb.model.param_names), design_point=pb.b.tolist(),
                fisher=ev.fisher.tolist(), predicted_std=_std(ev.fisher).tolist(),
                end_residuals={names[c.index]: float(r) for c, r in
                               zip(pb.end_conditions, ev.end_residuals, strict=True)},
                input_dt=dt, peak_force=float(np.abs(u).max()))


def _std(fisher: np.ndarray) -> np.ndarray:
    try:
        return np.sqrt(np.diag(np.linalg.inv(fisher)))
    except np.linalg.LinAlgError:
        return np.full(fisher.shape[0], np.inf)


# ----------------------------------------------------------------------------------------- plan


async def prepare(ctx) -> None:
    """Load (or design, off the loop) the input and check it against the drive's force limit."""
    cfg: AdjointRigConfig = ctx.config
    loop = asyncio.get_running_loop()
    force, info = await loop.run_in_executor(None, signal_of, cfg)
    check_signal(ctx, force, info)
    ctx.signal = (info.get("input_dt", cfg.adjoint.dt), force, info)


def check_signal(ctx, force: np.ndarray, info: dict) -> None:
    """The input against the drive's force limit and the driver's own checks, before anything is sent."""
    from drivers.servo_drive import LimitError

    cfg: AdjointRigConfig = ctx.config
    drive = ctx.devices.drive
    limit = min(cfg.devices.drive.torque_limit, drive.drive_limits.get("torque_limit", math.inf))
    if info["peak_force"] > limit:
        what, unit = INPUTS[cfg.adjoint.plant]
        raise LimitError(drive.name, drive.url, f"peak {what} {info['peak_force']:.4g} {unit} of the "
                         f"{info['design']} input exceeds the drive's limit {limit:.4g} {unit}")
    drive.check_trajectory(info.get("input_dt", cfg.adjoint.dt), force)


def make_plan(kind: str):
    trace_stream, plan_stream = f"{kind}.trace", f"{kind}.plan"
    channels = channels_of(kind)
    units = units_of(kind)

    async def plan(ctx) -> None:
        """One run of the prepared input; with ``[sequential]`` enabled, run - refit - stop or redesign -
        run until the confidence target or a budget (daq/rigs/adjoint/online.py)."""
        ctx.summary.update(runs=0)
        dt, force, info = ctx.signal
        seq = ctx.config.sequential
        if not seq.enabled:
            await run_once(ctx, dt, force, info)
            return
        from daq.rigs.adjoint import online as online_drive

        ident = await online_drive.start(ctx)
        t_plan = time.monotonic()
        loop = asyncio.get_running_loop()
        while True:
            await run_once(ctx, dt, force, dict(info, run=ctx.summary["runs"]))
            n = ctx.summary["runs"]
            reason, est = await online_drive.decide(ctx, ident, n, time.monotonic() - t_plan)
            if reason is not None:
                return
            if seq.redesign and est is not None:
                values = dict(zip(est["parameters"], est["values"], strict=True))
                force, info = await loop.run_in_executor(None, online_drive.redesigned_signal, ctx.config,
                                                         values, force, n)
                check_signal(ctx, force, info)
                ctx.advance(0, f"redesigned at {values} in {info['design_s']:.1f} s")

    async def run_once(ctx, dt: float, force: np.ndarray, info: dict) -> None:
        """Upload, enable, start, wait, read the trace back, disable, publish it between the events."""
        drive = ctx.devices.drive
        await ctx.checkpoint("before the run")
        await drive.load_trajectory(dt, force)
        await drive.enable()
        t0 = time.time()
        await drive.start()
        await drive.wait_done()
        trace = await drive.read_trace()
        await drive.disable()
        n = int(trace["speed"].size)
        expected = int(round(force.size * dt / trace["dt"]))
        if n != expected:
            raise RuntimeError(f"trace has {n} samples, expected {expected}")
        await ctx.event(plan_stream, "trajectory_start", role="identification", dt=trace["dt"], n=n, t0=t0,
                        **info)
        data = np.column_stack([trace["torque_cmd"], trace["torque"], trace["speed"]])
        await ctx.publish_blocks(trace_stream, data, t0, trace["dt"], channels, units, FRAME_SAMPLES)
        await ctx.event(plan_stream, "trajectory_end", role="identification", dt=trace["dt"], n=n, t0=t0)
        ctx.summary["runs"] += 1
        ctx.advance(1, f"{info['design']} input recorded ({n} samples)")

    return plan


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


def make_arrays(kind: str):
    trace_stream, plan_stream = f"{kind}.trace", f"{kind}.plan"

    def arrays(store, session_id: str) -> Runs | None:
        """The session's completed trajectories: each ``trajectory_start`` .. ``trajectory_end`` pair
        of ``<kind>.plan`` owns the next ``n`` samples of the trace stream, in run order."""
        marks = [e for e in store.events(session_id, stream=plan_stream)
                 if e.kind in ("trajectory_start", "trajectory_end")]
        read_range = getattr(store, "read_range", None)
        runs, k, recorded = [], 0, 0
        for i, ev in enumerate(marks):
            if ev.kind != "trajectory_start":
                continue
            recorded += 1
            n, dt = int(ev.body["n"]), float(ev.body["dt"])
            done = i + 1 < len(marks) and marks[i + 1].kind == "trajectory_end"
            if done:
                rows = (read_range(session_id, trace_stream, k, k + n).data if read_range is not None
                        else store.read_stream(session_id, trace_stream).data[k:k + n])
                if rows.shape[0] != n:
                    raise ValueError(f"session {session_id}: run {recorded - 1} has {rows.shape[0]} stored "
                                     f"samples, expected {n}")
                rows = rows.astype(float)
                runs.append(Record(np.arange(n) * dt, rows[:, 0], rows[:, 1], rows[:, 2], dt, dict(ev.body)))
            k += n
        return Runs(runs, recorded) if runs else None

    return arrays


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
                "nfev": self.nfev, "elapsed_s": self.elapsed_s}


def analyze(recs: Runs | None, cfg: AdjointRigConfig, progress=None) -> AdjointAnalysis:
    """Least-squares fit of the design's parameters (and ``[fit.nuisance]``) on the recorded command and
    output of every completed run together; the predicted std is the design noise's, marginal over the
    nuisance parameters. A session of the sequential loop is fitted as its online identifier fits (a scan
    over the design's parameters, then Levenberg-Marquardt), so the analysis ends at its last estimate; a
    single plain run as before (from ``[fit].start`` times the design point). The crane is fitted on its
    first run only (its friction and dead-time model fits one record)."""
    from daq.rigs.analysis import AnalysisError
    from identification.adjoint_plants import fit_record, fit_records
    from identification.sequential_design import Record as FitRecord

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
    values, nuisance = nominal_values(cfg), dict(cfg.fit.nuisance)
    if plant == "crane" or (len(runs) == 1 and not cfg.sequential.enabled):
        rec = runs[0]
        u = lagged_mean(rec.force_cmd, cfg.fit.input_lag, rec.dt)
        fit = fit_record(plant, values, names, nuisance, u, rec.dt, rec.output, cfg.adjoint.sigma,
                         start=cfg.fit.start, skip=skip, decimate=cfg.fit.decimate,
                         friction_eps=cfg.fit.friction_speed_eps)
    else:
        data = [FitRecord(lagged_mean(r.force_cmd, cfg.fit.input_lag, r.dt), r.output, r.dt,
                          int(round(cfg.fit.skip / r.dt))) for r in runs]
        fit = fit_records(plant, values, names, nuisance, data, cfg.adjoint.sigma, start=cfg.fit.start,
                          scan=cfg.sequential.enabled, friction_eps=cfg.fit.friction_speed_eps)
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
                           elapsed_s=time.perf_counter() - t0, n_runs=len(runs), n_recorded=recs.recorded)


def _design_std(runs: list[Record]) -> np.ndarray | None:
    """The design model's predicted std for the runs together: from the sum of the Fisher matrices
    their trajectory events carry (each at its own design point); one run: its ``predicted_std``."""
    if len(runs) == 1:
        std = runs[0].info.get("predicted_std")
        return None if std is None else np.asarray(std, float)
    if not all("fisher" in r.info for r in runs):
        return None
    return _std(sum(np.asarray(r.info["fisher"], float) for r in runs))


def _plots(result: AdjointAnalysis, recs: Runs, folder: Path) -> list[Path]:
    from daq.rigs.adjoint.plots import plot_analysis

    runs = recs.runs[:result.n_runs]
    return plot_analysis(result, Runs(runs, len(runs)).joined(), folder)


def _describe(sim) -> list[dict]:
    s = sim.settings
    return [{"device": "drive", "protocol": "opc.tcp", "address": url, "security": kind,
             "nodes": f"namespace {s.namespace}, object {s.axis}, plant {sim.plant}"}
            for kind, url in sim.endpoints.items()]


def simulator(raw: dict):
    from simulators.crane_rig import CraneRig

    return CraneRig(raw)


def make_rig(kind: str, summary: str) -> Rig:
    cmd, inp, out = channels_of(kind)
    in_unit, _, unit = units_of(kind)
    return Rig(
        kind=kind,
        summary=summary,
        schema=AdjointRigConfig,
        open_devices=open_devices,
        plan=make_plan(kind),
        simulator=simulator,
        simulated_devices=simulated_devices,
        prepare=prepare,
        progress_total=lambda cfg: cfg.sequential.max_runs if cfg.sequential.enabled else 1,
        arrays=make_arrays(kind),
        analyze=analyze,
        report=Report(text=lambda r: r.text(), to_dict=lambda r: r.to_dict(), plots=_plots),
        describe_simulator=_describe,
        streams={f"{kind}.trace": f"{cmd}, {inp} [{in_unit}], {out} [{unit}] at the drive's cycle",
                 f"{kind}.plan": "events"},
    )
