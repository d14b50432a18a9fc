"""Running stiffness estimate of the press after each completed series (online identification, issue 10).

``estimate_stiffness(z, q, q_desired, sigmas, sensor_names, p0=previous.p)`` fits k5, k7 of the linkage
model to every loaded setpoint (q_d > 0) of the series measured so far, with the actual forces as inputs,
warm-started from the previous estimate. It returns the estimate, its covariance (eq. 10 with the
second-order term), standard deviations, relative standard deviations and the confidence-ellipse axes.

Model choice: M1 (no friction). It is one warm-started fit of two parameters (about 10 ms for a few
series), defined from the first series on. M3 would first need its friction model trained through the
inverse model (three more fits, at least one unloading branch) and, trained and fitted on the same few
series, its twelve coefficients overfit short staircases (k5 off by ~35 % on a 7-setpoint plan). The
online estimate answers "is the stiffness known precisely enough to stop measuring"; which friction
model is adequate stays the job of the offline model-uncertainty test (``hil analyze``).
Because M1 ignores friction, its residual variance RSS/dof is above 1; ``inflate=True`` scales the
covariance by max(1, RSS/dof) so that a stopping rule does not trust a precision the misfit denies.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from identification.ellipsoid import confidence_ellipsoid
from identification.least_squares import fit_state_model
from identification.press_models import P_NAMES, PressConstants, PressLinkageModel

P0 = (1.8e8, 1.8e8)  # N/m, cold start (the offline analysis' default)
MODEL = "M1"


@dataclass
class OnlineEstimate:
    """Current k5, k7 (N/m) of the series so far; covariance in (N/m)^2, semi-axes in N/m."""

    p: np.ndarray
    covariance: np.ndarray
    std: np.ndarray
    rel_std: np.ndarray
    s2: float                 # RSS/dof of the fit (1 when model and sigmas are right)
    inflated: bool            # covariance scaled by max(1, s2)
    semi_axes: np.ndarray     # confidence ellipse at 1 - alpha
    axes: np.ndarray          # columns: directions of the semi-axes
    alpha: float
    n_series: int
    n_obs: int
    nfev: int
    success: bool
    model: str = MODEL
    p_names: tuple[str, ...] = P_NAMES

    def to_dict(self) -> dict:
        """JSON-ready body of an ``estimate`` event."""
        return {"model": self.model, "parameters": list(self.p_names), "series_used": self.n_series,
                "k": self.p.tolist(), "covariance": self.covariance.tolist(), "std": self.std.tolist(),
                "rel_std": self.rel_std.tolist(), "s2": self.s2, "inflated": self.inflated,
                "alpha": self.alpha, "ellipse_semi_axes": self.semi_axes.tolist(),
                "ellipse_axes": self.axes.tolist(), "n_obs": self.n_obs, "nfev": self.nfev,
                "success": self.success}


def estimate_stiffness(
    z: np.ndarray,
    q: np.ndarray,
    q_desired: np.ndarray,
    sigmas: np.ndarray,
    sensor_names: tuple[str, ...] | list[str],
    *,
    p0: np.ndarray | tuple[float, float] | None = None,
    alpha: float = 0.05,
    inflate: bool = True,
    constants: PressConstants | dict | None = None,
) -> OnlineEstimate:
    """M1 fit of k5, k7 to z[series, setpoint, sensor] (m) at actual forces q[series, setpoint] (N).

    Only setpoints with q_desired > 0 are used (as the offline fit on setpoints 2..n-1). ``p0``: the
    previous estimate (warm start); None starts from :data:`P0`.
    """
    z = np.asarray(z, float)
    q = np.asarray(q, float)
    sig = np.asarray(sigmas, float)
    if z.ndim != 3 or q.shape != z.shape[:2]:
        raise ValueError(f"need z[series, setpoint, sensor], q[series, setpoint]; got {z.shape}, {q.shape}")
    loaded = np.asarray(q_desired, float) > 0
    if loaded.size != z.shape[1] or not loaded.any():
        raise ValueError("q_desired must give one value per setpoint, some of them above 0")
    if isinstance(constants, dict):
        constants = PressConstants.from_dict(constants)
    model = PressLinkageModel(constants, tuple(sensor_names))
    start = np.asarray(P0 if p0 is None else p0, float)
    if not (np.all(np.isfinite(start)) and np.all(start > 0)):
        start = np.asarray(P0, float)
    n_s = z.shape[2]
    fit = fit_state_model(model, z[:, loaded].reshape(-1, n_s), q[:, loaded].ravel(), sig, start,
                          p_scale=np.asarray(P0, float), bounds=(0.0, np.inf))
    C = fit.covariance
    if inflate and np.all(np.isfinite(C)):
        C = C * max(1.0, fit.s2)
    std = np.sqrt(np.abs(np.diag(C)))
    rel = std / np.where(np.abs(fit.p) > 0, np.abs(fit.p), np.inf)
    if np.all(np.isfinite(C)):
        ell = confidence_ellipsoid(fit.p, C, alpha)
        semi, axes = ell.semi_axes, ell.axes
    else:
        semi, axes = np.full(fit.p.size, np.inf), np.eye(fit.p.size)
    return OnlineEstimate(p=fit.p, covariance=C, std=std, rel_std=rel, s2=fit.s2, inflated=inflate,
                          semi_axes=semi, axes=axes, alpha=alpha, n_series=int(z.shape[0]), n_obs=fit.n_obs,
                          nfev=fit.nfev, success=fit.success)
