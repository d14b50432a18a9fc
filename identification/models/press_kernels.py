"""Compiled state solve of the press linkage and its derivatives (numba): the fast path of
``PressLinkageModel.solve_state`` and ``PressLinkageModel.state_derivatives``.

Every press fit solves the linkage's 10 equations at each of its 14-58 force points at every model
evaluation, by Newton's method on ``K y + f_bearing(y) = b q``. In numpy each Newton step is a batch of
small array operations and a stacked 10 x 10 solve whose per-call overhead dominates (a profile of the
uncertainty test's 200 replicates: half of all its time in the state solve). Here the same iteration runs
compiled, point by point: the bearings' forces and their 2 x 2 stiffnesses written out, the tangent
``K + J_bearing`` factorised by Gaussian elimination with partial pivoting, the same start (the linear
solve with the bearings' stiffness at rest) and the same stopping rule (every point stepped until the
largest step is below 1e-10 of the largest displacement, at most 30 steps). The states' first and second
derivatives by ``(k5, k7)`` (``-E_y^-1 E_p``, ``-E_y^-1 (E_yy[Y_l, Y_m] + ...)``) reuse one factorisation
of ``E_y`` per point. The numbers agree with the numpy path to round-off (states within ~1e-14 relative,
second derivatives ~1e-12, over stiffnesses e^-3 to e^3 of the truth: the elimination's sums are ordered
differently from LAPACK's); no BLAS, no threads, no fast-math, so a run is repeatable to the bit on any
machine.

Compiled once per checkout and cached as the drive loops are (:mod:`identification.models.drive_kernels`:
numba's cache beside the source, else the user's cache folder, else compiled in memory); without numba the
numpy path runs.
"""

from __future__ import annotations

import numpy as np

from identification.models.drive_kernels import AVAILABLE

__all__ = ["AVAILABLE", "load_kernels", "loaded", "newton_states", "state_derivatives"]

#: Newton steps at most, and the relative size of the last step (the numpy path's constants)
MAX_STEPS, REL_STEP = 30, 1e-10


def _lu_factor(A: np.ndarray, piv: np.ndarray) -> bool:
    """Factorise a small square ``A`` in place (Gaussian elimination with partial pivoting, the rows swapped
    at step ``c`` in ``piv[c]``); False when ``A`` is singular."""
    n = A.shape[0]
    for c in range(n):
        p = c
        big = abs(A[c, c])
        for r in range(c + 1, n):
            if abs(A[r, c]) > big:
                big, p = abs(A[r, c]), r
        piv[c] = p
        if p != c:
            for j in range(n):
                A[c, j], A[p, j] = A[p, j], A[c, j]
        if A[c, c] == 0.0:
            return False
        inv = 1.0 / A[c, c]
        for r in range(c + 1, n):
            m = A[r, c] * inv
            A[r, c] = m
            if m != 0.0:
                for j in range(c + 1, n):
                    A[r, j] -= m * A[c, j]
    return True


def _lu_solve(A: np.ndarray, piv: np.ndarray, x: np.ndarray) -> None:
    """``x`` overwritten by the solution of ``A z = x`` from the factors of :func:`_lu_factor`."""
    n = A.shape[0]
    for c in range(n):  # the row swaps first (the factors' rows were swapped whole, multipliers included)
        p = piv[c]
        if p != c:
            x[c], x[p] = x[p], x[c]
    for c in range(n):
        for r in range(c + 1, n):
            x[r] -= A[r, c] * x[c]
    for r in range(n - 1, -1, -1):
        acc = x[r]
        for j in range(r + 1, n):
            acc -= A[r, j] * x[j]
        x[r] = acc / A[r, r]


def _lu_solve_in_place(A: np.ndarray, x: np.ndarray, piv: np.ndarray) -> bool:
    """Solve ``A z = x`` (``A`` overwritten by its factors), ``z`` into ``x``; False when ``A`` is
    singular."""
    if not _lu_factor(A, piv):
        return False
    _lu_solve(A, piv, x)
    return True


def _add_bearings(y: np.ndarray, bi: np.ndarray, bj: np.ndarray, k: float, beta: float, f: np.ndarray,
                  T: np.ndarray) -> None:
    """Add each bearing's force ``k (1 + beta |d|^2) d`` of its relative displacement ``d`` to ``f`` and its
    stiffness ``k ((1 + beta |d|^2) I + 2 beta d d^T)`` to ``T`` (a node-to-ground bearing: ``bj < 0``)."""
    for b in range(bi.size):
        i, j = 2 * bi[b], 2 * bj[b]
        d0, d1 = y[i], y[i + 1]
        if j >= 0:
            d0 -= y[j]
            d1 -= y[j + 1]
        s = 1.0 + beta * (d0 * d0 + d1 * d1)
        g0, g1 = k * s * d0, k * s * d1
        t00 = k * (s + 2.0 * beta * d0 * d0)
        t01 = k * (2.0 * beta * d0 * d1)
        t11 = k * (s + 2.0 * beta * d1 * d1)
        f[i] += g0
        f[i + 1] += g1
        T[i, i] += t00
        T[i, i + 1] += t01
        T[i + 1, i] += t01
        T[i + 1, i + 1] += t11
        if j >= 0:
            f[j] -= g0
            f[j + 1] -= g1
            T[j, j] += t00
            T[j, j + 1] += t01
            T[j + 1, j] += t01
            T[j + 1, j + 1] += t11
            T[i, j] -= t00
            T[i, j + 1] -= t01
            T[i + 1, j] -= t01
            T[i + 1, j + 1] -= t11
            T[j, i] -= t00
            T[j, i + 1] -= t01
            T[j + 1, i] -= t01
            T[j + 1, i + 1] -= t11


