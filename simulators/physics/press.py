"""Quasi-static plant truth of one press linkage (the simulator's side, not a candidate model).

The linkage is a small planar spring network solved for static equilibrium with Newton's method:

* ``D`` (0, 0): head of the pressure bar; the vertical process force acts here (upward positive). The
  pressure-bar guide holds D horizontally (linear spring ``k_guide``) and is where friction acts.
* bar 5 (axial stiffness ``k5``) runs from D up-left to the joint ``F`` (-0.30, 0.50); it meets the
  joint pin through a bearing.
* bar 7 (``k7``) runs from F up-right to the frame bearing ``G`` (0, 1.00).
* the lever (axial stiffness ``k_lever``) runs from F straight down to the frame bearing ``A`` (-0.30, -0.20).
* bearings are isotropic radial springs with hardening, force ``k_joint*(1 + joint_beta*|d|^2)*d``.
* ``B0`` is the tip of a light feeler lever pivoted on the frame and resting on D; its vertical motion is
  ``b0_ratio`` times that of D (it carries no load).

Statics: a vertical load at D loads bars 5 and 7 in series (D and B0 vertical see ``1/k5 + 1/k7``), while a
horizontal load at F does not load bar 5 at all, so the horizontal motion of F sees ``1/k7`` only: this is
the sensor that separates k5 from k7; B0 is nearly redundant with D.

Friction at the pressure-bar guide is a Prandtl-Ishlinskii superposition of stop operators driven by the
process force (a Preisach model with a smooth density concentrated near the diagonal): continuous,
rate-independent, with memory, and saturating at ``friction_max``. The guide's normal force grows with the
process force (bar 5 is inclined, so a vertical load pushes D sideways into the guide): the saturated
friction is ``friction_max + friction_load_slope * |q_P|``. The force that reaches the linkage is
``q = q_P - q_fric``; friction resists the current direction of loading.

State: 10 displacements ``[D, F5, F, G7, A]`` x (x, y) in metres, where F5 is bar 5's end at joint F and
G7 / A are the bar ends in the frame bearings.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

SENSOR_NAMES = ("D_vertical", "F_horizontal", "B0_vertical")

# Nominal node positions, m (fixed geometry, known to every model).
POS_D = np.array([0.0, 0.0])
POS_F = np.array([-0.30, 0.50])
POS_G = np.array([0.0, 1.00])
POS_A = np.array([-0.30, -0.20])

# Node slots in the state vector (x at 2*i, y at 2*i+1).
NODE_D, NODE_F5, NODE_F, NODE_G7, NODE_A = range(5)
N_DOF = 10


@dataclass
class PressTruth:
    """True constants of the simulated press linkage (SI units).

    Config keys (flat, ``[simulator]`` table of ``configs/press-sim.toml``), with defaults:
    ``k5`` = 2.0e8 N/m and ``k7`` = 1.5e8 N/m (the two bar stiffnesses to identify), ``k_lever`` = 1.0e9 N/m,
    ``k_guide`` = 5.0e8 N/m, ``k_joint`` = 1.2e9 N/m, ``joint_beta`` = 2.0e8 1/m^2 (bearing hardening),
    ``b0_ratio`` = 0.2 (feeler lever ratio), ``friction_max`` = 1000.0 N (saturated friction force),
    ``friction_scale`` = 1500.0 N (median stop-operator threshold), ``friction_spread`` = 0.7 (log-normal
    width of the threshold density), ``friction_n`` = 40 (number of stop operators),
    ``friction_load_slope`` = 0.02 (extra saturated friction per newton of process force),
    ``q_max`` = 20000.0 N.
    """

    k5: float = 2.0e8
    k7: float = 1.5e8
    k_lever: float = 1.0e9
    k_guide: float = 5.0e8
    k_joint: float = 1.2e9
    joint_beta: float = 2.0e8
    b0_ratio: float = 0.2
    friction_max: float = 1000.0
    friction_scale: float = 1500.0
    friction_spread: float = 0.7
    friction_n: int = 40
    friction_load_slope: float = 0.02
    q_max: float = 20000.0

    @classmethod
    def from_config(cls, d: dict) -> PressTruth:
        """Build from a flat dict; unknown keys are an error, missing keys take the defaults."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"unknown PressTruth keys: {unknown}")
        if "friction_n" in d and not float(d["friction_n"]).is_integer():
            raise ValueError(f"friction_n must be a whole number (a count of stop operators), got "
                             f"{d['friction_n']!r}")
        kw: dict[str, Any] = {k: (int(v) if k == "friction_n" else float(v)) for k, v in d.items()}
        truth = cls(**kw)
        for k in ("k5", "k7", "k_lever", "k_guide", "k_joint", "friction_scale", "q_max"):
            if not getattr(truth, k) > 0:
                raise ValueError(f"PressTruth.{k} must be > 0")
        negative = min(truth.friction_max, truth.joint_beta, truth.friction_load_slope) < 0
        if negative or truth.friction_n < 1:
            raise ValueError("PressTruth: friction_max, friction_load_slope, joint_beta must be >= 0 and "
                             "friction_n >= 1")
        return truth

    def to_dict(self) -> dict:
        """Flat JSON/TOML-friendly dict (round-trips through from_config)."""
        return asdict(self)


