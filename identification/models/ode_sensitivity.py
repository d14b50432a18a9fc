"""Sensitivity-extended ODE on a fixed grid (paper 002, eqs. 3-5) and the exact discrete adjoint of it.

Grid: ``N`` input samples of length ``dt`` held constant (zero-order hold), each split into
``n_sub`` classical Runge-Kutta (RK4) steps of ``h = dt/n_sub``; nodes ``t_n = n*h``,
``n = 0..M``, ``M = N*n_sub``. The scheme is applied to the extended state
``z = [x, x_b1, .., x_bn]`` with ``x_bj' = f_x x_bj + f_bj``; for an explicit Runge-Kutta
method this gives exactly the parameter derivatives of the discrete state, so the Fisher
matrix is that of the discrete model used for fitting.

The gradient of a cost ``J = sum_n c_n(z_n)`` with respect to the input samples is obtained
by the reverse (transposed) sweep through the RK4 stages - the discrete counterpart of the
adjoint system ``p' = -H_z^T`` (eqs. 9-15). It needs the Jacobian of the extended right-hand
side (eq. 5), whose first block column holds second derivatives of ``f``; they are taken by
complex step on the model's analytic ``f_x`` and ``f_b`` at all stage points at once.
Linear time-invariant models (``linear_system``) use the equivalent matrix recurrence
``z+ = Phi z + Gamma u`` (RK4 of a linear system is its 4th-order Taylor polynomial).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from identification.models.ode_models import ODEModel

__all__ = ["Trajectory", "integrate", "adjoint_gradient", "output_cotangents", "output_sensitivities"]

_CS = 1e-30  # complex step


@dataclass
class Trajectory:
    """States and state sensitivities at the nodes of the integration grid."""

    t: np.ndarray  # (M+1,) s
    x: np.ndarray  # (M+1, n_x)
    X: np.ndarray  # (M+1, n_x, n_b) dx/db
    h: float
    n_sub: int
    dt: float
    stages: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None  # x, X, u, t per stage
    linear: tuple[np.ndarray, np.ndarray] | None = None  # (Phi, Gamma) of the linear recurrence


def _is_linear(model) -> bool:
    return hasattr(model, "linear_system")


def _extended_linear(model, b: np.ndarray, h: float) -> tuple[np.ndarray, np.ndarray]:
    A, B, dA, dB = model.linear_system(b)
    nx, nu = B.shape
    nb = dA.shape[0]
    nz = nx * (1 + nb)
    Az = np.zeros((nz, nz))
    Bz = np.zeros((nz, nu))
    Az[:nx, :nx] = A
    Bz[:nx] = B
    for j in range(nb):
        r = nx * (j + 1)
        Az[r:r + nx, :nx] = dA[j]
        Az[r:r + nx, r:r + nx] = A
        Bz[r:r + nx] = dB[j]
    hA = h * Az
    eye = np.eye(nz)
    P2 = hA @ hA
    P3 = P2 @ hA
    Phi = eye + hA + P2 / 2 + P3 / 6 + P3 @ hA / 24
    Gam = h * (eye + hA / 2 + P2 / 6 + P3 / 24) @ Bz
    return Phi, Gam


def integrate(model: ODEModel, b: np.ndarray, u: np.ndarray, dt: float, n_sub: int = 1,
              x0: np.ndarray | None = None, store_stages: bool = True) -> Trajectory:
    """Integrate states and sensitivities for the held input ``u`` (N, n_u) or (N,)."""
    b = np.asarray(b, dtype=float)
    u = np.asarray(u, dtype=float)
    if u.ndim == 1:
        u = u[:, None]
    N, nu = u.shape
    nx = len(model.state_names)
    nb = b.size
    n_sub = int(n_sub)
    if n_sub < 1 or not (dt > 0 and math.isfinite(dt)):
        raise ValueError("need dt > 0 and n_sub >= 1")
    h = dt / n_sub
    M = N * n_sub
    x = np.zeros(nx) if x0 is None else np.asarray(x0, dtype=float).copy()
    t = np.arange(M + 1) * h
    if _is_linear(model):
        Phi, Gam = _extended_linear(model, b, h)
        nz = Phi.shape[0]
        Z = np.empty((M + 1, nz))
        z = np.zeros(nz)
        z[:nx] = x
        Z[0] = z
        Gu = u @ Gam.T  # (N, nz)
        for n in range(M):
            z = Phi @ z + Gu[n // n_sub]
            Z[n + 1] = z
        X = Z[:, nx:].reshape(M + 1, nb, nx).transpose(0, 2, 1)
        return Trajectory(t, Z[:, :nx].copy(), np.ascontiguousarray(X), h, n_sub, dt, linear=(Phi, Gam))

    xs = np.empty((M + 1, nx))
    Xs = np.empty((M + 1, nx, nb))
    X = np.zeros((nx, nb))
    xs[0], Xs[0] = x, X
    if store_stages:
        sx = np.empty((M, 4, nx))
        sX = np.empty((M, 4, nx, nb))
    jac = getattr(model, "jacobians", None)
    if jac is None:
        def jac(x, u, b, t):
            return model.f(x, u, b, t), model.fx(x, u, b, t), model.fb(x, u, b, t)
    for n in range(M):
        uk = u[n // n_sub]
        tn = n * h
        f1, J1, B1 = jac(x, uk, b, tn)
        k1, K1 = f1, J1 @ X + B1
        x2, X2 = x + 0.5 * h * k1, X + 0.5 * h * K1
        f2, J2, B2 = jac(x2, uk, b, tn + 0.5 * h)
        k2, K2 = f2, J2 @ X2 + B2
        x3, X3 = x + 0.5 * h * k2, X + 0.5 * h * K2
        f3, J3, B3 = jac(x3, uk, b, tn + 0.5 * h)
        k3, K3 = f3, J3 @ X3 + B3
        x4, X4 = x + h * k3, X + h * K3
        f4, J4, B4 = jac(x4, uk, b, tn + h)
        k4, K4 = f4, J4 @ X4 + B4
        if store_stages:
            sx[n] = (x, x2, x3, x4)
            sX[n] = (X, X2, X3, X4)
        x = x + (h / 6) * (k1 + 2 * k2 + 2 * k3 + k4)
        X = X + (h / 6) * (K1 + 2 * K2 + 2 * K3 + K4)
        xs[n + 1], Xs[n + 1] = x, X
    stages = None
    if store_stages:
        su = np.repeat(u, n_sub, axis=0)[:, None, :].repeat(4, axis=1)
        st = (np.arange(M) * h)[:, None] + np.array([0.0, 0.5, 0.5, 1.0]) * h
        stages = (sx, sX, su, st)
    return Trajectory(t, xs, Xs, h, n_sub, dt, stages=stages)


def output_sensitivities(model: ODEModel, b: np.ndarray, traj: Trajectory) -> tuple[np.ndarray, np.ndarray]:
    """Outputs ``y`` (M+1, n_y) and output sensitivities ``Y = g_x X + g_b`` (M+1, n_y, n_b) at the nodes."""
    y = model.g(traj.x, b)
    Y = model.gx(traj.x, b) @ traj.X + model.gb(traj.x, b)
    return y, Y


def output_cotangents(model: ODEModel, b: np.ndarray, traj: Trajectory, cY: np.ndarray,
                      cy: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Pull ``dJ/dY`` (and ``dJ/dy``) at the nodes back to ``dJ/dx`` (M+1, n_x) and ``dJ/dX``."""
    gx = model.gx(traj.x, b)
    cX = np.swapaxes(gx, -1, -2) @ cY
    cx = np.zeros_like(traj.x)
    if cy is not None:
        cx += np.einsum("nyi,ny->ni", gx, cy)
    if not _is_linear(model):  # g_x and g_b may depend on x: second-order term by complex step
        nx = traj.x.shape[1]
        for i in range(nx):
            xc = traj.x.astype(complex)
            xc[:, i] += 1j * _CS
            Yc = model.gx(xc, b) @ traj.X + model.gb(xc, b)
            cx[:, i] += np.einsum("nyj,nyj->n", np.imag(Yc) / _CS, cY)
    return cx, cX


