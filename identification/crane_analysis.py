"""Crane x-axis analysis: model selection configured from the ``[model_selection]`` config table.

Keys (all optional; SI units)::

    [model_selection]
    max_masses = 3              # candidates with 1..max_masses inertias (3 -> 96 models)
    candidates = []             # explicit model names instead (e.g. ["3m+visc+dt", "2m+visc"])
    n_starts = 3                # multistart least-squares starts per candidate (centre + Latin hypercube)
    seed = 0                    # seed of the start points
    max_nfev = 60               # Jacobian evaluations per start
    decimate = 5                # model step = decimate * trace dt (10 kHz -> 2 kHz)
    skip = 0                    # model steps left out of the cost at the start of each run
    friction_eps = 0.05         # rad/s, smooth sign tanh(w/eps) of the candidates' Coulomb/Stribeck friction
    min_pii_ratio = 0.01        # accept only if min PII >= this x max PII (eq. 6)
    max_condition_index = 30.0  # ... and every scaled condition index < this (eq. 8)
    min_validation_fit = 0.8    # ... and 1 - NRMSE on the validation run >= this
    parsimony_tol = 0.01        # fewest parameters within (1 + tol) x best validation cost (0: best fit)
    profile_points = 9          # grid points per parameter of the profile likelihood
    n_jobs = 2                  # worker processes

    [model_selection.bounds]    # name = [lo, hi]; defaults: identification.drive_models.DEFAULT_BOUNDS
"""

from __future__ import annotations

from collections.abc import Callable

from identification.drive_models import DEFAULT_BOUNDS, all_structures, parse_name
from identification.model_selection import CandidateResult, SelectionResult, select_model

__all__ = ["analyze_crane", "selection_options", "DEFAULTS"]

DEFAULTS: dict = {
    "max_masses": 3,
    "candidates": None,
    "n_starts": 3,
    "seed": 0,
    "max_nfev": 60,
    "decimate": 5,
    "skip": 0,
    "friction_eps": 0.05,
    "min_pii_ratio": 0.01,
    "max_condition_index": 30.0,
    "min_validation_fit": 0.8,
    "parsimony_tol": 0.01,
    "profile_points": 9,
    "n_jobs": 2,
}


def selection_options(section: dict | None) -> dict:
    """Keyword arguments for :func:`select_model` from a ``[model_selection]`` dict (validated)."""
    sec = dict(section or {})
    unknown = sorted(set(sec) - set(DEFAULTS) - {"bounds"})
    if unknown:
        known = sorted(DEFAULTS) + ["bounds"]
        raise ValueError(f"[model_selection]: unknown key(s) {unknown}; known: {known}")
    opt = {**DEFAULTS, **{k: v for k, v in sec.items() if k != "bounds"}}
    bounds = dict(DEFAULT_BOUNDS)
    for name, pair in (sec.get("bounds") or {}).items():
        if name not in DEFAULT_BOUNDS:
            raise ValueError(f"[model_selection.bounds]: unknown parameter {name!r}; "
                             f"known: {sorted(DEFAULT_BOUNDS)}")
        try:
            lo, hi = (float(pair[0]), float(pair[1]))
        except (TypeError, ValueError, IndexError):
            raise ValueError(f"[model_selection.bounds] {name} must be [lo, hi]") from None
        if not lo < hi:
            raise ValueError(f"[model_selection.bounds] {name}: need lo < hi, got [{lo}, {hi}]")
        bounds[name] = (lo, hi)
    if opt["candidates"]:
        candidates = [parse_name(str(c)) for c in opt["candidates"]]
    else:
        mm = int(opt["max_masses"])
        if mm not in (1, 2, 3):
            raise ValueError("[model_selection] max_masses must be 1, 2 or 3")
        candidates = all_structures(mm)
    for key in ("n_starts", "decimate", "max_nfev", "n_jobs", "profile_points"):
        if int(opt[key]) < 1:
            raise ValueError(f"[model_selection] {key} must be >= 1")
    return dict(bounds=bounds, candidates=candidates, n_starts=int(opt["n_starts"]), seed=int(opt["seed"]),
                max_nfev=int(opt["max_nfev"]), decimate=int(opt["decimate"]), skip=int(opt["skip"]),
                friction_eps=float(opt["friction_eps"]), min_pii_ratio=float(opt["min_pii_ratio"]),
                max_condition_index=float(opt["max_condition_index"]),
                min_validation_fit=float(opt["min_validation_fit"]),
                parsimony_tol=float(opt["parsimony_tol"]),
                profile_points=int(opt["profile_points"]), n_jobs=int(opt["n_jobs"]))


def analyze_crane(train, valid, config_section: dict | None,
                  progress: Callable[[int, int, CandidateResult], None] | None = None) -> SelectionResult:
    """Select the crane model. ``train``/``valid``: ``(u, y, dt)`` or ``(t, torque_cmd, speed, dt)``."""
    opts = selection_options(config_section)
    bounds = opts.pop("bounds")
    return select_model(train, valid, bounds, progress=progress, **opts)
