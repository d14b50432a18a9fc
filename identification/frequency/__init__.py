"""Frequency domain: FRF estimation, LSCF poles, modal extraction and metrics, nonlinear distortions (BLA)."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for type checkers; at run time each name is imported from its module on first use
    from identification.frequency.frf_estimation import (
        FRFEstimate,
        h1_estimate,
    )
    from identification.frequency.lscf import lscf_pole_sets, lscf_poles
    from identification.frequency.modal_extraction import (
        ModalFit,
        extract_modes,
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

#: module of this package -> the public names it defines, imported on first use (PEP 562): importing one
#: module of identification/ loads only what that module imports
_EXPORTS: dict[str, tuple[str, ...]] = {
    "frf_estimation": ("FRFEstimate", "h1_estimate"),
    "lscf": ("lscf_poles", "lscf_pole_sets"),
    "modal_extraction": (
        "ModalFit", "extract_modes", "lsfd", "order_spread", "pole_covariance", "refine_poles",
        "stable_poles", "synthesize",
    ),
    "modal_metrics": ("csf", "frac", "macxp", "macxp_matrix", "ndd", "summary_stats"),
    "nonlinear_distortion": (
        "BLAEstimate", "DistortionVerdict", "best_linear_approximation", "distortion_from_records",
        "distortion_verdict", "excited_lines", "remove_trend",
    ),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = [
    "FRFEstimate",
    "h1_estimate",
    "ModalFit",
    "lscf_poles",
    "lscf_pole_sets",
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
