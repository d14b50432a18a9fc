"""Estimation and uncertainty: weighted least squares with covariance, confidence ellipsoids,
identifiability, profile likelihood, residual adequacy. Generic over any model;
the floor of identification/."""

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
    profile_likelihood,
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
    residual_adequacy,
)

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
    "profile_likelihood",
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
    "residual_adequacy",
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
