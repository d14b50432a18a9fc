"""Running stiffness estimate of the press after each completed series (online identification, issue 10).

``estimate_stiffness(z, q, q_desired, sigmas, sensor_names, p0=previous.p)`` fits k5, k7 of the linkage
model to every loaded setpoint (q_d > 0) of the series measured so far, with the actual forces as inputs,
warm-started from the previous estimate. It returns the estimate, its covariance (eq. 10 with the
second-order term), standard deviations, relative standard deviations and the confidence-ellipse axes.

Model choice: M1 (no friction). It is one warm-started fit of two parameters (about 10 ms for a few
series), defined from the first series on. M3 would first need its friction model trained through the
inverse model (three more fits, at least one unloading branch) and, trained and fitted on the same few
series, its twelve coefficients overfit short staircases (k5 off by ~35 % on a 7-setpoint plan). The
online estimate answers "is the stiffness known precisely enough to stop measuring".
Because M1 ignores friction, its residual variance RSS/dof is above 1; ``inflate=True`` scales the
covariance by max(1, RSS/dof) so that a stopping rule does not trust a precision the misfit denies.

``model_verdict(z, q, q_desired, sigmas, sensor_names, ...)`` is the running answer to "which friction
model is adequate": the offline press analysis (:func:`identification.analyses.press_analysis.analyze_press`,
the same training/test series, sensor selection, splits and Bonferroni level) on the series so far,
condensed to the per-model verdict, alpha_min per split and M3's estimate. ``verdict_settled`` tells
whether the pattern of rejected models has stopped changing.

Several looks, one family: testing the series so far after every series at ``tol`` each rejects a correct
model far more often than ``tol`` over the whole run (each look is another chance). Given the planned
number of series, ``model_verdict(..., n_planned=N, first_look=k0, spending="obrien-fleming")`` tests
look n at the increment of an alpha-spending function at information fraction n / N
(:func:`identification.selection.uncertainty_test.look_levels`), so the levels of all looks add up to ``tol``
and the family-wise false-rejection rate over the looks stays at most ``tol``; the verdict says which
level it used and that an interim verdict is provisional. Without ``n_planned`` it is the single
analysis of the offline test (``tol``, as ``hil analyze`` runs it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from identification.analyses.press_analysis import analyze_press
from identification.estimation.ellipsoid import confidence_ellipsoid
from identification.estimation.least_squares import fit_state_model
from identification.models.press_models import P_NAMES, PressConstants, PressLinkageModel
from identification.selection.uncertainty_test import SPENDING_RULES, look_levels

UNIT = "N/m"

P0 = (1.8e8, 1.8e8)  # N/m, cold start (the offline analysis' default)
MODEL = "M1"
#: alpha_min below this prints as "< 1e-6": a smaller number says nothing more (rejected at any level)
SMALLEST_SHOWN = 1e-6


def format_alpha(a: float) -> str:
    """A p-value (alpha_min) for people: "< 1e-6" below :data:`SMALLEST_SHOWN`, two digits above,
    "not computed" when it is NaN."""
    if not np.isfinite(a):
        return "not computed"
    if a < SMALLEST_SHOWN:
        return f"< {SMALLEST_SHOWN:.0e}".replace("e-0", "e-")
    return f"{a:.2g}"


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
                "used": self.n_series, "unit": UNIT, "values": self.p.tolist(), "k": self.p.tolist(),
                "covariance": self.covariance.tolist(), "std": self.std.tolist(),
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


@dataclass
class ModelVerdict:
    """The model-uncertainty test of one candidate model on the series so far."""

    name: str
    reject: bool               # rejected in at least one split at the corrected level
    alpha_min: np.ndarray      # per split (same order as OnlineVerdict.splits), fraction
    rejected_splits: np.ndarray
    p: np.ndarray              # k5, k7 (N/m) on all inner test setpoints
    std: np.ndarray            # N/m
    s2: float                  # RSS/dof of that fit

    @property
    def undecided(self) -> str:
        """Why the test cannot keep this model yet ("" when it can decide): a split whose comparison could
        not be computed (a singular fit on too few series) is no evidence for the model."""
        missing = int(np.sum(~np.isfinite(self.alpha_min)))
        if self.reject or not missing:
            return ""
        return (f"not enough series: {missing} of {self.alpha_min.size} splits cannot be compared yet "
                "(a fit on them is singular)")

    @property
    def verdict(self) -> str:
        return "reject" if self.reject else "undecided" if self.undecided else "keep"

    @property
    def min_alpha_min(self) -> float:
        """The smallest alpha_min over the splits that could be computed (NaN when none could)."""
        finite = self.alpha_min[np.isfinite(self.alpha_min)]
        return float(finite.min()) if finite.size else float("nan")

    @property
    def text(self) -> str:
        """One line: "M2 reject (alpha_min < 1e-6)", "M3 keep (alpha_min 0.1)" or why it is undecided."""
        if self.verdict == "undecided":
            return f"{self.name} undecided ({self.undecided})"
        return f"{self.name} {self.verdict} (alpha_min {format_alpha(self.min_alpha_min)})"

    def to_dict(self) -> dict:
        """JSON-ready. An undecided model carries no estimate (no ``values``, ``std``, ``s2``, no smallest
        alpha_min): its fit on the series so far may be singular (k of 1e16 N/m, std NaN) - only why it is
        undecided."""
        out = {"reject": self.reject, "verdict": self.verdict, "undecided": self.undecided,
               "alpha_min": self.alpha_min.tolist(), "rejected_splits": self.rejected_splits.tolist(),
               "text": self.text}
        if self.verdict == "undecided":
            return out
        return {**out, "min_alpha_min": self.min_alpha_min, "alpha_text": format_alpha(self.min_alpha_min),
                "values": self.p.tolist(), "std": self.std.tolist(), "s2": self.s2}


@dataclass
class OnlineVerdict:
    """Running model-uncertainty result: a model is rejected when alpha_min < level in any split."""

    n_series: int
    tol: float                 # family-wise level
    level: float               # Bonferroni-corrected level tol / n_tests (what the verdict uses)
    splits: list[str]
    models: dict[str, ModelVerdict]
    sensors: list[str]         # the chosen sensor set (names)
    train_series: list[int]
    test_series: list[int]
    p_names: tuple[str, ...] = P_NAMES
    family_tol: float | None = None  # level of the whole family of looks (None: a single analysis at tol)
    spending: str = "none"           # alpha-spending rule over the looks
    look: int = 1                    # this look's number (1-based) of n_looks planned
    n_looks: int = 1
    provisional: bool = False        # an interim look (fewer series than planned)
    undecided: str = ""              # why no model can be tested yet ("not enough series: ..."), "" if it ran

    @property
    def rejected(self) -> tuple[str, ...]:
        """The verdict pattern: names of the rejected models, in model order."""
        return tuple(m for m, v in self.models.items() if v.reject)

    def _named(self, verdict: str) -> list[str]:
        return [m for m, v in self.models.items() if v.verdict == verdict]

    @property
    def text(self) -> str:
        """The verdict in one line, for people."""
        return self.undecided or " · ".join(v.text for v in self.models.values())

    def to_dict(self) -> dict:
        """JSON-ready ``verdict`` of an estimate event (fractions, not %; k in N/m). A verdict that cannot
        be computed yet carries only ``undecided`` (its reason) and ``text``, no ``rejected``/``kept``."""
        if self.undecided:
            return {"series_used": self.n_series, "undecided": self.undecided, "text": self.text}
        return {"series_used": self.n_series, "tol": self.tol, "level": self.level,
                "splits": list(self.splits), "parameters": list(self.p_names), "sensors": list(self.sensors),
                "train_series": list(self.train_series), "test_series": list(self.test_series),
                "rejected": list(self.rejected), "kept": self._named("keep"),
                "undecided": self._named("undecided"), "text": self.text,
                "models": {m: v.to_dict() for m, v in self.models.items()},
                "family_tol": self.tol if self.family_tol is None else self.family_tol,
                "spending": self.spending, "look": self.look, "n_looks": self.n_looks,
                "provisional": self.provisional}


def model_verdict(
    z: np.ndarray,
    q: np.ndarray,
    q_desired: np.ndarray,
    sigmas: np.ndarray,
    sensor_names: tuple[str, ...] | list[str],
    *,
    tol: float = 0.05,
    criterion: str = "E",
    n_sensors: int = 2,
    n_random_splits: int = 0,
    seed: int = 0,
    constants: PressConstants | dict | None = None,
    n_planned: int | None = None,
    first_look: int = 2,
    spending: str = "obrien-fleming",
) -> OnlineVerdict:
    """The offline model-uncertainty test of M1/M2/M3 on the ``z.shape[0] >= 2`` series so far.

    Same defaults as the offline analysis (train the friction models on all but the last two series,
    test on the last two; with two series: train on the first). Slow for a loop (about 1 s for 10 x 29
    setpoints): run it off the event loop.

    ``n_planned``: the plan's number of series; then this is one look of the family of looks at
    ``first_look .. n_planned`` series, tested at ``look_tol(...)`` (the alpha spent at this look)
    instead of ``tol``. ``OnlineVerdict.tol`` is the level used, ``family_tol`` the family's.
    """

    z = np.asarray(z, float)
    if z.ndim != 3:
        raise ValueError(f"need z[series, setpoint, sensor], got z of shape {z.shape}")
    n = int(z.shape[0])
    if n < 2:
        return _undecided(n, tol, "not enough series: the test trains the friction models on some series and "
                                  f"compares fits on others, which needs at least 2 (have {n})")
    family_tol, look, n_looks = None, 1, 1
    if n_planned is not None:
        family_tol = tol
        tol, look, n_looks = look_tol(n, n_planned, tol, first_look=first_look, spending=spending)
    try:
        res = analyze_press(z, q, q_desired, sigmas, sensor_names=tuple(sensor_names), tol=tol,
                            criterion=criterion, n_sensors=min(n_sensors, z.shape[2]),
                            n_random_splits=n_random_splits, seed=seed, constants=constants)
    except np.linalg.LinAlgError as exc:  # a fit or the sensor selection singular on too few series
        return _undecided(n, tol, f"not enough series: with {n} series a fit of the press analysis is "
                                  f"singular ({exc}); the verdict follows with more series")
    models = {}
    for name, rep in res.models.items():
        tests = rep.test.tests
        models[name] = ModelVerdict(
            name=name, reject=bool(rep.test.reject), alpha_min=np.array([t.alpha_min for t in tests]),
            rejected_splits=np.array([t.reject for t in tests], bool), p=np.asarray(rep.fit_all.p, float),
            std=np.asarray(rep.fit_all.std_errors, float), s2=float(rep.fit_all.s2))
    first = next(iter(res.models.values())).test
    level = first.tests[0].level if first.tests else tol
    chosen = [n for n, w in zip(res.sensor_names, res.selection.omega, strict=True) if w]
    return OnlineVerdict(n_series=n, tol=tol, level=float(level),
                         splits=[t.name for t in first.tests], models=models, sensors=chosen,
                         train_series=res.train_series, test_series=res.test_series, family_tol=family_tol,
                         spending=spending if n_planned is not None else "none", look=look, n_looks=n_looks,
                         provisional=n_planned is not None and n < n_planned)


def _undecided(n: int, tol: float, reason: str) -> OnlineVerdict:
    """A verdict that cannot be computed yet, with its reason in words."""
    return OnlineVerdict(n_series=n, tol=tol, level=float("nan"), splits=[], models={}, sensors=[],
                         train_series=[], test_series=[], undecided=reason)


def look_tol(n: int, n_planned: int, tol: float = 0.05, *, first_look: int = 2,
             spending: str = "obrien-fleming") -> tuple[float, int, int]:
    """(level, look number, number of looks) of the look after ``n`` series, when a verdict is given after
    every series from ``first_look`` to ``n_planned`` (information fraction: series / planned series).

    A look beyond the plan (a plan run longer than planned) has no alpha left: level 0, never rejects.
    """
    if spending not in SPENDING_RULES:
        raise ValueError(f"spending must be one of {SPENDING_RULES}, got {spending!r}")
    first = max(1, int(first_look))
    n_planned = max(int(n_planned), first)
    looks = np.arange(first, n_planned + 1)
    levels = look_levels(looks / n_planned, tol, spending)
    if n < first:
        raise ValueError(f"look after {n} series is before the first planned look ({first})")
    if n > n_planned:
        return 0.0, int(n - first + 1), int(looks.size)
    return float(levels[n - first]), int(n - first + 1), int(looks.size)


def verdict_settled(patterns: list[tuple[str, ...] | None], n: int) -> bool:
    """True when the last ``n`` verdict patterns (rejected model names, one per series; None where no
    verdict was computed) exist and are all equal."""
    if n < 1 or len(patterns) < n:
        return False
    last = patterns[-n:]
    return all(p is not None and p == last[0] for p in last)