def _unit(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    v = b - a
    return v / np.linalg.norm(v)


def _axial_block(n: np.ndarray, k: float) -> np.ndarray:
    """4x4 stiffness of an axial spring with unit direction n (small displacements)."""
    nn = k * np.outer(n, n)
    return np.block([[nn, -nn], [-nn, nn]])


class StopOperatorFriction:
    """Rate-independent friction: sum of stop (elastic-perfectly-plastic) operators of the force input.

    Each operator i follows force increments and is clipped to [-r_i, r_i]; the friction force is
    sum_i w_i * s_i. Thresholds r_i are log-spaced, weights follow a log-normal density so that the
    output rises smoothly after every reversal and saturates at ``friction_max``. With ``load_slope`` > 0
    the whole output is scaled by the guide's normal force, (fmax + load_slope * |q_P|) / fmax.
    """

    def __init__(self, fmax: float, scale: float, spread: float, n: int, load_slope: float = 0.0) -> None:
        self.fmax = fmax
        self.load_slope = load_slope
        lo, hi = scale * np.exp(-3.0 * spread), scale * np.exp(3.0 * spread)
        self.r = np.geomspace(lo, hi, n)
        dens = np.exp(-0.5 * (np.log(self.r / scale) / spread) ** 2)
        share = dens / dens.sum()  # share of the saturated friction carried by each operator
        self.w = fmax * share / self.r
        self.s = np.zeros(n)
        self.q_prev = 0.0

    def reset(self) -> None:
        self.s[:] = 0.0
        self.q_prev = 0.0

    def step(self, q_p: float) -> float:
        self.s = np.clip(self.s + (q_p - self.q_prev), -self.r, self.r)
        self.q_prev = q_p
        if self.fmax <= 0:
            return 0.0
        return float(self.w @ self.s) * (1.0 + self.load_slope * abs(q_p) / self.fmax)


class PressLinkage:
    """Stateful plant: ``respond(force_N)`` returns the three true displacements in metres."""

    SENSOR_NAMES = SENSOR_NAMES

    def __init__(self, truth: PressTruth | None = None) -> None:
        self.truth = truth or PressTruth()
        t = self.truth
        self.friction = StopOperatorFriction(
            t.friction_max, t.friction_scale, t.friction_spread, t.friction_n, t.friction_load_slope
        )
        self._K = self._linear_stiffness()
        # Bearings: (node_i, node_j or None for ground)
        self._bearings = ((NODE_F5, NODE_F), (NODE_G7, None), (NODE_A, None))
        self._load = np.zeros(N_DOF)
        self._load[2 * NODE_D + 1] = 1.0
        self.y = np.zeros(N_DOF)
        self.last_friction = 0.0

    def _linear_stiffness(self) -> np.ndarray:
        t = self.truth
        K = np.zeros((N_DOF, N_DOF))

        def add(i: int, j: int, n: np.ndarray, k: float) -> None:
            idx = [2 * i, 2 * i + 1, 2 * j, 2 * j + 1]
            K[np.ix_(idx, idx)] += _axial_block(n, k)

        add(NODE_D, NODE_F5, _unit(POS_D, POS_F), t.k5)
        add(NODE_F, NODE_G7, _unit(POS_F, POS_G), t.k7)
        add(NODE_F, NODE_A, _unit(POS_F, POS_A), t.k_lever)
        K[2 * NODE_D, 2 * NODE_D] += t.k_guide
        return K

    def _bearing_terms(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Internal bearing forces and their Jacobian. Each bearing's 2 x 2 block is written out in scalars,
        the same products in the same order as ``k (1 + beta |d|^2) d`` and ``k ((1 + beta |d|^2) I +
        2 beta d d^T)`` over numpy arrays (equal to the bit): the plant solves this a few times per tick,
        and 2 x 2 arrays cost several times the arithmetic."""
        t = self.truth
        k, two_beta = t.k_joint, 2.0 * t.joint_beta
        f = np.zeros(N_DOF)
        J = np.zeros((N_DOF, N_DOF))
        v = y.tolist()
        for i, j in self._bearings:
            a = 2 * i
            dx, dy = (v[a] - v[2 * j], v[a + 1] - v[2 * j + 1]) if j is not None else (v[a], v[a + 1])
            s = 1.0 + t.joint_beta * (dx * dx + dy * dy)
            ks = k * s
            fx, fy = ks * dx, ks * dy
            kxx, kyy = k * (s + two_beta * (dx * dx)), k * (s + two_beta * (dy * dy))
            kxy = k * (two_beta * (dx * dy))
            f[a] += fx
            f[a + 1] += fy
            J[a, a] += kxx
            J[a, a + 1] += kxy
            J[a + 1, a] += kxy
            J[a + 1, a + 1] += kyy
            if j is not None:
                b = 2 * j
                f[b] -= fx
                f[b + 1] -= fy
                for r, c in ((a, b), (b, a)):
                    J[r, c] -= kxx
                    J[r, c + 1] -= kxy
                    J[r + 1, c] -= kxy
                    J[r + 1, c + 1] -= kyy
                J[b, b] += kxx
                J[b, b + 1] += kxy
                J[b + 1, b] += kxy
                J[b + 1, b + 1] += kyy
        return f, J

    def equilibrium(self, q: float, y0: np.ndarray | None = None) -> np.ndarray:
        """Solve K y + f_bearing(y) = load * q by Newton's method (q = force reaching the linkage, N)."""
        y = np.zeros(N_DOF) if y0 is None else y0.copy()
        rhs = self._load * q
        for _ in range(50):
            f, Jb = self._bearing_terms(y)
            res = self._K @ y + f - rhs
            dy = np.linalg.solve(self._K + Jb, -res)
            y += dy
            if np.max(np.abs(dy)) < 1e-14:
                break
        else:  # pragma: no cover - the hardening system is monotone, Newton always converges here
            raise RuntimeError("press equilibrium: Newton did not converge")
        return y

    def observe(self, y: np.ndarray) -> np.ndarray:
        """Sensor values [D_vertical, F_horizontal, B0_vertical] in metres from a state."""
        d_v = y[2 * NODE_D + 1]
        return np.array([d_v, y[2 * NODE_F], self.truth.b0_ratio * d_v])

    def respond(self, force_N: float) -> np.ndarray:
        """Apply process force q_P (N, upward at the ram), advance friction memory, return displacements."""
        q_p = float(force_N)
        self.last_friction = self.friction.step(q_p)
        self.y = self.equilibrium(q_p - self.last_friction, self.y)
        return self.observe(self.y)

    def reset(self) -> None:
        """Back to the unloaded, friction-free (virgin) state."""
        self.friction.reset()
        self.y = np.zeros(N_DOF)
        self.last_friction = 0.0


def staircase_forces(q_max: float = 20000.0, n_up: int = 14) -> np.ndarray:
    """Desired forces 0 -> q_max in n_up steps and back to 0 (2*n_up + 1 setpoints, N)."""
    up = np.linspace(0.0, q_max, n_up + 1)
    return np.concatenate([up, up[-2::-1]])


def simulate_staircase(
    truth: PressTruth,
    q_actual: np.ndarray,
    sigmas: np.ndarray,
    rng: np.random.Generator,
    precondition: bool = True,
) -> np.ndarray:
    """Noisy displacements z[series, setpoint, sensor] (m) for actual forces q_actual[series, setpoint] (N).

    One plant runs through all series in order without reset (friction memory carries over, as on the
    rig); independent Gaussian noise with the given per-sensor sigmas (m) is added. ``precondition`` first
    runs one unrecorded cycle 0 -> max(q_actual) -> 0, so that every recorded series is a true repeat
    (no virgin friction branch).
    """
    q_actual = np.atleast_2d(np.asarray(q_actual, dtype=float))
    sig = np.asarray(sigmas, dtype=float)
    plant = PressLinkage(truth)
    if precondition:
        for qp in staircase_forces(float(q_actual.max()), 14):
            plant.respond(qp)
    z = np.empty(q_actual.shape + (len(SENSOR_NAMES),))
    for i in range(q_actual.shape[0]):
        for j in range(q_actual.shape[1]):
            z[i, j] = plant.respond(q_actual[i, j])
    return z + rng.standard_normal(z.shape) * sig
