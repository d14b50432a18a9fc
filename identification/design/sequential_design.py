"""Sequential (closed-loop) experiment design for the drive rigs: fit over every run so far, decide, redesign.

The loop the rig runs (issue 10): run an input, refit the parameters over all recorded runs, stop when
every relative standard deviation is at or below a target (or a budget is spent), else re-solve the
adjoint input design at the current estimate and run that. This module holds the math of each step as
plain functions over arrays; the rig (``daq.rigs.adjoint.rig``) and the online identifier
(``daq.rigs.adjoint.online``) do the I/O.

* :func:`fit_runs` - one least-squares fit over several records (stacked residuals, shared parameters),
  warm-started from the previous estimate; without a trustworthy start it also starts from the best
  points of a log grid and keeps the lowest cost, because an oscillating output has a cost with narrow
  local minima (oscillator, sine input, truth c2 = 1100 N/m: Levenberg-Marquardt from 300 N/m stops at
  410 N/m; pendulum: s_p = 0.083 m swings at nearly the frequency of the true 0.2 m, a second basin).
* :func:`stop_reason` - the stopping rule with its budgets, as the text recorded in the session.
* :func:`redesign` - the adjoint design at a new design point, warm-started from the previous input; with
  ``earlier`` (the inputs already run) it maximises the information of all runs together
  (:func:`earlier_fisher` as the problem's prior Fisher matrix), so the next input targets what the runs
  so far left uncertain, instead of the best run on its own.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TypedDict

import numpy as np
import scipy.optimize

from identification.design.adjoint_design import (
    DesignProblem,
    DesignResult,
    evaluate,
    optimize_input,
    simulate_output,
)
from identification.estimation.covariance import marginal_std
from identification.estimation.ellipsoid import confidence_ellipsoid
from identification.estimation.residual_adequacy import hac_covariance
from identification.models.ode_models import ODEModel

__all__ = ["Record", "RunsFit", "fit_runs", "scan_start", "stop_reason", "redesign", "predicted_std",
           "earlier_fisher"]


@dataclass
class Record:
    """One run: input ``u`` (N,) or (N, n_u) held for ``dt`` each, output ``y`` (N,) or (N, n_y) at
    ``t_k = k*dt`` (before u_k acts, as :func:`identification.design.adjoint_design.simulate_output`);
    the first ``skip`` samples stay out of the fit."""

    u: np.ndarray
    y: np.ndarray
    dt: float
    skip: int = 0

    def __post_init__(self):
        self.u = np.asarray(self.u, float)
        self.u = self.u[:, None] if self.u.ndim == 1 else self.u
        self.y = np.asarray(self.y, float)
        self.y = self.y.reshape(self.y.shape[0], -1)
        if self.u.shape[0] != self.y.shape[0]:
            raise ValueError(f"input has {self.u.shape[0]} samples, output {self.y.shape[0]}")


@dataclass
class RunsFit:
    """Estimate over ``n_runs`` records (one shape for every call of :func:`fit_runs`).

    ``covariance = s2 * (J^T J)^-1`` with ``s2`` the pooled residual variance (output units squared),
    i.e. the noise is estimated from the records, not taken from the design's assumed sigma. It takes
    the residuals as white: when they are correlated in time (a speed differenced from encoder counts
    has negatively correlated quantisation noise, issue 21) it misstates the noise at the frequencies
    that carry the information. ``robust_covariance`` is the Newey-West sandwich over time
    (:func:`identification.estimation.residual_adequacy.hac_covariance`, lags inside each run) that
    stays honest
    then; ``residuals`` and ``run_sizes`` (samples per run, after ``skip``) let a caller check whiteness.
    """

    names: list[str]
    b: np.ndarray
    covariance: np.ndarray
    std: np.ndarray
    rel_std: np.ndarray
    s2: float
    n_runs: int
    n_obs: int
    nfev: int
    success: bool
    message: str
    start: np.ndarray           # where the kept local fit started
    scanned: int                # grid points evaluated by the scan (0: warm start)
    alpha: float
    semi_axes: np.ndarray       # of the (1 - alpha) confidence ellipsoid, eigenvector order
    axes: np.ndarray
    robust_covariance: np.ndarray | None = None   # HAC sandwich (None: not computed)
    hac_bandwidth: float = math.nan               # Bartlett window, samples (largest over the runs)
    residuals: np.ndarray | None = field(default=None, repr=False)  # model - measured, runs stacked
    run_sizes: tuple[int, ...] = ()

    @property
    def robust_std(self) -> np.ndarray:
        """Square roots of the robust covariance's diagonal (NaN where it is not computed)."""
        return marginal_std(self.robust_covariance, self.b.size)

    @property
    def residual_std(self) -> float:
        return math.sqrt(self.s2)

    def marginal(self, k: int) -> RunsFit:
        """The first ``k`` parameters alone (their covariance block and ellipsoid), e.g. the design's
        parameters of a fit that also estimated nuisance parameters."""
        cov = self.covariance[:k, :k]
        ell = confidence_ellipsoid(self.b[:k], cov, self.alpha) if np.all(np.isfinite(cov)) else None
        rob = None if self.robust_covariance is None else self.robust_covariance[:k, :k]
        return replace(self, names=self.names[:k], b=self.b[:k], covariance=cov, std=self.std[:k],
                       robust_covariance=rob,
                       rel_std=self.rel_std[:k], start=self.start[:k],
                       semi_axes=ell.semi_axes if ell else np.full(k, np.inf),
                       axes=ell.axes if ell else np.eye(k))

    def to_dict(self) -> dict:
        """The common body of an ``estimate`` event (issue 10) without model name, units and timing."""
        return {"parameters": list(self.names), "values": self.b.tolist(), "std": self.std.tolist(),
                "rel_std": self.rel_std.tolist(), "covariance": self.covariance.tolist(),
                "ellipse_semi_axes": self.semi_axes.tolist(), "ellipse_axes": self.axes.tolist(),
                "alpha": self.alpha, "used": self.n_runs, "n_obs": self.n_obs, "s2": self.s2,
                "residual_std": self.residual_std, "nfev": self.nfev, "success": self.success,
                "scanned": self.scanned,
                "robust_std": [float(x) if math.isfinite(x) else None for x in self.robust_std],
                "hac_bandwidth": float(self.hac_bandwidth) if math.isfinite(self.hac_bandwidth) else None}


