"""Plots and files of results (matplotlib Agg, PNG): the I/O side of identification/."""

from __future__ import annotations

from pathlib import Path


def save_figure(fig, path: str | Path, dpi: int = 110) -> Path:
    """Lay out, write as PNG and close ``fig`` (figures are never left open in a long-running service)."""
    import matplotlib.pyplot as plt

    path = Path(path)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path
