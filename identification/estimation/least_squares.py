"""Weighted least squares for models given by a state equation E(y, p, q) = 0 (Gally et al., eqs. 3-5).

The state is eliminated (y = y(p, q)); derivatives come from the implicit function theorem
(dy/dp = -E_y^-1 E_p, second derivatives as in the paper's appendix eqs. 14-16), so the estimate, its
Jacobian and the exact Hessian H = J^T Omega J + S are available for the covariance of eq. 10.

Two entry points:

* ``fit_state_model(model, z, q, sigmas, p0, omega=...)`` for any object following ``StateModel``;
* ``fit_residuals(residual, p0, ...)`` for explicit models given as a residual function.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
from scipy.optimize import least_squares

from identification.estimation.covariance import covariance_matrix, fd_second_derivatives, second_order_term


@runtime_checkable
class StateModel(Protocol):
    """Batched quasi-static model: N experiments with inputs q[N, ...] share one parameter vector p.

    Required: ``n_p``, ``n_s``, ``solve_state``, ``jacobians``, ``observe``, ``observe_jacobians``.
    Optional (exact second derivatives; otherwise finite differences of the first derivatives are used):
    ``E_second(y, p, q, Yp)`` -> (N, d_y, n_p, n_p) and ``h_second(y, p, q, Yp)`` -> (N, n_s, n_p, n_p),
    the second total derivatives of E and h along (y'(p), p) with y'' left out, i.e. for directions l, m:
    E_yy[Yp_l, Yp_m] + E_yp[Yp_l, e_m] + E_yp[Yp_m, e_l] + E_pp[e_l, e_m].
    Optional too: ``state_derivatives(p, q, second)`` -> ``(y, Yp, Ypp or None)`` or None, the states and
    their derivatives computed by the model itself (a compiled path); None falls back to the above.
    """

    n_p: int
    n_s: int

    def solve_state(self, p: np.ndarray, q: np.ndarray) -> np.ndarray: ...  # (N, d_y)

    def jacobians(self, y: np.ndarray, p: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(E_y (N, d_y, d_y), E_p (N, d_y, n_p))"""
        ...

    def observe(self, y: np.ndarray, p: np.ndarray, q: np.ndarray) -> np.ndarray: ...  # (N, n_s)

    def observe_jacobians(
        self, y: np.ndarray, p: np.ndarray, q: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(h_y (N, n_s, d_y), h_p (N, n_s, n_p))"""
        ...


@dataclass
class Sensitivities:
    """Model output and its first/second parameter derivatives for N experiments."""

    y: np.ndarray  # (N, d_y)
    h: np.ndarray  # (N, n_s)
    dh: np.ndarray  # (N, n_s, n_p)
    d2h: np.ndarray | None  # (N, n_s, n_p, n_p)
    dy: np.ndarray  # (N, d_y, n_p)


def _fd_path_second(model, y, p, q, Yp, which: str, rel_step: float = 1e-5) -> np.ndarray:
    """Second total derivative along (Yp, I) from central differences of first derivatives."""
    n_p = p.size
    out = None
    for m in range(n_p):
        eps = rel_step * max(abs(p[m]), 1e-12)
        dp = np.zeros(n_p)
        dp[m] = eps
        vals = []
        for sgn in (1.0, -1.0):
            ys, ps = y + sgn * eps * Yp[:, :, m], p + sgn * dp
            if which == "E":
                A, B = model.jacobians(ys, ps, q)
            else:
                A, B = model.observe_jacobians(ys, ps, q)
            vals.append(np.einsum("nij,njl->nil", A, Yp) + B)  # first total derivative, (N, ., n_p)
        col = (vals[0] - vals[1]) / (2 * eps)
        if out is None:
            out = np.zeros(col.shape + (n_p,))
        out[..., m] = col
    assert out is not None  # p has at least one parameter
    return 0.5 * (out + out.transpose(0, 1, 3, 2))


def state_sensitivities(
    model: StateModel, p: np.ndarray, q: np.ndarray, second: bool = True
) -> Sensitivities:
    """Solve the state and differentiate h(y(p), p, q) once (and twice if ``second``) w.r.t. p."""
    p = np.asarray(p, dtype=float)
    derive = getattr(model, "state_derivatives", None)
    derived = derive(p, q, second) if derive is not None else None
    if derived is not None:  # the model's own (compiled) y, Y_p and Y_pp
        y, Yp, Ypp = derived
    else:
        y = model.solve_state(p, q)
        Ey, Ep = model.jacobians(y, p, q)
        Yp = -np.linalg.solve(Ey, Ep)  # (N, d_y, n_p), eq. 15
    h = model.observe(y, p, q)
    hy, hp = model.observe_jacobians(y, p, q)
    dh = np.einsum("nsj,njl->nsl", hy, Yp) + hp
    d2h = None
    if second:
        if derived is None:
            if hasattr(model, "E_second"):
                T = model.E_second(y, p, q, Yp)
            else:
                T = _fd_path_second(model, y, p, q, Yp, "E")
            N, d_y, n_p, _ = T.shape
            Ypp = -np.linalg.solve(Ey, T.reshape(N, d_y, n_p * n_p)).reshape(N, d_y, n_p, n_p)  # eq. 16
        if hasattr(model, "h_second"):
            Th = model.h_second(y, p, q, Yp)
        else:
            Th = _fd_path_second(model, y, p, q, Yp, "h")
        d2h = Th + np.einsum("nsj,njlm->nslm", hy, Ypp)  # eq. 14
    return Sensitivities(y=y, h=h, dh=dh, d2h=d2h, dy=Yp)


@dataclass
class FitResult:
    """Outcome of a weighted least-squares fit (all arrays in SI units of p)."""

    p: np.ndarray
    residuals: np.ndarray  # scaled residuals r = (z - h)/sigma of the used measurements
    J: np.ndarray  # dr/dp, (n, n_p)
    H: np.ndarray  # J^T J + S (or J^T J for Gauss-Newton)
    S: np.ndarray  # second-order term (zeros if not computed)
    covariance: np.ndarray  # eq. 10 with S if second_order else Gauss-Newton
    covariance_gn: np.ndarray  # (J^T J)^-1, always reported for comparison
    cost: float  # 0.5 * sum r^2
    success: bool
    status: int
    message: str
    nfev: int
    n_obs: int
    dof: int
    second_order: bool
    covariance_note: str = ""  # why the covariance is NaN (not identifiable from these data); "" if defined

    @property
    def identifiable(self) -> bool:
        """False when the covariance could not be formed (a rank-deficient or singular information)."""
        return not self.covariance_note

    @property
    def s2(self) -> float:
        """Residual variance estimate RSS/(n - n_p) (about 1 when the sigmas are right)."""
        return float(2 * self.cost / max(self.dof, 1))

    @property
    def std_errors(self) -> np.ndarray:
        """sqrt of the covariance diagonal; NaN where it is undefined (see ``covariance_note``)."""
        v = np.diag(self.covariance)
        return np.sqrt(np.where(v >= 0, v, np.nan))


def _finish(p, r, J, r_pp, opt, second_order, residual_variance) -> FitResult:
    n, n_p = J.shape
    S = np.zeros((n_p, n_p))
    if second_order and r_pp is not None:
        S = second_order_term(r, np.ones(n), r_pp)
    note = ""
    try:
        C, H = covariance_matrix(J, None, S if second_order else None)
        C_gn, _ = covariance_matrix(J)
    except np.linalg.LinAlgError as exc:  # said, not hidden in garbage numbers (or negative variances)
        C = C_gn = np.full((n_p, n_p), np.nan)
        H = J.T @ J + S
        note = str(exc)
    cost = 0.5 * float(r @ r)
    dof = n - n_p
    if residual_variance:
        s2 = 2 * cost / max(dof, 1)
        C, C_gn = C * s2, C_gn * s2
    return FitResult(
        p=p, residuals=r, J=J, H=H, S=S, covariance=C, covariance_gn=C_gn, cost=cost,
        success=bool(opt.success), status=int(opt.status), message=str(opt.message), nfev=int(opt.nfev),
        n_obs=n, dof=dof, second_order=second_order, covariance_note=note,
    )


#: a fitted parameter this many decades from its scale (|p0| by default) ran away: not identifiable
RUNAWAY_DECADES = 3


def fit_state_model(
    model: StateModel,
    z: np.ndarray,
    q: np.ndarray,
    sigmas: np.ndarray,
    p0: np.ndarray,
    *,
    omega: np.ndarray | None = None,
    second_order: bool = True,
    p_scale: np.ndarray | None = None,
    bounds: tuple[np.ndarray | float, np.ndarray | float] = (-np.inf, np.inf),
    max_nfev: int = 200,
) -> FitResult:
    """Minimise 0.5 * sum omega_k ((z - h(y(p), p, q)) / sigma_k)^2 subject to E(y, p, q) = 0.

    z: (N, n_s) measurements for N experiments with inputs q (N, ...); sigmas (n_s,); omega (n_s,) binary
    sensor weights (default all ones). Internally p is scaled by ``p_scale`` (default |p0|).
    """
    z = np.asarray(z, dtype=float)
    sig = np.asarray(sigmas, dtype=float)
    om = np.ones(model.n_s, dtype=bool) if omega is None else np.asarray(omega).astype(bool)
    p0 = np.asarray(p0, dtype=float)
    scale = np.abs(p0) if p_scale is None else np.asarray(p_scale, dtype=float)
    scale = np.where(scale > 0, scale, 1.0)
    cache: dict = {}

    def sens(x: np.ndarray, second: bool = False) -> Sensitivities:
        key = (x.tobytes(), second)
        if key not in cache:
            cache.clear()
            cache[key] = state_sensitivities(model, x * scale, q, second=second)
        return cache[key]

    def fun(x: np.ndarray) -> np.ndarray:
        return ((z - sens(x).h) / sig)[:, om].ravel()

    def jac(x: np.ndarray) -> np.ndarray:
        dh = sens(x).dh[:, om, :] / sig[om, None]
        return -dh.reshape(-1, p0.size) * scale

    lb, ub = (np.broadcast_to(np.asarray(b, dtype=float), p0.shape) / scale for b in bounds)
    opt = least_squares(fun, p0 / scale, jac=jac, bounds=(lb, ub), method="trf", x_scale=1.0,
                        xtol=1e-12, ftol=1e-12, gtol=1e-12, max_nfev=max_nfev)
    p = opt.x * scale
    s = state_sensitivities(model, p, q, second=second_order)
    r = ((z - s.h) / sig)[:, om].ravel()
    J = -(s.dh[:, om, :] / sig[om, None]).reshape(-1, p.size)
    r_pp = None
    if second_order:
        assert s.d2h is not None  # state_sensitivities(second=True) computes it
        r_pp = -(s.d2h[:, om] / sig[om, None, None]).reshape(-1, p.size, p.size)
    fit = _finish(p, r, J, r_pp, opt, second_order, residual_variance=False)
    ran = np.flatnonzero(np.abs(np.log10(np.maximum(np.abs(p), 1e-300) / scale)) > RUNAWAY_DECADES)
    if ran.size and not fit.covariance_note:
        # a parameter driven orders of magnitude away from its scale: the cost is flat towards infinity
        # (or zero) in it, and where the optimiser stopped - hence whether the Jacobian there still passes the
        # rank test - depends on rounding; say "not identifiable" for every BLAS kernel alike
        fit.covariance = np.full_like(fit.covariance, np.nan)
        fit.covariance_gn = np.full_like(fit.covariance_gn, np.nan)
        fit.covariance_note = (f"parameter(s) {ran.tolist()} ran more than {RUNAWAY_DECADES} decades from "
                               "their scale: not identifiable from these data")
    return fit


def fit_residuals(
    residual: Callable[[np.ndarray], np.ndarray],
    p0: np.ndarray,
    *,
    jac: Callable[[np.ndarray], np.ndarray] | None = None,
    second_order: bool = True,
    residual_variance: bool = False,
    max_nfev: int = 500,
) -> FitResult:
    """Fit an explicit model given its scaled residual function r(p) = (data - model)/sigma.

    Without ``jac`` the Jacobian is taken by central differences; second derivatives always come from
    central differences of the Jacobian. ``residual_variance=True`` multiplies the covariance by
    s^2 = RSS/(n - n_p) (sigma unknown, the classic nonlinear-regression standard errors).
    """
    p0 = np.asarray(p0, dtype=float)

    def fd_jac(p: np.ndarray) -> np.ndarray:
        cols = []
        for m in range(p.size):
            e = np.zeros(p.size)
            e[m] = 1e-6 * max(abs(p[m]), 1e-8)
            cols.append((residual(p + e) - residual(p - e)) / (2 * e[m]))
        return np.stack(cols, axis=1)

    J_fun = jac or fd_jac
    opt = least_squares(residual, p0, jac=J_fun, method="trf", xtol=1e-14, ftol=1e-14, gtol=1e-14,
                        max_nfev=max_nfev)
    p = opt.x
    r = np.asarray(residual(p), dtype=float)
    J = np.asarray(J_fun(p), dtype=float)
    r_pp = fd_second_derivatives(J_fun, p) if second_order else None
    return _finish(p, r, J, r_pp, opt, second_order, residual_variance)
