"""The adjoint design with its end conditions as exact constraints: SQP on the input scaled to its range.

Why: the optimum of these designs is bang-bang (nearly every sample on a bound) and must meet the end
conditions. The arctan map of eq. 18 reaches a bound only as ``w -> inf`` (the gradient in ``w`` fades like
``1/w^2``), and the terminal penalty ``rho/2*e^2`` adds a few directions whose curvature is orders of
magnitude above the criterion's: L-BFGS-B then needs 400 to 900 iterations (issue 31 item 7). Here the
variable is ``x = (u - mid)/half`` in ``[-1, 1]`` (box bounds, reached exactly), the end conditions are the
equality constraints ``e(x) = 0`` on the scaled residuals, and scipy's SLSQP (a quasi-Newton SQP) solves
the problem; state limits stay a smooth penalty in the cost. Each iteration costs one forward solve with
sensitivities and one adjoint sweep for the cost, and a forward solve plus one adjoint sweep per end
condition for the constraint Jacobian (the sweeps of the discrete adjoint, exact to round-off).

Plain functions over numpy arrays, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.optimize

from identification.models.ode_sensitivity import adjoint_gradient, integrate

# identification.design.adjoint_design types; that module imports this one (no import cycle)
DesignProblem = Any
Evaluation = Any

__all__ = ["SqpOutcome", "end_jacobian", "least_squares_multipliers", "solve_sqp"]


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

    def residuals(self, x: np.ndarray) -> np.ndarray:
        return self.at(x).end_residuals / self.scales

    def jacobian(self, x: np.ndarray) -> np.ndarray:
        self.at(x)
        if self.jac is None:
            self.jac = end_jacobian(self.pb, self.u(x)) * self.half.ravel()[None, :]
            self.n += len(self.scales)
        return self.jac


def solve_sqp(problem: DesignProblem, u0: np.ndarray, evaluate, max_iter: int = 300,
              ftol: float = 1e-12) -> SqpOutcome:
    """Minimise the criterion (plus the state-limit penalty) over ``u`` within its bounds subject to the
    end conditions, from ``u0``. ``evaluate`` is :func:`identification.design.adjoint_design.evaluate`
    (passed in: that module calls this one). ``problem.end_weight`` is not used: the conditions are exact."""
    from dataclasses import replace

    pb = replace(problem, end_weight=0.0)
    fun = _Cache(pb, evaluate)
    lo, hi = problem.bounds()
    x0 = np.clip((np.asarray(u0, float).reshape(lo.shape) - fun.mid) / fun.half, -1.0, 1.0).ravel()
    history: list[float] = []
    constraints = []
    if pb.end_conditions:
        constraints = [{"type": "eq", "fun": fun.residuals, "jac": fun.jacobian}]
    r = scipy.optimize.minimize(fun.cost, x0, jac=fun.grad, method="SLSQP", bounds=[(-1.0, 1.0)] * x0.size,
                                constraints=constraints, callback=lambda xk: history.append(fun.cost(xk)),
                                options={"maxiter": max_iter, "ftol": ftol})
    x = np.clip(r.x, -1.0, 1.0)
    lam = np.zeros(len(pb.end_conditions))
    if pb.end_conditions:
        lam = least_squares_multipliers(fun.grad(x), fun.jacobian(x), x)
    return SqpOutcome(u=fun.u(x), iterations=int(r.nit), n_evaluations=fun.n, message=str(r.message),
                      multipliers=lam, cost_history=history)
