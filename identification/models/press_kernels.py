"""Compiled state solve of the press linkage (numba): the fast path of ``PressLinkageModel.solve_state``.

Every press fit solves the linkage's 10 equations at each of its 14-58 force points at every model
evaluation, by Newton's method on ``K y + f_bearing(y) = b q``. In numpy each Newton step is a batch of
small array operations and a stacked 10 x 10 solve whose per-call overhead dominates (a profile of the
uncertainty test's 200 replicates: half of all its time in the state solve). Here the same iteration runs
compiled, point by point: the bearings' forces and their 2 x 2 stiffnesses written out, the tangent
``K + J_bearing`` factorised by Gaussian elimination with partial pivoting, the same start (the linear
solve with the bearings' stiffness at rest) and the same stopping rule (every point stepped until the
largest step is below 1e-10 of the largest displacement, at most 30 steps). The numbers agree with the numpy
path to round-off (~1e-15 relative: the elimination's sums are ordered differently from LAPACK's); no BLAS,
no threads, no fast-math, so a run is repeatable to the bit on any machine.

Compiled once per checkout and cached as the drive loops are (:mod:`identification.models.drive_kernels`:
numba's cache beside the source, else the user's cache folder, else compiled in memory); without numba the
numpy path runs.
"""

from __future__ import annotations

import numpy as np

from identification.models.drive_kernels import AVAILABLE

__all__ = ["AVAILABLE", "newton_states"]

#: Newton steps at most, and the relative size of the last step (the numpy path's constants)
MAX_STEPS, REL_STEP = 30, 1e-10


def _lu_solve_in_place(A: np.ndarray, x: np.ndarray) -> bool:
    """Solve ``A z = x`` for a small square ``A`` (overwritten by its factors), ``z`` into ``x``; False
    (and ``x`` unfinished) when ``A`` is singular."""
    n = A.shape[0]
    for c in range(n):
        piv = c
        big = abs(A[c, c])
        for r in range(c + 1, n):
            if abs(A[r, c]) > big:
                big, piv = abs(A[r, c]), r
        if piv != c:
            for j in range(n):
                A[c, j], A[piv, j] = A[piv, j], A[c, j]
            x[c], x[piv] = x[piv], x[c]
        if A[c, c] == 0.0:
            return False
        inv = 1.0 / A[c, c]
        for r in range(c + 1, n):
            m = A[r, c] * inv
            if m != 0.0:
                for j in range(c + 1, n):
                    A[r, j] -= m * A[c, j]
                x[r] -= m * x[c]
    for r in range(n - 1, -1, -1):
        acc = x[r]
        for j in range(r + 1, n):
            acc -= A[r, j] * x[j]
        x[r] = acc / A[r, r]
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
    u = b.copy()  # the linear start: y = q K_lin^-1 b
    A = K_lin.copy()
    if not _lu_solve_in_place(A, u):
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
            if not _lu_solve_in_place(T, f):
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


_compiled: list = []


def _compile(cache: bool):
    """The solve and its two helpers jitted (the helpers handed to the solve as its globals)."""
    import types

    import numba  # lazy: loads LLVM (~0.5 s); only a press fit needs it

    def jit(fn):
        return numba.njit(cache=cache, nogil=True)(fn)

    helpers = {"_lu_solve_in_place": jit(_lu_solve_in_place), "_add_bearings": jit(_add_bearings)}
    # a function of its own (the same code, the compiled helpers as globals), under a name of its own: the
    # on-disk cache is keyed by the name
    solve = types.FunctionType(_newton_states.__code__, {**_newton_states.__globals__, **helpers},
                               "_newton_states_compiled")
    solve.__qualname__ = solve.__name__
    return jit(solve)


def _kernel():
    """The compiled solve, made or loaded from the cache on first use."""
    if not _compiled:
        try:
            _compiled.append(_compile(cache=True))
        except RuntimeError:  # no writable cache folder (a read-only checkout, no writable home): compiled in
            _compiled.append(_compile(cache=False))  # memory, each process once
    return _compiled[0]


def newton_states(K: np.ndarray, K_lin: np.ndarray, b: np.ndarray, q: np.ndarray, bi: np.ndarray,
                  bj: np.ndarray, k: float, beta: float) -> np.ndarray:
    """States ``y`` (N, n) with ``K y + f_bearing(y) = b q`` at each force of ``q`` (N,), from the linear
    start ``q K_lin^-1 b``; bearing ``m`` joins nodes ``bi[m]`` and ``bj[m]`` (-1: the ground), node ``i``
    being state entries ``2i, 2i + 1``, with stiffness ``k`` and hardening ``beta``."""
    if not AVAILABLE:  # pragma: no cover
        raise RuntimeError("numba is not installed: use the numpy path")
    c = np.ascontiguousarray
    y, solved = _kernel()(c(K, dtype=float), c(K_lin, dtype=float), c(b, dtype=float),
                          c(q, dtype=float).ravel(), bi, bj, float(k), float(beta))
    if not solved:
        raise np.linalg.LinAlgError("Singular matrix")  # what the numpy path's solve raises
    return y
