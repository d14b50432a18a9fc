"""Per-rig analysis pipelines that combine the rooms below: press, crane, online press, the adjoint plants."""

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
