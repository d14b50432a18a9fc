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

from daq import json_codec
from daq.config.load import ConfigError
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


def nominal_values(cfg: AdjointRigConfig, prior: dict[str, float] | None = None) -> dict[str, float]:
    """The design point: prior knowledge only - ``[adjoint.nominal]`` (data sheet, drawings, an earlier
    identification), with ``prior`` (an earlier session's estimate, ``hil design adjoint --prior``) over it.
    Never the simulator truth: a real rig has none. ConfigError naming ``[adjoint.nominal]`` and the
    missing values when the design model's values are not all given."""
    from identification.analyses.adjoint_plants import DESIGN_VALUES  # lazy: scipy

    values = {k: float(v) for k, v in cfg.adjoint.nominal.items()}
    values.update(prior or {})
    missing = [k for k in DESIGN_VALUES[cfg.adjoint.plant] if k not in values]
    if missing:
        raise ConfigError(f"the design point is prior knowledge, not the simulator truth: give "
                          f"{', '.join(missing)} ({cfg.adjoint.plant} design model) in [adjoint.nominal], or "
                          f"design at an earlier session's estimate (hil design adjoint --prior SESSION)",
                          key="[adjoint.nominal]")
    return values


def nuisance_starts(cfg: AdjointRigConfig, values: dict[str, float]) -> dict[str, float]:
    """Start values of the ``[fit.nuisance]`` parameters: the design point's value where it has one (the
    pendulum's cart friction ``d_c``, the crane's ``viscous``: prior knowledge, like the design point),
    else the value ``[fit.nuisance]`` gives (a data-sheet guess for friction the design model lacks)."""
    return {n: float(values.get(n, v)) for n, v in cfg.fit.nuisance.items()}


def simulator_truth(cfg: AdjointRigConfig) -> dict[str, float] | None:
    """Every number of the simulator truth (None for a real rig)."""
    if cfg.simulator is None:
        return None
    from simulators.crane_drive import get_plant  # lazy: scipy and the simulator's plants

    truth = get_plant(cfg.adjoint.plant).truth.from_config(dict(cfg.simulator.truth))
    return {k: float(v) for k, v in truth.to_dict().items()}


def problem_of(cfg: AdjointRigConfig, prior: dict[str, float] | None = None,
               prior_fisher: np.ndarray | None = None):
    """The design problem at the design point (:func:`nominal_values`); ``prior_fisher``: information the
    new run adds to (an earlier session's, the inverse of its covariance), physical units."""
    from identification.analyses.adjoint_plants import design_problem  # lazy: scipy

    pb = design_problem(cfg.adjoint.plant, nominal_values(cfg, prior), cfg.adjoint.spec())
    pb.prior_fisher = prior_fisher
    return pb


def run_design(cfg: AdjointRigConfig, prior: dict[str, float] | None = None,
               prior_fisher: np.ndarray | None = None):
    """The adjoint design of the config (``identification.design.adjoint_design.optimize_input`` from F0)."""
    from identification.analyses.adjoint_plants import reference_inputs  # lazy: scipy
    from identification.design.adjoint_design import optimize_input  # lazy: scipy

    a = cfg.adjoint
    pb = problem_of(cfg, prior, prior_fisher)
    u0 = reference_inputs(pb, a.start)["F0"]
    return optimize_input(pb, u0, method=a.method, max_iter=a.max_iter, rounds=a.rounds, end_tol=a.end_tol,
                          grad_tol=a.grad_tol)


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


def design_record_path(trajectory: str | Path) -> Path:
    """Where `hil design adjoint` records a trajectory's design (JSON beside the CSV)."""
    return Path(trajectory).with_suffix(".design.json")


