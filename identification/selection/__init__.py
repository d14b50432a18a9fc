"""Model selection and model validity: the drive-kit selection with identifiability checks, the
model-uncertainty test."""

from identification.selection.model_selection import (
    CandidateResult,
    FitResult,
    SelectionResult,
    as_run,
    fit_structure,
    select_model,
)
from identification.selection.uncertainty_test import (
    NormalityRow,
    SplitTest,
    UncertaintyTestResult,
    look_levels,
    paired_differences,
    press_scenarios,
    random_splits,
    run_uncertainty_test,
    shapiro_table,
    spent_alpha,
)

__all__ = [
    "FitResult",
    "CandidateResult",
    "SelectionResult",
    "fit_structure",
    "select_model",
    "as_run",
    "NormalityRow",
    "paired_differences",
    "shapiro_table",
    "press_scenarios",
    "random_splits",
    "SplitTest",
    "UncertaintyTestResult",
    "run_uncertainty_test",
    "spent_alpha",
    "look_levels",
]
