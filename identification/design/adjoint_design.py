"""Optimal input design by the adjoint method (seed paper 002).

Problem: find the held input samples ``u_k`` (k = 0..N-1, sample time ``dt``) within
``[u_min, u_max]`` that maximise the information about the parameters ``b`` in the measured
output of ``x' = f(x, u, b, t), y = g(x, b)``, with end conditions on states and optional
state limits.

Information. With the output sensitivities ``Y(t) = dy/db`` (eq. 3) and measurements every
``meas_dt`` with noise std ``sigma``, the Fisher matrix is approximated by the integral
``F = (1/meas_dt) int Y^T R^-1 Y dt`` (right Riemann sum on the integration nodes). The
criteria work on the scaled matrix ``I = D F D`` with ``D = diag(scale)``:

* ``"A"``: ``J = -trace(I)``. This is the paper's choice (eq. 7: ``J = -int sum_j y_bj^T y_bj dt``;
  identical up to the factor ``1/(sigma^2 meas_dt)`` with ``scaling="none"``). The paper picks
  it because its derivative is a plain integral; here every criterion has an exact gradient.
* ``"D"``: ``J = -log det I`` (volume of the confidence ellipsoid).
* ``"E"``: ``J = -(sum_i lambda_i^-p)^(-1/p)``, a smooth lower bound of the smallest eigenvalue
  (``p = e_power``; exact ``-lambda_min`` for one parameter).

Default: D with relative scaling (``scale = |b|``, i.e. sensitivities ``b_j dy/db_j``). D is
invariant to the parameter units and cannot buy information for one well-determined parameter
at the expense of a weak one (A can: the trace is dominated by the largest sensitivity, and A
and E depend on the units of b). Relative scaling keeps ``I`` well conditioned for parameters of
different magnitude (``s_p = 0.2 m`` against ``d_p = 0.01 N*m*s``) and makes A and E comparable.
For one parameter all three criteria have the same optimum.

Constraints: the input is ``u = psi(w)`` with the arctangent map of eq. 18,
``psi(w) = (u+ + u-)/2 + s*arctan(w/s)``, ``s = (u+ - u-)/pi`` (slope 1 at the centre), so the
optimiser works on the unbounded ``w``. End conditions ``x_i(t_f) = target_i`` enter as a
terminal ("scrap") penalty (eq. 14 with ``p(t_f) = dJ/dx(t_f)``) in augmented-Lagrangian form
``mu*e + rho/2*e^2`` on the scaled residual ``e = (x_i(t_f) - target_i)/scale_i``; the multipliers
are updated between inner solves so that the end conditions are met, not only approached.
State limits ``|x_i| <= limit_i`` are a smooth quadratic penalty on the excess.

Gradient: the exact discrete adjoint of the RK4 integration (``identification.models.ode_sensitivity``);
one gradient costs one forward solve plus one reverse sweep, independent of N.
Optimisers: ``"gradient"`` - the paper's step ``w <- w - kappa*dJ/dw`` (eq. 16) with a
backtracking line search for kappa (baseline); ``"lbfgs"`` - scipy's L-BFGS-B on ``w`` with the
adjoint gradient (default here); ``"sqp"`` - end conditions as exact constraints, the input scaled to
its bounds (:mod:`identification.design.adjoint_sqp`; the rigs' default, 30-75 iterations, not 400-900).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import scipy.optimize

from identification.design.adjoint_sqp import solve_sqp
from identification.estimation.blas import single_thread_blas
from identification.models.ode_models import ODEModel
from identification.models.ode_sensitivity import (
    adjoint_gradient,
    integrate,
    output_cotangents,
    output_sensitivities,
)

__all__ = [
    "EndCondition", "StateLimit", "DesignProblem", "Evaluation", "DesignResult", "ParameterFit", "to_bounded",
    "from_bounded", "criterion_value", "evaluate", "cost_and_gradient", "optimize_input",
    "projected_gradient_norm", "simulate_output", "fit_parameters",
]

CRITERIA = ("A", "D", "E")
METHODS = ("sqp", "lbfgs", "gradient")


@dataclass(frozen=True)
class EndCondition:
    """``x[index](t_f) = target``; ``scale`` (state units) makes the residual dimensionless."""

    index: int
    target: float = 0.0
    scale: float = 1.0


@dataclass(frozen=True)
class StateLimit:
    """``|x[index](t)| <= limit`` as a smooth penalty on the excess."""

    index: int
    limit: float


@dataclass
class DesignProblem:
    """An input design problem on a fixed grid: ``n_samples`` held samples of ``dt`` (t_f = n_samples*dt)."""

    model: ODEModel
    b: np.ndarray  # design (nominal) parameter values, in model.param_names order
    dt: float  # input sample time, s
    n_samples: int
    u_min: float | np.ndarray
    u_max: float | np.ndarray
    x0: np.ndarray | None = None
    n_sub: int = 1  # RK4 steps per input sample
    criterion: str = "D"
    scaling: str | np.ndarray = "relative"  # "relative" (|b|), "none", or explicit scales
    sigma: float | np.ndarray = 1.0  # measurement noise std per output
    meas_dt: float | None = None  # measurement sample time (default: the RK4 step)
    e_power: float = 8.0
    end_conditions: Sequence[EndCondition] = ()
    end_weight: float = 1e3  # rho of the terminal penalty
    state_limits: Sequence[StateLimit] = ()
    limit_weight: float = 1e3
    info_scale: float | None = None  # A/E values are divided by this (set from the start input if None)
    prior_fisher: np.ndarray | None = None  # information already held (earlier runs), added to the new run's

    def __post_init__(self):
        self.b = np.asarray(self.b, dtype=float).ravel()
        if self.criterion not in CRITERIA:
            raise ValueError(f"criterion must be one of {CRITERIA}")
        if self.b.size != len(self.model.param_names):
            raise ValueError("b must have one value per model parameter")
        if self.n_samples < 1 or not self.dt > 0:
            raise ValueError("need n_samples >= 1 and dt > 0")
        lo, hi = np.broadcast_arrays(np.asarray(self.u_min, float), np.asarray(self.u_max, float))
        if np.any(hi <= lo):
            raise ValueError("need u_max > u_min")
        self.n_sub = int(self.n_sub)

    @property
    def n_u(self) -> int:
        return len(self.model.input_names)

    @property
    def h(self) -> float:
        return self.dt / self.n_sub

    @property
    def t_f(self) -> float:
        return self.n_samples * self.dt

    @property
    def scales(self) -> np.ndarray:
        if isinstance(self.scaling, str):
            if self.scaling == "relative":
                return np.where(self.b != 0, np.abs(self.b), 1.0)
            if self.scaling == "none":
                return np.ones_like(self.b)
            raise ValueError("scaling must be 'relative', 'none' or an array")
        return np.asarray(self.scaling, dtype=float).ravel()

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        shape = (self.n_samples, self.n_u)
        return (np.broadcast_to(np.asarray(self.u_min, float), shape),
                np.broadcast_to(np.asarray(self.u_max, float), shape))


def to_bounded(w: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Eq. 18: ``u = (hi+lo)/2 + s*arctan(w/s)``, ``s = (hi-lo)/pi``; -> ``(u, du/dw)``, u in [lo, hi]."""
    s = (hi - lo) / np.pi
    r = w / s
    u = np.clip(0.5 * (hi + lo) + s * np.arctan(r), lo, hi)
    with np.errstate(over="ignore"):
        return u, 1.0 / (1.0 + r * r)