def design_prior(trajectory: str | Path) -> dict | None:
    """The prior (``{"session", "values", ...}``) a trajectory file was designed at, None for
    ``[adjoint.nominal]`` (or no design record)."""
    try:
        return json_codec.loads(design_record_path(trajectory).read_text()).get("prior")
    except (OSError, ValueError, AttributeError):
        return None


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
    from identification.analyses.adjoint_plants import reference_inputs  # lazy: scipy

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
            prior = design_prior(path)
            if prior is not None:  # designed at an earlier session's estimate: predict at that point
                pb = problem_of(cfg, prior["values"])
                info["prior_session"] = prior["session"]
        elif cfg.plan.design_if_missing:
            res = run_design(cfg)
            force = res.u[:, 0].copy()
            info.update(trajectory=None, iterations=res.iterations, design_success=res.success,
                        design_converged=res.converged, design_status=res.status)
        else:
            raise FileNotFoundError(f"{path} not found: run `hil design adjoint` first")
    else:
        force = reference_inputs(pb, cfg.adjoint.start)["F0" if design == "F0" else "sine"][:, 0].copy()
    info.update(predicted(pb, force, pb.dt))
    return force, info


def multisine_of(cfg: AdjointRigConfig, pb, info: dict) -> tuple[np.ndarray, dict]:
    """The crane's training multisine (``[excitation]``, built as the crane rig builds it) at its own
    sample time, scaled to the peak ``u_max``: the same duration and peak torque as the adjoint design."""
    from identification.design.adjoint_design import DesignProblem  # lazy: scipy

    if cfg.excitation is None:
        raise ValueError("[plan] design = 'multisine' needs an [excitation] table")
    assert cfg.devices is not None  # [devices] is required (the config's check)
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
    from identification.design.adjoint_design import evaluate  # lazy: scipy

    ev = evaluate(pb, u[:, None], gradient=False)
    names = list(pb.model.state_names)
    return dict(parameters=list(pb.model.param_names), design_point=pb.b.tolist(),
                fisher=ev.fisher.tolist(), predicted_std=fisher_std(ev.fisher).tolist(),
                end_residuals={names[c.index]: float(r) for c, r in
                               zip(pb.end_conditions, ev.end_residuals, strict=True)},
                input_dt=dt, peak_force=float(np.abs(u).max()))




def fisher_std(fisher: np.ndarray) -> np.ndarray:
    """:func:`identification.design.adjoint_design.fisher_std` (imported when first used)."""
    from identification.design.adjoint_design import fisher_std as predicted  # lazy: scipy

    return predicted(fisher)


# ----------------------------------------------------------------------------------------- priors


class Prior:
    """An earlier session's estimate as prior knowledge for a design (``hil design adjoint --prior``):
    ``values`` (its design point's values with the estimate over them, nuisances included), the
    identified ``names`` and their ``covariance`` (None: values only), and where it came from."""

    def __init__(self, session: str, values: dict[str, float], names: list[str],
                 covariance: np.ndarray | None, source: str):
        self.session, self.values, self.names, self.source = session, values, names, source
        self.covariance = None if covariance is None else np.asarray(covariance, float)

    def fisher_for(self, params: list[str]) -> np.ndarray | None:
        """The prior information (inverse covariance) in the order of ``params``; None when the session
        identified other parameters or its covariance is not invertible."""
        if self.covariance is None or sorted(self.names) != sorted(params):
            return None
        order = [self.names.index(p) for p in params]
        cov = self.covariance[np.ix_(order, order)]
        try:
            fisher = np.linalg.inv(cov)
        except np.linalg.LinAlgError:
            return None
        return fisher if np.all(np.isfinite(fisher)) else None

    def to_dict(self) -> dict:
        return {"session": self.session, "source": self.source, "values": self.values,
                "parameters": self.names,
                "covariance": None if self.covariance is None else self.covariance.tolist()}


