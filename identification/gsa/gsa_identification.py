"""The former single module of the GSA identification, split by stage into the modules of
:mod:`identification.gsa`: its public names, for code written against the old path (import them from
``identification.gsa``)."""

from identification.gsa import (
    GSAIdentificationResult,
    GSAIntervals,
    ModalReference,
    SobolResult,
    evaluate_model,
    fraction_within,
    identify,
    local_refit,
    parameter_intervals,
    reference_from_model,
    sobol_indices,
)

__all__ = [
    "ModalReference", "reference_from_model", "SobolResult", "sobol_indices", "GSAIdentificationResult",
    "identify", "evaluate_model", "fraction_within", "GSAIntervals", "parameter_intervals", "local_refit",
]
