"""What of an analysis goes into a lab session's metadata: the whole report (as ``hil analyze --json``
prints it, non-finite numbers as null) and a flat summary that ``hil sessions`` searches -
``estimates`` {parameter: value}, ``intervals`` {parameter: [lo, hi]} (95 %, from the standard errors
where the report gives them) and ``verdict`` (a short text such as ``"M3 keep"``)."""

from __future__ import annotations

import math
import time

from daq import json_codec

Z95 = 1.959963984540054


def _numbers(xs) -> list[float] | None:
    if isinstance(xs, list) and xs and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                           for x in xs):
        return [float(x) for x in xs]
    return None


def _pairs(names, values, stds) -> tuple[dict, dict]:
    est = {n: v for n, v in zip(names, values, strict=True) if math.isfinite(v)}
    iv = {}
    if stds is not None and len(stds) == len(names):
        iv = {n: [v - Z95 * s, v + Z95 * s] for n, v, s in zip(names, values, stds, strict=True)
              if math.isfinite(v) and math.isfinite(s)}
    return est, iv


def _find_estimates(report: dict) -> tuple[dict, dict, str | None]:
    """Estimates, intervals and the verdict of a report, by the shapes our rigs' reports have."""
    names = report.get("parameters")
    verdicts = report.get("verdicts")
    models = report.get("models")
    if isinstance(names, list) and isinstance(models, dict):  # per-model fits: the kept model's estimates
        kept = [m for m, v in (verdicts or {}).items() if v == "keep"] or list(models)
        model = models.get(kept[0]) or {}
        values = _numbers(model.get("p"))
        if values is not None and len(values) == len(names):
            est, iv = _pairs(names, values, _numbers(model.get("std_errors")))
            return est, iv, " ".join(f"{m} keep" for m in kept) if verdicts else None
    for key in ("estimates", "values", "parameters"):  # {name: value} or names + values at any level
        block = report.get(key)
        if isinstance(block, dict) and _numbers(list(block.values())) is not None:
            return {k: float(v) for k, v in block.items()}, {}, _verdict(report)
    names = report.get("names") or report.get("parameter_names")
    values = _numbers(report.get("values") or report.get("p") or report.get("estimates"))
    if isinstance(names, list) and values is not None and len(names) == len(values):
        est, iv = _pairs(names, values, _numbers(report.get("std") or report.get("std_errors")))
        return est, iv, _verdict(report)
    for value in report.values():
        if isinstance(value, dict):
            est, iv, verdict = _find_estimates(value)
            if est:
                return est, iv, verdict or _verdict(report)
    return {}, {}, _verdict(report)


def _verdict(report: dict) -> str | None:
    v = report.get("verdict")
    if isinstance(v, str):
        return v
    vs = report.get("verdicts")
    if isinstance(vs, dict) and all(isinstance(x, str) for x in vs.values()):
        return " ".join(f"{k} {x}" for k, x in vs.items() if x == "keep") or None
    return None


def analysis_metadata(report: dict, summary: dict | None = None, *, by: str | None = None,
                      where: str | None = None) -> dict:
    """The ``analysis`` metadata of a session from its report dict and the rig kind's summary of it
    (``Rig.analysis_summary``; None: found in the report by the shapes above), with who ran the analysis,
    where ("rig": from a local store, "lab": from the lab's copy) and when (unix time)."""
    clean = json_codec.loads(json_codec.dumps_strict(report, default=str))
    if summary is None:
        est, iv, verdict = _find_estimates(clean)
        summary = {"estimates": est, "intervals": iv, "verdict": verdict}
    summary = json_codec.loads(json_codec.dumps_strict(summary, default=str))
    return {**summary, "report": clean, "by": by, "where": where, "at": time.time()}


def analysis_record(rig, result, where: str, by: str | None) -> dict:
    """The ``analysis`` metadata of ``rig``'s (a :class:`daq.rigs.base.Rig`) ``result``: its report and
    the kind's own summary of it."""
    report = rig.report_dict(result)
    return analysis_metadata(report, rig.analysis_summary(report), by=by, where=where)
