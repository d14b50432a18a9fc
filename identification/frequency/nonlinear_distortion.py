"""Is a linear model enough? The best linear approximation (BLA) and its nonlinear distortions, from data.

The robust method of Pintelon and Schoukens (System Identification: a Frequency Domain Approach, ch. 3-4):
the plant is driven by ``M`` odd random-phase multisines (independent phases, the same amplitude
spectrum), each applied for ``P`` steady-state periods. Some odd lines and all even lines in the band
stay unexcited: there a linear plant's output holds only noise, a nonlinear plant's also its odd
(odd lines) or even (even lines) distortions.

Per realisation ``m`` and line ``k`` (DFT of each period):

- the mean over the periods ``Ym, Um``, and the sample variance over the periods (the noise: it changes
  from period to period, the nonlinear distortions of a periodic excitation do not);
- excited lines: ``G_m = Ym / Um`` with its noise variance; the BLA is the mean of ``G_m`` over the
  realisations, its total variance their scatter / M, its noise variance the mean of the noise variances
  / M, and the difference the variance of the stochastic nonlinear distortions;
- detection lines: the power of ``Ym`` against its noise variance.

Both give F-distributed statistics under a linear plant with Gaussian noise (excited lines:
``F(2(M-1), 2M(P-1))``, detection lines: ``F(2, 2(P-1))``); their p-values are combined with Fisher's
method into one test whose false-alarm rate is ``alpha``. The levels are referred to the output of one
period of one realisation: ``level_db`` is the nonlinear distortion power over the noise power there.
The periods must be in steady state (discard the settling periods): a transient looks like a
distortion to this test.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from identification.estimation.distributions import chi2_sf, f_sf

__all__ = ["BLAEstimate", "DistortionVerdict", "best_linear_approximation", "distortion_verdict",
           "distortion_from_records", "excited_lines", "remove_trend"]


@dataclass
class BLAEstimate:
    """The BLA on the excited lines and the output spectra on the detection lines (one output)."""

    freq: np.ndarray  # Hz, excited lines
    G: np.ndarray  # complex BLA, output unit per input unit
    var_noise: np.ndarray  # noise variance of G (after averaging M x P periods)
    var_nl: np.ndarray  # variance of the stochastic nonlinear distortions of G (mean of M); NaN if M = 1
    det_freq: np.ndarray  # Hz, detection lines (unexcited odd and even lines in the band)
    det_odd: np.ndarray  # bool per detection line: odd line (odd nonlinearities show there)
    y_nl: np.ndarray  # output distortion power per detection line, one period (noise subtracted)
    y_noise: np.ndarray  # output noise variance per detection line, one period
    yx_nl: np.ndarray  # output distortion variance per excited line, one realisation (from var_nl)
    yx_noise: np.ndarray  # output noise variance per excited line, one period
    p_lines: np.ndarray  # p-value per excited line (NaN if M = 1)
    p_det: np.ndarray  # p-value per detection line (over the realisations)
    n_realisations: int
    n_periods: int


@dataclass
class DistortionVerdict:
    """One answer: are there nonlinear distortions above the noise, how large, where."""

    detected: bool
    p_value: float
    level_db: float  # distortion power over noise power, one period, in ``band``; upper bound if not detected
    band: tuple[float, float]  # Hz
    alpha: float

    def statement(self) -> str:
        lo, hi = self.band
        if self.detected:
            rel = "above" if self.level_db >= 0 else "below"
            return (f"nonlinear distortions {abs(self.level_db):.0f} dB {rel} the noise from {lo:.3g} to "
                    f"{hi:.3g} Hz ({_p_text(self.p_value)}): a linear model leaves them in its residuals")
        return (f"no nonlinear distortions detected from {lo:.3g} to {hi:.3g} Hz ({_p_text(self.p_value)}, "
                f"level < {self.level_db:.0f} dB against the noise): a linear model can be adequate")

    def to_dict(self) -> dict:
        return {"detected": bool(self.detected), "level_db": _finite(self.level_db),
                "band": [float(self.band[0]), float(self.band[1])], "p_value": float(self.p_value),
                "alpha": float(self.alpha), "statement": self.statement()}


def _finite(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


def _p_text(p: float) -> str:
    return "p < 1e-6" if p < 1e-6 else f"p = {p:.2g}"


def _spectra(x: np.ndarray) -> np.ndarray:
    """DFT per period of ``x`` (M, P, N) (one-sided, scaled by 1/N)."""
    return np.fft.rfft(np.asarray(x, dtype=float), axis=-1) / x.shape[-1]


def best_linear_approximation(u: np.ndarray, y: np.ndarray, dt: float, excited: np.ndarray,
                              band: tuple[float, float] | None = None) -> BLAEstimate:
    """BLA, noise and nonlinear variances per line from steady-state periods (robust method).

    ``u``, ``y``: (M realisations, P periods, N samples per period) of the input and one output;
    ``excited``: the excited DFT bins of one period. Detection lines are the unexcited bins between the
    lowest and highest excited bin (or in ``band``, Hz). Needs P >= 2; the excited-line variances need M >= 2.
    """
    u, y = np.asarray(u, dtype=float), np.asarray(y, dtype=float)
    if u.ndim != 3 or u.shape != y.shape:
        raise ValueError("u and y must both be (realisations, periods, samples per period)")
    M, P, N = u.shape
    if P < 2:
        raise ValueError("need at least 2 periods per realisation to see the noise")
    excited = np.unique(np.asarray(excited, dtype=int))
    df = 1.0 / (N * dt)
    U, Y = _spectra(u), _spectra(y)
    Um, Ym = U.mean(axis=1), Y.mean(axis=1)  # (M, n_bins)
    dU, dY = U - Um[:, None], Y - Ym[:, None]
    var_y = np.sum(np.abs(dY) ** 2, axis=1) / (P - 1)  # one period, per realisation
    # excited lines: G per realisation and its noise variance (errors in variables, linearised)
    Ue, Ye = Um[:, excited], Ym[:, excited]
    Gm = Ye / Ue
    dE = dY[:, :, excited] - Gm[:, None] * dU[:, :, excited]
    var_gm = np.sum(np.abs(dE) ** 2, axis=1) / (P - 1) / P / np.abs(Ue) ** 2  # of G_m (mean of P)
    G = Gm.mean(axis=0)
    var_noise = var_gm.mean(axis=0) / M
    if M >= 2:
        var_total = np.sum(np.abs(Gm - G) ** 2, axis=0) / (M - 1) / M
        var_nl = np.maximum(var_total - var_noise, 0.0)
        F = var_total / var_noise
        p_lines = f_sf(F, 2 * (M - 1), 2 * M * (P - 1))
    else:
        var_nl = np.full(excited.size, np.nan)
        p_lines = np.full(excited.size, np.nan)
    u_pow = np.mean(np.abs(Ue) ** 2, axis=0)
    yx_nl = M * var_nl * u_pow
    yx_noise = P * var_noise * M * u_pow
    # detection lines
    lo_bin, hi_bin = excited[0], excited[-1]
    if band is not None:
        lo_bin, hi_bin = int(np.ceil(band[0] / df - 1e-9)), int(np.floor(band[1] / df + 1e-9))
    det = np.setdiff1d(np.arange(max(lo_bin, 1), hi_bin + 1), excited)
    Fd = P * np.abs(Ym[:, det]) ** 2 / var_y[:, det]  # (M, n_det), F(2, 2(P-1)) under a linear plant
    pd = f_sf(Fd, 2, 2 * (P - 1))
    p_det = chi2_sf(-2 * np.sum(np.log(np.maximum(pd, 1e-300)), axis=0), 2 * M)
    y_noise = var_y[:, det].mean(axis=0)
    y_nl = np.maximum(np.mean(np.abs(Ym[:, det]) ** 2, axis=0) - y_noise / P, 0.0)
    return BLAEstimate(freq=excited * df, G=G, var_noise=var_noise, var_nl=var_nl, det_freq=det * df,
                       det_odd=det % 2 == 1, y_nl=y_nl, y_noise=y_noise, yx_nl=yx_nl, yx_noise=yx_noise,
                       p_lines=p_lines, p_det=p_det, n_realisations=M, n_periods=P)


def _fisher(p: np.ndarray, dof_per: int) -> float:
    """Fisher's combination of independent p-values (each over ``dof_per / 2`` tests combined already)."""
    p = p[np.isfinite(p)]
    if p.size == 0:
        return 1.0
    return float(chi2_sf(-2 * np.sum(np.log(np.maximum(p, 1e-300))), 2 * p.size))


