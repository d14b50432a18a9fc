"""Per-rig analysis pipelines that combine the rooms below: press, crane, online press, the adjoint plants."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for type checkers; at run time each name is imported from its module on first use
    from identification.analyses.adjoint_plants import (
        CRANE_STRUCTURE,
        DEFAULT_SPECS,
        DESIGN_VALUES,
        PLANTS,
        RecordFit,
        analysis_model,
        design_problem,
        fit_record,
        fit_records,
        reference_inputs,
        start_input,
    )
    from identification.analyses.crane_analysis import (
        DEFAULTS,
        RunsFit,
        analyze_crane,
        fit_runs,
        selection_options,
    )
    from identification.analyses.online_press import (
        ModelVerdict,
        OnlineEstimate,
        OnlineVerdict,
        estimate_stiffness,
        look_tol,
        model_verdict,
        verdict_settled,
    )
    from identification.analyses.press_analysis import (
        ModelReport,
        PressAnalysisResult,
        analyze_press,
        corrected_displacements,
    )

#: module of this package -> the public names it defines, imported on first use (PEP 562): importing one
#: module of identification/ loads only what that module imports
_EXPORTS: dict[str, tuple[str, ...]] = {
    "adjoint_plants": (
        "CRANE_STRUCTURE", "DEFAULT_SPECS", "DESIGN_VALUES", "PLANTS", "RecordFit", "analysis_model",
        "design_problem", "fit_record", "fit_records", "reference_inputs", "start_input",
    ),
    "crane_analysis": ("DEFAULTS", "RunsFit", "analyze_crane", "fit_runs", "selection_options"),
    "online_press": (
        "ModelVerdict", "OnlineEstimate", "OnlineVerdict", "estimate_stiffness", "look_tol", "model_verdict",
        "verdict_settled",
    ),
    "press_analysis": ("ModelReport", "PressAnalysisResult", "analyze_press", "corrected_displacements"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = [
    "DEFAULT_SPECS",
    "DESIGN_VALUES",
    "design_problem",
    "start_input",
    "reference_inputs",
    "PLANTS",
    "RecordFit",
    "analysis_model",
    "fit_record",
    "fit_records",
    "CRANE_STRUCTURE",
    "analyze_crane",
    "selection_options",
    "DEFAULTS",
    "RunsFit",
    "fit_runs",
    "OnlineEstimate",
    "estimate_stiffness",
    "ModelVerdict",
    "OnlineVerdict",
    "model_verdict",
    "look_tol",
    "verdict_settled",
    "ModelReport",
    "PressAnalysisResult",
    "corrected_displacements",
    "analyze_press",
]


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use."""
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # found directly from now on
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
