"""Fitting one drive candidate to a run: the scaled parametrisation, residuals with the sensitivity
Jacobian, multistart bounded least squares (seed paper 004, section 2.2).

The model runs on the step ``decimate * dt`` and is compared with the measured speed at the same instants;
:mod:`identification.selection.model_selection` screens the kit with it on a coarse step and refits the
close rivals on the data's own step.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import scipy.optimize

from identification.models.drive_models import DEFAULT_BOUNDS, DriveStructure, parse_name
from identification.models.drive_simulation import DEFAULT_FRICTION_EPS, StepInput, prepare_input, simulate

__all__ = ["Run", "FitResult", "as_run", "fit_structure", "simulate_run"]

Run = tuple  # (u, y, dt) or (t, u, y, dt)


def as_run(run: Run) -> tuple[np.ndarray, np.ndarray, float]:
    """Accept ``(u, y, dt)`` or ``(t, u, y, dt)`` (as returned by ``daq.crane_experiment.crane_arrays``)."""
    if len(run) == 4:
        _, u, y, dt = run
    elif len(run) == 3:
        u, y, dt = run
    else:
        raise ValueError("a run is (u, y, dt) or (t, u, y, dt)")
    u = np.asarray(u, dtype=float).ravel()
    y = np.asarray(y, dtype=float).ravel()
    if u.size != y.size:
        raise ValueError("input and output of a run differ in length")
    return u, y, float(dt)


# ---------------------------------------------------------------------------------- parametrisation
class _Scaling:
    """Map the box [0, 1]^n_p to the bounds; log-scaled where lo > 0 and hi/lo >= 10."""

    def __init__(self, names: Sequence[str], bounds: dict[str, tuple[float, float]]):
        self.names = list(names)
        self.lo = np.array([float(bounds[n][0]) for n in names])
        self.hi = np.array([float(bounds[n][1]) for n in names])
        if np.any(self.hi <= self.lo):
            bad = [n for n, a, b in zip(names, self.lo, self.hi, strict=True) if b <= a]
            raise ValueError(f"bounds need lo < hi for {bad}")
        self.log = (self.lo > 0) & (self.hi / np.where(self.lo > 0, self.lo, 1.0) >= 10.0)
        safe_lo = np.where(self.lo > 0, self.lo, 1.0)
        self.ratio = np.where(self.log, np.log(np.where(self.log, self.hi / safe_lo, 2.0)), 0.0)

    def to_p(self, th: np.ndarray) -> np.ndarray:
        lin = self.lo + th * (self.hi - self.lo)
        lg = self.lo * np.exp(th * self.ratio)
        return np.where(self.log, lg, lin)

    def dp_dth(self, th: np.ndarray) -> np.ndarray:
        return np.where(self.log, self.to_p(th) * self.ratio, self.hi - self.lo)

    def to_th(self, p: np.ndarray) -> np.ndarray:
        p = np.clip(p, self.lo, self.hi)
        lin = (p - self.lo) / (self.hi - self.lo)
        lg = np.log(np.where(self.log, p / np.where(self.lo > 0, self.lo, 1.0), 1.0)) / np.where(
            self.log, self.ratio, 1.0)
        return np.clip(np.where(self.log, lg, lin), 0.0, 1.0)

    @property
    def ranges(self) -> np.ndarray:
        return self.hi - self.lo


# ---------------------------------------------------------------------------------------- fitting
@dataclass
class FitResult:
    structure: DriveStructure
    params: dict[str, float]
    cost: float  # 0.5 * sum of squared residuals (training, after `skip`)
    fit: float  # 1 - NRMSE on training
    S: np.ndarray  # output sensitivity at the optimum (training samples used in the cost)
    sigma2: float  # residual variance estimate
    n_evals: int
    n_starts: int
    start_costs: list[float]
    at_bound: list[str]
    std_errors: dict[str, float] = field(default_factory=dict)  # SI, from the Fisher matrix (eq. 9 unscaled)


def _nrmse(e: np.ndarray, y: np.ndarray) -> float:
    den = np.linalg.norm(y - y.mean())
    return float(np.linalg.norm(e) / den) if den > 0 else float("inf")


class _Problem:
    """Residuals and Jacobian in the scaled coordinates, with one cached simulation per point."""

    def __init__(self, structure, inp: StepInput, y: np.ndarray, scaling: _Scaling, skip: int,
                 friction_eps: float, fixed: dict[str, float] | None = None):
        self.s = structure
        self.inp = inp
        self.y = y
        self.sc = scaling
        self.skip = skip
        self.eps = friction_eps
        self.fixed = dict(fixed or {})
        self.free = [j for j, n in enumerate(scaling.names) if n not in self.fixed]
        self._key: bytes | None = None
        self._val: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # (residual, Jacobian, S)
        self._rkey: bytes | None = None
        self._rval: tuple[np.ndarray, np.ndarray] | None = None  # (reduced residual, reduced Jacobian)
        self.n_evals = 0

    def params(self, th_free: np.ndarray) -> dict[str, float]:
        p = self.sc.to_p(np.clip(self._expand(th_free), 0, 1))
        out = {n: float(v) for n, v in zip(self.sc.names, p, strict=True)}
        out.update(self.fixed)
        return out

    def _expand(self, th_free: np.ndarray) -> np.ndarray:
        th = np.full(len(self.sc.names), 0.5)
        th[self.free] = th_free
        return th

    def _eval(self, th_free: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        key = th_free.tobytes()
        if key != self._key:
            p = self.params(th_free)
            r = simulate(self.s, p, self.inp, sensitivities=True, friction_eps=self.eps)
            assert r.S is not None  # sensitivities=True computes it
            n = min(r.y.size, self.y.size)
            res = (r.y[:n] - self.y[:n])[self.skip:]
            J = r.S[:n][self.skip:][:, self.free] * self.sc.dp_dth(self._expand(th_free))[self.free]
            bad = not (np.all(np.isfinite(res)) and np.all(np.isfinite(J)))
            if bad:
                res = np.full_like(res, 1e3)
                J = np.zeros_like(J)
            self._key, self._val = key, (res, J, r.S[:n][self.skip:])
            self.n_evals += 1
        assert self._val is not None  # set above on the first call (no key equals None)
        return self._val

    def fun(self, th_free):
        return self._eval(th_free)[0]

    def jac(self, th_free):
        return self._eval(th_free)[1]

    def _reduced(self, th_free: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Residual and Jacobian rotated onto ``n_free + 1`` rows: ``R`` of the QR factorisation of
        ``[J r]`` gives ``Q^T r`` and the length of the rest of ``r`` (its last column) and ``Q^T J`` (the
        others, last row 0). The local model ``|r + J p|`` and the cost ``|r|`` are those of the full rows,
        so the trust-region iterations are the same, but the solver's own linear algebra (an SVD and a
        dozen vector operations per iteration) works on ``n_free + 1`` rows instead of thousands: the
        crane screen spends 6-9 % less CPU (issue 44)."""
        key = th_free.tobytes()
        if key != self._rkey:
            res, J, _ = self._eval(th_free)
            m, n = J.shape
            if m > n + 1:
                A = np.empty((m, n + 1))
                A[:, :n] = J
                A[:, n] = res
                R = np.asarray(np.linalg.qr(A, mode="r"))  # mode "r": R alone (typed as a pair)
                self._rval = (R[:, n].copy(), R[:, :n].copy())
            else:
                self._rval = (res, J)
            self._rkey = key
        assert self._rval is not None  # set above on the first call
        return self._rval

    def fun_reduced(self, th_free):
        return self._reduced(th_free)[0]

    def jac_reduced(self, th_free):
        return self._reduced(th_free)[1]