def _stacked(model: ODEModel, b: np.ndarray, runs: Sequence[Record]) -> tuple[np.ndarray, np.ndarray]:
    """Residual-ready outputs (sum N_i*n_y,) and sensitivities (sum N_i*n_y, n_b) of all runs at ``b``."""
    ys, Ys = [], []
    for r in runs:
        _, y, Y = simulate_output(model, b, r.u, r.dt, 1)
        ys.append(y[r.skip:].ravel())
        Ys.append(Y[r.skip:].reshape(-1, b.size))
    return np.concatenate(ys), np.concatenate(Ys)


def _measured(runs: Sequence[Record]) -> np.ndarray:
    return np.concatenate([r.y[r.skip:].ravel() for r in runs])


def scan_start(model: ODEModel, runs: Sequence[Record], b0: np.ndarray, span: float = 4.0,
               max_points: int = 81, keep: int = 3, dims: int | None = None) -> tuple[list[np.ndarray], int]:
    """The ``keep`` grid points of least squared residual on ``b0 * f``, ``f`` log-spaced in
    [1/span, span] for each of the first ``dims`` parameters (default all; the rest stay at ``b0``),
    product grid of at most ``max_points``, best first; and the number of points evaluated."""
    b0 = np.asarray(b0, float)
    k = b0.size if dims is None else max(1, min(int(dims), b0.size))
    n = max(3, int(math.floor(max_points ** (1.0 / k) + 1e-9)))
    factors = np.geomspace(1.0 / span, span, n)
    ym = _measured(runs)
    scored: list[tuple[float, int, np.ndarray]] = []
    for f in itertools.product(factors, repeat=k):
        b = b0 * np.concatenate([np.asarray(f), np.ones(b0.size - k)])
        ys = np.concatenate([simulate_output(model, b, r.u, r.dt, 1)[1][r.skip:].ravel() for r in runs])
        cost = float(np.sum((ys - ym) ** 2))
        scored.append((cost if math.isfinite(cost) else math.inf, len(scored), b))
    scored.sort(key=lambda c: c[:2])
    return [b for _, _, b in scored[:keep]], len(scored)


def fit_runs(model: ODEModel, runs: Sequence[Record], b0: np.ndarray, *, scan: bool = False,
             span: float = 4.0, max_points: int = 81, keep: int = 3, scan_dims: int | None = None,
             alpha: float = 0.05) -> RunsFit:
    """Least squares for the model's free parameters over all ``runs`` together.

    ``b0``: the start (the previous estimate for a warm start). ``scan=True`` (when ``b0`` is only a
    prior) also starts from the ``keep`` best points of :func:`scan_start` around ``b0`` (gridding the
    first ``scan_dims`` parameters) and keeps the fit of least cost. Parameters are scaled by the start
    so Levenberg-Marquardt sees O(1) unknowns; the Jacobian is exact (forward sensitivities).
    """
    if not runs:
        raise ValueError("no runs to fit")
    b0 = np.asarray(b0, float).ravel()
    starts, scanned = [b0], 0
    if scan:
        best, scanned = scan_start(model, runs, b0, span, max_points, keep, scan_dims)
        starts += best
    fits, error = [], None
    for b in starts:
        try:
            fits.append(_fit_from(model, runs, b, alpha))
        except (ValueError, np.linalg.LinAlgError, FloatingPointError) as exc:  # a scan start may diverge
            error = exc
    if not fits:
        assert error is not None  # there is at least one start (b0), and each one failed
        raise error
    fit = min(fits, key=lambda f: (not np.isfinite(f[1]), f[1]))[0]
    fit.scanned = scanned
    return fit


