"""The nonlinear-distortion plot: output power per line (signal, noise, distortions)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from identification.frequency.nonlinear_distortion import BLAEstimate, DistortionVerdict


def _db(x: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return 10 * np.log10(np.maximum(np.asarray(x, dtype=float), 1e-300))


def plot_distortion(bla: BLAEstimate, verdict: DistortionVerdict, path: str | Path,
                    output: str = "output", unit: str = "") -> Path:
    """Output power per line of one period (dB): the linear part on the excited lines, the noise, and the
    nonlinear distortions on the excited lines (variance over the realisations) and the detection lines
    (odd and even); the verdict in the title."""
    import matplotlib  # lazy: heavy, only for plots

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: heavy, only for plots

    path = Path(path)
    u_pow = bla.yx_noise / np.maximum(bla.n_periods * bla.var_noise * bla.n_realisations, 1e-300)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.plot(bla.freq, _db(np.abs(bla.G) ** 2 * u_pow), lw=1, color="k", label="linear part (BLA)")
    ax.plot(bla.freq, _db(bla.yx_noise), lw=0.8, color="tab:green", label="noise (excited lines)")
    if np.isfinite(bla.yx_nl).any():
        ax.plot(bla.freq, _db(bla.yx_nl), ".", ms=3, color="tab:red", label="distortions (excited lines)")
    odd = bla.det_odd
    ax.plot(bla.det_freq[odd], _db(bla.y_nl[odd]), "o", ms=3, mfc="none", color="tab:red",
            label="distortions, odd detection lines")
    ax.plot(bla.det_freq[~odd], _db(bla.y_nl[~odd]), "s", ms=3, mfc="none", color="tab:purple",
            label="distortions, even detection lines")
    ax.plot(bla.det_freq, _db(bla.y_noise), ":", lw=0.8, color="tab:green", label="noise (detection lines)")
    ax.axvspan(*verdict.band, color="0.9", zorder=0)
    ax.set_xscale("log")
    ax.set_xlabel("frequency [Hz]")
    ax.set_ylabel(f"{output} power per line, one period [dB{' ' + unit if unit else ''}]")
    ax.set_title(verdict.statement().split(":")[0], fontsize=9)
    finite = _db(np.abs(bla.G) ** 2 * u_pow)
    top = float(np.max(finite)) + 10
    ax.set_ylim(top - 120, top)
    ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
