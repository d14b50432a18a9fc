"""Plots of the adjoint input design (convergence, signal, predicted information) and of a fitted run."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from daq.plots import save_figure
from daq.plots.labels import estimate_text
from daq.rigs.adjoint.config import INPUTS, OUTPUTS


def _plt():
    import matplotlib  # lazy: matplotlib only when a plot is drawn

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_design(result, references: dict[str, np.ndarray], stds: dict[str, np.ndarray], folder: str | Path,
                output_unit: str = "", input_label: str = "force [N]") -> list[Path]:
    """convergence.png (cost per iteration), signal.png (designed force with F0 and the sine) and
    information.png (predicted standard deviation of each parameter, relative to its value, per input)."""
    plt = _plt()
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.plot(np.arange(1, len(result.cost_history) + 1), result.cost_history, label="total cost")
    ax.plot(np.arange(1, len(result.info_history) + 1), result.info_history,
            label=f"criterion {result.criterion}")
    ax.set_xlabel("iteration")
    ax.set_ylabel("cost (1)")
    ax.set_title(f"{result.method}: {result.iterations} iterations, {result.n_evaluations} gradient solves")
    ax.legend()
    files.append(save_figure(fig, folder / "convergence.png", dpi=100))

    fig, ax = plt.subplots(figsize=(7, 3.5))
    t = result.t
    ax.step(t, result.u[:, 0], where="post", label="adjoint design")
    for name, u in references.items():
        ax.step(t, u, where="post", alpha=0.6, label=name)
    hi = float(np.asarray(result.bounds[1]).ravel()[0])
    ax.axhline(hi, color="k", ls=":", lw=0.8)
    ax.axhline(-hi, color="k", ls=":", lw=0.8)
    ax.set_xlabel("t [s]")
    ax.set_ylabel(input_label)
    ax.legend(loc="upper right")
    files.append(save_figure(fig, folder / "signal.png", dpi=100))

    fig, ax = plt.subplots(figsize=(7, 3.5))
    names = list(result.param_names)
    width = 0.8 / max(len(stds), 1)
    for i, (label, s) in enumerate(stds.items()):
        ax.bar(np.arange(len(names)) + i * width, np.asarray(s) / np.abs(result.b), width, label=label)
    ax.set_xticks(np.arange(len(names)) + 0.4 - width / 2, names)
    ax.set_yscale("log")
    ax.set_ylabel("predicted std / value (1)")
    ax.set_title("predicted information (smaller = better determined)")
    ax.legend()
    files.append(save_figure(fig, folder / "information.png", dpi=100))
    return files


def plot_analysis(result, rec, folder: str | Path) -> list[Path]:
    """fit.png: the recorded force, the measured output and the fitted model's output with the residual."""
    plt = _plt()
    out, unit = OUTPUTS[result.plant]
    what, in_unit = INPUTS[result.plant]
    fig, axes = plt.subplots(3, 1, figsize=(8, 7), sharex=True)
    axes[0].step(rec.t, rec.force_cmd, where="post", label="command")
    axes[0].plot(rec.t, rec.force, lw=0.8, label="applied")
    axes[0].set_ylabel(f"{what} [{in_unit}]")
    axes[0].legend(loc="upper right")
    axes[1].plot(rec.t, rec.output, lw=0.8, label="measured")
    axes[1].plot(result.t, result.y_fit, lw=0.8, label="fitted model")
    axes[1].set_ylabel(f"{out} [{unit}]")
    axes[1].legend(loc="upper right")
    n = min(result.t.size, rec.t.size)
    step = max(int(round((result.t[1] - result.t[0]) / (rec.t[1] - rec.t[0]))), 1) if n > 1 else 1
    measured = rec.output[::step][:result.y_fit.size]
    axes[2].plot(result.t[:measured.size], measured - result.y_fit[:measured.size], lw=0.6)
    axes[2].set_ylabel(f"residual [{unit}]")
    axes[2].set_xlabel("t [s]")
    est = fit_estimates_text(result)
    axes[0].set_title(f"{result.plant}, {result.design} input: {est}")
    return [save_figure(fig, Path(folder) / "fit.png", dpi=100)]


def fit_estimates_text(result) -> str:
    """The fitted parameters with their std and units for fit.png's title: "c2 = 1.09997 kN/m ± 28 mN/m"."""
    from daq.rigs.adjoint.online import PARAM_UNITS  # lazy: the online estimator (bus, threads); its units

    return ", ".join(estimate_text(n, float(v), float(s), PARAM_UNITS.get(n, ""))
                     for n, v, s in zip(result.names, result.estimate, result.compare_std, strict=True))
