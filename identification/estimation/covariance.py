"""Parameter covariance of a weighted least-squares estimate, with or without the second-order term.

Notation (Gally et al., eqs. 4-10): residuals r = Sigma^-1 (z - h(p)) (already divided by the sensor sigmas),
J = dr/dp, binary weights Omega. The sensitivity of the estimate to the data gives

    C = H^-1 J^T Omega^2 J H^-T,   H = J^T Omega J + S,   S = sum_i r_i Omega_ii d2 r_i / dp2,

and the Gauss-Newton approximation drops S (then C = (J^T Omega J)^-1). Keeping S matters when the model
is curved in p and the residuals are not small (a misfit or few data).
"""

from __future__ import annotations

import numpy as np


def second_order_term(r: np.ndarray, weights: np.ndarray, r_pp: np.ndarray) -> np.ndarray:
    """S = sum_i w_i r_i d2r_i/dp2 for residuals r (n,), weights (n,) and second derivatives (n, n_p, n_p)."""
    return np.einsum("i,ilm->lm", np.asarray(r) * np.asarray(weights), r_pp)


#: smallest singular value of the column-scaled Jacobian, relative to the largest, below which the
#: information matrix counts as singular (condition number of J^T J above 1e14): not identifiable
RCOND = 1e-7


def covariance_matrix(
    J: np.ndarray,
    weights: np.ndarray | None = None,
    S: np.ndarray | None = None,
    rcond: float = RCOND,
) -> tuple[np.ndarray, np.ndarray]:
    """Return (C, H) for the scaled residual Jacobian J (n, n_p); S=None gives Gauss-Newton.

    Computed in column-scaled coordinates (each parameter's information scaled to 1) as C = B B^T with
    B = H^-1 J^T Omega, so C is positive semi-definite by construction: forming J^T J first leaves a
    rounding-level negative eigenvalue in an unidentifiable direction, which H^-1 then amplifies into a
    negative variance. Raises numpy.linalg.LinAlgError, with the reason, if a parameter has no
    information, the column-scaled Jacobian is rank-deficient (s_min / s_max < ``rcond``: the parameters
    are not identifiable from these data) or H is numerically singular.
    """
    J = np.asarray(J, dtype=float)
    n_p = J.shape[1]
    w = np.ones(J.shape[0]) if weights is None else np.asarray(weights, dtype=float)
    JW = J * w[:, None]
    H = J.T @ JW
    if S is not None:
        H = H + S
    H = 0.5 * (H + H.T)
    if n_p == 0:
        return np.zeros((0, 0)), H
    d = np.sqrt(np.abs(np.einsum("ij,ij->j", J, JW)))  # information of each parameter alone
    if not np.all(np.isfinite(d)) or np.any(d == 0):
        raise np.linalg.LinAlgError(
            f"parameter(s) {np.flatnonzero(~(d > 0)).tolist()} do not affect the used outputs: "
            "not identifiable")
    sv = np.linalg.svd(J * np.sqrt(np.abs(w))[:, None] / d, compute_uv=False)
    if sv[-1] < rcond * sv[0]:
        raise np.linalg.LinAlgError(
            f"information matrix numerically singular (scaled s_min/s_max = {sv[-1] / sv[0]:.1e} < "
            f"{rcond:g}): the parameters are not identifiable from these data")
    Hs = H / np.outer(d, d)
    if np.linalg.cond(Hs) > 1.0 / rcond**2:
        raise np.linalg.LinAlgError("H = J^T J + S numerically singular: the second-order covariance is "
                                    "undefined")
    B = np.linalg.solve(Hs, (JW / d).T) / d[:, None]  # H^-1 J^T Omega, back in the parameters' units
    C = B @ B.T
    return 0.5 * (C + C.T), H


def fd_second_derivatives(jac, p: np.ndarray, rel_step: float = 1e-4) -> np.ndarray:
    """Central finite differences of a Jacobian function: d2r/dp2 as (n, n_p, n_p), symmetrised."""
    p = np.asarray(p, dtype=float)
    n_p = p.size
    steps = rel_step * np.maximum(np.abs(p), 1e-8)
    cols = []
    for m in range(n_p):
        e = np.zeros(n_p)
        e[m] = steps[m]
        cols.append((np.asarray(jac(p + e)) - np.asarray(jac(p - e))) / (2 * steps[m]))
    R2 = np.stack(cols, axis=2)  # [i, l, m] = d/dp_m of dr_i/dp_l
    return 0.5 * (R2 + R2.transpose(0, 2, 1))


def marginal_std(cov: np.ndarray | None, n: int) -> np.ndarray:
    """Square roots of a covariance's diagonal; NaN where it is not computed (None) or a diagonal entry is
    negative (not PSD), never the square root of a negative number."""
    if cov is None:
        return np.full(n, np.nan)
    d = np.diag(cov)
    return np.sqrt(np.where(d >= 0, d, np.nan))
