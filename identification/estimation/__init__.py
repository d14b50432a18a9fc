"""Estimation and uncertainty: weighted least squares with covariance, confidence ellipsoids,
identifiability, profile likelihood, residual adequacy. Generic over any model;
the floor of identification/."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for type checkers; at run time each name is imported from its module on first use
    from identification.estimation.blas import (
        limit_blas_to_one_thread,
        single_thread_blas,
    )
    from identification.estimation.covariance import (
        covariance_matrix,
        fd_second_derivatives,
        marginal_std,
        second_order_term,
    )
    from identification.estimation.ellipsoid import (
        ConfidenceEllipsoid,
        alpha_min,
        confidence_ellipsoid,
        mahalanobis2,
    )
    from identification.estimation.identifiability import (
        IdentifiabilityResult,
        ProfileResult,
        analyze_identifiability,
    )
    from identification.estimation.least_squares import (
        FitResult,
        Sensitivities,
        StateModel,
        fit_residuals,
        fit_state_model,
        state_sensitivities,
    )
    from identification.estimation.profile_likelihood import (
        ProfileLikelihoodResult,
        lr_threshold,
        profile_likelihood_intervals,
    )
    from identification.estimation.residual_adequacy import (
        INADEQUATE,
        AdequacyResult,
        IntervalReport,
        NoiseCovariance,
        hac_covariance,
        input_basis,
        input_correlation_test,
        interval_report,
        ljung_box,
        noise_covariance,
    )

#: module of this package -> the public names it defines, imported on first use (PEP 562): importing one
#: module of identification/ loads only what that module imports
_EXPORTS: dict[str, tuple[str, ...]] = {
    "blas": ("limit_blas_to_one_thread", "single_thread_blas"),
    "covariance": ("covariance_matrix", "fd_second_derivatives", "marginal_std", "second_order_term"),
    "ellipsoid": ("ConfidenceEllipsoid", "alpha_min", "confidence_ellipsoid", "mahalanobis2"),
    "identifiability": ("IdentifiabilityResult", "ProfileResult", "analyze_identifiability"),
    "least_squares": (
        "FitResult", "Sensitivities", "StateModel", "fit_residuals", "fit_state_model", "state_sensitivities",
    ),
    "profile_likelihood": ("ProfileLikelihoodResult", "lr_threshold", "profile_likelihood_intervals"),
    "residual_adequacy": (
        "INADEQUATE", "AdequacyResult", "IntervalReport", "NoiseCovariance", "hac_covariance", "input_basis",
        "input_correlation_test", "interval_report", "ljung_box", "noise_covariance",
    ),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = [
    "single_thread_blas",
    "limit_blas_to_one_thread",
    "second_order_term",
    "covariance_matrix",
    "fd_second_derivatives",
    "marginal_std",
    "ConfidenceEllipsoid",
    "mahalanobis2",
    "confidence_ellipsoid",
    "alpha_min",
    "IdentifiabilityResult",
    "analyze_identifiability",
    "ProfileResult",
    "StateModel",
    "Sensitivities",
    "state_sensitivities",
    "FitResult",
    "fit_state_model",
    "fit_residuals",
    "ProfileLikelihoodResult",
    "profile_likelihood_intervals",
    "lr_threshold",
    "AdequacyResult",
    "ljung_box",
    "input_correlation_test",
    "hac_covariance",
    "NoiseCovariance",
    "noise_covariance",
    "input_basis",
    "IntervalReport",
    "interval_report",
    "INADEQUATE",
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
