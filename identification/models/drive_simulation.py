"""Fixed-step simulation of drive candidates with forward sensitivities (seed 004, eqs. 13-15).

Discretisation (step ``h = decimate * dt``):

* the linear part (inertias, springs, dampers, viscous friction) is discretised exactly
  for a zero-order-held input (``Ad = expm(A h)``); its parameter derivatives ``dAd/dp``,
  ``dBd/dp`` come from the block matrix exponential (Frechet derivative), so the
  sensitivities are the exact derivatives of the discrete model output;
* the input held over step k is the mean of the dead-time-shifted measured command over
  ``[t_k, t_k + h)`` (the command is a zero-order hold at ``dt``); its derivative with respect
  to the dead time is the difference quotient of the command at the two shifted step edges;
* the measured speed is the drive's: its encoder angle differenced over one sample of the trace, i.e. the
  mean motor speed over the last sample - half a sample (``speed_lag = dt / 2``) behind the motor speed
  (the averaging's amplitude factor ``sinc(f dt)`` is above 0.9996 up to 150 Hz at 10 kHz). The model
  delays its output by ``speed_lag``; for a time-invariant model started at rest that is the same as
  delaying its input, so the lag is added to the dead time of the input (exactly, as a fractional delay on
  the data's own step) and the ``dead_time`` parameter is the drive's own, command to torque;
* Coulomb/Stribeck friction is held over a step at its value at the end of the step
  (implicit, solved by scalar Newton): stable for any stiffness of the smooth sign; the
  sensitivity of the friction follows from the implicit function theorem.

All sensitivity columns ride along with the state as one augmented vector
``xi = [x, dx/dp_1, ..., dx/dp_np]``; for linear candidates one step is one matrix-vector
product ``xi+ = Phi xi + w_k``, the nonlinear ones add a scalar Newton solve and a rank-one
update per step.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import numpy as np
import scipy.linalg

from identification.models import drive_kernels
from identification.models.drive_models import DriveStructure, linear_matrices

__all__ = ["SimResult", "StepInput", "prepare_input", "discretize", "simulate", "DEFAULT_FRICTION_EPS",
           "ENGINES", "get_engine", "set_engine"]

#: Speed scale of the smooth sign ``tanh(w/eps)`` in the candidate models, rad/s.
DEFAULT_FRICTION_EPS = 0.05

#: ``compiled``: the step loop in :mod:`identification.models.drive_kernels` (numba); ``python``: the
#: loop below
#: (nonlinear candidates) and the numpy block lifting (linear ones), the implementation before issue 23.
ENGINES = ("compiled", "python")


def _engine_from_env() -> str:
    name = os.environ.get("HIL_SIM_ENGINE", "").strip().lower() or "compiled"
    if name not in ENGINES:
        raise ValueError(f"HIL_SIM_ENGINE={name!r}: known engines are {ENGINES}")
    return name if (name == "python" or drive_kernels.AVAILABLE) else "python"


_ENGINE = _engine_from_env()


def get_engine() -> str:
    """The simulation engine of this process (``HIL_SIM_ENGINE`` at import, or :func:`set_engine`)."""
    return _ENGINE


def set_engine(name: str) -> str:
    """Choose the engine of this process; returns the previous one. Worker processes read
    ``HIL_SIM_ENGINE`` when they start: set that too to switch a pool or a Dask cluster."""
    global _ENGINE
    if name not in ENGINES:
        raise ValueError(f"unknown engine {name!r}: known {ENGINES}")
    if name == "compiled" and not drive_kernels.AVAILABLE:
        raise RuntimeError("the compiled engine needs numba")
    old, _ENGINE = _ENGINE, name
    return old


@dataclass
class SimResult:
    """Simulated motor speed on the model grid and its parameter sensitivities."""

    t: np.ndarray  # s, model grid k*h
    y: np.ndarray  # rad/s
    S: np.ndarray | None  # (n, n_p) d y / d p in physical parameter units
    names: list[str]


@dataclass
class StepInput:
    """Measured command prepared for a model step ``h = decimate * dt``, and the lag of the measured speed."""

    u: np.ndarray  # command at dt (ZOH), N*m
    dt: float
    decimate: int
    n_steps: int
    _cum: np.ndarray  # integral of the command at the knots j*dt
    speed_lag: float = 0.0  # s, lag of the measured speed behind the motor speed (dt / 2: differenced angle)
    _last: tuple = field(default=(), repr=False, compare=False)  # (delay, v, dv) of the last held() call
    _knots: np.ndarray | None = field(default=None, repr=False, compare=False)  # j*dt, made on first use

    @property
    def h(self) -> float:
        return self.dt * self.decimate

    def held(self, dead_time: float) -> tuple[np.ndarray, np.ndarray]:
        """Mean delayed input per model step and its derivative with respect to the dead time (read-only
        arrays; the last delay's are kept: a candidate without a dead time asks for the same one always)."""
        if self._last and self._last[0] == dead_time:
            return self._last[1], self._last[2]
        v, dv = self._held(dead_time)
        v.setflags(write=False)
        dv.setflags(write=False)
        self._last = (dead_time, v, dv)
        return v, dv

    def _held(self, dead_time: float) -> tuple[np.ndarray, np.ndarray]:
        h = self.h
        edges = np.arange(self.n_steps + 1) * h - dead_time
        if self._knots is None:
            self._knots = np.arange(self.u.size + 1) * self.dt
        U = np.interp(edges, self._knots, self._cum, left=0.0)
        v = np.diff(U) / h
        idx = np.floor(edges / self.dt + 1e-9).astype(int)
        uz = np.where((idx >= 0) & (idx < self.u.size), self.u[np.clip(idx, 0, self.u.size - 1)], 0.0)
        dv = -np.diff(uz) / h
        return v, dv


def prepare_input(u: np.ndarray, dt: float, decimate: int = 1, speed_lag: float | None = None) -> StepInput:
    """Wrap the measured command (one value per ``dt``) for simulation on the step ``decimate*dt``.

    ``speed_lag`` (s): how far the measured speed lags the motor speed; default ``dt / 2``, the drive's
    speed differenced from the encoder angle over one sample (0: a speed sampled directly)."""
    u = np.asarray(u, dtype=float).ravel()
    decimate = int(decimate)
    if decimate < 1:
        raise ValueError("decimate must be >= 1")
    lag = 0.5 * float(dt) if speed_lag is None else float(speed_lag)
    if not (lag >= 0 and math.isfinite(lag)):
        raise ValueError(f"speed_lag must be >= 0, got {speed_lag!r}")
    n_steps = u.size // decimate
    if n_steps < 2:
        raise ValueError("record too short")
    cum = np.concatenate(([0.0], np.cumsum(u) * dt))
    return StepInput(u=u, dt=float(dt), decimate=decimate, n_steps=n_steps, _cum=cum, speed_lag=lag)


def discretize(A: np.ndarray, B: np.ndarray, dA: np.ndarray, dB: np.ndarray, h: float
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Exact ZOH discretisation and its parameter derivatives (block matrix exponential)."""
    n = A.shape[0]
    n_p = dA.shape[0]
    M = np.zeros((n + 1, n + 1))
    M[:n, :n] = A
    M[:n, n] = B
    E = scipy.linalg.expm(M * h)
    Ad, Bd = E[:n, :n], E[:n, n]
    dAd = np.zeros((n_p, n, n))
    dBd = np.zeros((n_p, n))
    moving = np.flatnonzero(dA.reshape(n_p, -1).any(axis=1) | dB.reshape(n_p, -1).any(axis=1))
    if moving.size:  # one stacked call: scipy runs each slice as it would alone (the same numbers), once
        big = np.zeros((moving.size, 2 * (n + 1), 2 * (n + 1)))
        big[:, : n + 1, : n + 1] = M * h
        big[:, n + 1:, n + 1:] = M * h
        big[:, :n, n + 1: 2 * n + 1] = dA[moving] * h  # the derivative blocks, all at once
        big[:, :n, 2 * n + 1] = dB[moving] * h
        L = scipy.linalg.expm(big)[:, : n + 1, n + 1:]
        dAd[moving] = L[:, :n, :n]
        dBd[moving] = L[:, :n, n]
    return Ad, Bd, dAd, dBd


def simulate(structure: DriveStructure, params: dict[str, float], inp: StepInput, *,
             sensitivities: bool = True, friction_eps: float = DEFAULT_FRICTION_EPS,
             engine: str | None = None) -> SimResult:
    """Simulate the measured motor speed from rest for the command in ``inp`` (the speed ``inp.speed_lag``
    late: input delay ``dead_time + speed_lag``); optionally with d y / d p.

    ``engine``: ``compiled`` or ``python`` (default: :func:`get_engine`); both run the same recursion."""
    s = structure
    names = s.param_names
    p = {name: float(params[name]) for name in names}
    n = s.n_states
    A, B, dA, dB = linear_matrices(s, p)
    Ad, Bd, dAd, dBd = discretize(A, B, dA, dB, inp.h)
    delay = p.get("dead_time", 0.0) + inp.speed_lag
    v, dv_dT = inp.held(delay)
    if s.gravity:
        v = v + p["gravity_torque"]
    N = inp.n_steps
    t = np.arange(N) * inp.h

    compiled = (engine or _ENGINE) == "compiled"
    Phi, Gam, w_in, Gf = _augmented(names, Ad, Bd, dAd, dBd, v, dv_dT, sensitivities, phi=not compiled)
    if inp.decimate == 1 and delay > 0:  # the data's own step: the delayed command exactly
        Gam, w_in = _fractional_delay(names, p, delay, A, B, dA, dB, Bd, dBd, inp, sensitivities)
    if compiled:
        X = _compiled_steps(s, p, names, Ad, Bd, dAd, Gam, w_in, Gf, sensitivities, friction_eps)
    elif not s.nonlinear:
        X = _linear_blocks(Phi, Gam, w_in, np.arange(0, Phi.shape[0], n))
    else:
        X = _python_friction_steps(s, p, names, Phi, Gam, w_in, Gf, float(Bd[0]), sensitivities, friction_eps)
    y = X[:, 0].copy()
    S = X[:, 1:].copy() if sensitivities else None
    if not np.all(np.isfinite(y)):
        y = np.nan_to_num(y, nan=1e6, posinf=1e6, neginf=-1e6)
    return SimResult(t=t, y=y, S=S, names=list(names))


def _augmented(names: list[str], Ad, Bd, dAd, dBd, v: np.ndarray, dv_dT: np.ndarray, sensitivities: bool,
               phi: bool = True):
    """``Phi, Gam, w_in, Gf`` of the step ``xi+ = Phi xi + Gam w_k + Gf f_k``: the state alone, or the state
    with its sensitivity columns ``xi = [x, dx/dp_1, ..., dx/dp_np]`` (input channels: held torque, its
    dead-time derivative, constant 1 for the gravity torque). ``phi=False``: ``Phi`` is not built (``None``;
    the compiled loop works on ``Ad`` and ``dAd`` block-wise)."""
    n, n_p, N = Ad.shape[0], len(names), v.size
    if not sensitivities:
        return Ad, Bd[:, None], v[:, None], Bd
    m = n * (1 + n_p)
    Phi = None
    if phi:
        Phi = np.zeros((m, m))
        Phi[:n, :n] = Ad
        for j in range(n_p):
            r = n * (j + 1)
            Phi[r:r + n, :n] = dAd[j]
            Phi[r:r + n, r:r + n] = Ad
    Gam = np.zeros((m, 3))
    Gam[:n, 0] = Bd
    Gam[n:, 0] = dBd.ravel()
    for j, name in enumerate(names):
        if name == "dead_time":
            Gam[n * (j + 1):n * (j + 2), 1] = Bd
        elif name == "gravity_torque":
            Gam[n * (j + 1):n * (j + 2), 2] = Bd
    w_in = np.column_stack([v, dv_dT, np.ones(N)])
    Gf = np.concatenate([Bd, dBd.ravel()])
    return Phi, Gam, w_in, Gf


def _fractional_delay(names: list[str], p: dict[str, float], T: float, A, B, dA, dB, Bd, dBd, inp: StepInput,
                      sensitivities: bool) -> tuple[np.ndarray, np.ndarray]:
    """``Gam, w_in`` of the exact discretisation on the command's own step ``dt`` with the input delay
    (dead time plus speed lag) ``T = m dt + tau`` as a fractional input delay: over step k the delayed
    command is ``u[k-m-1]`` for the first ``tau`` and ``u[k-m]`` for the rest, so
    ``x+ = Ad x + Ga u[k-m-1] + Gb u[k-m]`` with
    ``Ga = expm(A (dt - tau)) G(tau)``, ``Gb = G(dt - tau)``, ``G(s) = int_0^s expm(A r) dr B`` - no error
    from the step for the linear part. Parameter derivatives by complex step through the matrix exponentials;
    ``dGa/dT = expm(A (dt - tau)) B = -dGb/dT``. Channels: ``u[k-m-1]``, ``u[k-m]``, 1 (gravity)."""
    dt = inp.dt
    m = int(math.floor(T / dt + 1e-12))
    tau = min(max(T - m * dt, 0.0), dt)

    def gammas(A_, B_):
        n = A_.shape[0]
        M = np.zeros((n + 1, n + 1), dtype=A_.dtype)
        M[:n, :n], M[:n, n] = A_, B_
        late = scipy.linalg.expm(M * (dt - tau))
        early = scipy.linalg.expm(M * tau)[:n, n]
        return late[:n, :n] @ early, late[:n, n], late[:n, :n] @ B_

    Ga, Gb, EB = gammas(A, B)
    k = np.arange(inp.n_steps)
    u_at = lambda idx: np.where(idx >= 0, inp.u[np.clip(idx, 0, inp.u.size - 1)], 0.0)  # noqa: E731
    w_in = np.column_stack([u_at(k - m - 1), u_at(k - m), np.ones(inp.n_steps)])
    grav = p.get("gravity_torque", 0.0)
    n = A.shape[0]
    cols = [np.column_stack([Ga, Gb, Bd * grav])]
    if sensitivities:
        h = 1e-30
        for j, name in enumerate(names):
            if name == "dead_time":
                cols.append(np.column_stack([EB, -EB, np.zeros(n)]))
            elif name == "gravity_torque":
                cols.append(np.column_stack([np.zeros(n), np.zeros(n), Bd]))
            elif np.any(dA[j]) or np.any(dB[j]):
                ca, cb, _ = gammas(A + 1j * h * dA[j], B + 1j * h * dB[j])
                cols.append(np.column_stack([ca.imag / h, cb.imag / h, dBd[j] * grav]))
            else:
                cols.append(np.zeros((n, 3)))
    return np.vstack(cols), w_in


def _python_friction_steps(s: DriveStructure, p: dict[str, float], names: list[str], Phi, Gam, w_in, Gf,
                           g: float, sensitivities: bool, friction_eps: float) -> np.ndarray:
    """The step loop of the candidates with Coulomb/Stribeck friction in Python (the ``python`` engine):
    the implicit friction ``f = F(a + g f)`` by scalar Newton, its sensitivity by the implicit function
    theorem."""
    n, n_p, N = s.n_states, len(names), w_in.shape[0]
    m = Phi.shape[0]
    out_idx = np.arange(0, m, n)  # w1 and d w1 / d p_j
    X = np.empty((N, out_idx.size))
    xi = np.zeros(m)
    W = w_in @ Gam.T
    fc = p.get("coulomb", 0.0)
    fs = p.get("stribeck_torque", 0.0) if s.stribeck else 0.0
    inv_vs = 1.0 / p["stribeck_speed"] if s.stribeck else 0.0
    inv_eps = 1.0 / float(friction_eps)
    jc = names.index("coulomb") if s.coulomb else -1
    js = names.index("stribeck_torque") if s.stribeck else -1
    jv = names.index("stribeck_speed") if s.stribeck else -1
    Fp = np.zeros(n_p)
    Bd_row = Gf[None, :n]
    dot = np.dot
    tanh, exp = math.tanh, math.exp
    f = 0.0
    for k in range(N):
        X[k] = xi[out_idx]
        base = dot(Phi, xi)
        base += W[k]
        a = base[0]
        # implicit friction: f = F(a + g f), scalar Newton started from the previous value
        for _ in range(30):
            w = a + g * f
            th = tanh(w * inv_eps)
            if fs:
                e = exp(-abs(w) * inv_vs)
                level = fc + fs * e
                dlev = -fs * e * inv_vs if w >= 0 else fs * e * inv_vs
            else:
                e = 0.0
                level = fc
                dlev = 0.0
            F = -th * level
            dF = -(1.0 - th * th) * inv_eps * level - th * dlev
            step = (f - F) / (1.0 - dF * g)
            f -= step
            if abs(step) <= 1e-12 * (1.0 + abs(f)):
                break
        f = F  # consistent with the last evaluation (step was negligible)
        xi = base + Gf * f
        if sensitivities:
            if jc >= 0:
                Fp[jc] = -th
            if js >= 0:
                Fp[js] = -th * e
                Fp[jv] = -th * fs * e * abs(w) * inv_vs * inv_vs
            Sv = xi[n:].reshape(n_p, n)
            df = (dF * Sv[:, 0] + Fp) / (1.0 - dF * g)
            Sv += df[:, None] * Bd_row
    return X


def _compiled_steps(s: DriveStructure, p: dict[str, float], names: list[str], Ad, Bd, dAd, Gam, w_in, Gf,
                    sensitivities: bool, friction_eps: float) -> np.ndarray:
    """The step loop in :mod:`identification.models.drive_kernels` (no BLAS: repeatable to the bit)."""
    nl = s.nonlinear
    return drive_kernels.drive_steps(
        Ad, dAd, Bd, Gam, w_in, Gf, len(names), sensitivities, nl,
        fc=p.get("coulomb", 0.0) if nl else 0.0,
        fs=p.get("stribeck_torque", 0.0) if s.stribeck else 0.0,
        inv_vs=1.0 / p["stribeck_speed"] if s.stribeck else 0.0,
        inv_eps=1.0 / float(friction_eps),
        jc=names.index("coulomb") if s.coulomb else -1,
        js=names.index("stribeck_torque") if s.stribeck else -1,
        jv=names.index("stribeck_speed") if s.stribeck else -1)


def _linear_blocks(Phi: np.ndarray, Gam: np.ndarray, w_in: np.ndarray, out_idx: np.ndarray,
                   L: int = 64) -> np.ndarray:
    """Outputs ``xi_k[out_idx]`` of ``xi_{k+1} = Phi xi_k + Gam w_k``, ``xi_0 = 0``, by block lifting.

    Within a block of ``L`` steps the outputs are a free response of the block's initial
    state plus a convolution of the few input channels with the Markov parameters; only
    the block-initial states are propagated sequentially (N/L small steps instead of N).
    """
    N, c = w_in.shape
    m = Phi.shape[0]
    r = out_idx.size
    L = max(1, min(L, N))
    nb = -(-N // L)
    w = np.zeros((nb * L, c))
    w[:N] = w_in
    # powers: O[j] = C Phi^j (r x m), P[l] = Phi^l Gam (m x c)
    O = np.empty((L, r, m))
    P = np.empty((L, m, c))
    O[0] = np.eye(m)[out_idx]
    P[0] = Gam
    for j in range(1, L):
        O[j] = O[j - 1] @ Phi
        P[j] = Phi @ P[j - 1]
    PhiL = np.linalg.matrix_power(Phi, L)
    # forced response inside a block: y[j] = sum_{i<j} C P[j-1-i] w[i]
    H = P[:, out_idx, :]  # (L, r, c) Markov parameters
    T = np.zeros((L, r, L, c))
    for j in range(1, L):
        T[j, :, :j, :] = H[j - 1::-1].transpose(1, 0, 2)
    wb = w.reshape(nb, L * c)
    Y = wb @ T.reshape(L * r, L * c).T  # (nb, L*r)
    # block-initial states
    R = P[::-1].transpose(1, 0, 2).reshape(m, L * c)  # [P_{L-1} ... P_0]
    D = wb @ R.T  # (nb, m)
    Xi = np.empty((nb, m))
    xi = np.zeros(m)
    for b in range(nb):
        Xi[b] = xi
        xi = PhiL @ xi + D[b]
    Y += Xi @ O.reshape(L * r, m).T
    return Y.reshape(nb * L, r)[:N]