def _starts(n_p: int, n_starts: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Centre of the (scaled) box, then Latin-hypercube points in [0.1, 0.9]."""
    out = [np.full(n_p, 0.5)]
    m = max(n_starts - 1, 0)
    if m:
        cut = (np.arange(m)[:, None] + rng.random((m, n_p))) / m
        for j in range(n_p):
            cut[:, j] = rng.permutation(cut[:, j])
        out += list(0.1 + 0.8 * cut)
    return out[:max(n_starts, 1)]


def fit_structure(structure: DriveStructure | str, u: np.ndarray, y: np.ndarray, dt: float,
                  bounds: dict[str, tuple[float, float]] | None = None, *, n_starts: int = 4, seed: int = 0,
                  decimate: int = 5, skip: int = 0, friction_eps: float = DEFAULT_FRICTION_EPS,
                  max_nfev: int = 60, fixed: dict[str, float] | None = None,
                  start: dict[str, float] | None = None, xtol: float = 1e-10) -> FitResult:
    """Fit one candidate on a run: multistart ``least_squares`` (TRF, box bounds) with sensitivity Jacobian.

    The model runs on the step ``decimate*dt``; the output is compared at the same instants
    (``y[::decimate]``). Parameters in ``fixed`` are held; ``start`` (physical values) replaces
    the first start point.
    """
    s = parse_name(structure) if isinstance(structure, str) else structure
    bounds = {**DEFAULT_BOUNDS, **(bounds or {})}
    inp = prepare_input(u, dt, decimate)
    yd = np.asarray(y, dtype=float)[::decimate][: inp.n_steps]
    sc = _Scaling(s.param_names, bounds)
    prob = _Problem(s, inp, yd, sc, skip, friction_eps, fixed)
    n_free = len(prob.free)
    rng = np.random.default_rng(seed)
    best: tuple[float, np.ndarray] | None = None
    start_costs = []
    if n_free == 0:
        res0 = prob.fun(np.zeros(0))
        best_th = np.zeros(0)
        best_cost = 0.5 * float(res0 @ res0)
        start_costs.append(best_cost)
    else:
        starts = _starts(n_free, n_starts, rng)
        if start is not None:
            starts[0] = sc.to_th(np.array([start.get(n, 0.5 * (sc.lo[j] + sc.hi[j]))
                                           for j, n in enumerate(sc.names)]))[prob.free]
        for th0 in starts:
            try:
                r = scipy.optimize.least_squares(prob.fun_reduced, th0, jac=prob.jac_reduced,
                                                 bounds=(0.0, 1.0), method="trf", x_scale="jac",
                                                 max_nfev=max_nfev, xtol=xtol, ftol=xtol)
                cost = float(r.cost)
                th = r.x
            except (ValueError, np.linalg.LinAlgError, FloatingPointError):
                cost, th = math.inf, th0
            start_costs.append(cost)
            if best is None or cost < best[0]:
                best = (cost, th)
        assert best is not None  # _starts gives at least one start
        best_cost, best_th = best
    res, _, S = prob._eval(np.asarray(best_th, dtype=float))
    params = prob.params(best_th)
    n_used = res.size
    n_free_p = max(n_used - n_free, 1)
    y_used = yd[: n_used + skip][skip:]
    th_full = sc.to_th(np.array([params[n] for n in sc.names]))
    at_bound = [n for n, v in zip(sc.names, th_full, strict=True)
                if n not in prob.fixed and (v <= 1e-6 or v >= 1 - 1e-6)]
    return FitResult(structure=s, params=params, cost=float(best_cost), fit=1.0 - _nrmse(res, y_used), S=S,
                     sigma2=float(res @ res) / n_free_p, n_evals=prob.n_evals, n_starts=len(start_costs),
                     start_costs=start_costs, at_bound=at_bound)


def simulate_run(structure: DriveStructure, params: dict[str, float], u: np.ndarray, y: np.ndarray,
                 dt: float, decimate: int, friction_eps: float = DEFAULT_FRICTION_EPS
                 ) -> tuple[np.ndarray, np.ndarray, float]:
    """Model output on the run's decimated grid; returns (t, y_model, 1 - NRMSE)."""
    inp = prepare_input(u, dt, decimate)
    r = simulate(structure, params, inp, sensitivities=False, friction_eps=friction_eps)
    yd = np.asarray(y, dtype=float)[::decimate][: inp.n_steps]
    n = min(yd.size, r.y.size)
    return r.t[:n], r.y[:n], 1.0 - _nrmse(r.y[:n] - yd[:n], yd[:n])
