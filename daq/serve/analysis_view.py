"""What the page shows of a session's analysis above its plots: the estimates with their 95 % intervals and
units and the verdict, from the rig kind's own summary of the report (``Rig.analysis_summary``) and the units
it knows for its parameters (``Rig.parameter_units``) - the report itself stays as ``hil analyze --json``
printed it."""

from __future__ import annotations

from daq.config.load import ConfigError
from daq.rigs import get_rig


def estimates_view(report: dict) -> dict:
    """``{"estimates": [{"name", "value", "interval", "unit"}], "verdict"}`` of a ``hil analyze --json``
    report (its ``kind`` names the rig kind); empty when the kind is unknown here or summarises nothing."""
    try:
        rig = get_rig(str(report.get("kind")))
    except ConfigError:
        return {"estimates": [], "verdict": None}
    summary = rig.analysis_summary(report) or {}
    units, intervals = rig.parameter_units(), summary.get("intervals") or {}
    rows = [{"name": name, "value": value, "interval": intervals.get(name), "unit": units.get(name, "")}
            for name, value in (summary.get("estimates") or {}).items()]
    return {"estimates": rows, "verdict": summary.get("verdict")}
