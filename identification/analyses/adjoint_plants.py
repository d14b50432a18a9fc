"""The three input-design problems of issue 9, built from plain dicts (e.g. an ``[adjoint]`` table).

``design_problem(plant, values, spec)`` turns the plant's physical values at the design point (a rig's
``[adjoint.nominal]`` or an earlier estimate, :data:`DESIGN_VALUES`) and the design description
(``[adjoint]``) into a :class:`DesignProblem`; ``start_input`` and
``reference_inputs`` give the paper's start signal F0 and comparison signals. No file access:
the caller loads the config.

``spec`` keys (SI): ``parameters`` (names to identify), ``criterion``, ``scaling``, ``t_f``,
``dt`` (input sample time), ``n_sub`` (RK4 steps per sample), ``u_max`` (|u| <= u_max),
``start`` (F0 = start*u_max, constant), ``sigma`` (measurement noise std), ``meas_dt``
(measurement sample time), ``end`` (state name -> scale, target 0), ``limits`` (state name ->
limit), ``end_weight``, ``limit_weight``.

``fit_record`` identifies the design's parameters from one recorded run with an analysis model that
may carry nuisance parameters the design model leaves out (friction of the cart, Coulomb/Stribeck
friction and dead time of the crane): they are fitted alongside, and the predicted uncertainty of
the design's parameters is their marginal std from the full covariance. ``fit_records`` does the same
jointly over several runs (oscillator, pendulum: a sequential-design session), through
:func:`identification.design.sequential_design.fit_runs`, the fit the online identifier runs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from identification.design.adjoint_design import (
    DesignProblem,
    EndCondition,
    StateLimit,
    simulate_output,
)
from identification.design.sequential_design import Record, fit_runs
from identification.estimation.covariance import marginal_std
from identification.estimation.residual_adequacy import hac_covariance
from identification.models.drive_simulation import DEFAULT_FRICTION_EPS, prepare_input, simulate
from identification.models.ode_models import PENDULUM_PARAMS, CartPendulumModel, crane_model, oscillator_model
from identification.selection.model_selection import fit_structure, parse_name

__all__ = ["DEFAULT_SPECS", "DESIGN_VALUES", "design_problem", "start_input", "reference_inputs", "PLANTS",
           "RecordFit", "analysis_model", "fit_record", "fit_records", "CRANE_STRUCTURE"]

PLANTS = ("oscillator", "pendulum", "crane")

#: The physical values a design point must give for each plant's design model (every parameter the model
#: holds fixed or frees; the pendulum's ``g`` defaults to 9.81 m/s^2). The model classes fall back on the
#: paper's example values for a key left out; a rig's design point must not (it would be a silent guess).
DESIGN_VALUES: dict[str, tuple[str, ...]] = {
    "oscillator": ("m1", "m2", "c1", "c2", "d1", "d2"),
    "pendulum": ("m_c", "m_p", "J_p", "s_p", "d_p", "d_c"),
    "crane": ("J1", "J2", "k12", "d12", "J3", "k23", "d23", "viscous"),
}

#: Design descriptions used when ``spec`` leaves a key out (the values of configs/<plant>-sim.toml).
#: Crane ``sigma``: the drive's speed from 2^20-count encoder differences at 10 kHz has a quantisation
#: error of std ``q/sqrt(6)``, q = 2*pi/2^20/1e-4 s = 0.060 rad/s, on top of 0.01 rad/s noise: 0.027 rad/s.
DEFAULT_SPECS: dict[str, dict] = {
    "oscillator": {
        "parameters": ["c2"], "criterion": "D", "scaling": "relative", "t_f": 1.0, "dt": 0.005, "n_sub": 2,
        "u_max": 10.0, "start": 0.5, "sigma": 5e-5, "meas_dt": 0.001,
        "end": {"v1": 0.01, "v2": 0.01}, "limits": {}, "end_weight": 1e3, "limit_weight": 1e3,
    },
    "pendulum": {
        "parameters": ["s_p", "d_p"], "criterion": "D", "scaling": "relative", "t_f": 2.0, "dt": 0.02,
        "n_sub": 2, "u_max": 5.0, "start": 0.5, "sigma": 1e-3, "meas_dt": 0.005,
        "end": {"phi": 0.01, "v_c": 0.01, "omega": 0.01}, "limits": {}, "end_weight": 1e3,
        "limit_weight": 1e3,
    },
    "crane": {
        "parameters": ["k23", "d23", "J3"], "criterion": "D", "scaling": "relative", "t_f": 2.0, "dt": 0.002,
        "n_sub": 2, "u_max": 10.0, "start": 0.5, "sigma": 0.027, "meas_dt": 0.0001,
        "end": {"w1": 0.1, "w2": 0.1, "w3": 0.1, "q12": 1e-3, "q23": 1e-3}, "limits": {"w1": 150.0},
        "end_weight": 1e3, "limit_weight": 1e3,
    },
}


def _model(plant: str, truth: dict, params: list[str]):
    if plant == "oscillator":
        keys: tuple[str, ...] = ("m1", "m2", "c1", "c2", "d1", "d2")
        return oscillator_model({k: float(truth[k]) for k in keys if k in truth}, free=tuple(params))
    if plant == "pendulum":
        keys = ("m_c", "m_p", "J_p", "s_p", "d_p", "d_c", "g", "f_c", "f_p", "eps")
        if not set(params) <= set(PENDULUM_PARAMS):
            raise ValueError(f"pendulum: parameters must be names of {list(PENDULUM_PARAMS)}")
        return CartPendulumModel({k: float(truth[k]) for k in keys if k in truth}, param_names=tuple(params))
    if plant == "crane":
        return crane_model(truth, free=tuple(params))
    raise ValueError(f"unknown plant {plant!r}; known: {PLANTS}")


def design_problem(plant: str, truth: dict, spec: dict | None = None) -> DesignProblem:
    """Design problem for ``plant`` at the parameter values in ``truth`` (the design point; a value left out
    falls back on the model's example value - a rig gives all of :data:`DESIGN_VALUES`)."""
    s = {**DEFAULT_SPECS[plant], **(spec or {})} if plant in DEFAULT_SPECS else None
    if s is None:
        raise ValueError(f"unknown plant {plant!r}; known: {PLANTS}")
    params = list(s["parameters"])
    model = _model(plant, truth, params)
    b = np.array([float(model.nominal[p]) for p in params])
    n = int(round(float(s["t_f"]) / float(s["dt"])))
    if n < 1 or abs(n * float(s["dt"]) - float(s["t_f"])) > 1e-9 * float(s["t_f"]):
        raise ValueError("t_f must be a whole number of input samples dt")
    names = list(model.state_names)

    def index(name: str) -> int:
        if name not in names:
            raise ValueError(f"{plant}: unknown state {name!r}; states: {names}")
        return names.index(name)

    ends = [EndCondition(index(k), 0.0, float(v)) for k, v in dict(s["end"]).items()]
    limits = [StateLimit(index(k), float(v)) for k, v in dict(s["limits"]).items()]
    umax = float(s["u_max"])
    return DesignProblem(model, b, float(s["dt"]), n, -umax, umax, n_sub=int(s["n_sub"]),
                         criterion=str(s["criterion"]), scaling=s["scaling"], sigma=float(s["sigma"]),
                         meas_dt=float(s["meas_dt"]), end_conditions=ends, end_weight=float(s["end_weight"]),
                         state_limits=limits, limit_weight=float(s["limit_weight"]))


def start_input(problem: DesignProblem, start: float = 0.5) -> np.ndarray:
    """The paper's start signal F0: the constant ``start * u_max``."""
    lo, hi = problem.bounds()
    return np.full(lo.shape, start * hi[0, 0])


def reference_inputs(problem: DesignProblem, start: float = 0.5) -> dict[str, np.ndarray]:
    """F0 and F_comp (a full-amplitude sine of period t_f), shape (N, 1)."""
    t = np.arange(problem.n_samples) * problem.dt
    umax = problem.bounds()[1][0, 0]
    return {"F0": start_input(problem, start),
            "sine": (umax * np.sin(2 * np.pi * t / problem.t_f))[:, None]}


# ------------------------------------------------------------------------------ fit of a recorded run
#: The crane's analysis structure (``identification.models.drive_models``): three masses, viscous, Coulomb and
#: Stribeck friction on the motor, input dead time - what the simulated axis has but the design model lacks.
CRANE_STRUCTURE = "3m+visc+coul+strib+dt"


@dataclass
class RecordFit:
    """Fit of one recorded run: the design's parameters first, then the nuisance parameters."""

    names: list[str]
    n_design: int                 # the first n_design names are the design's parameters
    estimate: np.ndarray
    design_point: np.ndarray      # where the predicted covariance is taken (nuisance at their nominal)
    predicted_cov: np.ndarray     # design noise sigma, samples used by the fit, full model
    residual_cov: np.ndarray      # at the estimate, with the residual variance
    residual_std: float           # output units
    n_used: int                   # samples in the cost
    success: bool
    nfev: int
    message: str
    t: np.ndarray                 # instants of y_fit, s (runs one after the other)
    y_fit: np.ndarray
    n_runs: int = 1               # records fitted together
    robust_cov: np.ndarray | None = None    # Newey-West sandwich at the estimate (issue 21); None: none
    hac_bandwidth: float = math.nan
    residuals: np.ndarray | None = None     # model - measured on the fitted samples, runs stacked
    run_sizes: tuple[int, ...] = ()         # fitted samples per run
    jacobian: np.ndarray | None = None      # output sensitivities at the estimate, rows of ``residuals``

    @property
    def predicted_std(self) -> np.ndarray:
        """Marginal standard deviations (square roots of the covariance diagonal), every parameter."""
        return np.sqrt(np.diag(self.predicted_cov))

    @property
    def residual_based_std(self) -> np.ndarray:
        return np.sqrt(np.diag(self.residual_cov))

    @property
    def robust_std(self) -> np.ndarray:
        """Marginal std of the robust (HAC) covariance; NaN where it is not computed or not PSD."""
        return marginal_std(self.robust_cov, self.estimate.size)


def analysis_model(plant: str, values: dict, names: list[str]):
    """The ODE model that identifies ``names`` (design parameters and nuisances) at ``values``."""
    return _model(plant, values, list(names))


def _inv(m: np.ndarray) -> np.ndarray:
    try:
        return np.linalg.inv(m)
    except np.linalg.LinAlgError:
        return np.full(m.shape, np.inf)


def fit_record(plant: str, values: dict, params: list[str], nuisance: dict[str, float], u: np.ndarray,
               dt: float, y: np.ndarray, sigma: float, *, start: float = 1.05, skip: int = 0,
               decimate: int = 1, friction_eps: float | None = None) -> RecordFit:
    """Least-squares fit of ``params`` (and the ``nuisance`` names, started at the given values).

    ``values``: the design point (every physical value of the plant); ``u``, ``y``: input and measured
    output sampled at ``dt`` (``y_k`` at ``t_k = k*dt``, before ``u_k`` acts). The design's parameters
    start at ``start`` times the design point. ``friction_eps``: smooth sign of the fitted Coulomb terms.
    ``decimate`` only concerns the crane (its model runs on ``decimate*dt``, the output is compared every
    ``decimate``-th sample). Several runs of the oscillator or the pendulum: :func:`fit_records`.
    """
    if plant == "crane":
        names, point, b_design, b0 = _start(values, params, nuisance, start)
        return _fit_crane(names, len(params), point, b_design, b0, u, dt, y, sigma, skip, decimate,
                          friction_eps)
    return fit_records(plant, values, params, nuisance, [Record(u, y, dt, skip)], sigma, start=start,
                       friction_eps=friction_eps)


def _start(values: dict, params: list[str], nuisance: dict[str, float], start: float):
    """(names, physical point, design point, start) of a fit: design parameters at ``start`` times
    their design value, nuisances at their given values."""
    names = list(params) + [n for n in nuisance if n not in params]
    point = {**values, **nuisance}
    b_design = np.array([float(point[n]) for n in names])
    b0 = b_design * np.where(np.arange(len(names)) < len(params), start, 1.0)
    return names, point, b_design, b0


def fit_records(plant: str, values: dict, params: list[str], nuisance: dict[str, float],
                runs: Sequence[Record], sigma: float, *, start: float = 1.05, scan: bool = False,
                friction_eps: float | None = None) -> RecordFit:
    """Joint least-squares fit of ``params`` (and the ``nuisance`` names) over every record of ``runs``
    (oscillator, pendulum): the model, start and nuisance handling of :func:`fit_record`, residuals of
    all runs stacked (:func:`identification.design.sequential_design.fit_runs`; each record starts at rest and
    keeps its own ``skip``). ``scan=True`` also starts from a log grid over the design's parameters and
    keeps the least cost, as the online identifier's first fit does (a far design point can otherwise
    end in a local minimum). One record without scan is :func:`fit_record`'s fit.

    Predicted covariance: ``sigma**2 (sum_i J_i^T J_i)^-1`` at the design point; residual-based: the
    pooled residual variance over all runs times ``(J^T J)^-1`` at the estimate (``fit_runs``).
    """
    if plant == "crane":
        raise ValueError("fit_records: the crane is fitted per record (fit_record)")
    if not runs:
        raise ValueError("fit_records: no records")
    names, point, b_design, b0 = _start(values, params, nuisance, start)
    vals = dict(point)
    if friction_eps is not None:
        vals["eps"] = friction_eps
    model = analysis_model(plant, vals, names)
    fit = fit_runs(model, runs, b0, scan=scan, scan_dims=len(params))
    J = np.concatenate([simulate_output(model, b_design, r.u, r.dt, 1)[2][r.skip:].reshape(-1, len(names))
                        for r in runs])
    t, y_fit, jac, t0 = [], [], [], 0.0
    for r in runs:
        _, yf, sf = simulate_output(model, fit.b, r.u, r.dt, 1)
        t.append(t0 + np.arange(yf.shape[0]) * r.dt)
        y_fit.append(yf[:, 0])
        jac.append(sf[r.skip:].reshape(-1, len(names)))
        t0 += yf.shape[0] * r.dt
    return RecordFit(names, len(params), fit.b, b_design, sigma**2 * _inv(J.T @ J), fit.covariance,
                     fit.residual_std, J.shape[0], fit.success, fit.nfev, fit.message, np.concatenate(t),
                     np.concatenate(y_fit), n_runs=len(runs), robust_cov=fit.robust_covariance,
                     hac_bandwidth=fit.hac_bandwidth, residuals=fit.residuals, run_sizes=fit.run_sizes,
                     jacobian=np.concatenate(jac))


def _fit_crane(names, n_design, point, b_design, b0, u, dt, y, sigma, skip, decimate, eps) -> RecordFit:

    s = parse_name(CRANE_STRUCTURE)
    eps = DEFAULT_FRICTION_EPS if eps is None else float(eps)
    missing = [k for k in s.param_names if k not in names and k not in point]
    if missing:
        raise ValueError(f"crane fit: no value for {', '.join(missing)} (held fixed): give it in the design "
                         f"point ([adjoint.nominal]) or fit it ([fit.nuisance])")
    fixed = {k: float(point[k]) for k in s.param_names if k not in names}
    start = {**fixed, **dict(zip(names, b0.tolist(), strict=True))}
    fit = fit_structure(s, u, y, dt, fixed=fixed, start=start, n_starts=1, decimate=decimate, skip=skip,
                        friction_eps=eps)
    cols = [s.param_names.index(n) for n in names]
    inp = prepare_input(u, dt, decimate)
    at_design = simulate(s, {**fixed, **dict(zip(names, b_design.tolist(), strict=True))}, inp,
                         friction_eps=eps)
    assert at_design.S is not None  # simulate computes it by default (sensitivities=True)
    J = at_design.S[skip:, cols]
    Jf = fit.S[:, cols]
    est = np.array([fit.params[n] for n in names])
    at_fit = simulate(s, fit.params, inp, sensitivities=False, friction_eps=eps)
    n_used = Jf.shape[0]
    res = (np.asarray(at_fit.y, float) - np.asarray(y, float)[::decimate][: at_fit.y.size])[skip:][:n_used]
    robust, bw = hac_covariance(Jf[: res.size], res) if res.size == n_used else (None, math.nan)
    return RecordFit(names, n_design, est, b_design, sigma**2 * _inv(J.T @ J), fit.sigma2 * _inv(Jf.T @ Jf),
                     math.sqrt(fit.sigma2), n_used, not fit.at_bound, fit.n_evals,
                     f"at bound: {fit.at_bound}" if fit.at_bound else "ok",
                     np.arange(at_fit.y.size) * dt * decimate, np.asarray(at_fit.y, float),
                     robust_cov=robust, hac_bandwidth=bw, residuals=res, run_sizes=(int(res.size),),
                     jacobian=Jf[: res.size])