def distortion_verdict(bla: BLAEstimate, alpha: float = 0.01, line_alpha: float = 1e-3) -> DistortionVerdict:
    """Detected when Fisher's combination of every line's p-value falls below ``alpha``.

    The band runs from the lowest to the highest line whose own p-value falls below ``line_alpha``
    (Bonferroni over the lines); ``level_db`` is the distortion over the noise power of one period,
    summed over the lines in that band (excited and detection lines). Not detected: the band is the
    tested one and ``level_db`` an upper bound (the estimate plus two of its standard errors).
    """
    p_all = np.concatenate([bla.p_lines, bla.p_det])
    p = _fisher(p_all, 2)
    detected = p < alpha
    f_all = np.concatenate([bla.freq, bla.det_freq])
    nl = np.concatenate([np.nan_to_num(bla.yx_nl), bla.y_nl])
    noise = np.concatenate([bla.yx_noise, bla.y_noise])
    n_ok = np.isfinite(p_all).sum()
    sig = np.isfinite(p_all) & (p_all < line_alpha / max(n_ok, 1))
    if detected and sig.any():
        band = (float(f_all[sig].min()), float(f_all[sig].max()))
    else:
        band = (float(f_all.min()), float(f_all.max()))
    inb = (f_all >= band[0]) & (f_all <= band[1])
    ratio = nl[inb].sum() / noise[inb].sum()
    if detected:
        level = 10 * np.log10(ratio) if ratio > 0 else -np.inf
    else:
        # the ratio's sampling error: each line's power estimate has a relative std of about 1 / sqrt(M)
        se = np.sqrt(np.sum(noise[inb] ** 2) / bla.n_realisations) / noise[inb].sum()
        level = 10 * np.log10(ratio + 2 * se)
    return DistortionVerdict(detected=bool(detected), p_value=p, level_db=float(level), band=band,
                             alpha=alpha)


