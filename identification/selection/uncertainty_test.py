"""Detection of model uncertainty (paper Algorithm 1): normality check, calibration/validation splits,
chi-square p-values alpha_min and a Bonferroni-corrected decision.

A model is rejected when, for any split, the estimate from the validation data lies outside the
confidence ellipsoid G(TOL/n_tests, p_cal, C_cal) of the calibration estimate. The Bonferroni level keeps
the family-wise false-rejection rate of a correct model at or below TOL.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from scipy.stats import norm, shapiro

from identification.estimation.ellipsoid import alpha_min as _alpha_min


@dataclass
class NormalityRow:
    sensor: str
    W: float
    p_value: float
    sigma: float  # repeatability sigma estimated from the paired differences (std / sqrt 2), m
    n: int
    normal: bool  # not rejected at level alpha

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def paired_differences(z: np.ndarray) -> np.ndarray:
    """z[series, setpoint, sensor] -> differences (z2-z1, z4-z3, ...) stacked per sensor: (n_pairs*n_q, n_s).

    Paired repeated series share the true value, so the differences carry noise only (mean zero).
    """
    z = np.asarray(z, float)
    n_pairs = z.shape[0] // 2
    d = z[1 : 2 * n_pairs : 2] - z[0 : 2 * n_pairs : 2]
    return d.reshape(-1, z.shape[2])


def shapiro_table(
    z: np.ndarray, sensor_names: tuple[str, ...] | None = None, alpha: float = 0.05
) -> list[NormalityRow]:
    """Shapiro-Wilk test of the paired differences of repeated series, one row per sensor."""
    d = paired_differences(z)
    names = sensor_names or tuple(f"sensor{k + 1}" for k in range(d.shape[1]))
    rows = []
    for k, name in enumerate(names):
        res = shapiro(d[:, k])
        rows.append(NormalityRow(sensor=name, W=float(res.statistic), p_value=float(res.pvalue),
                                 sigma=float(np.std(d[:, k], ddof=1) / np.sqrt(2)), n=d.shape[0],
                                 normal=bool(res.pvalue >= alpha)))
    return rows


def press_scenarios(n_setpoints: int = 29) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The four splits of Table 3 as 0-based setpoint indices (unloaded first/last setpoints dropped).

    With n_up = (n_setpoints - 1) // 2 steps, 1-based: loading halves {2,4,..,n_up} vs {3,5,..,n_up+1};
    unloading halves {n_up+1, n_up+3, ..} vs {n_up+2, ..}; loading {2..n_up} vs unloading {n_up+1..n-1};
    alternating {3,5,..,n-2} vs {2,4,..,n-1}. For 29 setpoints these are exactly the paper's sets.
    """
    n = n_setpoints
    peak = (n - 1) // 2 + 1  # 1-based index of the maximum force (15 for 29 setpoints)
    one = lambda a, b, step=1: np.arange(a, b + 1, step) - 1  # noqa: E731 (1-based inclusive -> 0-based)
    return {
        "loading halves": (one(2, peak - 1, 2), one(3, peak, 2)),
        "unloading halves": (one(peak, n - 2, 2), one(peak + 1, n - 1, 2)),
        "loading vs unloading": (one(2, peak - 1), one(peak, n - 1)),
        "alternating": (one(3, n - 2, 2), one(2, n - 1, 2)),
    }


