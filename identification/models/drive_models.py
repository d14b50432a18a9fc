"""Candidate model kit for electric drives with coupled mechanics (seed paper 004).

A candidate is a chain of ``n_masses`` elastically coupled inertias (motor first) plus a
selection of submodels acting on the motor inertia: viscous, Coulomb and Stribeck friction
(eq. 1, with a smooth sign ``tanh(w/eps)``), input dead time and a constant gravity torque.
3 x 8 x 2 x 2 = 96 structures.

States ``[w1..wn, q1-q2, .., q(n-1)-qn]`` (rad/s, rad); input: motor torque (N*m);
output: motor speed ``w1`` (rad/s). Parameter names follow ``simulators.physics.crane``.

The linear part ``x' = A x + B (u + M_grav + M_F,nl)`` holds inertias, springs, dampers and
viscous friction; the Coulomb/Stribeck torque ``M_F,nl(w1)`` is the only nonlinearity.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

__all__ = [
    "DriveStructure",
    "all_structures",
    "parse_name",
    "linear_matrices",
    "friction_torque",
    "DEFAULT_BOUNDS",
    "PARAM_UNITS",
]

#: Default search bounds (SI) for the stacker-crane x-axis; overridden by ``[model_selection.bounds]``. The
#: values of configs/crane-sim.toml: data-sheet values with wide margins, no box centred on the simulated
#: axis (tests/test_shipped_bounds.py).
DEFAULT_BOUNDS: dict[str, tuple[float, float]] = {
    "J1": (0.01, 0.1),
    "J2": (0.01, 0.15),
    "J3": (0.015, 0.5),
    "k12": (800.0, 30000.0),
    "k23": (60.0, 3000.0),
    "d12": (0.0, 6.0),
    "d23": (0.0, 1.0),
    "viscous": (0.0, 0.5),
    "coulomb": (0.0, 3.0),
    "stribeck_torque": (0.0, 1.5),
    "stribeck_speed": (0.1, 10.0),
    "dead_time": (0.0, 0.005),
    "gravity_torque": (-4.0, 6.0),
}

PARAM_UNITS: dict[str, str] = {
    "J1": "kg*m^2", "J2": "kg*m^2", "J3": "kg*m^2",
    "k12": "N*m/rad", "k23": "N*m/rad", "d12": "N*m*s/rad", "d23": "N*m*s/rad",
    "viscous": "N*m*s/rad", "coulomb": "N*m", "stribeck_torque": "N*m", "stribeck_speed": "rad/s",
    "dead_time": "s", "gravity_torque": "N*m",
}


@dataclass(frozen=True, order=True)
class DriveStructure:
    """One candidate structure of the kit."""

    n_masses: int
    viscous: bool = False
    coulomb: bool = False
    stribeck: bool = False
    dead_time: bool = False
    gravity: bool = False

    def __post_init__(self):
        if self.n_masses not in (1, 2, 3):
            raise ValueError("n_masses must be 1, 2 or 3")

    @property
    def name(self) -> str:
        """Readable name, e.g. ``"3m+visc+dt"``; ``"1m"`` for the bare inertia."""
        parts = [f"{self.n_masses}m"]
        for flag, tag in ((self.viscous, "visc"), (self.coulomb, "coul"), (self.stribeck, "strib"),
                          (self.dead_time, "dt"), (self.gravity, "grav")):
            if flag:
                parts.append(tag)
        return "+".join(parts)

    @property
    def n_states(self) -> int:
        return 2 * self.n_masses - 1

    @property
    def nonlinear(self) -> bool:
        """True if Coulomb or Stribeck friction is present (stepped simulation needed)."""
        return self.coulomb or self.stribeck

    @property
    def param_names(self) -> list[str]:
        names = ["J1"]
        if self.n_masses >= 2:
            names += ["J2", "k12", "d12"]
        if self.n_masses >= 3:
            names += ["J3", "k23", "d23"]
        if self.viscous:
            names.append("viscous")
        if self.coulomb:
            names.append("coulomb")
        if self.stribeck:
            names += ["stribeck_torque", "stribeck_speed"]
        if self.dead_time:
            names.append("dead_time")
        if self.gravity:
            names.append("gravity_torque")
        return names

    @property
    def n_params(self) -> int:
        return len(self.param_names)

    def __str__(self) -> str:
        return self.name


def all_structures(max_masses: int = 3) -> list[DriveStructure]:
    """Every structure of the kit (96 for ``max_masses=3``), ordered simple to complex."""
    out = []
    for n in range(1, max_masses + 1):
        for vis, cou, stri, dt, grav in itertools.product((False, True), repeat=5):
            out.append(DriveStructure(n, vis, cou, stri, dt, grav))
    return sorted(out, key=lambda s: (s.n_params, s.name))


_TAGS = {"visc": "viscous", "coul": "coulomb", "strib": "stribeck", "dt": "dead_time", "grav": "gravity"}


def parse_name(name: str) -> DriveStructure:
    """Inverse of :attr:`DriveStructure.name`."""
    parts = name.strip().split("+")
    if not parts[0].endswith("m") or not parts[0][:-1].isdigit():
        raise ValueError(f"bad model name {name!r}: must start with '1m', '2m' or '3m'")
    flags = {}
    for tag in parts[1:]:
        if tag not in _TAGS:
            raise ValueError(f"bad model name {name!r}: unknown submodel {tag!r} (known: {sorted(_TAGS)})")
        flags[_TAGS[tag]] = True
    return DriveStructure(int(parts[0][:-1]), **flags)


def _build_linear(s: DriveStructure, p: dict, dtype=float, batch: tuple[int, ...] = ()
                  ) -> tuple[np.ndarray, np.ndarray]:
    """``A`` (n, n, *batch), ``B`` (n, *batch): the parameters may be arrays of shape ``batch`` (every
    complex-step direction at once; element for element the same operations as one at a time)."""
    n = s.n_masses
    ns = s.n_states
    J = [p["J1"], p.get("J2", 1.0), p.get("J3", 1.0)][:n]
    k = [p.get("k12", 0.0), p.get("k23", 0.0)][: n - 1]
    d = [p.get("d12", 0.0), p.get("d23", 0.0)][: n - 1]
    c = p.get("viscous", 0.0) if s.viscous else 0.0
    A = np.zeros((ns, ns) + batch, dtype=dtype)
    # torque balance of mass i: J_i w_i' = -k_{i-1}(q_{i-1}-q_i)... sign per coupling
    A[0, 0] = A[0, 0] - c
    for i in range(n - 1):  # coupling between mass i and i+1, deflection state n+i
        A[i, i] -= d[i]
        A[i, i + 1] += d[i]
        A[i + 1, i] += d[i]
        A[i + 1, i + 1] -= d[i]
        A[i, n + i] -= k[i]
        A[i + 1, n + i] += k[i]
    for i in range(n):
        A[i, :] = A[i, :] / J[i]
    for i in range(n - 1):
        A[n + i, i] = 1.0
        A[n + i, i + 1] = -1.0
    B = np.zeros((ns,) + batch, dtype=dtype)
    B[0] = 1.0 / J[0] if not batch else [1.0 / complex(j) for j in J[0]]  # Python division, as alone
    return A, B


def linear_matrices(s: DriveStructure, p: dict[str, float]
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``A, B`` of the linear part and their derivatives ``dA`` (n_p, n, n), ``dB`` (n_p, n).

    Derivatives are taken by complex step (exact to round-off; A and B are analytic in p).
    """
    A, B = _build_linear(s, p)
    names = s.param_names
    dA = np.zeros((len(names),) + A.shape)
    dB = np.zeros((len(names),) + B.shape)
    h = 1e-30
    lin = [j for j, name in enumerate(names) if name not in _NOT_LINEAR]
    if lin:  # every direction in one batched build (issue 44: ~40x fewer small-array operations)
        pc = {key: np.full(len(lin), complex(v)) for key, v in p.items() if key not in _NOT_LINEAR}
        scale = np.empty(len(lin))
        for i, j in enumerate(lin):
            name = names[j]
            pc[name][i] = complex(p[name]) + 1j * h * max(abs(p[name]), 1.0)
            scale[i] = h * max(abs(p[name]), 1.0)
        Ac, Bc = _build_linear(s, pc, dtype=complex, batch=(len(lin),))
        dA[lin] = np.moveaxis(Ac.imag / scale, -1, 0)
        dB[lin] = np.moveaxis(Bc.imag / scale, -1, 0)
    return A, B, dA, dB


