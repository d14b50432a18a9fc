"""Cart pendulum of seed paper 002 (sec. 4.2) as a simulated plant.

A cart (mass ``m_c``, viscous friction ``d_c``) on a straight rail carries a pendulum hinged at
its centre (mass ``m_p``, inertia ``J_p`` about its centre of gravity at ``s_p`` from the joint,
joint damping ``d_p``); the force acts on the cart, the absolute pendulum angle is measured
(0 = hanging down). The truth adds what the design model
(``identification.models.ode_models.CartPendulumModel``) lacks: Coulomb friction of the cart and of
the joint (smooth sign), a first-order lag of the applied force, and an angle encoder
(quantisation to ``encoder_counts`` per revolution plus Gaussian noise).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np

from simulators.physics.oscillator import rk4_held, truth_from_config

__all__ = ["PendulumTruth", "simulate", "OUTPUT"]

#: Key of the measured output in :func:`simulate`'s result.
OUTPUT = "angle"


@dataclass(frozen=True)
class PendulumTruth:
    """Physical values of the simulated cart pendulum (SI; defaults = configs/pendulum-sim.toml)."""

    m_c: float = 1.0  # kg
    m_p: float = 0.3  # kg
    J_p: float = 0.004  # kg*m^2 about the centre of gravity
    s_p: float = 0.2  # m
    d_p: float = 0.01  # N*m*s/rad
    d_c: float = 2.0  # N*s/m
    g: float = 9.81  # m/s^2
    cart_coulomb: float = 0.01  # N
    joint_coulomb: float = 2e-5  # N*m
    friction_speed_eps: float = 1e-3  # m/s and rad/s, smooth sign tanh(v/eps)
    input_lag: float = 2e-4  # s, force actuator time constant (0: none)
    angle_noise: float = 1e-3  # rad, std of additive noise
    encoder_counts: int = 16384  # counts per revolution (0: no quantisation)
    substeps: int = 10  # RK4 steps per sample

    @classmethod
    def from_config(cls, d: dict | None) -> PendulumTruth:
        """Build from a flat dict (e.g. ``[simulator.truth]``); missing keys take the defaults."""
        return truth_from_config(cls, d, "pendulum")

    def to_dict(self) -> dict:
        return asdict(self)

    def validate(self) -> None:
        for name in ("m_c", "m_p", "J_p", "s_p", "g", "friction_speed_eps"):
            if not getattr(self, name) > 0:
                raise ValueError(f"pendulum truth: {name} must be > 0")
        for name in ("d_p", "d_c", "cart_coulomb", "joint_coulomb", "input_lag", "angle_noise",
                     "encoder_counts"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"pendulum truth: {name} must be >= 0")
        if self.substeps < 1:
            raise ValueError("pendulum truth: substeps must be >= 1")

    def model_values(self) -> dict[str, float]:
        """The values the design model knows (``identification.models.ode_models.PENDULUM_NOMINAL`` keys)."""
        return {k: getattr(self, k) for k in ("m_c", "m_p", "J_p", "s_p", "d_p", "d_c", "g")}


def _rhs(t: PendulumTruth) -> Callable[[list[float], float], list[float]]:
    mc, mp, Jp, s, dp, dc, g = t.m_c, t.m_p, t.J_p, t.s_p, t.d_p, t.d_c, t.g
    fc, tc, eps = t.cart_coulomb, t.joint_coulomb, t.friction_speed_eps
    m11 = mc + mp
    m22 = Jp + mp * s * s
    sin, cos, tanh = math.sin, math.cos, math.tanh

    def rhs(x: list[float], force: float) -> list[float]:
        _, phi, vc, om = x
        sn, cs = sin(phi), cos(phi)
        m12 = mp * s * cs
        r1 = force - dc * vc - fc * tanh(vc / eps) + mp * s * om * om * sn
        r2 = -mp * g * s * sn - dp * om - tc * tanh(om / eps)
        det = m11 * m22 - m12 * m12
        return [vc, om, (m22 * r1 - m12 * r2) / det, (m11 * r2 - m12 * r1) / det]

    return rhs


def simulate(truth: PendulumTruth, force: np.ndarray, dt: float,
             rng: np.random.Generator | int | None = None) -> dict:
    """Simulate from rest (hanging) for the force command ``force`` (N, held for ``dt`` per sample).

    Returns arrays sampled at ``t = k*dt`` (k = 0..N-1, before sample k acts): ``t``,
    ``force_cmd``, ``force`` (applied after the lag), ``angle`` (measured, rad), ``angle_true``,
    ``cart_position``, ``cart_speed``, ``angular_speed``; plus ``dt`` and ``substeps``.
    """
    if not isinstance(rng, np.random.Generator):
        rng = np.random.default_rng(0 if rng is None else rng)
    u = np.asarray(force, dtype=float).ravel()
    if not (dt > 0 and math.isfinite(dt)):
        raise ValueError("dt must be a positive number")
    if not np.all(np.isfinite(u)):
        raise ValueError("force contains non-finite values")
    X, applied = rk4_held(_rhs(truth), [0.0] * 4, u, dt, truth.substeps, truth.input_lag)
    X, applied = X[:-1], applied[:-1]
    n = u.size
    phi = X[:, 1]
    meas = phi.copy()
    if truth.encoder_counts > 0:
        q = 2 * np.pi / truth.encoder_counts
        meas = np.floor(meas / q + 0.5) * q
    if truth.angle_noise > 0:
        meas = meas + rng.normal(0.0, truth.angle_noise, n)
    return {
        "t": np.arange(n) * dt,
        "force_cmd": u.copy(),
        "force": applied if truth.input_lag > 0 else u.copy(),
        "angle": meas,
        "angle_true": phi.copy(),
        "cart_position": X[:, 0].copy(),
        "cart_speed": X[:, 2].copy(),
        "angular_speed": X[:, 3].copy(),
        "dt": float(dt),
        "substeps": truth.substeps,
    }
