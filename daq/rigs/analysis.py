"""Offline analysis of a stored session, by its rig kind: session -> arrays -> analysis -> report.

The session's own config snapshot is checked against the rig's schema again, so an analysis runs with
exactly the settings the run was recorded with.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from daq.config.load import ConfigError, parse
from daq.rigs import get_rig
from daq.rigs.base import AnalysisError, Rig
from daq.store.reads import SessionReads

__all__ = ["AnalysisError", "analyze_session"]


def analyze_session(store: SessionReads, session: str, *, plots_dir: str | Path | None = None,
                    progress: Callable[[int, int, object], None] | None = None,
                    ) -> tuple[Any, Any, Rig, list[Path]]:
    """Analyse ``session`` (id, unique prefix or "latest"); returns (info, result, rig, plot files): the
    rig reports the result (``rig.report_text(result)``, ``rig.report_dict(result)``)."""
    info = store.get_session(session)
    try:
        rig = get_rig(info.kind)
    except ConfigError:
        raise AnalysisError(f"session {info.id}: no analysis for rig kind {info.kind!r}") from None
    if not rig.has_analysis:
        raise AnalysisError(f"session {info.id}: rig kind {info.kind!r} has no analysis")
    try:
        cfg = parse(info.config, rig.schema, f"session {info.id} config")
    except ConfigError as exc:
        raise AnalysisError(str(exc)) from None
    if cfg.rig.dry_run:
        raise AnalysisError(f"session {info.id} is a dry run: its commands were held, nothing moved, so "
                            "there is nothing to analyse (docs/dry-run.md)")
    arrays = rig.arrays(store, info.id)
    try:
        result = rig.analyze(arrays, cfg, progress)
    except AnalysisError as exc:
        raise AnalysisError(f"session {info.id}: {exc}") from None
    files: list[Path] = []
    if plots_dir is not None and rig.has_plots:  # named, titled with the session: never another's overwritten
        from daq.plots.session_files import write_session_plots  # lazy: plots only when asked for

        files = write_session_plots(lambda folder: rig.plots(result, arrays, folder), plots_dir, info.id,
                                    info.kind)
    return info, result, rig, files
