"""Two-mass oscillator of seed paper 002 (sec. 4.1) as a simulated plant.

Chain: wall -- (c1, d1) -- m1 -- (c2, d2) -- m2; the force acts on m1, the position x2 of m2
is measured. Besides what the design model (``identification.models.ode_models.oscillator_model``)
knows, the truth has effects it lacks: Coulomb friction on both masses (smooth sign
``tanh(v/eps)``), a first-order lag of the applied force, and a position sensor with
Gaussian noise and quantisation.

Integration: classical RK4 with ``substeps`` steps per sample on the zero-order-held command,
in plain Python floats (a few states, so this beats per-step numpy calls).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields

import numpy as np

__all__ = ["OscillatorTruth", "simulate", "rk4_held", "truth_from_config", "OUTPUT"]

#: Key of the measured output in :func:`simulate`'s result.
OUTPUT = "x2"


@dataclass(frozen=True)
class OscillatorTruth:
    """Physical values of the simulated oscillator (SI; defaults = configs/oscillator-sim.toml)."""

    m1: float = 1.0  # kg
    m2: float = 1.0  # kg
    c1: float = 2000.0  # N/m
    c2: float = 1100.0  # N/m
    d1: float = 2.0  # N*s/m
    d2: float = 2.0  # N*s/m
    coulomb1: float = 0.002  # N, Coulomb friction on m1
    coulomb2: float = 0.002  # N, Coulomb friction on m2
    friction_speed_eps: float = 1e-3  # m/s, smooth sign tanh(v/eps)
    input_lag: float = 2e-5  # s, time constant of the force actuator (0: none)
    position_noise: float = 5e-5  # m, std of the additive noise on x2
    position_resolution: float = 1e-6  # m, quantum of the position sensor (0: none)
    substeps: int = 10  # RK4 steps per sample

    @classmethod
    def from_config(cls, d: dict | None) -> OscillatorTruth:
        """Build from a flat dict (e.g. ``[simulator.truth]``); missing keys take the defaults."""
        return truth_from_config(cls, d, "oscillator")

    def to_dict(self) -> dict:
        return asdict(self)

    def validate(self) -> None:
        for name in ("m1", "m2", "c1", "c2", "friction_speed_eps"):
            if not getattr(self, name) > 0:
                raise ValueError(f"oscillator truth: {name} must be > 0")
        for name in ("d1", "d2", "coulomb1", "coulomb2", "input_lag", "position_noise",
                     "position_resolution"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"oscillator truth: {name} must be >= 0")
        if self.substeps < 1:
            raise ValueError("oscillator truth: substeps must be >= 1")

    def model_values(self) -> dict[str, float]:
        """The values the design model knows (``identification.models.ode_models.OSCILLATOR_NOMINAL``
        keys)."""
        return {k: getattr(self, k) for k in ("m1", "m2", "c1", "c2", "d1", "d2")}


def truth_from_config(cls, d: dict | None, label: str):
    """Shared ``from_config``: reject unknown keys and non-numbers, cast ints, validate."""
    d = dict(d or {})
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(d) - set(known))
    if unknown:
        raise ValueError(f"{label} truth: unknown key(s) {unknown}; known: {sorted(known)}")
    kwargs: dict = {}
    for name, value in d.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{label} truth: {name} must be a number, got {value!r}")
        if known[name].type in ("int", int) and not float(value).is_integer():
            raise ValueError(f"{name} must be a whole number, got {value!r}")
        kwargs[name] = int(value) if known[name].type in ("int", int) else float(value)
    truth = cls(**kwargs)
    truth.validate()
    return truth


def rk4_held(rhs: Callable[[list[float], float], list[float]], x0: Sequence[float], u: np.ndarray,
             dt: float, substeps: int, lag: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """RK4 of ``x' = rhs(x, F)`` with ``u`` held per sample and applied through a first-order lag.

    The lag state is advanced exactly (``F -> u + (F - u) exp(-h/lag)`` per step) and the mechanics
    see its mean over each RK4 step, so a lag far shorter than the step is neither stiff nor
    mis-sampled at the sample edges. Returns the states at ``t_k = k*dt`` (k = 0..N, shape
    (N+1, n)) and the applied force at the same instants.
    """
    h = dt / substeps
    x = [float(v) for v in x0]
    n = len(x)
    out = np.empty((len(u) + 1, n))
    applied = np.empty(len(u) + 1)
    out[0] = x
    fa = 0.0
    applied[0] = fa
    e_full = math.exp(-h / lag) if lag > 0 else 0.0
    mean_w = lag / h * (1.0 - e_full) if lag > 0 else 0.0  # weight of (F - u) in the step mean
    rng = range(n)
    for k, uk in enumerate(u.tolist()):
        for _ in range(substeps):
            f_mean = uk + (fa - uk) * mean_w
            f_end = uk + (fa - uk) * e_full
            k1 = rhs(x, f_mean)
            k2 = rhs([x[i] + 0.5 * h * k1[i] for i in rng], f_mean)
            k3 = rhs([x[i] + 0.5 * h * k2[i] for i in rng], f_mean)
            k4 = rhs([x[i] + h * k3[i] for i in rng], f_mean)
            x = [x[i] + h / 6 * (k1[i] + 2 * k2[i] + 2 * k3[i] + k4[i]) for i in rng]
            fa = f_end
        out[k + 1] = x
        applied[k + 1] = fa
    return out, applied


def _rhs(truth: OscillatorTruth) -> Callable[[list[float], float], list[float]]:
    m1, m2, c1, c2, d1, d2 = truth.m1, truth.m2, truth.c1, truth.c2, truth.d1, truth.d2
    f1, f2, eps = truth.coulomb1, truth.coulomb2, truth.friction_speed_eps
    tanh = math.tanh

    def rhs(x: list[float], force: float) -> list[float]:
        x1, x2, v1, v2 = x
        spring = c2 * (x1 - x2) + d2 * (v1 - v2)
        a1 = (force - c1 * x1 - d1 * v1 - spring - f1 * tanh(v1 / eps)) / m1
        a2 = (spring - f2 * tanh(v2 / eps)) / m2
        return [v1, v2, a1, a2]

    return rhs


def _sensor(value: np.ndarray, noise: float, resolution: float, rng: np.random.Generator) -> np.ndarray:
    out = value + rng.normal(0.0, noise, value.size) if noise > 0 else value.copy()
    if resolution > 0:
        out = np.round(out / resolution) * resolution
    return out


def simulate(truth: OscillatorTruth, force: np.ndarray, dt: float,
             rng: np.random.Generator | int | None = None) -> dict:
    """Simulate from rest for the force command ``force`` (N, one value per sample, held for ``dt``).

    Returns arrays sampled at ``t = k*dt`` (k = 0..N-1, before sample k acts): ``t``,
    ``force_cmd``, ``force`` (applied force after the lag), ``x2`` (measured, m), ``x2_true``,
    ``x1``, ``v1``, ``v2``; plus ``dt`` and ``substeps``.
    """
    if not isinstance(rng, np.random.Generator):
        rng = np.random.default_rng(0 if rng is None else rng)
    u = np.asarray(force, dtype=float).ravel()
    if not (dt > 0 and math.isfinite(dt)):
        raise ValueError("dt must be a positive number")
    if not np.all(np.isfinite(u)):
        raise ValueError("force contains non-finite values")
    X, applied = rk4_held(_rhs(truth), [0.0] * 4, u, dt, truth.substeps, truth.input_lag)
    X, applied = X[:-1], applied[:-1] if truth.input_lag > 0 else u.copy()
    n = u.size
    return {
        "t": np.arange(n) * dt,
        "force_cmd": u.copy(),
        "force": applied,
        "x2": _sensor(X[:, 1], truth.position_noise, truth.position_resolution, rng),
        "x2_true": X[:, 1].copy(),
        "x1": X[:, 0].copy(),
        "v1": X[:, 2].copy(),
        "v2": X[:, 3].copy(),
        "dt": float(dt),
        "substeps": truth.substeps,
    }
