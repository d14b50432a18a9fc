"""Offline analysis of a stored session: pick the method by the session's rig kind.

Press sessions go to the model-uncertainty analysis (sensor selection, Algorithm 1 per friction
model); crane sessions go to the model selection with practical identifiability. Each returns a
result with ``to_dict()`` for ``--json`` and ``format_table()`` for the terminal.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from daq.store import SessionStore, StoreError


class AnalysisError(StoreError):
    """A session that cannot be analysed (wrong kind, too little data); one clear message."""


def analyze_session(store: SessionStore, session: str, *, plots_dir: str | Path | None = None,
                    progress: Callable[[int, int, str], None] | None = None):
    """Analyse ``session`` (id, unique prefix or "latest"); returns (info, result)."""
    info = store.get_session(session)
    if info.kind == "press":
        result = _analyze_press(store, info, plots_dir)
    elif info.kind == "crane":
        result = _analyze_crane(store, info, plots_dir, progress)
    else:
        raise AnalysisError(f"session {info.id}: no analysis for rig kind {info.kind!r}")
    return info, result


def _analyze_press(store: SessionStore, info, plots_dir):
    from daq.press_session import press_arrays
    from identification.press_analysis import analyze_press

    arrays = press_arrays(store, info.id)
    n_series = arrays.z.shape[0]
    if n_series < 3:
        raise AnalysisError(f"session {info.id}: {n_series} complete series; the analysis needs at least 3 "
                            "(training series for the memory model plus two test series)")
    if np.isnan(arrays.sigmas).any():
        raise AnalysisError(f"session {info.id}: the config snapshot gives no sigma for every sensor")
    cfg = info.config.get("analysis", {})
    result = analyze_press(
        arrays.z, arrays.q, arrays.q_desired, arrays.sigmas,
        tol=float(cfg.get("tol", 0.05)), criterion=str(cfg.get("criterion", "E")),
        n_random_splits=int(cfg.get("n_random_splits", 0)), seed=int(cfg.get("seed", 0)),
        constants=cfg.get("constants"),
    )
    if plots_dir is not None:
        from identification import press_analysis

        press_analysis.write_plots(result, arrays.z, arrays.q, Path(plots_dir))
    return result


def _analyze_crane(store: SessionStore, info, plots_dir, progress):
    from daq.crane_experiment import crane_arrays
    from identification.crane_analysis import analyze_crane

    runs = crane_arrays(store, info.id)
    missing = {"training", "validation"} - set(runs)
    if missing:
        raise AnalysisError(f"session {info.id}: no {' and no '.join(sorted(missing))} run recorded")
    section = info.config.get("model_selection", {})
    if progress is not None:  # show the bar at once: the first candidates take a while
        from identification.crane_analysis import selection_options

        progress(0, len(selection_options(section)["candidates"]), "fitting candidate models")
    result = analyze_crane(runs["training"], runs["validation"], section, progress=progress)
    if plots_dir is not None:
        from identification import drive_plots

        drive_plots.write_plots(result, Path(plots_dir))
    return result