def random_splits(
    n_setpoints: int, n_splits: int, rng: np.random.Generator
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Monte-Carlo cross-validation splits: random halves of setpoints 2..n-1 (1-based)."""
    idx = np.arange(1, n_setpoints - 1)
    out = {}
    for i in range(n_splits):
        perm = rng.permutation(idx)
        h = idx.size // 2
        out[f"random {i + 1}"] = (np.sort(perm[:h]), np.sort(perm[h:]))
    return out


@dataclass
class SplitTest:
    name: str
    alpha_min: float
    level: float  # Bonferroni level TOL / n_tests
    reject: bool
    p_cal: np.ndarray
    C_cal: np.ndarray
    p_val: np.ndarray
    C_val: np.ndarray
    C_training: np.ndarray | None = None  # covariance of p_val - p_cal from trained model coefficients

    def to_dict(self) -> dict:
        extra = {} if self.C_training is None else {"C_training": self.C_training.tolist()}
        return {"name": self.name, "alpha_min": self.alpha_min, "level": self.level, "reject": self.reject,
                "p_cal": self.p_cal.tolist(), "C_cal": self.C_cal.tolist(), "p_val": self.p_val.tolist(),
                "C_val": self.C_val.tolist(), **extra}


@dataclass
class UncertaintyTestResult:
    tol: float
    n_tests: int
    compare: str = "difference"
    tests: list[SplitTest] = field(default_factory=list)

    @property
    def reject(self) -> bool:
        """True if any split rejects (model uncertainty detected)."""
        return any(t.reject for t in self.tests)

    def to_dict(self) -> dict:
        return {"tol": self.tol, "n_tests": self.n_tests, "compare": self.compare, "reject": self.reject,
                "tests": [t.to_dict() for t in self.tests]}


def run_uncertainty_test(
    fit_subset: Callable[[np.ndarray], tuple],
    splits: dict[str, tuple[np.ndarray, np.ndarray]],
    tol: float = 0.05,
    compare: str = "difference",
    nuisance_cov: np.ndarray | None = None,
) -> UncertaintyTestResult:
    """Algorithm 1 from line 06: for each split fit calibration and validation sets, compare by alpha_min.

    ``fit_subset(indices)`` returns (p, C) estimated from the data at those setpoint indices. All splits
    form one family: level = tol / len(splits). All splits are evaluated (no early stop) for the report.
    ``compare="difference"`` uses C_cal + C_val (both estimates are noisy and independent; nominal error
    rate), ``compare="calibration"`` uses C_cal alone as in the paper (anti-conservative: about twice the
    chi-square statistic under a correct model).

    Models with coefficients trained on other data (the friction models) carry that training error into
    both estimates alike. Give its covariance as ``nuisance_cov`` and let ``fit_subset`` return
    (p, C, G) with G = dp/dc: the comparison then adds (G_val - G_cal) nuisance_cov (G_val - G_cal)^T,
    the part of the training error that moves the two estimates apart.
    """
    if compare not in ("difference", "calibration"):
        raise ValueError("compare must be 'difference' or 'calibration'")
    n_tests = len(splits)
    level = tol / n_tests
    res = UncertaintyTestResult(tol=tol, n_tests=n_tests, compare=compare)
    for name, (cal, val) in splits.items():
        p_c, C_c, *g_c = fit_subset(np.asarray(cal))
        p_v, C_v, *g_v = fit_subset(np.asarray(val))
        C_train = np.zeros_like(np.asarray(C_c, float))
        if nuisance_cov is not None and g_c and g_v and np.size(nuisance_cov):
            dG = np.asarray(g_v[0]) - np.asarray(g_c[0])
            C_train = dG @ np.asarray(nuisance_cov) @ dG.T
        try:
            a = _alpha_min(p_c, np.asarray(C_c) + C_train, p_v, C_v if compare == "difference" else None)
        except np.linalg.LinAlgError:
            a = float("nan")
        res.tests.append(SplitTest(name=name, alpha_min=a, level=level, reject=bool(a < level),
                                   p_cal=np.asarray(p_c), C_cal=np.asarray(C_c), p_val=np.asarray(p_v),
                                   C_val=np.asarray(C_v), C_training=C_train))
    return res


# ------------------------------------------------------------------------- several looks at growing data
#: alpha-spending rules for interim looks: "none" spends the full level at every look (no control)
SPENDING_RULES = ("none", "bonferroni", "obrien-fleming", "pocock")


def spent_alpha(t: np.ndarray | float, tol: float, rule: str = "obrien-fleming") -> np.ndarray:
    """Cumulative alpha spent by information fraction ``t`` in (0, 1] (Lan-DeMets spending functions).

    O'Brien-Fleming type: 2 (1 - Phi(z_{1-tol/2} / sqrt(t))), almost nothing early, nearly all at the end;
    Pocock type: tol ln(1 + (e - 1) t), about even over the looks. Both spend exactly ``tol`` at t = 1.
    """
    t = np.clip(np.asarray(t, float), 0.0, 1.0)
    if rule == "obrien-fleming":
        with np.errstate(divide="ignore"):
            return np.where(t > 0, 2.0 * norm.sf(norm.isf(tol / 2.0) / np.sqrt(np.where(t > 0, t, 1.0))), 0.0)
    if rule == "pocock":
        return tol * np.log1p((np.e - 1.0) * t)
    raise ValueError(f"no spending function for rule {rule!r}")


def look_levels(fractions, tol: float = 0.05, rule: str = "obrien-fleming") -> np.ndarray:
    """Family level of each look (before the split family's own Bonferroni), for looks at information
    fractions ``fractions`` (increasing, e.g. series so far / planned series).

    ``none``: ``tol`` at every look (the family-wise rate over the looks grows with their number);
    ``bonferroni``: ``tol / n_looks``; ``obrien-fleming``/``pocock``: the increments of the spending
    function, alpha(t_k) - alpha(t_{k-1}). The levels of the three controlled rules add up to at most
    ``tol``, so by Bonferroni's inequality over the looks the probability that a correct model is
    rejected at any look is at most ``tol`` whatever the correlation between the looks.
    """
    f = np.asarray(fractions, float).ravel()
    if f.size and (np.any(np.diff(f) <= 0) or f[0] <= 0 or f[-1] > 1 + 1e-12):
        raise ValueError(f"look fractions must increase within (0, 1], got {f.tolist()}")
    if rule == "none":
        return np.full(f.size, float(tol))
    if rule == "bonferroni":
        return np.full(f.size, float(tol) / max(f.size, 1))
    cum = spent_alpha(f, tol, rule)
    return np.diff(np.concatenate([[0.0], cum]))