#: parameters outside the linear part (their dA, dB are zero)
_NOT_LINEAR = frozenset({"coulomb", "stribeck_torque", "stribeck_speed", "dead_time", "gravity_torque"})


def friction_torque(w: float, coulomb: float, stribeck_torque: float, stribeck_speed: float,
                    eps: float) -> tuple[float, float, float, float, float]:
    """Coulomb + Stribeck torque on the motor (eq. 1 without the viscous part) and its derivatives.

    Returns ``(F, dF/dw, dF/dcoulomb, dF/dstribeck_torque, dF/dstribeck_speed)``.
    """
    th = math.tanh(w / eps)
    aw = abs(w)
    if stribeck_torque != 0.0:
        e = math.exp(-aw / stribeck_speed)
        level = coulomb + stribeck_torque * e
        dlevel_dw = -stribeck_torque * e / stribeck_speed * (1.0 if w >= 0 else -1.0)
        d_vs = -th * stribeck_torque * e * aw / stribeck_speed**2
    else:
        e = math.exp(-aw / stribeck_speed) if stribeck_speed > 0 else 0.0
        level = coulomb
        dlevel_dw = 0.0
        d_vs = 0.0
    F = -th * level
    dF = -(1.0 - th * th) / eps * level - th * dlevel_dw
    return F, dF, -th, -th * e, d_vs