def _fit_from(model: ODEModel, runs: Sequence[Record], b0: np.ndarray, alpha: float) -> tuple[RunsFit, float]:
    """One Levenberg-Marquardt fit from ``b0``; returns (fit, final cost)."""
    scale = np.where(b0 != 0, np.abs(b0), 1.0)
    ym = _measured(runs)
    cache: dict[bytes, tuple[np.ndarray, np.ndarray]] = {}

    def at(th: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        key = th.tobytes()
        if key not in cache:
            cache.clear()
            cache[key] = _stacked(model, th * scale, runs)
        return cache[key]

    r = scipy.optimize.least_squares(lambda th: at(th)[0] - ym, b0 / scale, jac=lambda th: at(th)[1] * scale,
                                     method="lm", xtol=1e-12, ftol=1e-12)
    b = r.x * scale
    J = at(r.x)[1]
    n_obs = ym.size
    s2 = float(r.fun @ r.fun) / max(n_obs - b.size, 1)
    try:
        cov = np.linalg.inv(J.T @ J) * s2
    except np.linalg.LinAlgError:
        cov = np.full((b.size, b.size), np.inf)
    std = np.sqrt(np.abs(np.diag(cov)))
    rel = std / np.where(b != 0, np.abs(b), np.nan)
    ell = confidence_ellipsoid(b, cov, alpha) if np.all(np.isfinite(cov)) else None
    sizes = tuple(int(run.y[run.skip:].size) for run in runs)
    robust, bw = hac_covariance(J, r.fun, runs=sizes)
    return RunsFit(names=list(model.param_names), b=b, covariance=cov, std=std, rel_std=rel, s2=s2,
                   n_runs=len(runs), n_obs=n_obs, nfev=int(r.nfev), success=bool(r.success),
                   message=str(r.message), start=b0, scanned=0, alpha=alpha,
                   semi_axes=ell.semi_axes if ell else np.full(b.size, np.inf),
                   axes=ell.axes if ell else np.eye(b.size), robust_covariance=robust, hac_bandwidth=bw,
                   residuals=np.asarray(r.fun, float).copy(), run_sizes=sizes), float(r.cost)


def stop_reason(names: Sequence[str], rel_std: Sequence[float] | None, target: float, n_runs: int,
                max_runs: int, elapsed_s: float = 0.0, max_seconds: float | None = None) -> str | None:
    """Why the loop stops after ``n_runs`` runs (None: go on). The confidence target wins over budgets:
    every relative std <= ``target``; else ``max_runs`` runs done; else ``max_seconds`` elapsed."""
    if rel_std is not None and len(rel_std) and all(math.isfinite(r) and r <= target for r in rel_std):
        rel = ", ".join(f"{n} {r:.3g}" for n, r in zip(names, rel_std, strict=True))
        return f"confidence target met after {n_runs} run{'s' if n_runs != 1 else ''}: rel. std {rel} " \
               f"<= {target:g}"
    if n_runs >= max_runs:
        return f"run budget reached ({max_runs} runs)"
    if max_seconds is not None and elapsed_s >= max_seconds:
        return f"time budget reached ({elapsed_s:.1f} s >= {max_seconds:g} s)"
    return None


def earlier_fisher(problem: DesignProblem, inputs: Sequence[np.ndarray]) -> np.ndarray:
    """Sum of the Fisher matrices of ``inputs`` (the runs already made, each (N, n_u) on the problem's grid)
    at ``problem.b`` - the current estimate when the problem is a redesign's - with the problem's own noise
    and measurement step, so it adds to a new run's Fisher matrix in the same units. The earlier runs'
    information is re-evaluated at the current estimate rather than taken from their own design points:
    the information an input carries depends on the parameters, and the estimate is the best guess of them.
    Zeros for no input; ValueError for an input of another length than the problem's grid."""
    shape = (problem.n_samples, problem.n_u)
    total = np.zeros((problem.b.size, problem.b.size))
    for k, u in enumerate(inputs):
        u = np.asarray(u, float)
        if u.size != shape[0] * shape[1]:
            raise ValueError(f"earlier input {k} has {u.size} samples, the design grid {shape[0]} x "
                             f"{shape[1]}")
        total += evaluate(problem, u.reshape(shape), gradient=False).fisher  # that input's alone
    return total


def predicted_std(problem: DesignProblem, u: np.ndarray, earlier: Sequence[np.ndarray] = ()) -> np.ndarray:
    """Standard deviations of b from the design model's Fisher matrix for input ``u`` at ``problem.b``;
    with ``earlier`` (inputs already run) those of all runs together (:func:`earlier_fisher` added)."""
    fisher = evaluate(problem, np.asarray(u, float).reshape(problem.n_samples, problem.n_u),
                      gradient=False).fisher
    if len(earlier):
        fisher = fisher + earlier_fisher(problem, earlier)
    try:
        return np.sqrt(np.diag(np.linalg.inv(fisher)))
    except np.linalg.LinAlgError:
        return np.full(fisher.shape[0], np.inf)


class _OptimizeOptions(TypedDict):
    """The :func:`optimize_input` settings :func:`redesign` passes to every optimisation."""

    method: str
    max_iter: int
    rounds: int
    end_tol: float


def redesign(problem: DesignProblem, u_prev: np.ndarray, *, shrink: float = 0.25,
             also_from: np.ndarray | None = None, method: str = "lbfgs", max_iter: int = 300, rounds: int = 6,
             end_tol: float = 1e-3, earlier: Sequence[np.ndarray] | None = None,
             from_alone: bool = True) -> DesignResult:
    """The adjoint design of ``problem`` (built at the current estimate) started from the previous input.

    ``earlier``: the inputs already run (in any order; normally ``u_prev`` among them). With them the
    criterion is that of all runs together: the design maximises ``crit(F_earlier + F_new)`` with
    ``F_earlier`` = :func:`earlier_fisher` at the estimate (added to any ``problem.prior_fisher``), so it
    buys information where the runs so far left the parameters uncertain. ``None``: the new run's own
    information only (the run-alone design). The two have the same optimum for one parameter
    (``log(F_prev + F_new)`` grows with ``F_new`` alone) and for the A criterion (the trace is linear);
    they differ for D and E with several parameters. The result's ``fisher``/``std`` are the new run's
    alone; :func:`predicted_std` with ``earlier`` gives those of all runs together.

    The criterion is not convex in the input: from the same starts the joint optimisation can end in a
    local optimum that is worse, judged by the joint criterion, than the run-alone design (oscillator c2,
    d2, 0.3 s, first run a sine: log det of the scaled joint information 27.335 against 27.364; the
    pendulum at the shipped nominal: 36.377 against 36.495). With ``from_alone`` (default) the run-alone
    designs are made from the starts, and the joint optimisation starts from ``shrink`` times the best of
    them (judged jointly); the kept design is the best of all of them by the joint criterion, so never
    worse than the run-alone one for all runs together (27.379 in the example), at 1.5 times the run-alone
    optimiser time with two starts. ``from_alone=False``: the joint optimisation from the starts only.

    The start is ``shrink * u_prev``: designed inputs sit on their bounds, where the arctangent map
    (eq. 18) has a vanishing slope, so an unshrunk warm start cannot move those samples and stays in
    the old design's local optimum. Oscillator, design at c2 = 700 N/m redesigned at 1100 N/m (300
    iterations): predicted std of c2 0.0369 N/m unshrunk, 0.0357 at 0.9, 0.0257 at 0.5, 0.0247 at 0.2,
    0.0247 from F0 (500 iterations). From a design at 500 N/m every shrink stays worse (0.032-0.034
    against 0.0247 from F0): ``also_from`` (e.g. F0) optimises from a second start as well and keeps the
    better design (end conditions met first, then the lower criterion).
    """
    if not 0 < shrink <= 1:
        raise ValueError(f"shrink must be in (0, 1], got {shrink}")
    shape = (problem.n_samples, problem.n_u)
    starts = [shrink * np.asarray(u_prev, float).reshape(shape)]
    if also_from is not None:
        starts.append(np.asarray(also_from, float).reshape(shape))
    kw: _OptimizeOptions = {"method": method, "max_iter": max_iter, "rounds": rounds, "end_tol": end_tol}
    if earlier is None:
        results = [optimize_input(problem, u0, **kw) for u0 in starts]
        return min(results, key=lambda r: (not r.success, r.info_cost))
    held = earlier_fisher(problem, earlier)
    if problem.prior_fisher is not None:
        held = held + np.asarray(problem.prior_fisher, float)
    joint = replace(problem, prior_fisher=held)
    if not from_alone:
        results = [optimize_input(joint, u0, **kw) for u0 in starts]
        return min(results, key=lambda r: (not r.success, r.info_cost))
    results = [optimize_input(replace(problem), u0, **kw) for u0 in starts]
    for r in results:
        r.info_cost = evaluate(joint, r.u, gradient=False).info_cost  # judged as all runs together
    best = min(results, key=lambda r: (not r.success, r.info_cost))
    results.append(optimize_input(joint, shrink * best.u, **kw))
    return min(results, key=lambda r: (not r.success, r.info_cost))
