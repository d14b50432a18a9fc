"""Local practical-identifiability measures from an output sensitivity matrix (seed 004, eqs. 6-9).

``S`` is ``d y / d p`` at the estimate (n_samples x n_p, physical units). Columns are first
multiplied by the parameter ranges ``hi - lo`` (the search bounds), so every measure is
relative to the range the parameter was searched in:

* parameter importance index (eq. 6): ``PII_j = ||X_j * range_j||``, reported also normalised
  to the largest one;
* collinearity index (eq. 7, Brun et al. 2001): ``1 / s_min`` of the column-normalised matrix;
* Belsley scaled condition indices (eq. 8): ``s_max / s_k`` of the column-normalised matrix;
* scaled covariance (eq. 9): ``sigma^2 (X_n^T X_n)^-1`` with the range-scaled ``X_n``.

A model is accepted if ``min PII >= min_pii_ratio * max PII`` and every condition index is
below ``max_condition_index`` (defaults 1 % and 30, as in the seed paper).

:func:`profile_likelihood` scans one parameter over a grid, re-optimising the others with a
caller-supplied re-fit function.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["IdentifiabilityResult", "analyze_identifiability", "ProfileResult", "profile_likelihood"]


@dataclass
class IdentifiabilityResult:
    names: list[str]
    pii: np.ndarray  # eq. 6, range-scaled, in output units
    pii_ratio: np.ndarray  # pii / max(pii)
    collinearity_index: float  # eq. 7
    condition_indices: np.ndarray  # eq. 8, ascending (first = 1)
    variance_proportions: np.ndarray  # Belsley decomposition for the largest condition index, per parameter
    scaled_covariance: np.ndarray  # eq. 9
    sigma2: float
    min_pii_ratio: float  # threshold used
    max_condition_index: float  # threshold used
    accepted: bool
    reasons: list[str] = field(default_factory=list)

    @property
    def min_pii(self) -> float:
        """Smallest PII relative to the largest."""
        return float(self.pii_ratio.min()) if self.pii_ratio.size else 1.0

    @property
    def max_ci(self) -> float:
        return float(self.condition_indices.max()) if self.condition_indices.size else 1.0

    def to_dict(self) -> dict:
        return {
            "names": list(self.names),
            "pii": self.pii.tolist(),
            "pii_ratio": self.pii_ratio.tolist(),
            "min_pii_ratio": self.min_pii,
            "collinearity_index": _finite(self.collinearity_index),
            "condition_indices": [_finite(c) for c in self.condition_indices],
            "max_condition_index": _finite(self.max_ci),
            "variance_proportions": self.variance_proportions.tolist(),
            "scaled_variances": [_finite(v) for v in np.diag(self.scaled_covariance)],
            "sigma2": self.sigma2,
            "thresholds": {"min_pii_ratio": self.min_pii_ratio,
                           "max_condition_index": self.max_condition_index},
            "accepted": self.accepted,
            "reasons": list(self.reasons),
        }


def _finite(x: float) -> float | None:
    x = float(x)
    return x if np.isfinite(x) else None


def analyze_identifiability(S: np.ndarray, ranges: ArrayLike, names: Sequence[str] | None = None,
                            sigma2: float = 1.0, min_pii_ratio: float = 0.01,
                            max_condition_index: float = 30.0) -> IdentifiabilityResult:
    """Identifiability measures of the sensitivity matrix ``S`` with columns scaled by ``ranges``."""
    S = np.asarray(S, dtype=float)
    if S.ndim != 2:
        raise ValueError("S must be 2-D (n_samples, n_params)")
    n_p = S.shape[1]
    ranges = np.asarray(ranges, dtype=float)
    if ranges.shape != (n_p,) or np.any(ranges <= 0):
        raise ValueError("ranges must be positive, one per column of S")
    names = list(names) if names is not None else [f"p{j}" for j in range(n_p)]
    Xn = S * ranges
    pii = np.linalg.norm(Xn, axis=0)
    top = pii.max() if n_p else 0.0
    pii_ratio = pii / top if top > 0 else np.zeros(n_p)
    norms = np.where(pii > 0, pii, 1.0)
    Xt = Xn / norms
    if n_p:
        _, sv, Vt = np.linalg.svd(Xt, full_matrices=False)
        s_max = sv[0]
        with np.errstate(divide="ignore"):
            ci = np.where(sv > 0, s_max / sv, np.inf)[::-1]
            gamma = 1.0 / sv[-1] if sv[-1] > 0 else np.inf
        # Belsley variance-decomposition proportions for the smallest singular value
        phi = (Vt.T ** 2) / np.maximum(sv, 1e-300) ** 2  # (n_p params, n_p components)
        prop = phi / phi.sum(axis=1, keepdims=True)
        var_prop = prop[:, -1]
        cov = sigma2 * np.linalg.pinv(Xn.T @ Xn)
    else:
        ci = np.zeros(0)
        gamma = 1.0
        var_prop = np.zeros(0)
        cov = np.zeros((0, 0))
    reasons = []
    if n_p and pii_ratio.min() < min_pii_ratio:
        weak = [names[j] for j in np.flatnonzero(pii_ratio < min_pii_ratio)]
        reasons.append(f"low importance (PII < {min_pii_ratio:g} x max): {', '.join(weak)}")
    if n_p and not np.all(ci < max_condition_index):
        reasons.append(f"collinear: max condition index {ci.max():.3g} >= {max_condition_index:g}")
    return IdentifiabilityResult(
        names=names, pii=pii, pii_ratio=pii_ratio, collinearity_index=float(gamma),
        condition_indices=np.asarray(ci, dtype=float), variance_proportions=var_prop,
        scaled_covariance=cov, sigma2=float(sigma2), min_pii_ratio=float(min_pii_ratio),
        max_condition_index=float(max_condition_index), accepted=not reasons, reasons=reasons,
    )


@dataclass
class ProfileResult:
    """Profile likelihood: cost ``J(p_i)`` with the other parameters re-optimised."""

    names: list[str]
    grids: list[np.ndarray]  # parameter values per profiled parameter
    costs: list[np.ndarray]  # cost at every grid value
    cost_opt: float  # cost at the estimate
    estimate: np.ndarray
    clear_minimum: list[bool]  # cost rises by at least `rise` on both sides (or at a bound)

    def to_dict(self) -> dict:
        return {
            "cost_opt": self.cost_opt,
            "parameters": [
                {"name": n, "estimate": float(e), "grid": g.tolist(), "cost": c.tolist(),
                 "clear_minimum": bool(m)}
                for n, e, g, c, m in zip(self.names, self.estimate, self.grids, self.costs,
                                         self.clear_minimum, strict=True)
            ],
        }


def profile_likelihood(refit: Callable[[int, float], float], names: Sequence[str],
                       estimate: Sequence[float], bounds: Sequence[tuple[float, float]],
                       cost_opt: float, n_grid: int = 9,
                       rise: float = 1.1, which: Sequence[int] | None = None,
                       span: float = 1.0) -> ProfileResult:
    """Profile each parameter over ``span`` x its bound range (centred on the estimate, clipped).

    ``refit(j, value)`` must return the optimal cost with parameter ``j`` fixed at ``value``.
    A profile has a clear minimum when the cost reaches ``rise * cost_opt`` on both sides of the
    estimate (a side that ends at a search bound counts as rising when it is the estimate's
    own bound, i.e. the parameter sits at the bound).
    """
    est = np.asarray(estimate, dtype=float)
    which = list(range(len(names))) if which is None else list(which)
    grids, costs, clear = [], [], []
    for j in which:
        lo, hi = bounds[j]
        half = 0.5 * span * (hi - lo)
        g_lo, g_hi = max(lo, est[j] - half), min(hi, est[j] + half)
        grid = np.unique(np.concatenate([np.linspace(g_lo, g_hi, n_grid), [est[j]]]))
        c = np.array([cost_opt if v == est[j] else refit(j, float(v)) for v in grid])
        left = c[grid < est[j]]
        right = c[grid > est[j]]
        tol = 1e-9 * (hi - lo)
        ok_left = (left.size == 0 and est[j] <= lo + tol) or (left.size > 0 and left.max() >= rise * cost_opt)
        ok_right = (right.size == 0 and est[j] >= hi - tol) or (
            right.size > 0 and right.max() >= rise * cost_opt)
        grids.append(grid)
        costs.append(c)
        clear.append(bool(ok_left and ok_right))
    return ProfileResult(names=[names[j] for j in which], grids=grids, costs=costs, cost_opt=float(cost_opt),
                         estimate=est[which], clear_minimum=clear)