def _newton_states(K: np.ndarray, K_lin: np.ndarray, b: np.ndarray, q: np.ndarray, bi: np.ndarray,
                   bj: np.ndarray, k: float, beta: float) -> tuple[np.ndarray, bool]:
    n, N = K.shape[0], q.size
    y = np.empty((N, n))
    piv = np.empty(n, dtype=np.int64)
    u = b.copy()  # the linear start: y = q K_lin^-1 b
    A = K_lin.copy()
    if not _lu_solve_in_place(A, u, piv):
        return y, False
    for p in range(N):
        for r in range(n):
            y[p, r] = q[p] * u[r]
    f = np.empty(n)
    T = np.empty((n, n))
    for _ in range(MAX_STEPS):
        step = 0.0
        for p in range(N):
            for r in range(n):
                f[r] = 0.0
                for c in range(n):
                    T[r, c] = K[r, c]
            _add_bearings(y[p], bi, bj, k, beta, f, T)
            for r in range(n):
                acc = f[r] - q[p] * b[r]
                for c in range(n):
                    acc += K[r, c] * y[p, c]
                f[r] = acc  # the residual
            if not _lu_solve_in_place(T, f, piv):
                return y, False
            for r in range(n):
                y[p, r] -= f[r]
                if abs(f[r]) > step:
                    step = abs(f[r])
        size = 0.0
        for p in range(N):
            for r in range(n):
                if abs(y[p, r]) > size:
                    size = abs(y[p, r])
        if step <= REL_STEP * size + 1e-300:
            break
    return y, True


def _state_derivatives(K: np.ndarray, K5: np.ndarray, K7: np.ndarray, y: np.ndarray, bi: np.ndarray,
                       bj: np.ndarray, k: float, beta: float,
                       second: bool) -> tuple[np.ndarray, np.ndarray, bool]:
    N, n = y.shape
    Yp = np.empty((N, n, 2))
    Ypp = np.empty((N if second else 0, n, 2, 2))
    T = np.empty((n, n))
    f = np.empty(n)
    x = np.empty(n)
    piv = np.empty(n, dtype=np.int64)
    S = np.empty((n, 2, 2))
    V = np.empty((2, 2))
    g = 2.0 * k * beta
    for p in range(N):
        for r in range(n):
            f[r] = 0.0
            for c in range(n):
                T[r, c] = K[r, c]
        _add_bearings(y[p], bi, bj, k, beta, f, T)  # T: E_y = K + the bearings' stiffness
        if not _lu_factor(T, piv):
            return Yp, Ypp, False
        for m in range(2):  # Y_p = -E_y^-1 E_p, E_p = [K5 y, K7 y]
            Km = K5 if m == 0 else K7
            for r in range(n):
                acc = 0.0
                for c in range(n):
                    acc += Km[r, c] * y[p, c]
                x[r] = acc
            _lu_solve(T, piv, x)
            for r in range(n):
                Yp[p, r, m] = -x[r]
        if not second:
            continue
        for r in range(n):  # E_yy[Y_l, Y_m] + K_m Y_l + K_l Y_m (as PressLinkageModel.E_second)
            for a in range(2):
                for c in range(2):
                    S[r, a, c] = 0.0
        for b in range(bi.size):
            i, j = 2 * bi[b], 2 * bj[b]
            d0, d1 = y[p, i], y[p, i + 1]
            if j >= 0:
                d0 -= y[p, j]
                d1 -= y[p, j + 1]
            for a in range(2):
                V[0, a] = Yp[p, i, a]
                V[1, a] = Yp[p, i + 1, a]
                if j >= 0:
                    V[0, a] -= Yp[p, j, a]
                    V[1, a] -= Yp[p, j + 1, a]
            for a in range(2):
                for c in range(2):
                    dv_a = d0 * V[0, a] + d1 * V[1, a]
                    dv_c = d0 * V[0, c] + d1 * V[1, c]
                    vv = V[0, a] * V[0, c] + V[1, a] * V[1, c]
                    t0 = g * (dv_c * V[0, a] + dv_a * V[0, c] + vv * d0)
                    t1 = g * (dv_c * V[1, a] + dv_a * V[1, c] + vv * d1)
                    S[i, a, c] += t0
                    S[i + 1, a, c] += t1
                    if j >= 0:
                        S[j, a, c] -= t0
                        S[j + 1, a, c] -= t1
        for m in range(2):
            Km = K5 if m == 0 else K7
            for r in range(n):
                for a in range(2):
                    acc = 0.0
                    for c in range(n):
                        acc += Km[r, c] * Yp[p, c, a]
                    S[r, a, m] += acc
                    S[r, m, a] += acc
        for a in range(2):  # Y_pp = -E_y^-1 S
            for c in range(2):
                for r in range(n):
                    x[r] = S[r, a, c]
                _lu_solve(T, piv, x)
                for r in range(n):
                    Ypp[p, r, a, c] = -x[r]
    return Yp, Ypp, True


