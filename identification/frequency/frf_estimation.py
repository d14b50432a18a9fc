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

__all__ = ["FRFEstimate", "h1_estimate"]


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
