"""Periodic multisine excitation with a low crest factor.

A multisine is a sum of cosines on the FFT grid of one period ``T = N*dt``. Because every
excited frequency is an integer multiple of ``1/T``, a record of whole periods has no
leakage: its DFT is exactly zero outside the requested lines.

The phases are chosen to make the peak small for a given RMS (crest factor
``CF = max|x| / rms(x)``). Two stages:

1. iterative clipping with spectrum restoration: clip the time signal, keep only the
   phases of its spectrum on the excited lines, restore the requested amplitudes;
2. optional L-infinity refinement: minimise the p-norm of the signal over the phases for
   increasing p (4 ... 256) with L-BFGS and an FFT-based analytic gradient; as p grows the
   p-norm approaches the peak value.

The returned signal has **unit peak** (max |x| = 1); :meth:`MultisineResult.scale_to_peak`
gives it in physical units.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import scipy.optimize

__all__ = [
    "MultisineResult",
    "design_multisine",
    "crest_factor",
    "schroeder_phases",
    "multisine_lines",
    "odd_random_phase_lines",
    "random_phase_realisations",
]


@dataclass
class MultisineResult:
    """A designed multisine. ``signal`` has unit peak; amplitudes match that scaling."""

    signal: np.ndarray  # n_periods * n_per_period samples, unit peak
    dt: float  # sample time, s
    period: float  # one period, s
    n_per_period: int  # samples per period
    n_periods: int
    bins: np.ndarray  # excited DFT bins of one period (integers)
    frequencies: np.ndarray  # Hz, = bins / period
    amplitudes: np.ndarray  # cosine amplitudes of the unit-peak signal
    phases: np.ndarray  # rad
    crest_factor: float
    crest_factor_schroeder: float
    crest_factor_random: float
    history: list[float] = field(default_factory=list)  # best crest factor after each stage

    @property
    def t(self) -> np.ndarray:
        """Time axis of :attr:`signal`, s."""
        return np.arange(self.signal.size) * self.dt

    @property
    def rms(self) -> float:
        return float(np.sqrt(np.mean(self.signal**2)))

    def scale_to_peak(self, limit: float) -> np.ndarray:
        """Signal scaled so that its peak magnitude equals ``limit`` (e.g. a torque limit in N*m)."""
        return self.signal * float(limit)

    def to_dict(self) -> dict:
        """JSON-friendly summary (without the sample values)."""
        return {
            "dt": self.dt,
            "period": self.period,
            "n_per_period": self.n_per_period,
            "n_periods": self.n_periods,
            "frequencies": self.frequencies.tolist(),
            "amplitudes": self.amplitudes.tolist(),
            "phases": self.phases.tolist(),
            "crest_factor": self.crest_factor,
            "crest_factor_schroeder": self.crest_factor_schroeder,
            "crest_factor_random": self.crest_factor_random,
        }


def crest_factor(x: np.ndarray) -> float:
    """Peak magnitude over RMS."""
    x = np.asarray(x, dtype=float)
    return float(np.max(np.abs(x)) / np.sqrt(np.mean(x**2)))


def schroeder_phases(amplitudes: np.ndarray) -> np.ndarray:
    """Schroeder's phases for an arbitrary power spectrum (flat: phi_k = -pi k^2 / n)."""
    a2 = np.asarray(amplitudes, dtype=float) ** 2
    p = a2 / a2.sum()
    n = p.size
    phases = np.zeros(n)
    for k in range(1, n):
        phases[k] = -2 * np.pi * np.sum((k - np.arange(k)) * p[:k])
    return np.mod(phases, 2 * np.pi)


