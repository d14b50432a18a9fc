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


def covariance_matrix(
    J: np.ndarray,
    weights: np.ndarray | None = None,
    S: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Return (C, H) for the scaled residual Jacobian J (n, n_p); S=None gives Gauss-Newton.

    Raises numpy.linalg.LinAlgError if H is singular (too few informative sensors).
    """
    J = np.asarray(J, dtype=float)
    w = np.ones(J.shape[0]) if weights is None else np.asarray(weights, dtype=float)
    JW = J * w[:, None]
    H = J.T @ JW
    if S is not None:
        H = H + S
    H = 0.5 * (H + H.T)
    M = JW.T @ JW  # J^T Omega^2 J
    Hinv = np.linalg.inv(H)
    C = Hinv @ M @ Hinv.T
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