def _extended_jacobians(model, b: np.ndarray, stages) -> tuple[np.ndarray, np.ndarray]:
    """Transposed Jacobians of the extended right-hand side (eq. 5) at every stage point."""
    sx, sX, su, st = stages
    M = sx.shape[0]
    nx, nb = sX.shape[2], sX.shape[3]
    nu = su.shape[2]
    P = M * 4
    x = sx.reshape(P, nx)
    X = sX.reshape(P, nx, nb)
    u = su.reshape(P, nu)
    t = st.reshape(P)
    fx = np.asarray(model.fx(x, u, b, t), dtype=float)
    fu = np.asarray(model.fu(x, u, b, t), dtype=float)
    # second-order blocks d(f_x X + f_b)/d(x, u), all stage points per direction at once
    T = np.empty((P, nx, nb, nx + nu))
    for k in range(nx + nu):
        xc = x.astype(complex)
        uc = u.astype(complex)
        if k < nx:
            xc[:, k] += 1j * _CS
        else:
            uc[:, k - nx] += 1j * _CS
        T[..., k] = np.imag(model.fx(xc, uc, b, t) @ X + model.fb(xc, uc, b, t)) / _CS
    nz = nx * (1 + nb)
    FzT = np.zeros((P, nz, nz))
    FuT = np.zeros((P, nu, nz))
    fxT = np.swapaxes(fx, 1, 2)
    FzT[:, :nx, :nx] = fxT
    FuT[:, :, :nx] = np.swapaxes(fu, 1, 2)
    for j in range(nb):
        r = nx * (j + 1)
        FzT[:, :nx, r:r + nx] = np.swapaxes(T[:, :, j, :nx], 1, 2)
        FzT[:, r:r + nx, r:r + nx] = fxT
        FuT[:, :, r:r + nx] = np.swapaxes(T[:, :, j, nx:], 1, 2)
    return FzT.reshape(M, 4, nz, nz), FuT.reshape(M, 4, nu, nz)