def excited_lines(u: np.ndarray, rel: float = 1e-2) -> np.ndarray:
    """The excited DFT bins of one period, read from the measured input ``u`` (realisations, periods,
    samples): the bins whose mean power is above ``rel`` times the median power of the strongest tenth
    of the bins (a flat-spectrum multisine's lines sit there; noise lies many decades below).
    For a rig whose source designs its own lines: the analysis takes them from what it measured."""
    power = np.mean(np.abs(_spectra(np.asarray(u, dtype=float))) ** 2, axis=(0, 1))
    power[0] = 0.0
    top = np.sort(power)[-max(power.size // 10, 1):]
    return np.flatnonzero(power > rel * np.median(top))


def remove_trend(x: np.ndarray, degree: int) -> np.ndarray:
    """``x`` (P periods, N samples) less the polynomial trend of ``degree`` (1..) in time over the record.

    What is left of a slow transient after the settling periods (a lightly damped rigid-body mode, a
    drift) is close to a low-degree polynomial over the few measured periods; the periodic part is not.
    The trend is fitted to what the periodic part cannot explain: the record less its mean period
    (the periodic part's least-squares estimate) against the basis treated the same way, so a periodic
    signal passes unchanged and a polynomial trend is removed exactly.
    """
    x = np.asarray(x, dtype=float)
    P, N = x.shape
    if degree < 1 or P < 2:
        return x.copy()
    t = np.linspace(-1.0, 1.0, P * N).reshape(P, N)
    basis = np.stack([t**d for d in range(1, degree + 1)])  # (degree, P, N)
    r = (x - x.mean(axis=0)).ravel()
    B = (basis - basis.mean(axis=1, keepdims=True)).reshape(degree, -1).T
    coef = np.linalg.lstsq(B, r, rcond=None)[0]
    return x - np.tensordot(coef, basis, axes=1)


def distortion_from_records(u: list[np.ndarray], y: list[np.ndarray], dt: float, n_per: int,
                            excited: np.ndarray, settle: int = 1, alpha: float = 0.01,
                            trend_degree: int = 0) -> tuple[BLAEstimate, DistortionVerdict]:
    """One call for a rig: ``u[m]``, ``y[m]`` are the records of realisation ``m`` (the same excited
    ``excited`` bins, whole periods of ``n_per`` samples); the first ``settle`` periods are dropped, and
    with ``trend_degree`` > 0 a polynomial trend of that degree over the kept periods (what is left of a
    slow transient, :func:`remove_trend`). ``verdict.to_dict()`` is the ``nonlinear_distortion`` field of
    an analysis."""
    us, ys = [], []
    for a, b in zip(u, y, strict=True):
        a, b = np.asarray(a, dtype=float).ravel(), np.asarray(b, dtype=float).ravel()
        P = a.size // n_per - settle
        if P < 2 or b.size != a.size:
            raise ValueError("each record needs the settling periods plus at least 2 whole periods")
        us.append(remove_trend(a[settle * n_per : (settle + P) * n_per].reshape(P, n_per), trend_degree))
        ys.append(remove_trend(b[settle * n_per : (settle + P) * n_per].reshape(P, n_per), trend_degree))
    P = min(x.shape[0] for x in us)
    bla = best_linear_approximation(np.array([x[:P] for x in us]), np.array([x[:P] for x in ys]), dt, excited)
    return bla, distortion_verdict(bla, alpha=alpha)
