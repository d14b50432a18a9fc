"""PNG plots of a model selection: fits, parameter importance, condition indices, profile likelihood."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from identification.model_selection import SelectionResult

__all__ = ["write_plots"]


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def write_plots(result: SelectionResult, directory: str | Path) -> list[Path]:
    """Write the selection plots into ``directory``; returns the files written."""
    plt = _plt()
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    files: list[Path] = []
    c = result.chosen

    if result.traces:
        fig, axes = plt.subplots(2, 1, figsize=(9, 6), sharex=False)
        for ax, role in zip(axes, ("train", "valid"), strict=True):
            t, y, ym = result.traces[role]
            ax.plot(t, y, lw=0.6, label="measured")
            ax.plot(t, ym, lw=0.6, label=f"model {c.name}")
            fit = c.train_fit if role == "train" else c.valid_fit
            ax.set_title(f"{'training' if role == 'train' else 'validation'}: fit {100 * fit:.2f} %")
            ax.set_xlabel("t [s]")
            ax.set_ylabel("motor speed [rad/s]")
            ax.legend(loc="upper right", fontsize=8)
        fig.tight_layout()
        files.append(_save(fig, out / "fit.png", plt))

    if c is not None:
        idf = c.identifiability
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
        x = np.arange(len(idf.names))
        a1.bar(x, idf.pii_ratio)
        a1.axhline(idf.min_pii_ratio, color="r", ls="--", lw=1, label="threshold")
        a1.set_yscale("log")
        a1.set_xticks(x, idf.names, rotation=45, ha="right", fontsize=8)
        a1.set_ylabel("PII / max PII")
        a1.set_title(f"parameter importance, {c.name}")
        a1.legend(fontsize=8)
        a2.bar(np.arange(idf.condition_indices.size) + 1, idf.condition_indices)
        a2.axhline(idf.max_condition_index, color="r", ls="--", lw=1, label="threshold")
        a2.set_xlabel("index k")
        a2.set_ylabel("scaled condition index")
        a2.set_title(f"condition indices (max {idf.max_ci:.3g})")
        a2.legend(fontsize=8)
        fig.tight_layout()
        files.append(_save(fig, out / "identifiability.png", plt))

    if result.candidates:
        cands = sorted(result.candidates, key=lambda r: -r.valid_fit)
        fig, ax = plt.subplots(figsize=(10, 0.16 * len(cands) + 1.5))
        y = np.arange(len(cands))
        colors = ["tab:green" if r.accepted else "tab:gray" for r in cands]
        ax.barh(y, [100 * max(r.valid_fit, 0.0) for r in cands], color=colors)
        ax.set_yticks(y, [r.name for r in cands], fontsize=6)
        ax.invert_yaxis()
        ax.set_xlabel("validation fit [%] (green: accepted)")
        lo = max(0.0, min(100 * max(r.valid_fit, 0.0) for r in cands))
        ax.set_xlim(lo, 100)
        fig.tight_layout()
        files.append(_save(fig, out / "candidates.png", plt))

    prof = result.profile
    if prof is not None and prof.names:
        n = len(prof.names)
        cols = min(n, 4)
        rows = -(-n // cols)
        fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.6 * rows), squeeze=False)
        bounds = result.settings.get("bounds", {})
        for i, name in enumerate(prof.names):
            ax = axes[i // cols][i % cols]
            ax.plot(prof.grids[i], prof.costs[i] / prof.cost_opt, "o-", ms=3)
            ax.axvline(prof.estimate[i], color="k", ls="--", lw=0.8)
            if name in bounds:
                ax.set_xlim(*bounds[name])
            ax.set_title(f"{name}{'' if prof.clear_minimum[i] else ' (flat)'}", fontsize=9)
            ax.set_ylabel("J / J_opt", fontsize=8)
            ax.tick_params(labelsize=7)
        for j in range(n, rows * cols):
            axes[j // cols][j % cols].axis("off")
        fig.tight_layout()
        files.append(_save(fig, out / "profile_likelihood.png", plt))
    return files


def _save(fig, path: Path, plt) -> Path:
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
