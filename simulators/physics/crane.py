"""Stacker-crane x-axis: three elastically coupled inertias with motor-side friction and dead time.

Chain: motor ``J1`` -- belt (``k12``, ``d12``) -- ``J2`` -- (``k23``, ``d23``) -- ``J3``.
The motor inertia carries the drive torque (delayed by ``dead_time``), a constant
``gravity_torque`` and the friction torque of seed paper 004, eq. 1::

    M_F(w) = -viscous*w - tanh(w/friction_speed_eps) * (coulomb + stribeck_torque*exp(-|w|/stribeck_speed))

Integration: the linear part (inertias, springs, dampers, viscous friction) is discretised
exactly with a matrix exponential on a sub-step grid (zero-order hold of the input per
sub-step). The system is diagonalised once, so a linear run is a handful of vectorised
first-order filters; the Coulomb/Stribeck torque is fed back explicitly once per sub-step
in a tight scalar loop over the modes.

The measured speed is what a drive computes from an incremental encoder: the position is
quantised to ``encoder_counts`` per revolution and differentiated over one sample,
Gaussian noise (``speed_noise``) is added and the result rounded to ``speed_resolution``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

import numpy as np
import scipy.linalg

__all__ = ["CraneTruth", "simulate_axis", "linear_state_space"]

#: Upper bound of integration sub-steps per sample.
MAX_SUBSTEPS = 2000


@dataclass(frozen=True)
class CraneTruth:
    """Physical parameters of the simulated axis (SI units; defaults = configs/crane-sim.toml)."""

    J1: float = 0.02  # motor + pulley inertia, kg*m^2
    J2: float = 0.06  # carriage (reflected), kg*m^2
    J3: float = 0.04  # mast / load handling device (reflected), kg*m^2
    k12: float = 2100.0  # belt stiffness, N*m/rad
    k23: float = 240.0  # mast stiffness, N*m/rad
    d12: float = 0.6  # belt damping, N*m*s/rad
    d23: float = 0.1  # mast damping, N*m*s/rad
    viscous: float = 0.05  # viscous friction on the motor, N*m*s/rad
    coulomb: float = 0.3  # Coulomb friction, N*m
    stribeck_torque: float = 0.15  # Stribeck torque (added at standstill), N*m
    stribeck_speed: float = 0.5  # Stribeck speed, rad/s
    friction_speed_eps: float = 0.02  # speed scale of the smooth sign tanh(w/eps), rad/s
    dead_time: float = 0.0008  # delay of the torque input, s
    gravity_torque: float = 0.0  # constant torque on the motor side, N*m (0 for the x-axis)
    encoder_counts: int = 2**20  # encoder counts per revolution (0: no position quantisation)
    speed_noise: float = 0.01  # std of additive speed noise, rad/s
    speed_resolution: float = 0.0  # speed quantum, rad/s (0: none)
    substeps: int = 4  # minimum integration sub-steps per sample

    @classmethod
    def from_config(cls, d: dict | None) -> CraneTruth:
        """Build from a flat dict (e.g. ``[simulator.truth]``); missing keys take the defaults."""
        d = dict(d or {})
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(d) - set(known))
        if unknown:
            raise ValueError(f"crane truth: unknown key(s) {unknown}; known: {sorted(known)}")
        kwargs: dict = {}
        for name, value in d.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"crane truth: {name} must be a number, got {value!r}")
            if known[name].type in ("int", int) and not float(value).is_integer():
                raise ValueError(f"{name} must be a whole number, got {value!r}")
            kwargs[name] = int(value) if known[name].type in ("int", int) else float(value)
        truth = cls(**kwargs)
        truth.validate()
        return truth

    def to_dict(self) -> dict:
        """Flat dict that :meth:`from_config` accepts."""
        return asdict(self)

    def validate(self) -> None:
        """Raise ValueError on physically meaningless values."""
        for name in ("J1", "J2", "J3", "k12", "k23"):
            if not getattr(self, name) > 0:
                raise ValueError(f"crane truth: {name} must be > 0")
        for name in ("d12", "d23", "viscous", "coulomb", "stribeck_torque", "dead_time",
                     "speed_noise", "speed_resolution", "encoder_counts"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"crane truth: {name} must be >= 0")
        if self.stribeck_torque > 0 and not self.stribeck_speed > 0:
            raise ValueError("crane truth: stribeck_speed must be > 0 when stribeck_torque > 0")
        if not self.friction_speed_eps > 0:
            raise ValueError("crane truth: friction_speed_eps must be > 0")
        if self.substeps < 1:
            raise ValueError("crane truth: substeps must be >= 1")

    @property
    def has_nonlinear_friction(self) -> bool:
        return self.coulomb > 0 or self.stribeck_torque > 0

    def friction(self, w: np.ndarray | float) -> np.ndarray | float:
        """Coulomb + Stribeck torque on the motor (viscous part excluded: it is in the linear part)."""
        w = np.asarray(w, dtype=float)
        level = self.coulomb
        if self.stribeck_torque > 0:
            level = level + self.stribeck_torque * np.exp(-np.abs(w) / self.stribeck_speed)
        return -np.tanh(w / self.friction_speed_eps) * level

    def eigen(self) -> tuple[np.ndarray, np.ndarray]:
        """Natural frequencies (Hz) and damping ratios of the two elastic modes, ascending."""
        lam = np.linalg.eigvals(linear_state_space(self)[0])
        osc = lam[lam.imag > 1e-9]
        wn = np.abs(osc)
        order = np.argsort(wn)
        return wn[order] / (2 * np.pi), (-osc.real / wn)[order]


def linear_state_space(truth: CraneTruth) -> tuple[np.ndarray, np.ndarray]:
    """Continuous linear part ``x' = A x + B u``.

    States ``[w1, w2, w3, q1-q2, q2-q3]`` (rad/s, rad); ``u`` is the total torque on the motor
    besides spring, damper and viscous friction (drive + gravity + Coulomb/Stribeck).
    """
    t = truth
    A = np.zeros((5, 5))
    A[0, :] = [-(t.viscous + t.d12), t.d12, 0.0, -t.k12, 0.0]
    A[0, :] /= t.J1
    A[1, :] = [t.d12, -(t.d12 + t.d23), t.d23, t.k12, -t.k23]
    A[1, :] /= t.J2
    A[2, :] = [0.0, t.d23, -t.d23, 0.0, t.k23]
    A[2, :] /= t.J3
    A[3, :] = [1.0, -1.0, 0.0, 0.0, 0.0]
    A[4, :] = [0.0, 1.0, -1.0, 0.0, 0.0]
    B = np.array([1.0 / t.J1, 0.0, 0.0, 0.0, 0.0])
    return A, B


def _zoh(A: np.ndarray, B: np.ndarray, h: float) -> tuple[np.ndarray, np.ndarray]:
    n = A.shape[0]
    M = np.zeros((n + 1, n + 1))
    M[:n, :n] = A
    M[:n, n] = B
    E = scipy.linalg.expm(M * h)
    return E[:n, :n], E[:n, n]


def _delayed_substep_input(torque: np.ndarray, dt: float, delay: float, n_sub: int) -> np.ndarray:
    """Average of the delayed zero-order-hold command over every sub-step (exact for any delay)."""
    n = torque.size
    knots = np.arange(n + 1) * dt
    integral = np.concatenate(([0.0], np.cumsum(torque) * dt))
    edges = np.arange(n * n_sub + 1) * (dt / n_sub) - delay
    U = np.interp(edges, knots, integral, left=0.0)
    return np.diff(U) / (dt / n_sub)


def _substeps(truth: CraneTruth, dt: float) -> int:
    n_sub = truth.substeps
    if truth.has_nonlinear_friction:
        # explicit friction feedback: keep h * (dM_F/dw) / J1 below 0.5
        slope = (truth.coulomb + truth.stribeck_torque) / truth.friction_speed_eps
        if truth.stribeck_torque > 0:
            slope += truth.stribeck_torque / truth.stribeck_speed
        n_sub = max(n_sub, math.ceil(dt * slope / (0.5 * truth.J1)))
    if n_sub > MAX_SUBSTEPS:
        raise ValueError(f"crane simulation needs {n_sub} sub-steps per sample; increase friction_speed_eps")
    return n_sub


def _modal(Ad: np.ndarray, Bd: np.ndarray, A: np.ndarray, x0: np.ndarray):
    """Diagonalise; keep one mode per conjugate pair (weight 2) so that states = Re(C @ z)."""
    lam_c, V = np.linalg.eig(A)
    if np.linalg.cond(V) > 1e8:
        raise np.linalg.LinAlgError("linear part not diagonalisable")
    Vinv = np.linalg.inv(V)
    D = Vinv @ Ad @ V
    off = D - np.diag(np.diag(D))
    if np.abs(off).max() > 1e-8 * max(1.0, np.abs(D).max()):
        raise np.linalg.LinAlgError("linear part not diagonalisable")
    scale = np.abs(lam_c).max()
    keep = lam_c.imag >= -1e-12 * scale
    complex_mode = np.abs(lam_c.imag) > 1e-12 * scale
    if np.count_nonzero(keep) + np.count_nonzero(complex_mode & keep) != lam_c.size:
        raise np.linalg.LinAlgError("unpaired complex eigenvalues")
    weight = np.where(complex_mode[keep], 2.0, 1.0)
    return np.diag(D)[keep], (Vinv @ Bd)[keep], V[:, keep] * weight, (Vinv @ x0)[keep]


def _first_order(lam: complex, b: complex, u: np.ndarray, z0: complex) -> np.ndarray:
    """z[j+1] = lam*z[j] + b*u[j], z[0] = z0; returns z[0..m]."""
    m = u.size
    z = np.empty(m + 1, dtype=complex)
    z[0] = z0
    from scipy import signal  # lazy: with scipy.stats ~0.6 s; a config check builds a truth (hil analyze)

    z[1:] = signal.lfilter([b], [1.0, -lam], u.astype(complex))
    if z0 != 0:
        z[1:] += z0 * lam ** np.arange(1, m + 1)
    return z


def _simulate_modal(truth: CraneTruth, lam: np.ndarray, b: np.ndarray, C: np.ndarray,
                    z0: np.ndarray, u_sub: np.ndarray) -> np.ndarray:
    """States at every sub-step edge, shape (5, m+1); friction fed back explicitly."""
    Z = np.array([_first_order(li, bi, u_sub, zi) for li, bi, zi in zip(lam, b, z0, strict=True)])
    if truth.has_nonlinear_friction:
        f = _friction_sequence(truth, lam, b, C[0], (C[0] @ Z).real)
        Z += np.array([_first_order(li, bi, f, 0j) for li, bi in zip(lam, b, strict=True)])
    return (C @ Z).real


def _friction_sequence(truth: CraneTruth, lam: np.ndarray, b: np.ndarray, c0: np.ndarray,
                       w1_lin: np.ndarray) -> np.ndarray:
    """Coulomb/Stribeck torque per sub-step, fed back through the modes (tight scalar loop)."""
    m = w1_lin.size - 1
    w_lin = w1_lin.tolist()
    modes = [(complex(li), complex(bi), complex(ci)) for li, bi, ci in zip(lam, b, c0, strict=True)]
    z = [0j] * len(modes)
    f_out = [0.0] * m
    eps = truth.friction_speed_eps
    fc = truth.coulomb
    fs = truth.stribeck_torque
    inv_vs = 1.0 / truth.stribeck_speed if truth.stribeck_speed > 0 else 0.0
    tanh, exp = math.tanh, math.exp
    idx = range(len(modes))
    for j in range(m):
        w = w_lin[j]
        for i in idx:
            w += (modes[i][2] * z[i]).real
        f = -tanh(w / eps) * (fc + fs * exp(-abs(w) * inv_vs))
        f_out[j] = f
        for i in idx:
            z[i] = modes[i][0] * z[i] + modes[i][1] * f
    return np.asarray(f_out)


def _simulate_dense(truth: CraneTruth, Ad: np.ndarray, Bd: np.ndarray, x0: np.ndarray,
                    u_sub: np.ndarray) -> np.ndarray:
    """Fallback: plain state loop (used only if the linear part cannot be diagonalised)."""
    m = u_sub.size
    X = np.empty((5, m + 1))
    x = x0.astype(float).copy()
    X[:, 0] = x
    for j in range(m):
        f = float(truth.friction(x[0])) if truth.has_nonlinear_friction else 0.0
        x = Ad @ x + Bd * (u_sub[j] + f)
        X[:, j + 1] = x
    return X


def simulate_axis(truth: CraneTruth, torque: np.ndarray, dt: float,
                  rng: np.random.Generator | int | None = None,
                  initial_speed: float = 0.0) -> dict:
    """Simulate the axis for the torque command ``torque`` (N*m, one value per sample, ZOH).

    Starts at rest (or with all inertias turning at ``initial_speed``). Returns a dict of
    arrays sampled at ``t = k*dt``: ``t``, ``torque_cmd``, ``torque`` (applied after the dead
    time, mean over the sample period), ``speed`` (measured motor speed, rad/s),
    ``speed_true``, ``load_speed`` (w3), ``position`` (true motor angle, rad), ``friction``
    (Coulomb+Stribeck torque at the sample, N*m); plus ``dt`` and ``substeps``.
    """
    if not isinstance(rng, np.random.Generator):
        rng = np.random.default_rng(0 if rng is None else rng)
    u_cmd = np.asarray(torque, dtype=float).ravel()
    if not (dt > 0 and math.isfinite(dt)):
        raise ValueError("dt must be a positive number")
    if not np.all(np.isfinite(u_cmd)):
        raise ValueError("torque contains non-finite values")
    n = u_cmd.size
    n_sub = _substeps(truth, dt)
    h = dt / n_sub
    A, B = linear_state_space(truth)
    Ad, Bd = _zoh(A, B, h)
    u_sub = _delayed_substep_input(u_cmd, dt, truth.dead_time, n_sub) + truth.gravity_torque
    x0 = np.array([initial_speed, initial_speed, initial_speed, 0.0, 0.0])
    try:
        lam, b, C, z0 = _modal(Ad, Bd, A, x0)
        states = _simulate_modal(truth, lam, b, C, z0, u_sub)
    except np.linalg.LinAlgError:
        states = _simulate_dense(truth, Ad, Bd, x0, u_sub)
    w1_sub = states[0]  # at the n*n_sub + 1 sub-step edges

    # true motor angle: trapezoidal integration on the sub-step grid
    q_sub = np.concatenate(([0.0], np.cumsum(0.5 * (w1_sub[1:] + w1_sub[:-1])) * h))
    idx = np.arange(n) * n_sub
    speed_true = w1_sub[idx]
    if truth.encoder_counts > 0:
        res = 2 * np.pi / truth.encoder_counts
        counts = np.floor(q_sub[np.arange(n + 1) * n_sub] / res)
        # speed at t_k from the counts at t_{k-1} and t_k (0 at k = 0)
        speed = np.concatenate(([0.0], np.diff(counts)[: max(n - 1, 0)] * (res / dt)))[:n]
    else:
        speed = speed_true.copy()
    if truth.speed_noise > 0:
        speed = speed + rng.normal(0.0, truth.speed_noise, n)
    if truth.speed_resolution > 0:
        speed = np.round(speed / truth.speed_resolution) * truth.speed_resolution

    torque_applied = u_sub[: n * n_sub].reshape(n, n_sub).mean(axis=1) - truth.gravity_torque
    friction = truth.friction(speed_true) if truth.has_nonlinear_friction else np.zeros(n)
    return {
        "t": np.arange(n) * dt,
        "torque_cmd": u_cmd.copy(),
        "torque": torque_applied,
        "speed": speed,
        "speed_true": speed_true,
        "load_speed": states[2][idx],
        "position": q_sub[idx],
        "friction": np.asarray(friction, dtype=float),
        "dt": float(dt),
        "substeps": n_sub,
    }
