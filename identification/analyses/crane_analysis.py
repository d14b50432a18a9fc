"""Crane x-axis analysis: model selection from ``[model_selection]``; one model fitted on several runs.

Keys (all optional; SI units)::

    [model_selection]
    max_masses = 3              # candidates with 1..max_masses inertias (3 -> 96 models)
    candidates = []             # explicit model names instead (e.g. ["3m+visc+dt", "2m+visc"])
    n_starts = 3                # multistart least-squares starts per candidate (centre + Latin hypercube)
    seed = 0                    # seed of the start points
    max_nfev = 60               # Jacobian evaluations per start
    decimate = 5                # model step = decimate * trace dt (10 kHz -> 2 kHz)
    skip = 0                    # model steps left out of the cost at the start of each run
    friction_eps = 0.05         # rad/s, smooth sign tanh(w/eps) of the candidates' Coulomb/Stribeck friction
    min_pii_ratio = 0.0         # accept only if min PII >= this x max PII (eq. 6; 0: off - the right model's
                                # dead time sits at 0.7-1 % of its search range's importance)
    max_condition_index = 1000.0  # ... and every scaled condition index < this (eq. 8; a guard against a
                                  # near-singular Fisher matrix: the seed paper's 30 rejects the right model)
    max_rel_std = 0.25          # ... and every parameter's standard error <= this x its value
    min_validation_fit = 0.8    # ... and 1 - NRMSE on the validation run >= this
    parsimony_tol = 0.01        # fewest parameters within (1 + tol) x best validation cost (0: best fit)
    profile_points = 9          # grid points per parameter of the profile likelihood
    n_jobs = 2                  # worker processes

    [model_selection.bounds]    # name = [lo, hi]; defaults: identification.models.drive_models.DEFAULT_BOUNDS
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.optimize

from identification.estimation.blas import single_thread_blas
from identification.estimation.ellipsoid import confidence_ellipsoid
from identification.models.drive_models import (
    DEFAULT_BOUNDS,
    PARAM_UNITS,
    DriveStructure,
    all_structures,
    parse_name,
)
from identification.models.drive_simulation import DEFAULT_FRICTION_EPS, prepare_input
from identification.selection.fitting import _nrmse, _Problem, _Scaling, _starts, as_run
from identification.selection.model_selection import CandidateResult, SelectionResult, select_model

__all__ = ["analyze_crane", "selection_options", "DEFAULTS", "RunsFit", "fit_runs"]

DEFAULTS: dict = {
    "max_masses": 3,
    "candidates": None,
    "n_starts": 3,
    "seed": 0,
    "max_nfev": 60,
    "decimate": 5,
    "skip": 0,
    "friction_eps": 0.05,
    "min_pii_ratio": 0.0,
    "max_condition_index": 1000.0,
    "max_rel_std": 0.25,
    "min_validation_fit": 0.8,
    "parsimony_tol": 0.01,
    "profile_points": 9,
    "n_jobs": 2,
}


def selection_options(section: dict | None) -> dict:
    """Keyword arguments for :func:`select_model` from a ``[model_selection]`` dict (validated)."""
    sec = dict(section or {})
    unknown = sorted(set(sec) - set(DEFAULTS) - {"bounds"})
    if unknown:
        known = sorted(DEFAULTS) + ["bounds"]
        raise ValueError(f"[model_selection]: unknown key(s) {unknown}; known: {known}")
    opt = {**DEFAULTS, **{k: v for k, v in sec.items() if k != "bounds"}}
    bounds = dict(DEFAULT_BOUNDS)
    for name, pair in (sec.get("bounds") or {}).items():
        if name not in DEFAULT_BOUNDS:
            raise ValueError(f"[model_selection.bounds]: unknown parameter {name!r}; "
                             f"known: {sorted(DEFAULT_BOUNDS)}")
        try:
            lo, hi = (float(pair[0]), float(pair[1]))
        except (TypeError, ValueError, IndexError):
            raise ValueError(f"[model_selection.bounds] {name} must be [lo, hi]") from None
        if not lo < hi:
            raise ValueError(f"[model_selection.bounds] {name}: need lo < hi, got [{lo}, {hi}]")
        bounds[name] = (lo, hi)
    if opt["candidates"]:
        candidates = [parse_name(str(c)) for c in opt["candidates"]]
    else:
        mm = int(opt["max_masses"])
        if mm not in (1, 2, 3):
            raise ValueError("[model_selection] max_masses must be 1, 2 or 3")
        candidates = all_structures(mm)
    for key in ("n_starts", "decimate", "max_nfev", "n_jobs", "profile_points"):
        if int(opt[key]) < 1:
            raise ValueError(f"[model_selection] {key} must be >= 1")
    return dict(bounds=bounds, candidates=candidates, n_starts=int(opt["n_starts"]), seed=int(opt["seed"]),
                max_nfev=int(opt["max_nfev"]), decimate=int(opt["decimate"]), skip=int(opt["skip"]),
                friction_eps=float(opt["friction_eps"]), min_pii_ratio=float(opt["min_pii_ratio"]),
                max_condition_index=float(opt["max_condition_index"]), max_rel_std=float(opt["max_rel_std"]),
                min_validation_fit=float(opt["min_validation_fit"]),
                parsimony_tol=float(opt["parsimony_tol"]),
                profile_points=int(opt["profile_points"]), n_jobs=int(opt["n_jobs"]))


def analyze_crane(train, valid, config_section: dict | None,
                  progress: Callable[[int, int, CandidateResult], None] | None = None) -> SelectionResult:
    """Select the crane model. ``train``/``valid``: ``(u, y, dt)`` or ``(t, torque_cmd, speed, dt)``."""
    opts = selection_options(config_section)
    bounds = opts.pop("bounds")
    return select_model(train, valid, bounds, progress=progress, **opts)


# ------------------------------------------------------------------------------ several runs, one model
@dataclass
class RunsFit:
    """One candidate fitted jointly on several runs (each simulated from rest), with its covariance.

    ``covariance = sigma2 (S^T S)^-1`` with ``S`` the stacked output sensitivities in SI units at the
    optimum and ``sigma2`` the residual variance; ``semi_axes`` are the (1 - alpha) confidence
    ellipsoid's semi-axes (eq. 7), mixed units like the covariance.
    """

    model: str
    names: list[str]
    values: np.ndarray
    cost: float                  # 0.5 * sum of squared residuals over all runs
    sigma2: float                # rad^2/s^2
    covariance: np.ndarray
    std: np.ndarray
    rel_std: np.ndarray
    semi_axes: np.ndarray
    alpha: float
    fits: list[float]            # 1 - NRMSE per run
    n_obs: int
    n_evals: int
    n_starts: int
    at_bound: list[str]

    @property
    def params(self) -> dict[str, float]:
        return {n: float(v) for n, v in zip(self.names, self.values, strict=True)}

    def to_dict(self) -> dict:
        """JSON-ready, in the keys of the common online-estimate contract (plus a few extras)."""
        return {"model": self.model, "parameters": list(self.names), "values": self.values.tolist(),
                "units": [PARAM_UNITS.get(n, "") for n in self.names],
                "std": _floats(self.std), "rel_std": _floats(self.rel_std),
                "covariance": [_floats(r) for r in self.covariance],
                "ellipse_semi_axes": _floats(self.semi_axes), "alpha": self.alpha,
                "cost": self.cost, "sigma2": self.sigma2, "fits": list(self.fits), "n_obs": self.n_obs,
                "n_evals": self.n_evals, "n_starts": self.n_starts, "at_bound": list(self.at_bound)}


def _floats(a) -> list:
    """Floats for JSON: non-finite values become None."""
    return [float(x) if np.isfinite(x) else None for x in np.asarray(a, dtype=float).ravel()]


class _Stacked:
    """Residuals and Jacobian of several runs stacked (each run a `_Problem` with the same scaling)."""

    def __init__(self, problems: list[_Problem]):
        self.problems = problems
        self.free = problems[0].free

    def fun(self, th):
        return np.concatenate([p.fun(th) for p in self.problems])

    def jac(self, th):
        return np.vstack([p.jac(th) for p in self.problems])

    def sens(self, th):
        return np.vstack([p._eval(th)[2] for p in self.problems])

    @property
    def n_evals(self) -> int:
        return sum(p.n_evals for p in self.problems)


def fit_runs(structure: DriveStructure | str, runs: Sequence,
             bounds: dict[str, tuple[float, float]] | None = None, *, start: dict[str, float] | None = None,
             n_starts: int = 3, seed: int = 0, decimate: int = 5,
             skip: int = 0, friction_eps: float = DEFAULT_FRICTION_EPS, max_nfev: int = 100,
             xtol: float = 1e-10, alpha: float = 0.05) -> RunsFit:
    """Fit ``structure`` on all ``runs`` (``(u, y, dt)`` or ``(t, u, y, dt)``) at once.

    Each run starts from rest, as on the rig; the cost is the sum over runs. ``start`` (physical
    values, e.g. the previous estimate) warm-starts with that single point; without it the centre
    of the scaled box and ``n_starts - 1`` Latin-hypercube points are tried (as ``fit_structure``).
    """
    s = parse_name(structure) if isinstance(structure, str) else structure
    runs = [as_run(r) for r in runs]
    if not runs:
        raise ValueError("fit_runs needs at least one run")
    bounds = {**DEFAULT_BOUNDS, **(bounds or {})}
    sc = _Scaling(s.param_names, bounds)
    probs = []
    for u, y, dt in runs:
        inp = prepare_input(u, dt, decimate)
        probs.append(_Problem(s, inp, np.asarray(y, dtype=float)[::decimate][: inp.n_steps], sc, skip,
                              friction_eps))
    prob = _Stacked(probs)
    if start is not None:
        starts = [sc.to_th(np.array([float(start[n]) for n in sc.names]))]
    else:
        starts = _starts(len(sc.names), n_starts, np.random.default_rng(seed))
    best = None
    with single_thread_blas():
        for th0 in starts:
            try:
                r = scipy.optimize.least_squares(prob.fun, th0, jac=prob.jac, bounds=(0.0, 1.0), method="trf",
                                                 x_scale="jac", max_nfev=max_nfev, xtol=xtol, ftol=xtol)
                cost, th = float(r.cost), r.x
            except (ValueError, np.linalg.LinAlgError, FloatingPointError):
                continue
            if best is None or cost < best[0]:
                best = (cost, th)
        if best is None:
            raise ValueError(f"{s.name}: no start point could be fitted")
        cost, th = best
        res = prob.fun(th)
        S = prob.sens(th)
        values = sc.to_p(np.clip(th, 0, 1))
        n_obs, n_p = S.shape
        sigma2 = float(res @ res) / max(n_obs - n_p, 1)
        try:
            cov = sigma2 * np.linalg.inv(S.T @ S)
            cov = 0.5 * (cov + cov.T)
        except np.linalg.LinAlgError:
            cov = np.full((n_p, n_p), np.inf)
        ell = confidence_ellipsoid(values, cov, alpha) if np.all(np.isfinite(cov)) else None
    std = np.sqrt(np.where(np.diag(cov) >= 0, np.diag(cov), np.nan))
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(values != 0, std / np.abs(values), np.inf)
    fits, k = [], 0
    for p in probs:
        m = p.y.size - p.skip
        e = res[k:k + m]
        fits.append(1.0 - _nrmse(e, p.y[p.skip:p.skip + e.size]))
        k += m
    at_bound = [n for n, v in zip(sc.names, np.clip(th, 0, 1), strict=True) if v <= 1e-6 or v >= 1 - 1e-6]
    return RunsFit(model=s.name, names=list(sc.names), values=values, cost=float(cost), sigma2=sigma2,
                   covariance=cov, std=std, rel_std=rel,
                   semi_axes=ell.semi_axes if ell is not None else np.full(n_p, np.inf), alpha=float(alpha),
                   fits=fits, n_obs=int(n_obs), n_evals=prob.n_evals, n_starts=len(starts), at_bound=at_bound)