def from_bounded(u: np.ndarray, lo: np.ndarray, hi: np.ndarray, margin: float = 1e-6) -> np.ndarray:
    """Inverse of :func:`to_bounded` (values at a bound are pulled inside by ``margin`` of the range)."""
    s = (hi - lo) / np.pi
    mid = 0.5 * (hi + lo)
    half = 0.5 * (hi - lo) * (1.0 - margin)
    return s * np.tan(np.clip(np.asarray(u, float) - mid, -half, half) / s)


def criterion_value(info: np.ndarray, kind: str, e_power: float = 8.0) -> tuple[float, np.ndarray]:
    """Criterion value and its derivative with respect to the (symmetric) information matrix."""
    info = 0.5 * (info + info.T)
    n = info.shape[0]
    if kind == "A":
        return -float(np.trace(info)), -np.eye(n)
    lam, V = np.linalg.eigh(info)
    if lam[0] <= 0:
        return math.inf, np.zeros_like(info)
    if kind == "D":
        return -float(np.sum(np.log(lam))), -(V / lam) @ V.T
    if kind == "E":
        ratio = lam[0] / lam
        phi = lam[0] * float(np.sum(ratio**e_power)) ** (-1.0 / e_power)
        dphi = (phi / lam) ** (e_power + 1)
        return -phi, -(V * dphi) @ V.T
    raise ValueError(f"unknown criterion {kind!r}")


