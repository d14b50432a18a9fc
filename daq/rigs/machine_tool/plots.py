"""PNG plots of a machine-tool identification: Sobol indices, FRFs measured vs identified, deviations."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from daq.plots import save_figure
from identification.models.machine_tool_model import MachineTool

__all__ = ["write_plots"]


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def write_plots(result, directory: str | Path) -> list[Path]:
    """``result``: daq.rigs.machine_tool.rig.MTAnalysisResult; returns the files written."""
    plt = _plt()
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    g = result.gsa
    files: list[Path] = []

    # Sobol total indices, mean over the (position, mode) pairs
    fig, ax = plt.subplots(figsize=(11, 4))
    x = np.arange(len(g.names))
    ax.bar(x - 0.2, g.sobol_macxp.ST.mean(axis=0), 0.4, label="MACXP")
    ax.bar(x + 0.2, g.sobol_ndd2.ST.mean(axis=0), 0.4, label="NDD$^2$")
    ax.set_xticks(x, g.names, rotation=90)
    ax.set_ylabel("total Sobol index (mean over pairs)")
    ax.legend()
    files.append(save_figure(fig, out / "sobol.png", dpi=110))

    # measured vs identified accelerance at the driving point, every position
    arr = result.arrays
    model = MachineTool()
    band = (arr.freq >= result.band[0]) & (arr.freq <= result.band[1])
    f = arr.freq[band]
    fig, axes = plt.subplots(len(arr.positions), 1, figsize=(9, 3 * len(arr.positions)), squeeze=False)
    for ax, p, role, H in zip(axes[:, 0], arr.positions, arr.roles, arr.H, strict=True):
        inp = arr.inputs[0]
        k = arr.labels.index(inp)
        Hm = model.frf(g.estimate, p, f, inp, kind="accelerance")[k]
        ax.semilogy(f, np.abs(H[0, k, band]), label="measured (H1)")
        ax.semilogy(f, np.abs(Hm), "--", label="identified model")
        ax.set_title(f"{inp}/{inp} at {1000 * p:.0f} mm ({role})")
        ax.set_ylabel("|H| [m/s$^2$/N]")
        ax.legend()
    axes[-1, 0].set_xlabel("frequency [Hz]")
    files.append(save_figure(fig, out / "frf_overlay.png", dpi=110))

    # parameter deviation from the truth (simulated sessions) or from the box centre's start
    dev = g.relative_deviation()
    ref_label = "truth" if dev is not None else "start"
    if dev is None:
        dev = (g.estimate - g.start) / g.start
    fig, ax = plt.subplots(figsize=(11, 4))
    iv = getattr(g, "intervals", None)
    # 95 % half-widths relative to the reference value (no bar: no interval - not identifiable)
    ref_value = g.truth if g.truth is not None else g.start
    err = None if iv is None else 100 * iv.quantiles * np.nan_to_num(iv.std, nan=0.0) / np.abs(ref_value)
    ax.bar(x, 100 * dev, color=["C0"] * len(g.stiffness_names) + ["C1"] * len(g.damping_names), yerr=err,
           capsize=2, ecolor="0.3")
    ax.axhline(0, color="k", lw=0.8)
    ax.set_xticks(x, g.names, rotation=90)
    ax.set_ylabel(f"deviation from {ref_label} [%]" + ("" if iv is None else ", 95 % interval"))
    files.append(save_figure(fig, out / "parameter_deviation.png", dpi=110))
    return files
