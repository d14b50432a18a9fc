"""Are a fitted model's intervals to be trusted? Residual checks, and a covariance for coloured residuals.

The classic covariance of a least-squares estimate, ``sigma2 (S^T S)^-1``, assumes the model structure is
right and the residuals white. When the structure lacks an effect of the plant (the crane truth's Stribeck
friction, which no candidate model has) the residuals carry the missing effect: they are correlated in
time and with the input, the classic intervals are too narrow, and the estimate converges to the best
wrong-model value, not to the truth. Two things here:

* :func:`residual_adequacy` - the model-adequacy check of MATLAB's ``resid`` on (validation) residuals:
  whiteness (Ljung-Box portmanteau over ``lags`` autocorrelations) and independence of the input
  (cross-correlations of residual and input at lags 0..``lags``, whose covariance under independence is
  the input's own autocorrelation, so the statistic ``n r^T R_u^-1 r`` is chi-square with lags + 1 dof
  whatever the input's colour). The two p-values form one family (Bonferroni).
* :func:`hac_covariance` - the sandwich (Huber-White) covariance with a Newey-West (Bartlett kernel)
  estimate of the long-run covariance of the scores ``S_t r_t``, bandwidth by Andrews' (1991) AR(1)
  plug-in rule: ``(S^T S)^-1 Omega (S^T S)^-1``. It stays honest under coloured noise; under a structure
  error it covers the best wrong-model value, which can still lie far from the truth - so a failed
  adequacy check marks every interval as not valid rather than trusting any of them.

:func:`interval_report` puts both intervals side by side with the check's verdict.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import scipy.linalg

from identification.estimation.distributions import chi2_sf, norm_isf

__all__ = ["AdequacyResult", "residual_adequacy", "ljung_box", "input_correlation_test", "hac_covariance",
           "NoiseCovariance", "noise_covariance", "input_basis",
           "IntervalReport", "interval_report", "INADEQUATE"]

INADEQUATE = ("model inadequate / residuals coloured: intervals from the model covariance are too narrow "
              "(and the estimate is the best value of a wrong structure, so no interval is trusted to "
              "contain the true value)")


def _acf(e: np.ndarray, lags: int) -> np.ndarray:
    e = e - e.mean()
    den = float(e @ e)
    if den == 0:
        return np.zeros(lags)
    return np.array([float(e[:-k] @ e[k:]) / den for k in range(1, lags + 1)])


def ljung_box(e: np.ndarray, lags: int = 25) -> tuple[float, float]:
    """Ljung-Box ``Q = n (n + 2) sum_k r_k^2 / (n - k)`` over lags 1..``lags`` and its chi-square p-value."""
    e = np.asarray(e, float).ravel()
    n = e.size
    lags = int(min(lags, n - 2))
    r = _acf(e, lags)
    q = float(n * (n + 2) * np.sum(r**2 / (n - np.arange(1, lags + 1))))
    return q, float(chi2_sf(q, lags))


def input_correlation_test(e: np.ndarray, u: np.ndarray, lags: int = 25) -> tuple[float, float]:
    """Residual-input cross-correlation at lags 0..``lags`` (input leading): statistic and p-value.

    Under "residuals white and independent of the input", ``sqrt(n) r_eu`` is normal with covariance
    the input's autocorrelation matrix, so ``n r^T R_u^-1 r`` is chi-square with ``lags + 1`` dof.
    """
    e = np.asarray(e, float).ravel()
    u = np.asarray(u, float).ravel()[: e.size]
    e = e - e.mean()
    u = u - u.mean()
    n = e.size
    lags = int(min(lags, n - 2))
    se, su = np.sqrt(e @ e), np.sqrt(u @ u)
    if se == 0 or su == 0:
        return 0.0, 1.0
    r = np.array([float(e[k:] @ u[: n - k]) for k in range(lags + 1)]) / (se * su)
    ru = np.concatenate([[1.0], _acf(u, lags)])
    R = scipy.linalg.toeplitz(ru)
    stat = float(n * r @ np.linalg.lstsq(R, r, rcond=1e-10)[0])
    return stat, float(chi2_sf(stat, lags + 1))


@dataclass
class AdequacyResult:
    """Whiteness and input-independence of residuals, one family at level ``level``."""

    n: int
    lags: int
    level: float
    q_whiteness: float
    p_whiteness: float
    q_input: float | None
    p_input: float | None
    acf: np.ndarray  # residual autocorrelation at lags 1..lags
    reasons: list[str] = field(default_factory=list)

    @property
    def p_value(self) -> float:
        """Bonferroni-combined p-value of the two checks (the whiteness one alone without an input)."""
        ps = [p for p in (self.p_whiteness, self.p_input) if p is not None]
        return float(min(1.0, len(ps) * min(ps)))

    @property
    def residuals_white(self) -> bool:
        ps = [p for p in (self.p_whiteness, self.p_input) if p is not None]
        return self.p_whiteness >= self.level / len(ps)

    @property
    def intervals_valid(self) -> bool:
        """The checks pass: the model and its residual assumptions are not contradicted by the data."""
        return self.p_value >= self.level

    @property
    def statement(self) -> str:
        if self.intervals_valid:
            return (f"residuals white and independent of the input (p = {self.p_value:.3g} >= "
                    f"{self.level:g}): "
                    "the model-based intervals apply")
        return INADEQUATE + " - " + "; ".join(self.reasons)

    def to_dict(self) -> dict:
        return {"residuals_white": bool(self.residuals_white), "p_value": self.p_value,
                "intervals_valid": bool(self.intervals_valid), "p_whiteness": self.p_whiteness,
                "p_input_correlation": self.p_input, "q_whiteness": self.q_whiteness, "q_input": self.q_input,
                "lags": self.lags, "n": self.n, "level": self.level,
                "acf": [float(x) for x in self.acf[:10]], "statement": self.statement}


def residual_adequacy(e: np.ndarray, u: np.ndarray | None = None, lags: int = 25,
                      level: float = 0.05, stride: int = 1) -> AdequacyResult:
    """Whiteness (Ljung-Box) of residuals ``e`` and, given the input ``u`` on the same grid, their
    independence of it; each check at ``level / n_checks``.

    ``stride``: judge every ``stride``-th residual only. A sensor's own noise may be correlated from one
    sample to the next (a speed differenced from encoder counts has MA(1) quantisation noise), which the
    robust covariance absorbs and which says nothing about the model; a structure error is slow (its
    residual follows the plant's dynamics over milliseconds), so it survives the thinning.
    """
    e = np.asarray(e, float).ravel()
    stride = max(1, int(stride))
    if u is not None:
        u = np.asarray(u, float).ravel()[: e.size]
        ok = np.isfinite(e[: u.size])
        e, u = e[: u.size][ok][::stride], u[ok][::stride]
    else:
        e = e[np.isfinite(e)][::stride]
    if e.size < 3 * lags:
        lags = max(1, e.size // 3)
    q, p = ljung_box(e, lags)
    qi = pi = None
    if u is not None:
        qi, pi = input_correlation_test(e, u, lags)
    res = AdequacyResult(n=int(e.size), lags=int(lags), level=float(level), q_whiteness=q, p_whiteness=p,
                         q_input=qi, p_input=pi, acf=_acf(e, lags))
    k = 1 if pi is None else 2
    if p < level / k:
        res.reasons.append(f"residuals coloured (Ljung-Box over {lags} lags p = {p:.2g}; lag-1 "
                           f"autocorrelation {res.acf[0]:.3f})")
    if pi is not None and pi < level / k:
        res.reasons.append(f"residuals correlated with the input (p = {pi:.2g}): dynamics the model lacks")
    return res


def _andrews_bandwidth(G: np.ndarray) -> float:
    """Andrews' (1991) AR(1) plug-in bandwidth of the Bartlett kernel for the score series G (n, p)."""
    n = G.shape[0]
    num = den = 0.0
    for g in G.T:
        g = g - g.mean()
        d = float(g[:-1] @ g[:-1])
        if d <= 0:
            continue
        rho = float(np.clip(g[1:] @ g[:-1] / d, -0.97, 0.97))
        s2 = float(np.mean((g[1:] - rho * g[:-1]) ** 2))
        num += 4 * rho**2 * s2**2 / ((1 - rho) ** 6 * (1 + rho) ** 2)
        den += s2**2 / (1 - rho) ** 4
    a1 = num / den if den > 0 else 0.0
    return float(min(1.1447 * (a1 * n) ** (1 / 3), n / 4))


def _bartlett_long_run(G: np.ndarray, L: float) -> np.ndarray:
    """``sum_|l|<=L (1 - |l|/(L+1)) sum_t g_t g_{t+l}^T`` of the score series G (n, p); PSD for any L."""
    Omega = G.T @ G
    for lag in range(1, int(np.floor(L)) + 1):
        w = 1.0 - lag / (L + 1.0)
        Gam = G[lag:].T @ G[:-lag]
        Omega += w * (Gam + Gam.T)
    return Omega


def hac_covariance(S: np.ndarray, r: np.ndarray, bandwidth: float | None = None,
                   runs: Sequence[int] | None = None) -> tuple[np.ndarray, float]:
    """Newey-West sandwich covariance of a least-squares estimate with output sensitivity ``S`` (n, p) and
    residuals ``r`` (n,): ``(S^T S)^-1 Omega (S^T S)^-1``,
    ``Omega = sum_|l|<=L (1 - |l|/(L+1)) sum_t g_t g_{t+l}^T``
    with ``g_t = S_t r_t`` (scaled by n / (n - p)). Returns (covariance, bandwidth L).

    ``runs``: lengths of consecutive independent records stacked in ``S`` and ``r`` (several runs of a
    rig): the lag sums stay inside each record, and each gets its own bandwidth (the largest is returned).
    The Bartlett weights keep every record's ``Omega`` positive semi-definite, also when the scores are
    negatively correlated from sample to sample (a speed differenced from encoder counts), where the
    truncated sum removes the white-noise part that cancels over time; the AR(1) plug-in rule grows with
    ``rho^2``, so a negative lag-1 correlation widens the window as a positive one does."""
    S = np.asarray(S, float)
    r = np.asarray(r, float).ravel()
    n, p = S.shape
    G = S * r[:, None]
    sizes = [n] if runs is None else [int(k) for k in runs]
    if sum(sizes) != n:
        raise ValueError(f"run lengths {sizes} do not add up to the {n} residuals")
    Omega, L, i = np.zeros((p, p)), 0.0, 0
    for k in sizes:
        if k == 0:
            continue
        Gk = G[i:i + k]
        i += k
        Lk = (_andrews_bandwidth(Gk) if k > 2 else 0.0) if bandwidth is None else float(bandwidth)
        Omega += _bartlett_long_run(Gk, Lk)
        L = max(L, Lk)
    Omega *= n / max(n - p, 1)
    d = np.linalg.norm(S, axis=0)
    d = np.where(d > 0, d, 1.0)
    Sn = S / d
    try:
        A = np.linalg.inv(Sn.T @ Sn) / np.outer(d, d)
    except np.linalg.LinAlgError:
        return np.full((p, p), np.nan), L
    C = A @ Omega @ A
    return 0.5 * (C + C.T), L


@dataclass
class IntervalReport:
    """Model-based and robust (HAC) intervals of one fit, with the adequacy check that says which to trust."""

    names: list[str]
    values: np.ndarray
    std_model: np.ndarray
    std_robust: np.ndarray
    level: float
    bandwidth: float
    adequacy: AdequacyResult
    units: dict[str, str] = field(default_factory=dict)
    step_bias: np.ndarray | None = None  # parameter shift caused by the model's time step (parameter units)
    step_note: str = ""

    @property
    def step_bias_std(self) -> np.ndarray | None:
        """|step bias| in robust standard deviations (None: not checked)."""
        if self.step_bias is None:
            return None
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.abs(self.step_bias) / self.std_robust

    @property
    def z(self) -> float:
        return float(norm_isf((1 - self.level) / 2))

    def interval(self, robust: bool = True) -> np.ndarray:
        s = self.std_robust if robust else self.std_model
        return np.stack([self.values - self.z * s, self.values + self.z * s], axis=1)

    @property
    def step_ok(self) -> bool:
        """The model's time step shifts no parameter by more than one robust std (or was not checked)."""
        b = self.step_bias_std
        return b is None or bool(np.all(np.nan_to_num(b, nan=np.inf) <= 1.0))

    @property
    def intervals_valid(self) -> bool:
        return self.adequacy.intervals_valid and self.step_ok

    @property
    def statement(self) -> str:
        parts = [] if self.adequacy.intervals_valid else [self.adequacy.statement]
        if not self.step_ok:
            b = self.step_bias_std
            assert b is not None  # step_ok is False only with a step bias
            j = int(np.nanargmax(b))
            parts.append(f"the model's time step biases the estimate by up to {b[j]:.2g} std "
                         f"({self.names[j]}); "
                         f"{self.step_note}: the intervals are too narrow")
        return "; ".join(parts) if parts else self.adequacy.statement

    @property
    def identifiable(self) -> dict[str, bool]:
        """Identifiable only with valid intervals and a finite robust interval that excludes no-effect
        ambiguity (robust rel. std < 50 %)."""
        ok = self.intervals_valid
        return {n: bool(ok and np.isfinite(s) and s < 0.5 * abs(v))
                for n, v, s in zip(self.names, self.values, self.std_robust, strict=True)}

    def ci95(self, robust: bool = True) -> dict[str, list[float | None]]:
        iv = self.interval(robust)
        return {n: [_f(a), _f(b)] for n, (a, b) in zip(self.names, iv, strict=True)}

    def to_dict(self) -> dict:
        bias_std = self.step_bias_std  # None exactly when there is no step bias
        return {"level": self.level, "ci95": self.ci95(True), "ci95_model": self.ci95(False),
                "std_model": [_f(x) for x in self.std_model], "std_robust": [_f(x) for x in self.std_robust],
                "hac_bandwidth": self.bandwidth, "identifiable": self.identifiable,
                "adequacy": self.adequacy_dict(),
                "step_bias_std": None if bias_std is None else [_f(x) for x in bias_std]}

    def adequacy_dict(self) -> dict:
        """The adequacy check; ``intervals_valid`` also needs the time-step check to pass."""
        d = self.adequacy.to_dict()
        d.update(intervals_valid=bool(self.intervals_valid), statement=self.statement, step_ok=self.step_ok)
        return d

    def format_table(self) -> str:
        head = (f"{100 * self.level:g} % intervals: model covariance (white residuals, right structure) and "
                f"robust (Newey-West sandwich, bandwidth {self.bandwidth:.1f} samples)")
        lines = [head, f"{'parameter':<16} {'estimate':>11} {'model lo':>11} {'model hi':>11} "
                       f"{'robust lo':>11} "
                       f"{'robust hi':>11} {'robust/model':>12}  identifiable"]
        im, ir = self.interval(False), self.interval(True)
        idf = self.identifiable
        for j, n in enumerate(self.names):
            ratio = self.std_robust[j] / self.std_model[j] if self.std_model[j] > 0 else float("nan")
            unit = f" [{self.units[n]}]" if self.units.get(n) else ""
            lines.append(f"{n:<16} {self.values[j]:>11.5g} {im[j, 0]:>11.5g} {im[j, 1]:>11.5g} "
                         f"{ir[j, 0]:>11.5g} {ir[j, 1]:>11.5g} {ratio:>12.3g}  "
                         f"{'yes' if idf[n] else ('not graded' if not self.intervals_valid else 'no')}{unit}")
        bias_std = self.step_bias_std  # None exactly when there is no step bias
        if bias_std is not None:
            lines.append("time-step bias / robust std: " + ", ".join(
                f"{n} {b:.2g}" for n, b in zip(self.names, bias_std, strict=True)))
        lines.append("adequacy (validation residuals): " + self.statement)
        return "\n".join(lines)


def _f(x) -> float | None:
    x = float(x)
    return x if np.isfinite(x) else None


def interval_report(names: Sequence[str], values: np.ndarray, S: np.ndarray, r: np.ndarray,
                    adequacy: AdequacyResult, level: float = 0.95, bandwidth: float | None = None,
                    units: dict[str, str] | None = None, step_error: np.ndarray | None = None,
                    step_note: str = "") -> IntervalReport:
    """Both intervals of a fit with sensitivity ``S`` (n, p; physical units) and residuals ``r`` (training),
    judged by ``adequacy`` (from :func:`residual_adequacy`, on validation residuals).

    ``step_error``: the model output at the estimate minus the same model on a finer time step, on the
    training samples. Its least-squares projection on ``S`` is the shift of the estimate that the coarse
    step causes - a structure error of the numerics that the residual checks cannot see when it is
    small against the noise; more than one robust std makes the intervals not valid."""
    S = np.asarray(S, float)
    r = np.asarray(r, float).ravel()
    n, p = S.shape
    sigma2 = float(r @ r) / max(n - p, 1)
    d = np.linalg.norm(S, axis=0)
    d = np.where(d > 0, d, 1.0)
    try:
        sv = np.linalg.svd(S / d, compute_uv=False)
        if sv[-1] < 1e-7 * sv[0]:
            raise np.linalg.LinAlgError("singular")
        C = sigma2 * np.linalg.inv((S / d).T @ (S / d)) / np.outer(d, d)
        std_m = np.sqrt(np.clip(np.diag(C), 0, None))
    except np.linalg.LinAlgError:
        std_m = np.full(p, np.nan)
    Cr, L = hac_covariance(S, r, bandwidth)
    dr = np.diag(Cr)
    std_r = np.sqrt(np.where(dr >= 0, dr, np.nan))
    bias = None
    if step_error is not None:
        de = np.asarray(step_error, float).ravel()[:n]
        bias = -np.linalg.lstsq(S[: de.size], de, rcond=None)[0]
    return IntervalReport(names=list(names), values=np.asarray(values, float), std_model=std_m,
                          std_robust=std_r,
                          level=float(level), bandwidth=float(L), adequacy=adequacy, units=dict(units or {}),
                          step_bias=bias, step_note=step_note)


# ------------------------------------------------------------ noise std: model error taken out (issue 21)


def input_basis(u: np.ndarray, n: int, hold: int = 1, memory: float = 1 / 3) -> np.ndarray:
    """Regressors of the input's linear response (n, k): a constant and the input delayed by 0, ``hold``,
    2 ``hold``, ... samples, over ``memory`` of the record (a fraction). ``hold``: the samples one input
    value is held for - a delay finer than that adds no new column to a held input."""
    u = np.asarray(u, float).ravel()[:n]
    u = np.concatenate([u - u.mean(), np.zeros(n - u.size)])
    hold = max(1, int(hold))
    k = max(1, int(memory * n / hold))
    cols = [np.ones(n)] + [np.concatenate([np.zeros(j * hold), u[: n - j * hold]]) for j in range(k)]
    return np.stack(cols, axis=1)


@dataclass
class NoiseCovariance:
    """Covariance of an estimate from the record's noise alone (:func:`noise_covariance`).

    ``explained``: share of the residual's sum of squares the input's linear response takes out (model
    error, and the noise that happens to lie along the regressors); ``correction``: per parameter, the
    variance factor that puts back what the clean-up takes from noise of the estimated colour (>= 1)."""

    cov: np.ndarray
    bandwidth: float
    explained: float
    correction: np.ndarray
    n_basis: int

    @property
    def std(self) -> np.ndarray:
        d = np.diag(self.cov)
        return np.sqrt(np.where(d >= 0, d, np.nan))


def _coloured_noise(acov: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """A Gaussian series of length n with autocovariance ``acov`` (lags 0..L, zero beyond): circulant
    embedding, negative spectral lines (rounding) set to zero."""
    m = 1 << int(np.ceil(np.log2(2 * n)))
    c = np.zeros(m)
    c[: acov.size] = acov
    c[m - acov.size + 1:] = acov[1:][::-1]
    lam = np.clip(np.fft.fft(c).real, 0.0, None)
    z = rng.standard_normal(m) + 1j * rng.standard_normal(m)
    return np.fft.fft(np.sqrt(lam / m) * z).real[:n]


def _bartlett_acov(e: np.ndarray, L: float) -> np.ndarray:
    """Bartlett-weighted sample autocovariance of e at lags 0..floor(L) (a positive semi-definite
    sequence)."""
    n = e.size
    lags = np.arange(int(np.floor(L)) + 1)
    c = np.array([float(e[k:] @ e[: n - k]) / n for k in lags])
    return c * (1.0 - lags / (L + 1.0))


def _sandwich_toeplitz(S: np.ndarray, acov: np.ndarray, sizes: Sequence[int]) -> np.ndarray:
    """``A S^T Sigma S A`` for noise of autocovariance ``acov`` inside each run (independent runs),
    ``A = (S^T S)^-1``: the covariance such noise gives a least-squares estimate."""
    p = S.shape[1]
    M, i = np.zeros((p, p)), 0
    for k in sizes:
        Sk = S[i:i + k]
        i += k
        M += acov[0] * Sk.T @ Sk
        for lag in range(1, min(acov.size, k)):
            X = Sk[lag:].T @ Sk[:-lag]
            M += acov[lag] * (X + X.T)
    A = np.linalg.inv(S.T @ S)
    return A @ M @ A


def noise_covariance(S: np.ndarray, r: np.ndarray, u: np.ndarray, *, hold: int = 1, memory: float = 1 / 3,
                     runs: Sequence[int] | None = None, draws: int = 16, seed: int = 0) -> NoiseCovariance:
    """Covariance of a least-squares estimate from the record's noise alone, the model error taken out.

    ``S`` (n, p): output sensitivities at the estimate, ``r`` (n,): residuals, ``u``: the input on the same
    samples (runs stacked, ``runs`` their lengths). The part of the residual that the input explains is
    not noise but the model's misfit (dynamics the model lacks; :func:`input_correlation_test` tests the
    same thing): it does not scatter the estimate between repeated runs, it biases it. So the residual is
    first regressed on the input's linear response (:func:`input_basis`, per run) and the Newey-West
    sandwich (:func:`hac_covariance`) is taken with what is left. The clean-up also takes away the noise
    that lies along the regressors - in the band that carries the information, so the sandwich would
    come out too narrow: ``draws`` series of noise with the cleaned residual's own (Bartlett-weighted)
    autocovariance go through the same clean-up and sandwich (seeded), and each parameter's variance is
    scaled by the exact variance over the mean of the draws' (never below 1: the result is never
    smaller than what the noise alone explains).

    What it is not: a bound on the error against the truth - the model error's bias is outside it, and
    whether intervals from it are valid stays with :func:`residual_adequacy`."""
    S = np.asarray(S, float)
    r = np.asarray(r, float).ravel()
    u = np.asarray(u, float).ravel()
    n, p = S.shape
    sizes = [n] if runs is None else [int(k) for k in runs]
    if sum(sizes) != n:
        raise ValueError(f"run lengths {sizes} do not add up to the {n} residuals")
    blocks, i = [], 0
    for k in sizes:
        blocks.append(input_basis(u[i:i + k], k, hold, memory))
        i += k
    X = scipy.linalg.block_diag(*blocks)
    # projector on the regressors from their Gram matrix (a QR of the tall basis is several times slower);
    # directions with no input in them (rank) are dropped
    w, V = np.linalg.eigh(X.T @ X)
    keep = w > 1e-10 * w.max()
    B = V[:, keep] / np.sqrt(w[keep])  # X B has orthonormal columns
    XB = X @ B
    n_basis = int(keep.sum())

    def clean(e: np.ndarray) -> np.ndarray:
        return e - XB @ (XB.T @ e)

    e = clean(r)
    explained = 1.0 - float(e @ e) / float(r @ r) if float(r @ r) > 0 else 0.0
    scale = n / max(n - n_basis - p, 1)  # degrees of freedom the clean-up and the fit used
    cov, L = hac_covariance(S, e * np.sqrt(scale), runs=sizes)
    # the clean-up's bias for noise of this colour, by simulation
    acov = np.zeros(int(np.floor(L)) + 1)
    i = 0
    for k in sizes:
        acov += _bartlett_acov(e[i:i + k] * np.sqrt(scale), L) * k / n
        i += k
    exact = np.diag(_sandwich_toeplitz(S, acov, sizes))
    rng = np.random.default_rng(seed)
    got = np.zeros(p)
    for _ in range(draws):
        z = np.concatenate([_coloured_noise(acov, k, rng) for k in sizes])
        c, _ = hac_covariance(S, clean(z) * np.sqrt(scale), bandwidth=L, runs=sizes)
        got += np.diag(c) / draws
    with np.errstate(divide="ignore", invalid="ignore"):
        corr = np.where(got > 0, np.maximum(exact / got, 1.0), 1.0)
    d = np.sqrt(corr)
    return NoiseCovariance(cov=cov * np.outer(d, d), bandwidth=float(L), explained=explained, correction=corr,
                           n_basis=n_basis)