@dataclass
class Evaluation:
    """Cost of one input and its parts; ``grad_u`` (N, n_u) when requested."""

    cost: float
    info_cost: float  # criterion part (divided by info_scale for A/E)
    end_cost: float
    limit_cost: float
    info: np.ndarray  # scaled information matrix D (F + prior_fisher) D
    fisher: np.ndarray  # Fisher matrix of this input alone, in physical units of b
    end_residuals: np.ndarray  # x_i(t_f) - target_i, state units
    max_excess: float  # largest |x_i|/limit_i - 1 over the trajectory (<= 0: limits held)
    grad_u: np.ndarray | None = None
    y: np.ndarray | None = None  # output at the nodes
    x: np.ndarray | None = None  # states at the nodes


def evaluate(problem: DesignProblem, u: np.ndarray, mu: np.ndarray | None = None,
             gradient: bool = True) -> Evaluation:
    """Forward solve with sensitivities, cost, and (optionally) the adjoint gradient for input ``u``."""
    pb = problem
    model, b = pb.model, pb.b
    u = np.asarray(u, dtype=float).reshape(pb.n_samples, pb.n_u)
    traj = integrate(model, b, u, pb.dt, pb.n_sub, pb.x0, store_stages=gradient)
    y, Y = output_sensitivities(model, b, traj)
    h = traj.h
    meas_dt = pb.meas_dt or h
    ny = Y.shape[1]
    rinv = np.broadcast_to(1.0 / np.asarray(pb.sigma, float) ** 2, (ny,))
    wq = np.full(Y.shape[0], h / meas_dt)
    wq[0] = 0.0  # sensitivities vanish at t = 0 anyway; right Riemann sum
    fisher = np.einsum("n,nyi,y,nyj->ij", wq, Y, rinv, Y)
    d = pb.scales
    held = fisher if pb.prior_fisher is None else fisher + np.asarray(pb.prior_fisher, float)
    info = held * np.outer(d, d)
    crit, G = criterion_value(info, pb.criterion, pb.e_power)
    div = 1.0 if pb.criterion == "D" or not pb.info_scale else float(pb.info_scale)
    info_cost = crit / div
    cx_extra = np.zeros_like(traj.x)

    # terminal (scrap) penalty, augmented-Lagrangian form
    ends = list(pb.end_conditions)
    res = np.array([traj.x[-1, c.index] - c.target for c in ends])
    end_cost = 0.0
    if ends:
        sc = np.array([c.scale for c in ends])
        e = res / sc
        m = np.zeros(len(ends)) if mu is None else np.asarray(mu, float)
        end_cost = float(m @ e + 0.5 * pb.end_weight * e @ e)
        for i, c in enumerate(ends):
            cx_extra[-1, c.index] += (m[i] + pb.end_weight * e[i]) / sc[i]

    # state limits: rho_s * sum_n h * max(0, |x|/lim - 1)^2
    limit_cost = 0.0
    max_excess = -math.inf
    for lim in pb.state_limits:
        xi = traj.x[:, lim.index]
        ex = np.abs(xi) / lim.limit - 1.0
        max_excess = max(max_excess, float(ex.max()))
        v = np.maximum(ex, 0.0)
        v[0] = 0.0
        limit_cost += float(pb.limit_weight * h * np.sum(v * v))
        cx_extra[:, lim.index] += pb.limit_weight * h * 2.0 * v * np.sign(xi) / lim.limit

    cost = info_cost + end_cost + limit_cost
    ev = Evaluation(cost, info_cost, end_cost, limit_cost, info, fisher, res, max_excess, y=y, x=traj.x)
    if gradient:
        if not math.isfinite(crit):
            raise FloatingPointError("information matrix is singular at this input")
        # dJ/dY_n = 2 wq_n R^-1 Y_n D G D / div
        DGD = (d[:, None] * G * d[None, :]) / div
        cY = 2.0 * wq[:, None, None] * rinv[None, :, None] * (Y @ DGD)
        cx, cX = output_cotangents(model, b, traj, cY)
        ev.grad_u = adjoint_gradient(model, b, traj, u, cx + cx_extra, cX)
    return ev


