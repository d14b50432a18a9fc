"""Excitation signals as files: trajectory CSV/NPZ and a plot of one period and the spectrum."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from identification.design.multisine import MultisineResult


def export_trajectory(result: MultisineResult, path: str | Path, peak: float = 1.0,
                      quantity: str = "torque", unit: str = "N*m") -> Path:
    """Write the signal scaled to ``peak`` as CSV (header ``t [s],<quantity> [<unit>]``) or NPZ."""
    path = Path(path)
    t = result.t
    v = result.scale_to_peak(peak)
    if path.suffix.lower() == ".npz":
        np.savez(path, t=t, value=v, dt=result.dt, quantity=quantity, unit=unit,
                 frequencies=result.frequencies, crest_factor=result.crest_factor)
    else:
        with path.open("w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["t [s]", f"{quantity} [{unit}]"])
            for ti, vi in zip(t, v, strict=True):
                w.writerow([f"{ti:.9g}", f"{vi:.9g}"])
    return path


def plot_multisine(result: MultisineResult, path: str | Path, peak: float = 1.0,
                   quantity: str = "torque", unit: str = "N*m") -> Path:
    """PNG with one period in time and the amplitude spectrum of the whole record."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    x = result.scale_to_peak(peak)
    n = x.size
    spec = np.abs(np.fft.rfft(x)) * 2.0 / n
    f = np.fft.rfftfreq(n, result.dt)
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 6))
    m = result.n_per_period
    ax1.plot(result.t[:m], x[:m], lw=0.7)
    ax1.set_xlabel("t [s]")
    ax1.set_ylabel(f"{quantity} [{unit}]")
    ax1.set_title(f"multisine, {result.bins.size} lines, crest factor {result.crest_factor:.3f} "
                  f"(Schroeder {result.crest_factor_schroeder:.3f})")
    fmax = result.frequencies.max() * 1.3
    sel = f <= fmax
    ax2.semilogy(f[sel], np.maximum(spec[sel], 1e-12 * peak), ".", ms=3)
    ax2.set_xlabel("f [Hz]")
    ax2.set_ylabel(f"amplitude [{unit}]")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