def multisine_lines(f_min: float, f_max: float, n_lines: int, dt: float, grid: str = "lin",
                    odd_only: bool = False, period: float | None = None) -> tuple[int, np.ndarray]:
    """Samples per period and excited DFT bins for the requested band and grid.

    Without ``period`` the frequency resolution is chosen so that ``n_lines`` lines fit the band
    (linear: equal spacing; log: the densest log step still gets distinct bins). With
    ``odd_only`` all bins are odd (even harmonics stay free to detect nonlinear distortion).
    """
    if not (0 < f_min < f_max):
        raise ValueError("need 0 < f_min < f_max")
    if n_lines < 1:
        raise ValueError("n_lines must be >= 1")
    if f_max >= 0.5 / dt:
        raise ValueError(f"f_max={f_max} Hz is not below the Nyquist frequency {0.5 / dt} Hz")
    if grid not in ("lin", "log"):
        raise ValueError("grid must be 'lin' or 'log'")
    step = 2 if odd_only else 1
    if period is None:
        if grid == "lin":
            df = min((f_max - f_min) / max(n_lines - 1, 1) / step, f_min)
        else:
            # log: resolution f_min (bins start at 1); the densest low end becomes consecutive bins,
            # refined only as far as needed to fit n_lines distinct bins into the band
            df = f_min
            while (f_max - f_min) / df / step + 1 < n_lines:
                df /= 2
        n_per = int(round(1.0 / (df * dt)))
    else:
        n_per = int(round(period / dt))
    df = 1.0 / (n_per * dt)
    k_lo = int(math.ceil(f_min / df - 1e-9))
    k_hi = int(math.floor(f_max / df + 1e-9))
    if odd_only:
        k_lo += 1 - k_lo % 2
        k_hi -= 1 - k_hi % 2
    available = np.arange(k_lo, k_hi + 1, step)
    if available.size < n_lines:
        raise ValueError(f"only {available.size} bins in the band for this period; lower n_lines")
    if grid == "lin":
        target = np.linspace(k_lo, k_hi, n_lines)
    else:
        target = np.geomspace(k_lo, k_hi, n_lines)
    # greedy, monotone assignment of distinct available bins closest to the targets
    bins = np.empty(n_lines, dtype=int)
    pos = 0
    for i, tk in enumerate(target):
        j = int(np.searchsorted(available, tk))
        cand = [c for c in (j - 1, j) if pos <= c < available.size]
        c = min(cand, key=lambda c: abs(available[c] - tk)) if cand else pos
        c = max(c, pos)
        c = min(c, available.size - (n_lines - i))  # leave room for the remaining lines
        bins[i] = available[c]
        pos = c + 1
    return n_per, bins