def cost_and_gradient(problem: DesignProblem, w: np.ndarray, mu: np.ndarray | None = None
                      ) -> tuple[float, np.ndarray]:
    """Cost and gradient with respect to the unbounded variable ``w`` (flat), ``u = psi(w)``."""
    lo, hi = problem.bounds()
    w = np.asarray(w, dtype=float).reshape(lo.shape)
    u, du = to_bounded(w, lo, hi)
    ev = evaluate(problem, u, mu, gradient=True)
    return ev.cost, (ev.grad_u * du).ravel()


@dataclass
class DesignResult:
    """Outcome of :func:`optimize_input` (one shape for every method)."""

    u: np.ndarray  # (N, n_u) designed input samples, held for dt each
    dt: float
    bounds: tuple[np.ndarray, np.ndarray]
    criterion: str
    param_names: tuple[str, ...]
    b: np.ndarray
    fisher: np.ndarray
    std: np.ndarray  # predicted standard deviations of b (physical units) with the given sigma
    info_cost: float
    cost_history: list[float]  # total cost per iteration (all augmented-Lagrangian rounds)
    info_history: list[float]  # criterion part per iteration
    end_residuals: dict[str, float]  # x_i(t_f) - target_i, state units
    max_state_excess: float  # <= 0: state limits held
    iterations: int
    n_evaluations: int  # forward+adjoint solves
    time: float  # s, wall clock of the optimisation
    method: str
    message: str
    success: bool  # the constraints hold (end conditions within end_tol, state limits)
    multipliers: np.ndarray = field(default_factory=lambda: np.zeros(0))
    converged: bool = False  # success and a projected gradient norm within grad_tol
    grad_norm: float = math.inf  # projected gradient norm of the last inner problem (see optimize_input)
    grad_tol: float = 0.05
    constraint_residual: float = 0.0  # max of the scaled end residuals and the state-limit excess
    constraint_tol: float = 1e-3
    reason: str = ""  # why not converged ("" when converged)

    @property
    def status(self) -> str:
        """``converged, |g|=..., max constraint residual=...`` or ``not converged: <reason>, ...``."""
        tail = f"|g|={self.grad_norm:.3g} (tol {self.grad_tol:g}), max constraint residual=" \
               f"{self.constraint_residual:.3g} (tol {self.constraint_tol:g})"
        return f"converged, {tail}" if self.converged else f"not converged: {self.reason}, {tail}"

    @property
    def t(self) -> np.ndarray:
        return np.arange(self.u.shape[0]) * self.dt

    def to_dict(self) -> dict:
        """JSON-friendly summary (without the samples)."""
        return {"dt": self.dt, "n_samples": int(self.u.shape[0]), "criterion": self.criterion,
                "params": dict(zip(self.param_names, self.b.tolist(), strict=True)),
                "std": dict(zip(self.param_names, self.std.tolist(), strict=True)),
                "fisher": self.fisher.tolist(), "info_cost": self.info_cost,
                "end_residuals": self.end_residuals, "max_state_excess": self.max_state_excess,
                "iterations": self.iterations, "n_evaluations": self.n_evaluations, "time": self.time,
                "method": self.method, "message": self.message, "success": self.success,
                "converged": self.converged, "grad_norm": self.grad_norm, "grad_tol": self.grad_tol,
                "constraint_residual": self.constraint_residual, "constraint_tol": self.constraint_tol,
                "reason": self.reason, "status": self.status}


def fisher_std(fisher: np.ndarray) -> np.ndarray:
    """The parameters' standard deviations a Fisher information matrix predicts (its inverse's diagonal,
    square-rooted); infinite for all when the matrix is singular (the design cannot identify them)."""
    try:
        return np.sqrt(np.diag(np.linalg.inv(fisher)))
    except np.linalg.LinAlgError:
        return np.full(fisher.shape[0], np.inf)


