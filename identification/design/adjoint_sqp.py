"""The adjoint design with its end conditions as exact constraints: SQP on the input scaled to its range.

Why: the optimum of these designs is bang-bang (nearly every sample on a bound) and must meet the end
conditions. The arctan map of eq. 18 reaches a bound only as ``w -> inf`` (the gradient in ``w`` fades like
``1/w^2``), and the terminal penalty ``rho/2*e^2`` adds a few directions whose curvature is orders of
magnitude above the criterion's: L-BFGS-B then needs 400 to 900 iterations (issue 31 item 7). Here the
variable is ``x = (u - mid)/half`` in ``[-1, 1]`` (box bounds, reached exactly), the end conditions are the
equality constraints ``e(x) = 0`` on the scaled residuals, and scipy's SLSQP (a quasi-Newton SQP) solves
the problem on the cost weighted by the start's steepest gradient (:func:`cost_weight`: with SLSQP's identity
start Hessian the cost's scale set the step, and the oscillator crawled); state limits stay a smooth penalty
in the cost. Each iteration costs one forward solve with
sensitivities and one adjoint sweep for the cost, and a forward solve plus one adjoint sweep per end
condition for the constraint Jacobian (the sweeps of the discrete adjoint, exact to round-off).

Plain functions over numpy arrays, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.optimize

from identification.models.ode_sensitivity import adjoint_gradient, integrate

# identification.design.adjoint_design types; that module imports this one (no import cycle)
DesignProblem = Any
Evaluation = Any

__all__ = [
    "COARSE_SAMPLES", "STALL_GAIN", "STALL_WINDOW", "STEP_REACH", "SqpOutcome", "coarsening", "cost_weight",
    "end_jacobian", "least_squares_multipliers", "solve_sqp",
]

#: A longer input is first designed on a coarser grid of at least this many samples (:func:`solve_sqp`).
COARSE_SAMPLES = 120
#: SLSQP stops once the test passes and the cost fell by less than STALL_GAIN over STALL_WINDOW iterations
#: (criterion units: log det for D, 1e-4 = 0.01 % of the information volume; A and E are scaled to ~1).
STALL_WINDOW, STALL_GAIN = 10, 1e-4
#: SLSQP sees the cost times :func:`cost_weight`: its first step would move the start's steepest sample
#: STEP_REACH half-ranges (clipped to the box). Shipped designs (issue 44, docs/adjoint-convergence.md):
#: reach 5-11 keeps the crane's optimum (4: 5e-4 worse, 14-30: 0.17-0.2 worse); the oscillator takes 98
#: iterations at 3, 80 at 5, 72 at 8.
STEP_REACH = 8.0


@dataclass
class SqpOutcome:
    """Where SQP stopped: the input, its iterations and solves, the optimiser's message, the multipliers
    of the scaled end conditions (least squares on the free samples, see :func:`least_squares_multipliers`)
    and the history of the cost per iteration."""

    u: np.ndarray
    iterations: int
    n_evaluations: int
    message: str
    multipliers: np.ndarray
    cost_history: list[float]


def end_jacobian(problem: DesignProblem, u: np.ndarray) -> np.ndarray:
    """``d e_i / d u`` (k, N*n_u) of the scaled end residuals ``e_i = (x_i(t_f) - target_i)/scale_i``:
    one forward solve and one adjoint sweep per end condition."""
    pb = problem
    traj = integrate(pb.model, pb.b, u, pb.dt, pb.n_sub, pb.x0, store_stages=True)
    rows = []
    for c in pb.end_conditions:
        cx = np.zeros_like(traj.x)
        cx[-1, c.index] = 1.0 / c.scale
        rows.append(adjoint_gradient(pb.model, pb.b, traj, u, cx, np.zeros_like(traj.X)).ravel())
    return np.array(rows)


def least_squares_multipliers(grad: np.ndarray, jac: np.ndarray, x: np.ndarray, tol: float = 1e-9
                              ) -> np.ndarray:
    """Multipliers ``lam`` that make ``grad + jac.T @ lam`` smallest on the samples off their bounds (the
    KKT conditions ask it to vanish there); all samples when fewer are free than constraints."""
    free = np.abs(x) < 1.0 - tol
    if free.sum() < jac.shape[0]:
        free[:] = True
    lam, *_ = np.linalg.lstsq(jac[:, free].T, -grad[free], rcond=None)
    return lam


class _Cache:
    """One solve per distinct ``x``: SLSQP asks for the cost, its gradient, the constraints and their
    Jacobian separately."""

    def __init__(self, problem: DesignProblem, evaluate):
        self.pb, self.evaluate = problem, evaluate
        lo, hi = problem.bounds()
        self.shape, self.mid, self.half = lo.shape, 0.5 * (hi + lo), 0.5 * (hi - lo)
        self.scales = np.array([c.scale for c in problem.end_conditions])
        self.key: bytes | None = None
        self.n = 0
        self.ev: Evaluation | None = None
        self.jac: np.ndarray | None = None
        self.weight = 1.0  # what SLSQP sees: weight * cost (the test and the history use the cost itself)

    def u(self, x: np.ndarray) -> np.ndarray:
        return self.mid + self.half * np.asarray(x, float).reshape(self.shape)

    def at(self, x: np.ndarray) -> Evaluation:
        key = np.asarray(x, float).tobytes()
        if key != self.key:
            self.ev = self.evaluate(self.pb, self.u(x), None, gradient=True)  # no end penalty: end_weight 0
            self.jac, self.key = None, key
            self.n += 1
        return self.ev

    def cost(self, x: np.ndarray) -> float:
        return self.at(x).cost

    def grad(self, x: np.ndarray) -> np.ndarray:
        return (self.at(x).grad_u * self.half).ravel()

    def weighted_cost(self, x: np.ndarray) -> float:
        return self.weight * self.cost(x)

    def weighted_grad(self, x: np.ndarray) -> np.ndarray:
        return self.weight * self.grad(x)

    def residuals(self, x: np.ndarray) -> np.ndarray:
        return self.at(x).end_residuals / self.scales

    def jacobian(self, x: np.ndarray) -> np.ndarray:
        self.at(x)
        if self.jac is None:
            self.jac = end_jacobian(self.pb, self.u(x)) * self.half.ravel()[None, :]
            self.n += len(self.scales)
        return self.jac


class _Converged(Exception):
    """Raised by the iteration callback once the iterate passes the convergence test (ends SLSQP there)."""


def _passes(fun: _Cache, x: np.ndarray, grad_tol: float, end_tol: float) -> bool:
    """The test :func:`identification.design.adjoint_design.optimize_input` judges a result by, on the
    cached solve at ``x``: scaled end residuals <= ``end_tol`` and the Lagrangian's projected gradient (the
    least-squares multipliers) <= ``grad_tol`` of the input range for every sample."""
    g = fun.grad(x)
    if fun.pb.end_conditions:
        if np.max(np.abs(fun.residuals(x))) > end_tol:
            return False
        jac = fun.jacobian(x)
        g = g + jac.T @ least_squares_multipliers(g, jac, x)
    if fun.pb.state_limits and fun.at(x).max_excess > 1e-3:
        return False
    return float(np.max(np.abs(np.clip(x - g, -1.0, 1.0) - x))) <= grad_tol


def cost_weight(grad0: np.ndarray, reach: float | None = STEP_REACH) -> float:
    """The factor on the cost that SLSQP minimises: ``reach / max|grad0|``, with ``grad0`` the gradient at
    the start on the input scaled to [-1, 1]; 1 for a zero or non-finite gradient and for ``reach=None``
    (the unweighted cost, as before issue 44).

    Why: SLSQP's quasi-Newton Hessian starts at the identity, and along the switching directions of a
    bang-bang optimum the criterion is concave, where the damped BFGS update stays near its start: the
    cost's own scale sets the step length. The oscillator's D criterion has gradients of ~0.03 per
    half-range near its optimum, so unweighted each iteration moved a switching sample by a few per cent of
    its range (148 iterations). Weighted, SLSQP's path no longer depends on the cost's scale (a factor on it
    gives the same weighted cost); the minimisers, the stop test and the reported criterion are unchanged."""
    g = float(np.max(np.abs(grad0))) if np.size(grad0) and reach is not None else 0.0
    return reach / g if reach is not None and math.isfinite(g) and g > 0.0 else 1.0


def coarsening(n_samples: int, min_samples: int = COARSE_SAMPLES) -> int:
    """The largest power-of-two factor ``k`` with ``n_samples/k`` whole and >= ``min_samples`` (1: none)."""
    k = 1
    while n_samples % (2 * k) == 0 and n_samples // (2 * k) >= min_samples:
        k *= 2
    return k


def _solve_level(problem: DesignProblem, u0: np.ndarray, evaluate, max_iter: int, ftol: float,
                 grad_tol: float, end_tol: float, polish: bool, reach: float | None) -> SqpOutcome:
    """SLSQP on one input grid from ``u0``, on the cost times :func:`cost_weight` (``reach``). Stops at
    SLSQP's own ``ftol``, or at the first iterate that passes the convergence test once the cost has
    stalled (fallen by less than ``STALL_GAIN`` over the last ``STALL_WINDOW`` iterations) - or at once
    (``polish``)."""
    fun = _Cache(problem, evaluate)
    lo, _ = problem.bounds()
    x0 = np.clip((np.asarray(u0, float).reshape(lo.shape) - fun.mid) / fun.half, -1.0, 1.0).ravel()
    history: list[float] = []
    state = {"x": x0, "nit": 0}

    def step(xk: np.ndarray) -> None:
        state["x"], state["nit"] = np.array(xk, float), state["nit"] + 1
        history.append(fun.cost(xk))
        stalled = len(history) > STALL_WINDOW and history[-STALL_WINDOW - 1] - history[-1] < STALL_GAIN
        if (polish or stalled) and _passes(fun, state["x"], grad_tol, end_tol):
            raise _Converged

    constraints = []
    if problem.end_conditions:
        constraints = [{"type": "eq", "fun": fun.residuals, "jac": fun.jacobian}]
    if polish and _passes(fun, x0, grad_tol, end_tol):
        x, nit, message = x0, 0, "the start passes the convergence test"
    else:
        try:
            fun.weight = cost_weight(fun.grad(x0), reach)
            r = scipy.optimize.minimize(fun.weighted_cost, x0, jac=fun.weighted_grad, method="SLSQP",
                                        bounds=[(-1.0, 1.0)] * x0.size, constraints=constraints,
                                        callback=step, options={"maxiter": max_iter, "ftol": ftol})
            x, nit, message = r.x, int(r.nit), str(r.message)
        except _Converged:
            x, nit = state["x"], int(state["nit"])
            message = "converged (projected gradient and end conditions)"
    x = np.clip(x, -1.0, 1.0)
    lam = np.zeros(len(problem.end_conditions))
    if problem.end_conditions:
        lam = least_squares_multipliers(fun.grad(x), fun.jacobian(x), x)
    return SqpOutcome(u=fun.u(x), iterations=nit, n_evaluations=fun.n, message=message, multipliers=lam,
                      cost_history=history)


def solve_sqp(problem: DesignProblem, u0: np.ndarray, evaluate, max_iter: int = 300, ftol: float = 1e-12,
              grad_tol: float = 0.05, end_tol: float = 1e-3,
              min_samples: int = COARSE_SAMPLES, reach: float | None = STEP_REACH) -> SqpOutcome:
    """Minimise the criterion (plus the state-limit penalty) over ``u`` within its bounds subject to the
    end conditions, from ``u0``. ``evaluate`` is :func:`identification.design.adjoint_design.evaluate`
    (passed in: that module calls this one). ``problem.end_weight`` is not used: the conditions are exact.

    Coarse to fine: a long input (more than ``2*min_samples`` samples) is first designed on a grid
    ``k`` times coarser (:func:`coarsening`; the same integration step, each coarse sample held for ``k``
    fine ones), and that design, repeated sample by sample, starts the full grid. The coarse problem is
    the fine one restricted to inputs held ``k`` samples, so its design is feasible and has the same
    value on the fine grid; its SQP moves whole switching blocks at a time (a fine grid moves them
    sample by sample) and costs ``k^2``-``k^3`` times less per iteration in SLSQP's dense subproblem.
    ``iterations`` and ``n_evaluations`` count both grids. The coarse grid (or the only one) runs until
    the convergence test (``optimize_input``'s, with ``grad_tol`` and ``end_tol``) passes and the cost
    has stalled, or to SLSQP's own stop (``ftol``): the test alone accepts the first bang-bang vertex, a
    poor local optimum, and ``ftol`` near round-off makes the stop depend on the BLAS kernel. The full
    grid only polishes: it stops at its first iterate (often the start) that passes the test. On each grid
    SLSQP minimises the cost times :func:`cost_weight` of its start's gradient (``reach``; None: unweighted);
    the test, the stall rule and the reported history use the cost itself."""
    from dataclasses import replace

    pb = replace(problem, end_weight=0.0)
    k = coarsening(pb.n_samples, min_samples)
    if k == 1:
        return _solve_level(pb, u0, evaluate, max_iter, ftol, grad_tol, end_tol, polish=False, reach=reach)
    coarse_pb = replace(pb, dt=pb.dt * k, n_samples=pb.n_samples // k, n_sub=pb.n_sub * k)
    u0 = np.asarray(u0, float).reshape(pb.bounds()[0].shape)
    coarse = _solve_level(coarse_pb, u0[::k], evaluate, max_iter, ftol, grad_tol, end_tol, polish=False,
                          reach=reach)
    fine = _solve_level(pb, np.repeat(coarse.u, k, axis=0), evaluate, max(max_iter - coarse.iterations, 1),
                        ftol, grad_tol, end_tol, polish=True, reach=reach)
    return SqpOutcome(u=fine.u, iterations=coarse.iterations + fine.iterations,
                      n_evaluations=coarse.n_evaluations + fine.n_evaluations,
                      message=f"{coarse.message} (grid {k}x coarser, {coarse.iterations} iterations); "
                              f"{fine.message} (full grid, {fine.iterations} iterations)",
                      multipliers=fine.multipliers, cost_history=coarse.cost_history + fine.cost_history)
