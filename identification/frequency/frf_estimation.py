"""H1 estimate of frequency response functions from a measured force and responses.

``H1(f) = G_fx(f) / G_ff(f)`` with Welch-averaged cross and auto spectra (scipy.signal.csd and
welch, same window and segments), and the ordinary coherence ``|G_fx|^2 / (G_ff G_xx)`` that
says where the estimate can be trusted (noise on the response only biases nothing in H1; low
coherence marks anti-resonances, leakage and noise).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.signal

__all__ = ["FRFEstimate", "LPMEstimate", "h1_estimate", "lpm_periodic"]


@dataclass
class FRFEstimate:
    freq: np.ndarray  # Hz, (n_freq,)
    H: np.ndarray  # (n_resp, n_freq) complex, response unit per N
    coherence: np.ndarray  # (n_resp, n_freq), 0..1
    n_averages: int


def h1_estimate(force: np.ndarray, responses: np.ndarray, dt: float, nperseg: int = 1024,
                noverlap: int | None = None, window: str = "hann", f_max: float | None = None) -> FRFEstimate:
    """H1 FRFs of every response column (``responses``: (n,) or (n, n_resp)) to the force (n,).

    ``nperseg`` samples per segment (frequency resolution ``1 / (nperseg dt)``), 50 % overlap by
    default; ``f_max`` drops the lines above it.
    """
    f = np.asarray(force, dtype=float).ravel()
    x = np.asarray(responses, dtype=float)
    if x.ndim == 1:
        x = x[:, None]
    if x.shape[0] != f.size:
        raise ValueError("force and responses differ in length")
    nperseg = int(min(nperseg, f.size))
    noverlap = nperseg // 2 if noverlap is None else int(noverlap)
    fs = 1.0 / float(dt)
    kw = dict(fs=fs, window=window, nperseg=nperseg, noverlap=noverlap, detrend=False)
    freq, gff = scipy.signal.welch(f, **kw)
    _, gfx = scipy.signal.csd(f[:, None], x, axis=0, **kw)
    _, gxx = scipy.signal.welch(x, axis=0, **kw)
    with np.errstate(divide="ignore", invalid="ignore"):
        H = (gfx / gff[:, None]).T
        coh = (np.abs(gfx) ** 2 / (gff[:, None] * gxx)).T
    coh = np.nan_to_num(coh.real, nan=0.0)
    keep = slice(None) if f_max is None else freq <= f_max
    n_avg = 1 + max(0, (f.size - nperseg) // max(nperseg - noverlap, 1))
    return FRFEstimate(freq=freq[keep], H=H[:, keep], coherence=coh[:, keep], n_averages=n_avg)


@dataclass
class LPMEstimate:
    """FRFs with a noise variance per line, transients removed (local polynomial method)."""

    freq: np.ndarray  # Hz, (n_freq,) the excited lines
    H: np.ndarray  # (n_resp, n_freq) complex
    var: np.ndarray  # (n_resp, n_freq) noise variance of H (complex: E|dH|^2)
    noise_y: np.ndarray  # (n_resp, n_freq) noise variance of the responses' spectra (record DFT)
    n_periods: int


def lpm_periodic(force: np.ndarray, responses: np.ndarray, dt: float, n_per: int, degree: int = 2,
                 half_width: int | None = None, f_min: float = 0.0, f_max: float | None = None,
                 ) -> LPMEstimate:
    """FRFs of a periodic excitation by the local polynomial method (Pintelon et al. 2011).

    The record (a whole number ``P >= 2`` of periods of ``n_per`` samples, after any settling) is
    transformed at once: the excitation lives on every ``P``-th bin, the bins between hold only noise
    and the leakage of transients (a decaying start, drift). Around each excited bin a polynomial of
    ``degree`` in the bin offset is fitted to the ``2 half_width`` nearest unexcited bins of force and
    responses: its value at the excited bin is the transient there (subtracted), its residuals give the
    noise variances and covariance per line. ``H = (Y - T_y) / (U - T_u)`` with its variance to first
    order (errors in variables). Lines from ``f_min`` to ``f_max`` Hz (default: up to Nyquist).
    """
    f = np.asarray(force, dtype=float).ravel()
    x = np.asarray(responses, dtype=float)
    x = x[:, None] if x.ndim == 1 else x
    if x.shape[0] != f.size:
        raise ValueError("force and responses differ in length")
    P = f.size // int(n_per)
    if P < 2:
        raise ValueError("the local polynomial method needs at least 2 periods")
    n = P * int(n_per)
    U = np.fft.rfft(f[:n])
    Y = np.fft.rfft(x[:n], axis=0)  # (n_bins, n_resp)
    df = 1.0 / (n_per * dt)
    top = 0.5 / dt if f_max is None else f_max
    k = np.arange(1, n_per // 2)
    k = k[(k * df >= f_min) & (k * df <= top)]
    hw = max(degree + 2, 2) if half_width is None else int(half_width)
    free = np.flatnonzero(np.arange(U.size) % P != 0)
    free = free[free > 0]
    Hs, Vs, Ns = [], [], []
    for kk in k:
        l0 = kk * P
        near = free[np.argsort(np.abs(free - l0), kind="stable")[: 2 * hw]]
        X = (near - l0)[:, None] ** np.arange(degree + 1)[None, :] / float(P * hw) ** np.arange(degree + 1)
        pinv = np.linalg.pinv(X)
        Z = np.column_stack([U[near], Y[near]])  # (2 hw, 1 + n_resp)
        coef = pinv @ Z
        res = Z - X @ coef
        dof = max(near.size - (degree + 1), 1)
        C = res.conj().T @ res / dof  # noise covariance of one bin (force first)
        c00 = float(np.real(pinv[0] @ pinv[0].conj()))  # variance factor of the transient estimate
        u0 = U[l0] - coef[0, 0]
        y0 = Y[l0] - coef[0, 1:]
        G = y0 / u0
        Cf = C * (1.0 + c00)
        var = (np.real(np.diag(Cf))[1:] + np.abs(G) ** 2 * np.real(Cf[0, 0])
               - 2 * np.real(np.conj(G) * Cf[0, 1:])) / np.abs(u0) ** 2
        Hs.append(G)
        Vs.append(np.maximum(var, 0.0))
        Ns.append(np.real(np.diag(C))[1:])
    return LPMEstimate(freq=k * df, H=np.array(Hs).T, var=np.array(Vs).T, noise_y=np.array(Ns).T, n_periods=P)