class _Counter:
    """Cost/gradient closure that counts solves and records the history."""

    def __init__(self, problem: DesignProblem, mu: np.ndarray | None):
        self.problem, self.mu = problem, mu
        self.n = 0
        self.last: tuple[np.ndarray, float, np.ndarray, float] | None = None

    def __call__(self, w: np.ndarray) -> tuple[float, np.ndarray]:
        lo, hi = self.problem.bounds()
        u, du = to_bounded(w.reshape(lo.shape), lo, hi)
        try:
            ev = evaluate(self.problem, u, self.mu, gradient=True)
        except FloatingPointError:
            return math.inf, np.zeros_like(w)
        self.n += 1
        g = (ev.grad_u * du).ravel()
        self.last = (w.copy(), ev.cost, g, ev.info_cost)
        return ev.cost, g


def _gradient_descent(fun: _Counter, w: np.ndarray, max_iter: int, tol: float,
                      hist: list[float], ihist: list[float]) -> tuple[np.ndarray, int, str]:
    """Paper eq. 16: ``w <- w - kappa * g`` with Armijo backtracking on kappa (grown 2x after success)."""
    J, g = fun(w)
    kappa = 1.0 / np.maximum(np.linalg.norm(g), 1e-300)  # np.maximum: max(numpy scalar, float) does not type
    it = 0
    msg = "max_iter reached"
    while it < max_iter:
        it += 1
        gg = float(g @ g)
        accepted = False
        for _ in range(60):
            w_new = w - kappa * g
            J_new, g_new = fun(w_new)
            if J_new <= J - 1e-4 * kappa * gg:
                accepted = True
                break
            kappa *= 0.5
        if not accepted:
            msg = "line search failed"
            break
        rel = (J - J_new) / max(abs(J), 1e-12)
        w, J, g = w_new, J_new, g_new
        hist.append(J)
        assert fun.last is not None  # None only if every evaluation failed (a start at inf cost)
        ihist.append(fun.last[3])
        kappa *= 2.0
        if rel < tol:
            msg = "relative cost change below tol"
            break
    return w, it, msg


