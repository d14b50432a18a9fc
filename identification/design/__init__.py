"""Experiment design: optimal sensor selection, multisines, adjoint optimal input design, sequential
design."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for type checkers; at run time each name is imported from its module on first use
    from identification.design.adjoint_design import (
        DesignProblem,
        DesignResult,
        EndCondition,
        Evaluation,
        ParameterFit,
        StateLimit,
        cost_and_gradient,
        criterion_value,
        evaluate,
        fit_parameters,
        from_bounded,
        optimize_input,
        projected_gradient_norm,
        simulate_output,
        to_bounded,
    )
    from identification.design.multisine import (
        MultisineResult,
        crest_factor,
        design_multisine,
        multisine_lines,
        schroeder_phases,
    )
    from identification.design.sensor_selection import (
        SensorSelectionResult,
        combo_label,
        design_criterion,
        enumerate_sensor_sets,
        select_sensors_bnb,
    )
    from identification.design.sequential_design import (
        Record,
        RunsFit,
        earlier_fisher,
        fit_runs,
        predicted_std,
        redesign,
        scan_start,
        stop_reason,
    )

#: module of this package -> the public names it defines, imported on first use (PEP 562): importing one
#: module of identification/ loads only what that module imports
_EXPORTS: dict[str, tuple[str, ...]] = {
    "adjoint_design": (
        "DesignProblem", "DesignResult", "EndCondition", "Evaluation", "ParameterFit", "StateLimit",
        "cost_and_gradient", "criterion_value", "evaluate", "fit_parameters", "from_bounded",
        "optimize_input", "projected_gradient_norm", "simulate_output", "to_bounded",
    ),
    "multisine": (
        "MultisineResult", "crest_factor", "design_multisine", "multisine_lines", "schroeder_phases",
    ),
    "sensor_selection": (
        "SensorSelectionResult", "combo_label", "design_criterion", "enumerate_sensor_sets",
        "select_sensors_bnb",
    ),
    "sequential_design": (
        "Record", "RunsFit", "earlier_fisher", "fit_runs", "predicted_std", "redesign", "scan_start",
        "stop_reason",
    ),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = [
    "EndCondition",
    "StateLimit",
    "DesignProblem",
    "Evaluation",
    "DesignResult",
    "ParameterFit",
    "to_bounded",
    "from_bounded",
    "criterion_value",
    "evaluate",
    "cost_and_gradient",
    "optimize_input",
    "projected_gradient_norm",
    "simulate_output",
    "fit_parameters",
    "MultisineResult",
    "design_multisine",
    "crest_factor",
    "schroeder_phases",
    "multisine_lines",
    "design_criterion",
    "combo_label",
    "SensorSelectionResult",
    "enumerate_sensor_sets",
    "select_sensors_bnb",
    "Record",
    "RunsFit",
    "fit_runs",
    "scan_start",
    "stop_reason",
    "redesign",
    "predicted_std",
    "earlier_fisher",
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
