"""The three input-design problems of issue 9, built from plain dicts (e.g. an ``[adjoint]`` table).

``design_problem(plant, truth, spec)`` turns the plant's physical values (``[simulator.truth]``)
and the design description (``[adjoint]``) into a :class:`DesignProblem`; ``start_input`` and
``reference_inputs`` give the paper's start signal F0 and comparison signals. No file access:
the caller loads the config.

``spec`` keys (SI): ``parameters`` (names to identify), ``criterion``, ``scaling``, ``t_f``,
``dt`` (input sample time), ``n_sub`` (RK4 steps per sample), ``u_max`` (|u| <= u_max),
``start`` (F0 = start*u_max, constant), ``sigma`` (measurement noise std), ``meas_dt``
(measurement sample time), ``end`` (state name -> scale, target 0), ``limits`` (state name ->
limit), ``end_weight``, ``limit_weight``.
"""

from __future__ import annotations

import numpy as np

from identification.adjoint_design import DesignProblem, EndCondition, StateLimit
from identification.ode_models import CartPendulumModel, crane_model, oscillator_model

__all__ = ["DEFAULT_SPECS", "design_problem", "start_input", "reference_inputs", "PLANTS"]

PLANTS = ("oscillator", "pendulum", "crane")

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
        keys = ("m1", "m2", "c1", "c2", "d1", "d2")
        return oscillator_model({k: float(truth[k]) for k in keys if k in truth}, free=tuple(params))
    if plant == "pendulum":
        keys = ("m_c", "m_p", "J_p", "s_p", "d_p", "d_c", "g")
        if tuple(params) != ("s_p", "d_p"):
            raise ValueError("pendulum: parameters must be ['s_p', 'd_p']")
        return CartPendulumModel({k: float(truth[k]) for k in keys if k in truth})
    if plant == "crane":
        return crane_model(truth, free=tuple(params))
    raise ValueError(f"unknown plant {plant!r}; known: {PLANTS}")


def design_problem(plant: str, truth: dict, spec: dict | None = None) -> DesignProblem:
    """Design problem for ``plant`` at the parameter values in ``truth`` (the design point)."""
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