def optimize_input(problem: DesignProblem, u0: np.ndarray, method: str = "lbfgs", max_iter: int = 500,
                   tol: float = 1e-10, rounds: int = 6, end_tol: float = 1e-3,
                   grad_tol: float = 0.05, sqp_options: dict | None = None) -> DesignResult:
    """Optimise the input from the start input ``u0`` (N, n_u) or (N,).

    ``rounds`` augmented-Lagrangian rounds (each an inner solve of at most ``max_iter``
    iterations) stop early once every scaled end residual ``|e_i| <= end_tol``; ``tol`` is the
    relative cost change that ends an inner solve. A and E costs are divided by their value at
    ``u0`` unless ``problem.info_scale`` is set.

    Convergence (``DesignResult.converged``) is judged on the result, not on the optimiser's stop: the
    constraints hold (scaled end residuals <= ``end_tol``, state limits exceeded by <= 1e-3) and the
    projected gradient norm of the last inner problem (criterion plus the augmented-Lagrangian terms at
    its multipliers, i.e. the Lagrangian's) is <= ``grad_tol``. The norm is taken on the input scaled
    to its range, ``x = (u - mid)/half`` in [-1, 1]: ``max_k |clip(x_k - g_k, -1, 1) - x_k|`` with
    ``g = dJ/dx`` - the largest move (a fraction of the input range) a projected-gradient step of unit
    length still asks of any sample; a sample at its bound with the gradient pushing outwards asks none.
    The arctan map approaches the bounds only asymptotically, so a sample 1e-3 of the range short of its
    bound counts 1e-3. Iteration limits and the optimiser's own stop do not decide: they are reported.
    ``sqp_options``: further keywords of :func:`identification.design.adjoint_sqp.solve_sqp` (``reach``,
    ``min_samples``) for ``method="sqp"``.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}")
    with single_thread_blas():  # tiny matrices: BLAS threads only contend (measured 8 ms per L-BFGS-B step)
        return _optimize(problem, u0, method, max_iter, tol, rounds, end_tol, grad_tol, sqp_options or {})


def projected_gradient_norm(problem: DesignProblem, u: np.ndarray, grad_u: np.ndarray) -> float:
    """``max_k |clip(x_k - g_k, -1, 1) - x_k|`` on the input scaled to its bounds (:func:`optimize_input`)."""
    lo, hi = problem.bounds()
    half = 0.5 * (hi - lo)
    x = (np.asarray(u, float).reshape(lo.shape) - 0.5 * (hi + lo)) / half
    g = np.asarray(grad_u, float).reshape(lo.shape) * half
    return float(np.max(np.abs(np.clip(x - g, -1.0, 1.0) - x)))


def _optimize(problem: DesignProblem, u0: np.ndarray, method: str, max_iter: int, tol: float, rounds: int,
              end_tol: float, grad_tol: float = 0.05, sqp_options: dict | None = None) -> DesignResult:
    pb = problem
    lo, hi = pb.bounds()
    u0 = np.asarray(u0, dtype=float).reshape(lo.shape)
    if pb.info_scale is None and pb.criterion != "D":
        ev0 = evaluate(pb, u0, gradient=False)
        crit0 = ev0.info_cost
        pb.info_scale = abs(crit0) if math.isfinite(crit0) and crit0 != 0 else 1.0
    w = from_bounded(u0, lo, hi).ravel()
    ends = list(pb.end_conditions)
    mu = np.zeros(len(ends))
    hist: list[float] = []
    ihist: list[float] = []
    iters = 0
    n_eval = 0
    msg = ""
    t0 = time.perf_counter()
    n_rounds = max(1, rounds if ends else 1)
    mu_inner = mu.copy()
    out = None
    if method == "sqp":
        out = solve_sqp(pb, u0, evaluate, max_iter, grad_tol=grad_tol, end_tol=end_tol, **(sqp_options or {}))
        iters, n_eval, msg = out.iterations, out.n_evaluations, out.message
        mu = mu_inner = out.multipliers
        hist += out.cost_history
        ihist += out.cost_history
        n_rounds = 0
    for _ in range(n_rounds):
        mu_inner = mu.copy()
        fun = _Counter(pb, mu_inner.copy())
        if method == "lbfgs":
            def cb(wk, fun=fun):
                hist.append(fun.last[1])
                ihist.append(fun.last[3])
            r = scipy.optimize.minimize(fun, w, jac=True, method="L-BFGS-B", callback=cb,
                                        options={"maxiter": max_iter, "ftol": tol, "gtol": 1e-12,
                                                 "maxcor": 20})
            w, it, msg = r.x, int(r.nit), str(r.message)
        else:
            w, it, msg = _gradient_descent(fun, w, max_iter, tol, hist, ihist)
        iters += it
        n_eval += fun.n
        if not ends:
            break
        u, _ = to_bounded(w.reshape(lo.shape), lo, hi)
        ev = evaluate(pb, u, mu, gradient=False)
        e = ev.end_residuals / np.array([c.scale for c in ends])
        if np.max(np.abs(e)) <= end_tol:
            break
        mu = mu + pb.end_weight * e
    elapsed = time.perf_counter() - t0
    u = out.u if out is not None else to_bounded(w.reshape(lo.shape), lo, hi)[0]
    try:  # the last inner problem's gradient at the result (one more solve)
        ev = evaluate(pb, u, mu_inner, gradient=True)
        n_eval += 1
        assert ev.grad_u is not None  # evaluate(gradient=True) sets it
        g_norm = projected_gradient_norm(pb, u, ev.grad_u)
    except FloatingPointError:
        ev = evaluate(pb, u, mu_inner, gradient=False)
        g_norm = math.inf
    names = list(pb.model.state_names)
    end_res = {names[c.index]: float(r) for c, r in zip(ends, ev.end_residuals, strict=True)}
    scaled = [abs(r) / c.scale for c, r in zip(ends, ev.end_residuals, strict=True)]
    ok_end = not scaled or max(scaled) <= end_tol
    ok_lim = not pb.state_limits or ev.max_excess <= 1e-3
    success = bool(ok_end and ok_lim and math.isfinite(ev.info_cost))
    if not ok_end:
        msg += f"; end conditions not met (max scaled residual {max(scaled):.3g} > {end_tol})"
    excess = max(0.0, ev.max_excess) if pb.state_limits else 0.0
    residual = max([*scaled, excess], default=0.0)  # end: scaled residual; limits: excess over the limit
    why = []
    if not math.isfinite(ev.info_cost):
        why.append("singular information matrix")
    if g_norm > grad_tol:
        why.append(f"projected gradient above tolerance ({msg.split(';')[0]})")
    if not ok_end:
        why.append("end conditions not met")
    if not ok_lim:
        why.append(f"state limits exceeded by {ev.max_excess:.3g} (> 1e-3 of the limit)")
    why_s = "; ".join(why)
    return DesignResult(u=u, dt=pb.dt, bounds=(lo[0].copy(), hi[0].copy()), criterion=pb.criterion,
                        param_names=tuple(pb.model.param_names), b=pb.b.copy(), fisher=ev.fisher,
                        std=fisher_std(ev.fisher), info_cost=ev.info_cost, cost_history=hist,
                        info_history=ihist, end_residuals=end_res, max_state_excess=float(ev.max_excess),
                        iterations=iters, n_evaluations=n_eval, time=elapsed, method=method, message=msg,
                        success=success, multipliers=mu, converged=success and not why, grad_norm=g_norm,
                        grad_tol=grad_tol, constraint_residual=residual, constraint_tol=end_tol, reason=why_s)


# ------------------------------------------------------------------------------- fitting helpers
def simulate_output(model: ODEModel, b: np.ndarray, u: np.ndarray, dt: float, n_sub: int = 1,
                    x0: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Output and output sensitivities at the sample instants ``t_k = k*dt``, k = 0..N-1 (before u_k acts).

    Returns ``t`` (N,), ``y`` (N, n_y), ``Y`` (N, n_y, n_b).
    """
    u = np.asarray(u, dtype=float)
    if u.ndim == 1:
        u = u[:, None]
    traj = integrate(model, np.asarray(b, float), u, dt, n_sub, x0, store_stages=False)
    y, Y = output_sensitivities(model, np.asarray(b, float), traj)
    idx = np.arange(u.shape[0]) * int(n_sub)
    return traj.t[idx], y[idx], Y[idx]


