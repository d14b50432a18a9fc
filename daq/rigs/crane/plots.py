"""PNG plots of a model selection: fits, parameter importance, condition indices, profile likelihoods."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from identification.models.drive_models import PARAM_UNITS
from identification.selection.model_selection import SelectionResult

__all__ = ["write_plots", "plot_profiles"]


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
        assert c is not None  # the traces are the chosen model's
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

    if result.profile is not None and result.profile.names:
        files.append(plot_profiles(result.profile, out / "profile_likelihood.png",
                                   title=f"profile likelihood, {c.name if c else ''}"))
    return files


def plot_profiles(prof, path: str | Path, title: str = "") -> Path:
    """One panel per parameter: the traced LR statistic, the chi-square threshold, the optimum, the
    profile-interval ends, and the Fisher matrix's quadratic approximation ``((p - p_opt) / se)^2``
    (it crosses the threshold at the Fisher interval's ends)."""
    from matplotlib.ticker import MaxNLocator

    plt = _plt()
    n = len(prof.names)
    cols = min(n, 4)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols, 2.8 * rows + 0.6), squeeze=False)
    thr = prof.threshold
    for i, name in enumerate(prof.names):
        ax = axes[i // cols][i % cols]
        g, lr, est = prof.grids[i], prof.lr[i], float(prof.estimate[i])
        lo, hi = prof.interval[i]
        se = prof.fisher_se[i]
        span = [x for x in (g.min(), g.max(), lo, hi) if x is not None]
        if se is not None:
            span += [est - 2.5 * se, est + 2.5 * se]
        x0, x1 = min(span), max(span)
        pad = 0.05 * (x1 - x0 or abs(est) or 1.0)
        x0, x1 = x0 - pad, x1 + pad
        top = max(1.6 * thr, min(float(np.max(lr)) * 1.1, 4 * thr))
        if se is not None and se > 0:
            xs = np.linspace(x0, x1, 200)
            ax.plot(xs, ((xs - est) / se) ** 2, color="tab:gray", lw=1, ls=":", label="Fisher (quadratic)")
        ax.plot(g, lr, "o", ms=4, color="tab:blue", label="profile (re-fitted points)")
        ax.axhline(thr, color="tab:red", ls="--", lw=1, label=f"chi2(1) {100 * prof.level:g} % = {thr:.2f}")
        ax.axvline(est, color="k", lw=0.8, label="optimum")
        for x in (lo, hi):
            if x is not None:
                ax.axvline(x, color="tab:green", lw=1, label="profile interval")
        for x, side, st in ((lo, "lower", prof.side_status[i][0]), (hi, "upper", prof.side_status[i][1])):
            if x is None:
                at = st == "at bound"
                ax.text(0.02 if side == "lower" else 0.98, 0.92, "at bound" if at else f"open ({st})",
                        transform=ax.transAxes, ha="left" if side == "lower" else "right", va="top",
                        fontsize=7, color="tab:gray" if at else "tab:red")
            if st in ("bound", "at bound"):  # the search bound the trace ended on
                ax.axvline(g[0] if side == "lower" else g[-1], color="tab:gray", ls="-.", lw=0.8)
        ax.set_xlim(x0, x1)
        ax.set_ylim(0, top)
        unit = PARAM_UNITS.get(name, "")
        ax.set_xlabel(f"{name} [{unit}]" if unit else name, fontsize=8)
        ax.set_ylabel("LR = 2 dJ / sigma^2", fontsize=8)
        ax.set_title(f"{name}: {prof.verdict(i)}", fontsize=9)
        ax.tick_params(labelsize=7)
        ax.xaxis.set_major_locator(MaxNLocator(4))
        ax.ticklabel_format(axis="x", style="sci", scilimits=(-3, 4), useOffset=False)
    for j in range(n, rows * cols):
        axes[j // cols][j % cols].axis("off")
    handles, labels = axes[0][0].get_legend_handles_labels()
    seen = dict(zip(labels, handles, strict=True))
    fig.legend(seen.values(), seen.keys(), loc="lower center", ncol=len(seen), fontsize=8, frameon=False)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return _save(fig, Path(path), plt)


def _save(fig, path: Path, plt) -> Path:
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
