"""Fit starts away from the truth.

A multistart fit of the crane's drive-model kit (``fit_structure``, ``select_model``,
``crane_analysis.fit_runs``) starts first at the centre of its scaled box, log-scaled where the range spans a
decade or more. The default bounds before issue 39 (:data:`_DECADE_BOUNDS`) put that centre on the
simulated crane's truth: J1, J2, J3, k23 and stribeck_speed exactly, k12 5 % off, gravity_torque at 0.
:data:`CRANE_BOUNDS` are those ranges moved so that the centre lies at least 10 % from the truth in every
parameter (the tests' bounds since issue 23; the shipped ones, ``DEFAULT_BOUNDS``, are data-sheet values away
from the truth since issue 39, tests/test_shipped_bounds.py); :func:`alternating` is a start 20-25 % off
every entry of a vector.
"""

from __future__ import annotations

import numpy as np

from identification.models.drive_models import DEFAULT_BOUNDS
from identification.selection.model_selection import _Scaling
from simulators.physics.crane import CraneTruth

#: the kit's default bounds before issue 39: a decade each side of the simulated crane's truth
_DECADE_BOUNDS: dict[str, tuple[float, float]] = {
    "J1": (0.002, 0.2), "J2": (0.006, 0.6), "J3": (0.004, 0.4), "k12": (200.0, 20000.0),
    "k23": (24.0, 2400.0),
    "d12": (0.0, 6.0), "d23": (0.0, 1.0), "viscous": (0.0, 0.5), "coulomb": (0.0, 3.0),
    "stribeck_torque": (0.0, 1.5), "stribeck_speed": (0.05, 5.0), "dead_time": (0.0, 0.005),
}

#: log-scaled ranges shifted by a factor (the centre moves by the same factor; the ratio hi/lo stays)
_FACTORS = {"J1": 1.25, "J2": 0.8, "J3": 1.25, "k12": 0.8, "k23": 1.25, "stribeck_speed": 0.8}

CRANE_BOUNDS: dict[str, tuple[float, float]] = {
    **_DECADE_BOUNDS,
    **{n: (_DECADE_BOUNDS[n][0] * f, _DECADE_BOUNDS[n][1] * f) for n, f in _FACTORS.items()},
    "gravity_torque": (-4.0, 6.0),  # centre 1 N*m, a tenth of the range from the truth's 0
}


def box_centre(bounds: dict[str, tuple[float, float]]) -> dict[str, float]:
    """The first start of the kit's fits: the centre of the scaled box, in physical values."""
    names = list(bounds)
    centre = _Scaling(names, bounds).to_p(np.full(len(names), 0.5))
    return dict(zip(names, centre.tolist(), strict=True))


def check_away_from(bounds: dict[str, tuple[float, float]], truth: dict[str, float],
                    rel: float = 0.1) -> None:
    """Every box centre at least ``rel`` (relative; for a zero truth: of the range) from ``truth``."""
    centre = box_centre(bounds)
    for name, value in truth.items():
        lo, hi = bounds[name]
        scale = abs(value) if value != 0 else hi - lo
        assert lo < value < hi, (name, value, bounds[name])
        assert abs(centre[name] - value) >= rel * scale * (1 - 1e-9), (name, centre[name], value)


#: the simulated crane's values of the fitted parameters (the shipped truth)
CRANE_TRUTH = {n: float(v) for n, v in CraneTruth().to_dict().items() if n in DEFAULT_BOUNDS}
check_away_from(CRANE_BOUNDS, CRANE_TRUTH)


def alternating(values, low: float = 0.8, high: float = 1.25) -> np.ndarray:
    """``values`` times ``low``, ``high``, ``low``, ... : a deterministic start 20-25 % off in every entry."""
    v = np.asarray(values, dtype=float)
    return v * np.where(np.arange(v.size) % 2 == 0, low, high)


def perturbed(values: dict[str, float], seed: int, low: float = 0.1, high: float = 0.25) -> dict[str, float]:
    """``values`` each scaled by its own factor ``1 + u`` or ``1 / (1 + u)``, ``u`` uniform in [``low``,
    ``high``] with a random side (seeded): a deterministic start away from the truth that also moves the
    poles - one factor for every inertia, stiffness and damping (e.g. 1.1 x the truth) leaves them exactly
    at the truth's. A zero value moves by ``u`` (absolute)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, v in values.items():
        u = rng.uniform(low, high)
        up = rng.random() < 0.5
        out[name] = (v * (1 + u) if up else v / (1 + u)) if v != 0 else (u if up else -u)
    return out