def _synth(n_per: int, bins: np.ndarray, amps: np.ndarray, phases: np.ndarray) -> np.ndarray:
    spec = np.zeros(n_per // 2 + 1, dtype=complex)
    spec[bins] = amps * np.exp(1j * phases) * (n_per / 2.0)
    return np.fft.irfft(spec, n_per)


def _clip_restore(n_per, bins, amps, phases, max_iter, rng) -> tuple[np.ndarray, float]:
    """Iterative clipping with spectrum restoration; returns the best phases and their CF."""
    best_ph = phases.copy()
    best_cf = crest_factor(_synth(n_per, bins, amps, phases))
    ph = phases.copy()
    level = 0.9
    for _ in range(max_iter):
        x = _synth(n_per, bins, amps, ph)
        peak = np.max(np.abs(x))
        rms = np.sqrt(np.mean(x**2))
        cf = peak / rms
        if cf < best_cf - 1e-12:
            best_cf, best_ph = cf, ph.copy()
        clip = max(level * peak, 1.2 * rms)
        xc = np.clip(x, -clip, clip)
        ph = np.angle(np.fft.rfft(xc)[bins])
    return best_ph, float(best_cf)


def _pnorm_refine(n_per, bins, amps, phases, p_list, maxiter) -> np.ndarray:
    """Minimise log ||x||_p over the phases for each p in turn (L-BFGS, analytic gradient)."""
    ph = phases.copy()

    for p in p_list:
        def fun(phi, p=p):
            x = _synth(n_per, bins, amps, phi)
            peak = np.max(np.abs(x))
            r = np.abs(x) / peak
            rp = r**p
            s = rp.sum()
            val = math.log(peak) + math.log(s) / p
            g = np.sign(x) * rp / (np.abs(x) + 1e-300) / s  # d val / d x_n
            G = np.fft.rfft(g)[bins]
            grad = -amps * np.imag(np.exp(1j * phi) * np.conj(G))
            return val, grad

        res = scipy.optimize.minimize(fun, ph, jac=True, method="L-BFGS-B",
                                      options={"maxiter": maxiter})
        ph = np.mod(res.x, 2 * np.pi)
    return ph


def design_multisine(f_min: float, f_max: float, n_lines: int, dt: float, n_periods: int = 1,
                     grid: str = "lin", odd_only: bool = False, amplitudes: np.ndarray | None = None,
                     seed: int = 0, max_iter: int = 300, method: str = "clip+pnorm",
                     period: float | None = None, n_restarts: int = 1) -> MultisineResult:
    """Design a leakage-free multisine with minimised crest factor.

    ``amplitudes`` (length ``n_lines``) shapes the amplitude spectrum (default flat).
    ``method``: ``"schroeder"`` (no optimisation), ``"clip"`` (clipping with spectrum
    restoration), ``"clip+pnorm"`` (clipping, then p-norm/L-infinity refinement).
    ``n_restarts`` random-phase starts are optimised and the best kept. Returns a unit-peak signal.
    """
    if n_periods < 1:
        raise ValueError("n_periods must be >= 1")
    if method not in ("schroeder", "clip", "clip+pnorm"):
        raise ValueError("method must be 'schroeder', 'clip' or 'clip+pnorm'")
    n_per, bins = multisine_lines(f_min, f_max, n_lines, dt, grid, odd_only, period)
    if amplitudes is None:
        amps = np.ones(n_lines)
    else:
        amps = np.asarray(amplitudes, dtype=float).ravel()
        if amps.size != n_lines or np.any(amps < 0) or not np.any(amps > 0):
            raise ValueError("amplitudes must be n_lines non-negative values, not all zero")
    rng = np.random.default_rng(seed)
    ph_schroeder = schroeder_phases(amps)
    cf_schroeder = crest_factor(_synth(n_per, bins, amps, ph_schroeder))
    ph_random = rng.uniform(0, 2 * np.pi, n_lines)
    cf_random = crest_factor(_synth(n_per, bins, amps, ph_random))
    history = [cf_schroeder]

    best_ph, best_cf = ph_schroeder, cf_schroeder
    if method != "schroeder":
        starts = [ph_schroeder] + [rng.uniform(0, 2 * np.pi, n_lines) for _ in range(max(n_restarts, 1) - 1)]
        for start in starts:
            ph, cf = _clip_restore(n_per, bins, amps, start, max_iter, rng)
            if method == "clip+pnorm":
                ph = _pnorm_refine(n_per, bins, amps, ph, (4, 8, 16, 32, 64, 128, 256), maxiter=200)
                cf = crest_factor(_synth(n_per, bins, amps, ph))
            history.append(cf)
            if cf < best_cf:
                best_ph, best_cf = ph, cf

    x = _synth(n_per, bins, amps, best_ph)
    peak = np.max(np.abs(x))
    signal = np.tile(x / peak, n_periods)
    return MultisineResult(
        signal=signal, dt=float(dt), period=n_per * dt, n_per_period=n_per, n_periods=int(n_periods),
        bins=bins, frequencies=bins / (n_per * dt), amplitudes=amps / peak, phases=np.mod(best_ph, 2 * np.pi),
        crest_factor=crest_factor(signal), crest_factor_schroeder=float(cf_schroeder),
        crest_factor_random=float(cf_random), history=history,
    )


def odd_random_phase_lines(n_per: int, dt: float, f_min: float, f_max: float, group: int = 4,
                           seed: int = 0) -> np.ndarray:
    """Excited bins of an odd random-phase multisine with detection lines.

    Of the odd bins in ``[f_min, f_max]`` one in every ``group`` consecutive ones (chosen at random) stays
    unexcited, like all even bins: there a linear plant's output holds only noise, so the odd (odd bins)
    and even (even bins) nonlinear distortions show (Pintelon and Schoukens).
    """
    if group < 2:
        raise ValueError("group must be >= 2 (one detection line per group)")
    df = 1.0 / (n_per * dt)
    k_lo = max(int(math.ceil(f_min / df - 1e-9)), 1)
    k_hi = min(int(math.floor(f_max / df + 1e-9)), n_per // 2 - 1)
    odd = np.arange(k_lo + 1 - k_lo % 2, k_hi + 1, 2)
    if odd.size < group:
        raise ValueError(f"only {odd.size} odd bins in {f_min:g}-{f_max:g} Hz; lengthen the period")
    rng = np.random.default_rng(seed)
    keep = np.ones(odd.size, dtype=bool)
    for start in range(0, odd.size - group + 1, group):
        keep[start + rng.integers(group)] = False
    return odd[keep]


def random_phase_realisations(n_per: int, bins: np.ndarray, n_realisations: int, seed: int = 0,
                              amplitudes: np.ndarray | None = None) -> np.ndarray:
    """``n_realisations`` periods (n_realisations, n_per) of multisines on ``bins`` with independent
    uniform random phases and the same amplitude spectrum (flat by default), each of unit RMS."""
    bins = np.asarray(bins, dtype=int)
    amps = np.ones(bins.size) if amplitudes is None else np.asarray(amplitudes, dtype=float)
    rng = np.random.default_rng(seed)
    out = np.empty((int(n_realisations), int(n_per)))
    for m in range(out.shape[0]):
        x = _synth(n_per, bins, amps, rng.uniform(0, 2 * np.pi, bins.size))
        out[m] = x / np.sqrt(np.mean(x**2))
    return out