@dataclass
class ParameterFit:
    """Least-squares estimate of the model parameters from one record."""

    b: np.ndarray
    std: np.ndarray  # from the Jacobian and the residual variance
    residual_std: float
    cost: float
    nfev: int
    success: bool
    message: str


def fit_parameters(model: ODEModel, u: np.ndarray, dt: float, y_meas: np.ndarray, b0: np.ndarray,
                   n_sub: int = 1, x0: np.ndarray | None = None, skip: int = 0) -> ParameterFit:
    """Fit ``b`` by ``scipy.optimize.least_squares`` (parameters relative to ``b0``, exact sensitivities).

    ``y_meas`` (N,) or (N, n_y) is sampled at ``t_k = k*dt`` like :func:`simulate_output`;
    the first ``skip`` samples are left out.
    """
    b0 = np.asarray(b0, dtype=float)
    scale = np.where(b0 != 0, np.abs(b0), 1.0)
    ym = np.asarray(y_meas, dtype=float)
    ym = ym.reshape(ym.shape[0], -1)[skip:]
    cache: dict = {}

    def run(th):
        key = th.tobytes()
        if key not in cache:
            cache.clear()
            _, y, Y = simulate_output(model, th * scale, u, dt, n_sub, x0)
            cache[key] = (y[skip:], Y[skip:])
        return cache[key]

    def fun(th):
        y, _ = run(th)
        return (y - ym).ravel()

    def jac(th):
        _, Y = run(th)
        return (Y * scale).reshape(-1, scale.size)

    r = scipy.optimize.least_squares(fun, b0 / scale, jac=jac, method="lm", xtol=1e-12, ftol=1e-12)
    b = r.x * scale
    J = jac(r.x) / scale
    dof = max(r.fun.size - b.size, 1)
    s2 = float(r.fun @ r.fun) / dof
    try:
        std = np.sqrt(np.diag(np.linalg.inv(J.T @ J)) * s2)
    except np.linalg.LinAlgError:
        std = np.full(b.size, np.inf)
    return ParameterFit(b=b, std=std, residual_std=math.sqrt(s2), cost=float(r.cost), nfev=int(r.nfev),
                        success=bool(r.success), message=str(r.message))