def prior_from_estimate(session: str, config: AdjointRigConfig, estimate: dict) -> Prior:
    """A prior from a session's last online ``estimate`` event (its body) and its config snapshot (parsed)."""
    values = dict(config.adjoint.nominal)
    names = list(estimate["parameters"])
    values.update(zip(names, map(float, estimate["values"]), strict=True))
    values.update({n: float(d["value"]) for n, d in (estimate.get("nuisance") or {}).items()})
    return Prior(session, values, names, estimate.get("covariance"),
                 f"online estimate over {estimate.get('used', '?')} run(s)")


def prior_from_analysis(session: str, config: AdjointRigConfig, result: dict) -> Prior:
    """A prior from the analysis of a session (``AdjointAnalysis.to_dict()``): its estimates and, as the
    analysis reports standard deviations only, a diagonal covariance of the compared std."""
    values = dict(config.adjoint.nominal)
    names = list(result["estimate"])
    values.update({k: float(v) for k, v in result["estimate"].items()})
    values.update({n: float(d["estimate"]) for n, d in (result.get("nuisance") or {}).items()})
    std = np.array([result["compared_std"][n] for n in names], float)
    return Prior(session, values, names, np.diag(std**2), "offline analysis (diagonal covariance)")


# ----------------------------------------------------------------------------------------- comparison


def criterion_of(pb, fisher: np.ndarray, info_scale: float | None = None) -> float:
    """The design criterion (the value the optimiser minimises, prior information included) of an
    input with Fisher matrix ``fisher``; A and E divided by ``info_scale`` as in the optimiser."""
    from identification.design.adjoint_design import criterion_value  # lazy: scipy

    held = fisher if pb.prior_fisher is None else fisher + np.asarray(pb.prior_fisher, float)
    value = criterion_value(held * np.outer(pb.scales, pb.scales), pb.criterion, pb.e_power)[0]
    return value if pb.criterion == "D" or not info_scale else value / info_scale


def compare_inputs(cfg: AdjointRigConfig, pb, designed: np.ndarray) -> dict[str, dict]:
    """Criterion value and predicted std of the designed input against F0 (constant), the sine and, where
    the config has one of the same duration (crane), the shipped multisine:
    ``{input: {"criterion": J, "std": {name: s}}}``."""
    from identification.analyses.adjoint_plants import reference_inputs  # lazy: scipy
    from identification.design.adjoint_design import evaluate  # lazy: scipy

    fishers = {"adjoint": evaluate(pb, designed[:, None], gradient=False).fisher}
    for name, u in reference_inputs(pb, cfg.adjoint.start).items():
        fishers[name] = evaluate(pb, u, gradient=False).fisher
    if cfg.excitation is not None and cfg.adjoint.plant == "crane":
        try:  # only when the multisine lasts as long as the design (it is not stretched)
            fishers["multisine"] = np.asarray(multisine_of(cfg, pb, {})[1]["fisher"], float)
        except ValueError:
            pass
    scale = pb.info_scale
    if pb.criterion != "D" and not scale:
        scale = abs(criterion_of(pb, fishers["F0"])) or 1.0
    names = list(pb.model.param_names)
    return {k: {"criterion": criterion_of(pb, f, scale),
                "std": dict(zip(names, fisher_std(f).tolist(), strict=True))} for k, f in fishers.items()}


def worse_than_references(table: dict[str, dict], criterion: str) -> list[str]:
    """In words, each parameter whose predicted std with the design is larger than with a reference
    input (the best such reference), e.g. ``J3: predicted std 4.1e-06 with the design vs 8.6e-07 with F0
    - the D-optimal design trades J3 for the others``."""
    ours = table["adjoint"]["std"]
    lines = []
    for p, s in ours.items():
        better = [(v["std"][p], k) for k, v in table.items() if k != "adjoint" and v["std"][p] < s]
        if better:
            best, ref = min(better)
            lines.append(f"{p}: predicted std {s:.2g} with the design vs {best:.2g} with {ref} - the "
                         f"{criterion}-optimal design trades {p} for the others")
    return lines
