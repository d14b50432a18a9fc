"""The adjoint rigs' inputs: the design point, the adjoint design problem and its solution, the
comparison inputs, trajectory files, and what the design model predicts for an input.

Blocking numerics: the plan calls these off the event loop. The identification kit (scipy, the plant
models) is imported inside the functions, so the registry's import of a rig stays light.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

from daq.rigs.adjoint.config import AdjointRigConfig
from daq.rigs.excitation import design_excitation


def lagged_mean(force: np.ndarray, lag: float, dt: float) -> np.ndarray:
    """Per-sample mean of a held command seen through a first-order lag ``lag`` << dt: the input the
    model's held-sample integration should get (each sample borrows ``w`` of the previous one)."""
    if lag <= 0:
        return np.asarray(force, float)
    w = lag / dt * (1.0 - math.exp(-dt / lag))
    prev = np.concatenate([[0.0], force[:-1]])
    return force + w * (prev - force)


def nominal_values(cfg: AdjointRigConfig) -> dict[str, float]:
    """The design point: the plant's default values, the simulator truth, then ``[adjoint.nominal]``."""
    from simulators.crane_drive import get_plant  # lazy: asyncua and scipy

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
    from simulators.crane_drive import get_plant  # lazy: asyncua and scipy

    truth = get_plant(cfg.adjoint.plant).truth.from_config(dict(cfg.simulator.truth))
    return {k: float(v) for k, v in truth.to_dict().items()}


def problem_of(cfg: AdjointRigConfig):
    from identification.adjoint_plants import design_problem  # lazy: scipy

    return design_problem(cfg.adjoint.plant, nominal_values(cfg), cfg.adjoint.spec())


def run_design(cfg: AdjointRigConfig):
    """The adjoint design of the config (``identification.adjoint_design.optimize_input`` from F0)."""
    from identification.adjoint_design import optimize_input  # lazy: scipy
    from identification.adjoint_plants import reference_inputs  # lazy: scipy

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
    from identification.adjoint_plants import reference_inputs  # lazy: scipy

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
    info.update(predicted(pb, force, pb.dt))
    return force, info


def multisine_of(cfg: AdjointRigConfig, pb, info: dict) -> tuple[np.ndarray, dict]:
    """The crane's training multisine (``[excitation]``, built as the crane rig builds it) at its own
    sample time, scaled to the peak ``u_max``: the same duration and peak torque as the adjoint design."""
    from identification.adjoint_design import DesignProblem  # lazy: scipy

    if cfg.excitation is None:
        raise ValueError("[plan] design = 'multisine' needs an [excitation] table")
    dt, torque, _, _, _ = design_excitation(cfg.excitation, "training", cfg.devices.drive.torque_limit)
    torque = np.asarray(torque, float) / np.abs(torque).max() * cfg.adjoint.u_max
    if abs(torque.size * dt - pb.t_f) > 1e-9 * pb.t_f:
        raise ValueError(f"[excitation]: {torque.size} samples of {dt:g} s do not last t_f = {pb.t_f:g} s")
    fine = DesignProblem(pb.model, pb.b, dt, torque.size, -cfg.adjoint.u_max * (1 + 1e-9),
                         cfg.adjoint.u_max * (1 + 1e-9), n_sub=1, criterion=pb.criterion, scaling=pb.scaling,
                         sigma=pb.sigma, meas_dt=pb.meas_dt, end_conditions=pb.end_conditions)
    info.update(predicted(fine, torque, dt))
    return torque, info


def predicted(pb, u: np.ndarray, dt: float) -> dict:
    """What the design model predicts for input ``u`` (sample time ``dt``): Fisher matrix, standard
    deviations at the design point, end-condition residuals, peak."""
    from identification.adjoint_design import evaluate  # lazy: scipy

    ev = evaluate(pb, u[:, None], gradient=False)
    names = list(pb.model.state_names)
    return dict(parameters=list(pb.model.param_names), design_point=pb.b.tolist(),
                fisher=ev.fisher.tolist(), predicted_std=fisher_std(ev.fisher).tolist(),
                end_residuals={names[c.index]: float(r) for c, r in
                               zip(pb.end_conditions, ev.end_residuals, strict=True)},
                input_dt=dt, peak_force=float(np.abs(u).max()))


def fisher_std(fisher: np.ndarray) -> np.ndarray:
    try:
        return np.sqrt(np.diag(np.linalg.inv(fisher)))
    except np.linalg.LinAlgError:
        return np.full(fisher.shape[0], np.inf)


