"""Frequency domain: FRF estimation, modal extraction, modal metrics, nonlinear distortions (BLA)."""

from identification.frequency.frf_estimation import (
    FRFEstimate,
    h1_estimate,
)
from identification.frequency.modal_extraction import (
    ModalFit,
    extract_modes,
    lscf_poles,
    lsfd,
    order_spread,
    pole_covariance,
    refine_poles,
    stable_poles,
    synthesize,
)
from identification.frequency.modal_metrics import (
    csf,
    frac,
    macxp,
    macxp_matrix,
    ndd,
    summary_stats,
)
from identification.frequency.nonlinear_distortion import (
    BLAEstimate,
    DistortionVerdict,
    best_linear_approximation,
    distortion_from_records,
    distortion_verdict,
    excited_lines,
    remove_trend,
)

__all__ = [
    "FRFEstimate",
    "h1_estimate",
    "ModalFit",
    "lscf_poles",
    "lsfd",
    "extract_modes",
    "synthesize",
    "stable_poles",
    "refine_poles",
    "pole_covariance",
    "order_spread",
    "macxp",
    "macxp_matrix",
    "ndd",
    "frac",
    "csf",
    "summary_stats",
    "BLAEstimate",
    "DistortionVerdict",
    "best_linear_approximation",
    "distortion_verdict",
    "distortion_from_records",
    "excited_lines",
    "remove_trend",
]
