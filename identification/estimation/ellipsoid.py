"""Confidence ellipsoids G(alpha, p, C) = {p': (p'-p)^T C^-1 (p'-p) <= chi2_{n_p}(1 - alpha)} (eq. 7)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from identification.estimation.distributions import chi2_ppf, chi2_sf


@dataclass
class ConfidenceEllipsoid:
    """Ellipsoid with centre, covariance, level; semi_axes[i] lies along axes[:, i] (eigenvectors of C)."""

    center: np.ndarray
    covariance: np.ndarray
    alpha: float
    radius2: float  # chi2 quantile gamma^2(alpha)
    semi_axes: np.ndarray
    axes: np.ndarray

    def contains(self, p: np.ndarray) -> bool:
        return mahalanobis2(self.center, self.covariance, p) <= self.radius2

    def boundary_2d(self, n: int = 200, dims: tuple[int, int] = (0, 1)) -> np.ndarray:
        """Points (n, 2) on the boundary of the 2D marginal ellipse of the chosen coordinates (plots)."""
        i, j = dims
        C2 = self.covariance[np.ix_([i, j], [i, j])]
        w, V = np.linalg.eigh(C2)
        t = np.linspace(0, 2 * np.pi, n)
        circle = np.stack([np.cos(t), np.sin(t)])
        pts = V @ (np.sqrt(np.maximum(w, 0) * self.radius2)[:, None] * circle)
        return (pts + self.center[[i, j], None]).T


def mahalanobis2(center: np.ndarray, C: np.ndarray, p: np.ndarray) -> float:
    """(p - center)^T C^-1 (p - center), by a solve (no explicit inverse)."""
    d = np.asarray(p, float) - np.asarray(center, float)
    return float(d @ np.linalg.solve(C, d))


def confidence_ellipsoid(p: np.ndarray, C: np.ndarray, alpha: float = 0.05) -> ConfidenceEllipsoid:
    """Ellipsoid at confidence level 1 - alpha; semi-axes sqrt(lambda_i * chi2_{n_p}(1 - alpha))."""
    p = np.asarray(p, float)
    r2 = float(chi2_ppf(1 - alpha, p.size))
    w, V = np.linalg.eigh(np.asarray(C, float))
    return ConfidenceEllipsoid(center=p, covariance=np.asarray(C, float), alpha=alpha, radius2=r2,
                               semi_axes=np.sqrt(np.maximum(w, 0) * r2), axes=V)


def alpha_min(
    p_cal: np.ndarray, C_cal: np.ndarray, p_val: np.ndarray, C_val: np.ndarray | None = None
) -> float:
    """p-value 1 - F_chi2_{n_p}(d^2) with d^2 = (p_val - p_cal)^T C^-1 (p_val - p_cal).

    C_val=None: C = C_cal, the paper's rule (p_val on the boundary of G(alpha, p_cal, C_cal)). Given C_val,
    C = C_cal + C_val, the covariance of the difference of two independent estimates; only this version
    has the nominal false-rejection rate when p_val is itself noisy.
    """
    C = np.asarray(C_cal, float) if C_val is None else np.asarray(C_cal, float) + np.asarray(C_val, float)
    d2 = mahalanobis2(p_cal, C, p_val)
    return float(chi2_sf(d2, np.size(p_cal)))
