"""Model selection and model validity: the drive-kit selection with identifiability checks, the
model-uncertainty test."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for type checkers; at run time each name is imported from its module on first use
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

#: module of this package -> the public names it defines, imported on first use (PEP 562): importing one
#: module of identification/ loads only what that module imports
_EXPORTS: dict[str, tuple[str, ...]] = {
    "model_selection": (
        "CandidateResult", "FitResult", "SelectionResult", "as_run", "fit_structure", "select_model",
    ),
    "uncertainty_test": (
        "NormalityRow", "SplitTest", "UncertaintyTestResult", "look_levels", "paired_differences",
        "press_scenarios", "random_splits", "run_uncertainty_test", "shapiro_table", "spent_alpha",
    ),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

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