def adjoint_gradient(model: ODEModel, b: np.ndarray, traj: Trajectory, u: np.ndarray,
                     cx: np.ndarray, cX: np.ndarray) -> np.ndarray:
    """``dJ/du`` (N, n_u) for ``J = sum_n c_n`` given ``cx = dJ/dx_n`` (M+1, n_x), ``cX = dJ/dX_n``.

    Reverse sweep through the exact steps of :func:`integrate` (discrete adjoint).
    """
    b = np.asarray(b, dtype=float)
    u = np.asarray(u, dtype=float)
    if u.ndim == 1:
        u = u[:, None]
    N, nu = u.shape
    M = N * traj.n_sub
    nx = traj.x.shape[1]
    nb = traj.X.shape[2]
    # cotangents in the z layout [x, X[:, 0], X[:, 1], ...]
    C = np.concatenate([cx, np.swapaxes(cX, 1, 2).reshape(M + 1, nx * nb)], axis=1)
    grad = np.zeros((N, nu))
    if traj.linear is not None:
        Phi, Gam = traj.linear
        PhiT = np.ascontiguousarray(Phi.T)
        lam_next = np.empty((M, C.shape[1]))  # adjoint at node n+1 for step n
        lam = C[M].copy()
        for n in range(M - 1, -1, -1):
            lam_next[n] = lam
            lam = PhiT @ lam + C[n]
        gsteps = lam_next @ Gam  # (M, nu)
        return gsteps.reshape(N, traj.n_sub, nu).sum(axis=1)

    if traj.stages is None:
        raise ValueError("trajectory was integrated without stored stages")
    FzT, FuT = _extended_jacobians(model, b, traj.stages)
    h = traj.h
    D = np.empty((M, 4, C.shape[1]))  # stage cotangents, for the input gradient afterwards
    lam = C[M].copy()
    for n in range(M - 1, -1, -1):
        F = FzT[n]
        d4 = (h / 6) * lam
        d3 = (h / 3) * lam
        d2 = (h / 3) * lam
        d1 = (h / 6) * lam
        dz = lam.copy()
        g = F[3] @ d4
        dz += g
        d3 = d3 + h * g
        g = F[2] @ d3
        dz += g
        d2 = d2 + (0.5 * h) * g
        g = F[1] @ d2
        dz += g
        d1 = d1 + (0.5 * h) * g
        dz += F[0] @ d1
        D[n, 0], D[n, 1], D[n, 2], D[n, 3] = d1, d2, d3, d4
        lam = dz + C[n]
    gsteps = np.einsum("msuz,msz->mu", FuT, D)
    grad += gsteps.reshape(N, traj.n_sub, nu).sum(axis=1)
    return grad
