"""The searchable summary of an analysis, one shape for every rig kind: what the lab's catalogue indexes
(``hil sessions --param``, ``--verdict``) and listings show, built by each kind from its own report dict
(``Rig.analysis_summary``).

::

    {"estimates": {name: value},            # SI, finite values only
     "intervals": {name: [lo, hi]},         # 95 %, finite bounds only
     "verdict": str | None,                 # press "M3 keep"; crane the chosen structure; others
                                            # "adequate" / "inadequate" (the residual adequacy check)
     "structure": str | None,               # the model the estimates belong to (press, crane)
     "intervals_valid": bool | None}        # the adequacy check's word on the intervals
"""

from __future__ import annotations

import math
from typing import Any

#: Half-width of a 95 % interval in standard errors (normal quantile).
Z95 = 1.959963984540054
#: The verdicts of a kind whose analysis fits one model and checks its residuals.
ADEQUATE, INADEQUATE = "adequate", "inadequate"
#: The crane's verdict when no structure of the kit passed the selection.
NO_STRUCTURE = "no structure accepted"


def _number(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x) if math.isfinite(x) else None


def estimates_of(block: Any) -> dict[str, float]:
    """``{name: value}`` of a report's block, finite numbers only."""
    if not isinstance(block, dict):
        return {}
    out = {str(k): _number(v) for k, v in block.items()}
    return {k: v for k, v in out.items() if v is not None}


def intervals_of(block: Any) -> dict[str, list[float]]:
    """``{name: [lo, hi]}`` of a report's block, pairs of finite numbers only."""
    if not isinstance(block, dict):
        return {}
    out = {}
    for name, pair in block.items():
        if isinstance(pair, (list, tuple)) and len(pair) == 2:
            lo, hi = _number(pair[0]), _number(pair[1])
            if lo is not None and hi is not None:
                out[str(name)] = [lo, hi]
    return out


def intervals_valid(report: dict) -> bool | None:
    adequacy = report.get("adequacy")
    valid = adequacy.get("intervals_valid") if isinstance(adequacy, dict) else None
    return valid if isinstance(valid, bool) else None


def summary(estimates: dict[str, float], intervals: dict[str, list[float]], verdict: str | None,
            structure: str | None = None, valid: bool | None = None) -> dict:
    return {"estimates": estimates, "intervals": intervals, "verdict": verdict, "structure": structure,
            "intervals_valid": valid}


def adequacy_summary(report: dict, estimates: dict[str, float], structure: str | None = None) -> dict:
    """The summary of a single fit whose report has ``ci95`` and ``adequacy`` (its verdict: whether the
    adequacy check lets the intervals stand)."""
    valid = intervals_valid(report)
    verdict = None if valid is None else (ADEQUATE if valid else INADEQUATE)
    return summary(estimates, intervals_of(report.get("ci95")), verdict, structure, valid)