_compiled: dict = {}
#: the kernels and the helpers they call, jitted together (each sees the others compiled)
_KERNELS = ("_lu_factor", "_lu_solve", "_lu_solve_in_place", "_add_bearings", "_newton_states",
            "_state_derivatives")


def _compile(cache: bool) -> dict:
    """Every function of _KERNELS jitted, each with globals in which the others are the jitted ones."""
    import types

    import numba  # lazy: loads LLVM (~0.5 s); only a press fit needs it

    glob = dict(globals())
    out = {}
    for name in _KERNELS:
        fn = globals()[name]
        # a function of its own (the same code, the compiled helpers as globals), under a name of its own:
        # the on-disk cache is keyed by the name
        twin = types.FunctionType(fn.__code__, glob, f"{name}_compiled")
        twin.__qualname__ = twin.__name__
        out[name] = glob[name] = numba.njit(cache=cache, nogil=True)(twin)
    return out


def _kernel(name: str):
    """The compiled ``name`` of _KERNELS, made or loaded from the cache on first use."""
    if not _compiled:
        try:
            _compiled.update(_compile(cache=True))
        except RuntimeError:  # no writable cache folder (a read-only checkout, no writable home): compiled in
            _compiled.update(_compile(cache=False))  # memory, each process once
    return _compiled[name]


def load_kernels() -> None:
    """Compile (or load from the cache) both kernels now, with the argument types of every later call: a
    process that will fit presses while it acquires (a run's online identifier) does this before the
    acquisition starts, so that loading LLVM and the kernels (~1 CPU-s; ~10 the first time on a fresh
    checkout) never competes with it."""
    if not AVAILABLE:  # pragma: no cover
        return
    one, none = np.array([0], dtype=np.int64), np.array([-1], dtype=np.int64)
    newton_states(np.eye(2), np.eye(2), np.ones(2), np.ones(1), one, none, 1.0, 1.0)
    state_derivatives(np.eye(2), np.eye(2), np.eye(2), np.ones((1, 2)), one, none, 1.0, 1.0, True)


def loaded() -> bool:
    """Whether this process holds the compiled kernels already."""
    return bool(_compiled)


def newton_states(K: np.ndarray, K_lin: np.ndarray, b: np.ndarray, q: np.ndarray, bi: np.ndarray,
                  bj: np.ndarray, k: float, beta: float) -> np.ndarray:
    """States ``y`` (N, n) with ``K y + f_bearing(y) = b q`` at each force of ``q`` (N,), from the linear
    start ``q K_lin^-1 b``; bearing ``m`` joins nodes ``bi[m]`` and ``bj[m]`` (-1: the ground), node ``i``
    being state entries ``2i, 2i + 1``, with stiffness ``k`` and hardening ``beta``."""
    if not AVAILABLE:  # pragma: no cover
        raise RuntimeError("numba is not installed: use the numpy path")
    c = np.ascontiguousarray
    y, solved = _kernel("_newton_states")(c(K, dtype=float), c(K_lin, dtype=float), c(b, dtype=float),
                          c(q, dtype=float).ravel(), bi, bj, float(k), float(beta))
    if not solved:
        raise np.linalg.LinAlgError("Singular matrix")  # what the numpy path's solve raises
    return y


def state_derivatives(K: np.ndarray, K5: np.ndarray, K7: np.ndarray, y: np.ndarray, bi: np.ndarray,
                      bj: np.ndarray, k: float, beta: float,
                      second: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """``(Y_p (N, n, 2), Y_pp (N, n, 2, 2) or None)``: the states' first (and with ``second`` their second)
    derivatives by ``p = (k5, k7)`` at the solved states ``y`` of ``K(p) = K0 + k5 K5 + k7 K7`` (eqs. 15, 16
    of the least-squares module: ``-E_y^-1 E_p`` and ``-E_y^-1 (E_yy[Y_l, Y_m] + K_m Y_l + K_l Y_m)``), one
    factorisation of ``E_y`` per point for all of them."""
    if not AVAILABLE:  # pragma: no cover
        raise RuntimeError("numba is not installed: use the numpy path")
    c = np.ascontiguousarray
    Yp, Ypp, solved = _kernel("_state_derivatives")(c(K, dtype=float), c(K5, dtype=float), c(K7, dtype=float),
                                                    c(y, dtype=float), bi, bj, float(k), float(beta),
                                                    bool(second))
    if not solved:
        raise np.linalg.LinAlgError("Singular matrix")  # what the numpy path's solve raises
    return Yp, (Ypp if second else None)
