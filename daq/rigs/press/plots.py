"""Plots of the press analysis (matplotlib Agg, PNG files into a given directory)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from daq.plots import save_figure  # noqa: E402
from identification.estimation.ellipsoid import confidence_ellipsoid  # noqa: E402

_save = save_figure  # lay out, write, close


def plot_force_displacement(
    z: np.ndarray,
    q: np.ndarray,
    model_curves: dict[str, np.ndarray],
    out_dir: str | Path,
    *,
    sensor_names: tuple[str, ...] = ("D_vertical", "F_horizontal", "B0_vertical"),
    series: list[int] | None = None,
    filename: str = "press_force_displacement.png",
) -> Path:
    """Measured force-displacement loops (markers) with model outputs (lines), one panel per sensor.

    model_curves: {model name: displacements (n_series, n_setpoints, n_sensors) in m for the same forces}.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    series = list(range(z.shape[0])) if series is None else series
    fig, axes = plt.subplots(1, z.shape[2], figsize=(5 * z.shape[2], 4), squeeze=False)
    for k, ax in enumerate(axes[0]):
        for i in series:
            ax.plot(q[i] / 1e3, z[i, :, k] * 1e6, "k.", ms=3, label="measured" if i == series[0] else None)
        for name, zm in model_curves.items():
            i = series[-1]
            ax.plot(q[i] / 1e3, zm[i, :, k] * 1e6, "-", lw=1.2, label=name)
        ax.set_xlabel("process force q_P [kN]")
        ax.set_ylabel(f"{sensor_names[k]} [um]")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    return _save(fig, out / filename)


def plot_estimates(
    result,
    out_dir: str | Path,
    *,
    filename: str = "press_estimates.png",
) -> Path:
    """Calibration/validation estimates (k5, k7) with confidence ellipses at the Bonferroni level, per model.

    ``result`` is a ``PressAnalysisResult``; one panel per model, one colour per split. Solid: the region the
    test uses (around the calibration estimate, with the covariance of the difference: calibration +
    validation + trained friction coefficients), so "keep" means the validation cross lies inside the
    solid curve. Dashed: the calibration estimate's own ellipse; dotted: the validation estimate's own
    ellipse.
    """
    from matplotlib.lines import Line2D

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    models = list(result.models.values())
    fig, axes = plt.subplots(1, len(models), figsize=(5 * len(models), 4.8), squeeze=False)
    for ax, rep in zip(axes[0], models, strict=True):
        colors = plt.cm.tab10.colors  # type: ignore[attr-defined]  # a ListedColormap; matplotlib says Colormap
        for t, color in zip(rep.test.tests, colors, strict=False):
            C_test = test_region_covariance(t, rep.test.compare)
            curves = ((t.p_cal, C_test, "-"), (t.p_cal, t.C_cal, "--"), (t.p_val, t.C_val, ":"))
            for centre, C, style in curves:
                b = confidence_ellipsoid(centre, C, t.level).boundary_2d()
                ax.plot(b[:, 0] / 1e6, b[:, 1] / 1e6, style, color=color, lw=1)
            ax.plot(t.p_cal[0] / 1e6, t.p_cal[1] / 1e6, "o", color=color, ms=4,
                    label=f"{t.name}{' (reject)' if t.reject else ''}")
            ax.plot(t.p_val[0] / 1e6, t.p_val[1] / 1e6, "x", color=color, ms=6)
        ax.set_title(f"{rep.name} ({'reject' if rep.test.reject else 'keep'})")
        ax.set_xlabel("k5 [N/um]")
        ax.set_ylabel("k7 [N/um]")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, loc="upper left")
    keys = [Line2D([], [], color="k", ls="-", label="test region (cal + val + training covariance)"),
            Line2D([], [], color="k", ls="--", label="calibration estimate (o) and its ellipse"),
            Line2D([], [], color="k", ls=":", marker="x", label="validation estimate (x) and its ellipse")]
    fig.legend(handles=keys, loc="lower center", ncol=3, fontsize=8)
    fig.tight_layout(rect=(0, 0.07, 1, 1))  # room for the shared legend under the x labels
    path = out / filename
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def test_region_covariance(t, compare: str) -> np.ndarray:
    """The covariance the model-uncertainty test compares p_val - p_cal with (what the solid curve shows)."""
    C = t.C_cal + t.C_val if compare == "difference" else t.C_cal
    return C + t.C_training if t.C_training is not None else C


def write_plots(result, z: np.ndarray, q: np.ndarray, out_dir) -> list:
    """Force-displacement loops of the test series with every model, and the estimates with ellipses."""
    return [plot_force_displacement(z, q, result.model_curves, out_dir, sensor_names=result.sensor_names,
                                    series=result.test_series),
            plot_estimates(result, out_dir)]
