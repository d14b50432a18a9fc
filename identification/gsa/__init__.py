"""Sobol-guided (GSA) identification of the machine-tool structure."""

from identification.gsa.gsa_identification import (
    GSAIdentificationResult,
    GSAIntervals,
    ModalReference,
    SobolResult,
    evaluate_model,
    identify,
    local_refit,
    parameter_intervals,
    reference_from_model,
    sobol_indices,
)

__all__ = [
    "ModalReference",
    "reference_from_model",
    "SobolResult",
    "sobol_indices",
    "GSAIdentificationResult",
    "identify",
    "evaluate_model",
    "GSAIntervals",
    "parameter_intervals",
    "local_refit",
]
