"""Sensitivity-guided identification of a structural model from modal data (seed paper 003).

Three steps, as in the paper's Figure 1:

1. **Partition by global sensitivity analysis.** For every (axis position, reference mode) pair,
   Sobol indices (first order S1 and total ST, SALib's Saltelli/Sobol' sampling and estimator)
   of two scalar outputs over the whole parameter box: the MACXP between reference and matched
   model mode, and the squared natural damping difference NDD^2. The parameters with
   ``ST >= threshold`` in a pair's MACXP form that pair's small stiffness subproblem.
2. **Stiffness.** Each subproblem maximises its pair's MACXP over its few parameters (SLSQP in
   the box scaled to [0, 1]) ``n_opt`` times from random starts, the other parameters drawn at
   random each time. Per parameter, the subproblem whose repetitions agree best (smallest
   standard deviation, in units of the parameter's range) gives the estimate: their mean.
3. **Damping.** With the identified stiffness, modal damping is linear in the viscous damping
   parameters (light damping, paper eqs. 11-13): ``xi_i = xi_known_i + sum_n q_in c_n`` with
   ``q_in = phi_i^T C_n phi_i / (2 omega_i)`` for mass-normalised undamped modes. The rows of the
   pairs whose NDD^2 depends least on the stiffness parameters (smallest summed ST) are solved by
   bounded linear least squares, relative to the reference damping.

4. **Correction for A1 and intervals** (with ``refine``). Undamped modes against damped reference modes
   shift both stages' optimum even with the right parameters (up to about one std of a stiffness, and tens
   of per cent for the coupling damping, on noise-free data). The residual the model leaves against its own
   damped modes at the estimate (:func:`~identification.gsa.modal_residual.a1_offset`,
   :func:`~identification.gsa.modal_residual.a1_damping_shift`) is taken out and both
   stages run once more. Then every parameter gets a standard error and a 95 % interval
   (:func:`parameter_intervals`, :class:`GSAIntervals`): the Jacobian of the joint step's smooth residual
   (a block sandwich when frequencies and shapes scatter differently), the damping stage's linear least
   squares with the stiffness uncertainty carried through; NaN for what the data do not see or a bound
   holds; a verdict from the held-back positions. Calibration: benchmarks/bench_machine_tool_calibration.py.

Stiffness stage and assumption A1: shapes and frequencies come from the undamped model, and for
the MACXP the model's eigenvalue carries the reference damping ratio, so damping parameters have
no influence on it (the MACXP weighs eigenvalues, and a damping mismatch would otherwise lower it).
The final tables use the full complex modal analysis of the identified model.

The model is duck-typed (``identification.models.machine_tool_model.MachineTool`` fits):
``real_modes_batch(kmat, s, n)``, ``observation(s)``, ``damping_parts(s)``,
``complex_modes(p, s, n)``, ``frf(p, s, freq, input)``. Every batch of model evaluations goes
through ``executor`` (any ``map(fn, items) -> list``; default: the builtin, in this process).

The modules, in the order of the stages: :mod:`~identification.gsa.reference` (the modal data),
:mod:`~identification.gsa.sobol` (step 1), :mod:`~identification.gsa.modal_residual` (the model against the
reference), :mod:`~identification.gsa.stages` (steps 2 and 3), :mod:`~identification.gsa.covariance`,
:mod:`~identification.gsa.checks` and :mod:`~identification.gsa.intervals` (step 4),
:mod:`~identification.gsa.result` and :mod:`~identification.gsa.procedure` (:func:`identify`).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for type checkers; at run time each name is imported from its module on first use
    from identification.gsa.intervals import (
        GSAIntervals,
        parameter_intervals,
    )
    from identification.gsa.procedure import (
        identify,
        local_refit,
    )
    from identification.gsa.reference import (
        ModalReference,
        reference_from_model,
    )
    from identification.gsa.result import (
        GSAIdentificationResult,
        evaluate_model,
        fraction_within,
    )
    from identification.gsa.sobol import (
        SobolResult,
        sobol_indices,
    )

#: module of this package -> the public names it defines, imported on first use (PEP 562): importing one
#: module of identification/ loads only what that module imports
_EXPORTS: dict[str, tuple[str, ...]] = {
    "intervals": ("GSAIntervals", "parameter_intervals"),
    "procedure": ("identify", "local_refit"),
    "reference": ("ModalReference", "reference_from_model"),
    "result": ("GSAIdentificationResult", "evaluate_model", "fraction_within"),
    "sobol": ("SobolResult", "sobol_indices"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = [
    "ModalReference",
    "reference_from_model",
    "SobolResult",
    "sobol_indices",
    "GSAIdentificationResult",
    "identify",
    "evaluate_model",
    "fraction_within",
    "GSAIntervals",
    "parameter_intervals",
    "local_refit",
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
