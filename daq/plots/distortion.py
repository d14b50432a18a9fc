"""The nonlinear-distortion plot: the BLA with its noise and distortion variances per line (top), and
the output on the detection lines (bottom)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from identification.frequency.nonlinear_distortion import BLAEstimate, DistortionVerdict


def _db(x: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return 10 * np.log10(np.maximum(np.asarray(x, dtype=float), 1e-300))


def plot_distortion(bla: BLAEstimate, verdict: DistortionVerdict, path: str | Path,
                    output: str = "output", unit: str = "", input_unit: str = "") -> Path:
    """Top: |BLA|^2, the BLA's noise variance and its nonlinear-distortion variance per excited line
    (dB of (output unit / input unit)^2). Bottom: output power per detection line of one period (odd and
    even lines: odd and even distortions) against the noise there. The verdict's band is shaded and its
    statement is the title."""
    import matplotlib  # lazy: heavy, only for plots

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: heavy, only for plots

    path = Path(path)
    g_unit = f"({unit}/{input_unit})^2" if unit and input_unit else ""
    y_unit = f"({unit})^2" if unit and not unit.startswith("(") else unit
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
    top.plot(bla.freq, _db(np.abs(bla.G) ** 2), lw=1, color="k", label="|BLA|^2")
    top.plot(bla.freq, _db(bla.var_noise), ".", ms=3, color="tab:green", label="noise variance of the BLA")
    if np.isfinite(bla.var_nl).any():
        top.plot(bla.freq, _db(bla.var_nl), "x", ms=3, color="tab:red",
                 label="nonlinear-distortion variance of the BLA")
    top.set_ylabel(f"dB {g_unit}".strip())
    ref = float(np.max(_db(np.abs(bla.G) ** 2))) + 10
    top.set_ylim(ref - 140, ref)
    top.legend(fontsize=7, loc="lower left")
    odd = bla.det_odd
    bottom.plot(bla.det_freq[odd], _db(bla.y_nl[odd]), "o", ms=3, mfc="none", color="tab:red",
                label="distortions, odd detection lines")
    bottom.plot(bla.det_freq[~odd], _db(bla.y_nl[~odd]), "s", ms=3, mfc="none", color="tab:purple",
                label="distortions, even detection lines")
    bottom.plot(bla.det_freq, _db(bla.y_noise), ":", lw=0.8, color="tab:green", label="noise, one period")
    finite = _db(np.concatenate([bla.y_nl, bla.y_noise]))
    finite = finite[finite > -290]
    hi = float(np.max(finite)) + 10 if finite.size else 0.0
    bottom.set_ylim(hi - 100, hi)
    bottom.set_ylabel(f"{output} per line [dB {y_unit}]".replace(" []", ""))
    bottom.legend(fontsize=7, loc="lower left")
    for ax in (top, bottom):
        ax.axvspan(*verdict.band, color="0.92", zorder=0)
        ax.set_xscale("log")
    bottom.set_xlabel("frequency [Hz]")
    top.set_title(verdict.statement().split(":")[0], fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
