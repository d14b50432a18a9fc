"""ODE plant models for input design: ``x' = f(x, u, b, t)``, ``y = g(x, b)`` with analytic Jacobians.

A model is any object with the attributes and methods of :class:`ODEModel`. Every method takes
arrays with arbitrary leading batch dimensions (``x`` of shape ``(..., n_x)``, ``u`` of shape
``(..., n_u)``) and returns e.g. ``fx`` of shape ``(..., n_x, n_x)``; ``b`` is the vector of the
parameters to be identified (``param_names``), every other physical value is held by the model.
The functions must also accept complex ``x`` and ``u`` (no ``abs``, ``max``, ``float()``): the
second derivatives needed by the adjoint of the sensitivity system are taken by complex step on
the analytic Jacobians, which is exact to round-off.

Linear time-invariant models additionally offer ``linear_system(b) -> (A, B, dA, dB)`` with
``y = C x``; the integrator then uses a matrix recurrence instead of stage evaluations.

Plants (seed paper 002, sec. 4, and the stacker crane of seed 004):

* :func:`oscillator_model` - wall -- c1, d1 -- m1 -- c2, d2 -- m2, force on m1, x2 measured;
* :class:`CartPendulumModel` - cart with a pendulum hinged at its centre, force on the cart,
  absolute pendulum angle measured (0 = hanging down);
* :func:`crane_model` - the three-mass drive chain of ``identification.models.drive_models`` with viscous
  friction only, motor speed measured.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from identification.models.drive_models import DriveStructure, linear_matrices

__all__ = [
    "ODEModel",
    "LinearModel",
    "CartPendulumModel",
    "oscillator_model",
    "crane_model",
    "OSCILLATOR_NOMINAL",
    "PENDULUM_NOMINAL",
    "PENDULUM_PARAMS",
    "complex_step_jacobian",
]

#: Nominal oscillator values (SI). Undamped modes 3.9 Hz and 9.5 Hz: a 1 s experiment sees 4-10 periods.
OSCILLATOR_NOMINAL: dict[str, float] = {
    "m1": 1.0,  # kg
    "m2": 1.0,  # kg
    "c1": 2000.0,  # N/m, wall - m1
    "c2": 1100.0,  # N/m, m1 - m2 (the parameter of paper 4.1)
    "d1": 2.0,  # N*s/m
    "d2": 2.0,  # N*s/m
}

#: Nominal cart-pendulum values (SI). Pendulum mode with the cart free: about 1.15 Hz.
PENDULUM_NOMINAL: dict[str, float] = {
    "m_c": 1.0,  # kg, cart
    "m_p": 0.3,  # kg, pendulum
    "J_p": 0.004,  # kg*m^2, pendulum inertia about its centre of gravity
    "s_p": 0.2,  # m, joint -> centre of gravity
    "d_p": 0.01,  # N*m*s/rad, joint damping
    "d_c": 2.0,  # N*s/m, cart friction (viscous)
    "g": 9.81,  # m/s^2
}


@runtime_checkable
class ODEModel(Protocol):
    """What the sensitivity integrator and the adjoint need from a plant model."""

    state_names: tuple[str, ...]
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    param_names: tuple[str, ...]

    def f(self, x: np.ndarray, u: np.ndarray, b: np.ndarray, t: float | np.ndarray) -> np.ndarray: ...

    def fx(self, x: np.ndarray, u: np.ndarray, b: np.ndarray, t: float | np.ndarray) -> np.ndarray: ...

    def fu(self, x: np.ndarray, u: np.ndarray, b: np.ndarray, t: float | np.ndarray) -> np.ndarray: ...

    def fb(self, x: np.ndarray, u: np.ndarray, b: np.ndarray, t: float | np.ndarray) -> np.ndarray: ...

    def g(self, x: np.ndarray, b: np.ndarray) -> np.ndarray: ...

    def gx(self, x: np.ndarray, b: np.ndarray) -> np.ndarray: ...

    def gb(self, x: np.ndarray, b: np.ndarray) -> np.ndarray: ...


def complex_step_jacobian(fun: Callable[[np.ndarray], np.ndarray], p: np.ndarray) -> np.ndarray:
    """``d fun / d p`` by complex step (exact to round-off, ``fun`` complex-analytic), shape out + (n_p,)."""
    p = np.asarray(p, dtype=float)
    cols = []
    for j in range(p.size):
        step = 1e-30 * max(abs(p[j]), 1.0)
        pc = p.astype(complex)
        pc[j] += 1j * step
        cols.append(np.imag(fun(pc)) / step)
    return np.stack(cols, axis=-1)


@dataclass
class LinearModel:
    """``x' = A(b) x + B(b) u``, ``y = C x``; ``matrices(b) -> (A, B, dA, dB)``, dA: (n_b, n_x, n_x)."""

    matrices: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]
    C: np.ndarray
    state_names: tuple[str, ...]
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    param_names: tuple[str, ...]
    nominal: dict[str, float] = field(default_factory=dict)
    _cache: tuple | None = field(default=None, repr=False)

    def linear_system(self, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        b = np.asarray(b, dtype=float)
        if self._cache is None or not np.array_equal(self._cache[0], b):
            A, B, dA, dB = self.matrices(b)
            B = np.asarray(B, dtype=float).reshape(A.shape[0], -1)
            dB = np.asarray(dB, dtype=float).reshape(len(b), A.shape[0], -1)
            self._cache = (b.copy(), (np.asarray(A, float), B, np.asarray(dA, float), dB))
        return self._cache[1]

    def f(self, x, u, b, t=0.0):
        A, B, _, _ = self.linear_system(b)
        return x @ A.T + u @ B.T

    def fx(self, x, u, b, t=0.0):
        A = self.linear_system(b)[0]
        return np.broadcast_to(A, np.shape(x)[:-1] + A.shape)

    def fu(self, x, u, b, t=0.0):
        B = self.linear_system(b)[1]
        return np.broadcast_to(B, np.shape(x)[:-1] + B.shape)

    def fb(self, x, u, b, t=0.0):
        _, _, dA, dB = self.linear_system(b)
        cols = np.einsum("jik,...k->...ij", dA, x) + np.einsum("jik,...k->...ij", dB, u)
        return cols

    def g(self, x, b):
        return x @ self.C.T

    def gx(self, x, b):
        return np.broadcast_to(self.C, np.shape(x)[:-1] + self.C.shape)

    def gb(self, x, b):
        return np.zeros(np.shape(x)[:-1] + (self.C.shape[0], len(self.param_names)))


def _oscillator_ab(p: dict) -> tuple[np.ndarray, np.ndarray]:
    m1, m2, c1, c2, d1, d2 = (p[k] for k in ("m1", "m2", "c1", "c2", "d1", "d2"))
    dtype = np.result_type(*(np.asarray(v) for v in p.values()), float)
    A = np.zeros((4, 4), dtype=dtype)
    A[0, 2] = A[1, 3] = 1.0
    A[2] = [-(c1 + c2) / m1, c2 / m1, -(d1 + d2) / m1, d2 / m1]
    A[3] = [c2 / m2, -c2 / m2, d2 / m2, -d2 / m2]
    B = np.array([[0.0], [0.0], [1.0 / m1], [0.0]], dtype=dtype)
    return A, B


def _matrices_by_complex_step(build: Callable[[dict], tuple[np.ndarray, np.ndarray]], nominal: dict,
                              free: Sequence[str]) -> Callable:
    def matrices(b: np.ndarray):
        p = dict(nominal)
        p.update(zip(free, (float(v) for v in b), strict=True))

        def ab(bc: np.ndarray) -> np.ndarray:
            q = dict(p)
            q.update(zip(free, bc, strict=True))
            A, B = build(q)
            return np.concatenate([A, B], axis=1)

        A, B = build(p)
        d = complex_step_jacobian(ab, np.asarray(b, dtype=float))  # (n_x, n_x + n_u, n_b)
        n = A.shape[0]
        dA = np.moveaxis(d[:, :n, :], -1, 0)
        dB = np.moveaxis(d[:, n:, :], -1, 0)
        return A.real.astype(float), B.real.astype(float), dA, dB

    return matrices


def oscillator_model(values: dict[str, float] | None = None, free: Sequence[str] = ("c2",)) -> LinearModel:
    """Two-mass oscillator of paper 4.1. States ``[x1, x2, v1, v2]``, input force on m1, output ``x2``."""
    nominal = {**OSCILLATOR_NOMINAL, **(values or {})}
    unknown = set(free) - set(nominal)
    if unknown:
        raise ValueError(f"oscillator: unknown parameter(s) {sorted(unknown)}")
    C = np.array([[0.0, 1.0, 0.0, 0.0]])
    return LinearModel(_matrices_by_complex_step(_oscillator_ab, nominal, tuple(free)), C,
                       ("x1", "x2", "v1", "v2"), ("F",), ("x2",), tuple(free), nominal)


#: Parameters of the three-mass chain with viscous friction, in ``DriveStructure(3, viscous=True)`` order.
CRANE_LINEAR_PARAMS = ("J1", "J2", "k12", "d12", "J3", "k23", "d23", "viscous")


def crane_model(values: dict[str, float], free: Sequence[str] = ("k23", "d23", "J3")) -> LinearModel:
    """Three-mass drive chain (``drive_models`` 3m+visc). States ``[w1, w2, w3, q1-q2, q2-q3]``, output w1."""
    s = DriveStructure(3, viscous=True)
    names = s.param_names
    nominal = {k: float(values[k]) for k in names}
    idx = [names.index(k) for k in free]

    def matrices(b: np.ndarray):
        p = dict(nominal)
        p.update(zip(free, (float(v) for v in b), strict=True))
        A, B, dA, dB = linear_matrices(s, p)
        return A, B[:, None], dA[idx], dB[idx][:, :, None]

    C = np.array([[1.0, 0.0, 0.0, 0.0, 0.0]])
    return LinearModel(matrices, C, ("w1", "w2", "w3", "q12", "q23"), ("torque",), ("w1",), tuple(free),
                       nominal)


#: Parameters the cart-pendulum model can identify: the two of paper 4.2 and the friction nuisances
#: (cart viscous ``d_c``, cart Coulomb ``f_c`` in N, joint Coulomb ``f_p`` in N*m; smooth sign tanh(v/eps)).
PENDULUM_PARAMS = ("s_p", "d_p", "d_c", "f_c", "f_p")


@dataclass
class CartPendulumModel:
    """Cart on a line with a pendulum hinged at its centre (paper 4.2); identifies ``param_names``.

    States ``[x_c, phi, v_c, omega]`` (m, rad, m/s, rad/s), input: force on the cart (N),
    output: absolute pendulum angle (rad, 0 = hanging down). Equations of motion::

        [m_c + m_p,          m_p s cos(phi)] [v_c']   [F - d_c v_c - f_c T(v_c) + m_p s omega^2 sin(phi)]
        [m_p s cos(phi), J_p + m_p s^2     ] [omega'] = [-m_p g s sin(phi) - d_p omega - f_p T(omega)       ]

    with the smooth sign ``T(v) = tanh(v/eps)`` (``eps`` in ``values``; ``f_c = f_p = 0`` unless given:
    the paper's model). ``param_names`` is any ordered subset of :data:`PENDULUM_PARAMS` (default
    ``("s_p", "d_p")``); the friction terms are there so an analysis can fit them as nuisance parameters.
    Every derivative of the accelerations ``a = M^-1 r`` follows ``a_q = M^-1 (r_q - M_q a)``.
    """

    values: dict[str, float] = field(default_factory=lambda: dict(PENDULUM_NOMINAL))
    state_names: tuple[str, ...] = ("x_c", "phi", "v_c", "omega")
    input_names: tuple[str, ...] = ("F",)
    output_names: tuple[str, ...] = ("phi",)
    param_names: tuple[str, ...] = ("s_p", "d_p")

    def __post_init__(self):
        self.values = {"f_c": 0.0, "f_p": 0.0, "eps": 0.01, **PENDULUM_NOMINAL, **self.values}
        self.param_names = tuple(self.param_names)
        bad = [p for p in self.param_names if p not in PENDULUM_PARAMS]
        if bad or len(set(self.param_names)) != len(self.param_names) or not self.param_names:
            raise ValueError(f"CartPendulumModel identifies distinct names of {PENDULUM_PARAMS}, "
                             f"got {self.param_names}")
        self._slot = [PENDULUM_PARAMS.index(p) for p in self.param_names]

    @property
    def nominal(self) -> dict[str, float]:
        return self.values

    def _params(self, b) -> list:
        """(s, d_p, d_c, f_c, f_p): the values with the free ones taken from ``b``."""
        p = [self.values[k] for k in PENDULUM_PARAMS]
        for j, slot in enumerate(self._slot):
            p[slot] = b[j]
        return p

    # -- pieces -------------------------------------------------------------------------------------
    def _parts(self, x, u, b):
        v = self.values
        mc, mp, Jp, g, eps = v["m_c"], v["m_p"], v["J_p"], v["g"], v["eps"]
        s, dp, dc, fc, fp = self._params(b)
        phi, vc, om = x[..., 1], x[..., 2], x[..., 3]
        F = u[..., 0]
        sn, cs = np.sin(phi), np.cos(phi)
        tc, tp = np.tanh(vc / eps), np.tanh(om / eps)
        m11 = mc + mp + 0.0 * phi
        m12 = mp * s * cs
        m22 = Jp + mp * s * s + 0.0 * phi
        det = m11 * m22 - m12 * m12
        r1 = F - dc * vc - fc * tc + mp * s * om * om * sn
        r2 = -mp * g * s * sn - dp * om - fp * tp
        a1 = (m22 * r1 - m12 * r2) / det
        a2 = (m11 * r2 - m12 * r1) / det
        return dict(mp=mp, g=g, dc=dc, dp=dp, fc=fc, fp=fp, eps=eps, s=s, phi=phi, vc=vc, om=om, sn=sn,
                    cs=cs, tc=tc, tp=tp, m11=m11, m12=m12, m22=m22, det=det, a1=a1, a2=a2)

    @staticmethod
    def _solve(P, q1, q2):
        """``M^-1 q`` for the mass matrix in ``P``."""
        return (P["m22"] * q1 - P["m12"] * q2) / P["det"], (P["m11"] * q2 - P["m12"] * q1) / P["det"]

    def _dacc(self, P, r1, r2, M11=0.0, M12=0.0, M22=0.0):
        """Derivative of the accelerations for ``r_q = (r1, r2)`` and ``M_q = [[M11, M12], [M12, M22]]``."""
        q1 = r1 - (M11 * P["a1"] + M12 * P["a2"])
        q2 = r2 - (M12 * P["a1"] + M22 * P["a2"])
        return self._solve(P, q1, q2)

    def _param_columns(self, P, zero) -> list[tuple]:
        """d(a1, a2)/d(each name of PENDULUM_PARAMS)."""
        mp, sn, cs, om = P["mp"], P["sn"], P["cs"], P["om"]
        d_s = self._dacc(P, mp * om * om * sn, -mp * P["g"] * sn, M12=mp * cs, M22=2.0 * mp * P["s"] + zero)
        return [d_s,
                self._dacc(P, zero, -om),
                self._dacc(P, -P["vc"], zero),
                self._dacc(P, -P["tc"], zero),
                self._dacc(P, zero, -P["tp"])]

    # -- protocol -----------------------------------------------------------------------------------
    def jacobians(self, x, u, b, t=0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(f, f_x, f_b)`` at one real point with plain floats (the forward sweep calls this per stage)."""
        v = self.values
        mc, mp, Jp, g, eps = v["m_c"], v["m_p"], v["J_p"], v["g"], v["eps"]
        s, dp, dc, fc, fp = (float(q) for q in self._params(b))
        phi, vc, om = float(x[1]), float(x[2]), float(x[3])
        sn, cs = math.sin(phi), math.cos(phi)
        tc, tp = math.tanh(vc / eps), math.tanh(om / eps)
        m11 = mc + mp
        m12 = mp * s * cs
        m22 = Jp + mp * s * s
        det = m11 * m22 - m12 * m12
        r1 = float(u[0]) - dc * vc - fc * tc + mp * s * om * om * sn
        r2 = -mp * g * s * sn - dp * om - fp * tp
        a1 = (m22 * r1 - m12 * r2) / det
        a2 = (m11 * r2 - m12 * r1) / det

        def dacc(q1, q2, M11=0.0, M12=0.0, M22=0.0):
            q1 -= M11 * a1 + M12 * a2
            q2 -= M12 * a1 + M22 * a2
            return (m22 * q1 - m12 * q2) / det, (m11 * q2 - m12 * q1) / det

        p1, p2 = dacc(mp * s * om * om * cs, -mp * g * s * cs, M12=-mp * s * sn)
        v1, v2 = dacc(-dc - fc / eps * (1.0 - tc * tc), 0.0)
        o1, o2 = dacc(2.0 * mp * s * om * sn, -dp - fp / eps * (1.0 - tp * tp))
        cols = (dacc(mp * om * om * sn, -mp * g * sn, M12=mp * cs, M22=2.0 * mp * s), dacc(0.0, -om),
                dacc(-vc, 0.0), dacc(-tc, 0.0), dacc(0.0, -tp))
        f = np.array([vc, om, a1, a2])
        fx = np.array([[0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0], [0.0, p1, v1, o1], [0.0, p2, v2, o2]])
        fb = np.zeros((4, len(self._slot)))
        for j, slot in enumerate(self._slot):
            fb[2, j], fb[3, j] = cols[slot]
        return f, fx, fb

    def f(self, x, u, b, t=0.0):
        P = self._parts(x, u, b)
        return np.stack([P["vc"], P["om"], P["a1"], P["a2"]], axis=-1)

    def fx(self, x, u, b, t=0.0):
        P = self._parts(x, u, b)
        mp, s, sn, cs, om, eps = P["mp"], P["s"], P["sn"], P["cs"], P["om"], P["eps"]
        zero = 0.0 * P["phi"]
        one = zero + 1.0
        d_phi = self._dacc(P, mp * s * om * om * cs, -mp * P["g"] * s * cs, M12=-mp * s * sn)
        d_vc = self._dacc(P, zero - P["dc"] - P["fc"] / eps * (1.0 - P["tc"] ** 2), zero)
        d_om = self._dacc(P, 2.0 * mp * s * om * sn, zero - P["dp"] - P["fp"] / eps * (1.0 - P["tp"] ** 2))
        rows = [
            [zero, zero, one, zero],
            [zero, zero, zero, one],
            [zero, d_phi[0], d_vc[0], d_om[0]],
            [zero, d_phi[1], d_vc[1], d_om[1]],
        ]
        return np.stack([np.stack(r, axis=-1) for r in rows], axis=-2)

    def fu(self, x, u, b, t=0.0):
        P = self._parts(x, u, b)
        zero = 0.0 * P["phi"]
        a = self._solve(P, zero + 1.0, zero)
        return np.stack([zero, zero, a[0], a[1]], axis=-1)[..., None]

    def fb(self, x, u, b, t=0.0):
        P = self._parts(x, u, b)
        zero = 0.0 * P["phi"]
        every = self._param_columns(P, zero)
        cols = [np.stack([zero, zero, every[slot][0], every[slot][1]], axis=-1) for slot in self._slot]
        return np.stack(cols, axis=-1)

    def g(self, x, b):
        return x[..., 1:2]

    def gx(self, x, b):
        C = np.array([[0.0, 1.0, 0.0, 0.0]])
        return np.broadcast_to(C, np.shape(x)[:-1] + C.shape)

    def gb(self, x, b):
        return np.zeros(np.shape(x)[:-1] + (1, len(self.param_names)))
