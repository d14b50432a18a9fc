"""Compiled step loop of the drive candidates (numba): the fast path of ``drive_simulation.simulate``.

Profile of the 96-model selection on the shipped crane session (before this module): ~90 % of the time is
the per-step Python loop of the candidates with Coulomb/Stribeck friction (scalar Newton solve plus the
augmented state-and-sensitivity update, 4,000 steps per simulation, ~10 us per step); the linear candidates
spend theirs in the numpy block lifting. This module runs the same recursion, step for step, compiled:

* ``xi+ = Phi xi + Gam w_k + Gf f_k`` with ``Phi`` block lower-triangular (``Ad`` on the diagonal blocks,
  ``dAd/dp_j`` in the first block column), evaluated block-wise (``(2 n_p + 1) n^2`` products per step
  instead of ``(n (1 + n_p))^2``);
* the implicit friction ``f = F(a + g f)`` by the same scalar Newton iteration, started from the previous
  value, and its sensitivity from the implicit function theorem (a rank-one update per step);
* for the linear candidates (no friction) the same loop without the Newton solve.

Same operations in the same order as the Python loop except the sums of the matrix-vector products
(sequential here, BLAS there): results agree to round-off (~1e-13 relative). No BLAS, no threads, no
fast-math, so a run is bit-for-bit repeatable on any machine. One loop per state count (1, 3, 5: a constant
of its compiled code, so the loops over the states unroll; issue 44: 1.45-1.5x faster than one loop for all,
the same numbers to the bit). Compiled once per checkout (``cache=True``: ~1.2 CPU-s each the first time, then
loaded from ``__pycache__`` by every process, pool and Dask workers included; ~0.1 CPU-s for the three). A
checkout the user cannot write caches in the user's cache folder (``~/.cache/numba``, numba's own fallback,
keyed by the source's path, size and time); with no writable folder at all the loops are compiled in memory
by each process (slower start, same numbers) instead of failing.

The engine is chosen by :func:`identification.models.drive_simulation.set_engine` or the environment variable
``HIL_SIM_ENGINE`` (``compiled`` | ``python``), read when a process first imports this package; without
numba the Python loop is used.
"""

from __future__ import annotations

import importlib.util
import math

import numpy as np

__all__ = ["AVAILABLE", "drive_steps", "load_kernels"]

#: numba is a declared dependency; without it (a platform with no wheel) the Python loop runs
AVAILABLE = importlib.util.find_spec("numba") is not None


def _steps_for(n: int):
    """The step loop for ``n`` states (a constant of the compiled code, so its loops over the states unroll:
    1.5x faster than with ``n`` read at run time, the same numbers): outputs ``[w1, d w1/d p_1, ...,
    d w1/d p_np]`` per step of the augmented recursion, from rest.

    ``Ad`` (n, n), ``dAd`` (n_p, n, n), ``Bd`` (n,); the input term of step k is ``Gam @ w_in[k]`` (``Gam``
    (m, c), ``w_in`` (N, c)); ``Gf`` (m,) is the column the friction torque enters by; ``m = n (1 + n_p)``
    with sensitivities (``n`` without). ``na``: ``dAd[j] = 0`` for ``j >= na`` (friction, dead-time and
    gravity parameters do not move ``Ad``): their zero products are left out, which changes no sum.
    ``jc``/``js``/``jv``: indices of coulomb, stribeck_torque, stribeck_speed (-1: none)."""

    def _drive_steps(Ad, dAd, Bd, Gam, w_in, Gf, n_p, na, sens, nonlinear, fc, fs, inv_vs, inv_eps, jc, js,
                     jv):
        N = w_in.shape[0]
        nc = w_in.shape[1]
        npar = n_p if sens else 0
        m = n * (1 + npar)
        X = np.empty((N, 1 + npar))
        xi = np.zeros(m)
        wk = np.zeros(m)
        base = np.zeros(m)
        Fp = np.zeros(max(npar, 1))
        g = Bd[0]
        f = 0.0
        for k in range(N):
            for j in range(npar + 1):
                X[k, j] = xi[n * j]
            if nc == 3:  # sensitivities: torque, its dead-time derivative, 1 (the same sums, spelled out)
                w0 = w_in[k, 0]
                w1 = w_in[k, 1]
                w2 = w_in[k, 2]
                for i in range(m):
                    wk[i] = ((0.0 + Gam[i, 0] * w0) + Gam[i, 1] * w1) + Gam[i, 2] * w2
            else:
                for i in range(m):
                    acc = 0.0
                    for c in range(nc):
                        acc += Gam[i, c] * w_in[k, c]
                    wk[i] = acc
            for i in range(n):
                acc = 0.0
                for c in range(n):
                    acc += Ad[i, c] * xi[c]
                base[i] = acc + wk[i]
            for j in range(npar):
                r = n * (j + 1)
                for i in range(n):
                    acc = 0.0
                    if j < na:
                        for c in range(n):
                            acc += dAd[j, i, c] * xi[c]
                    for c in range(n):
                        acc += Ad[i, c] * xi[r + c]
                    base[r + i] = acc + wk[r + i]
            if not nonlinear:
                for i in range(m):
                    xi[i] = base[i]
                continue
            a = base[0]
            # implicit friction: f = F(a + g f), scalar Newton started from the previous value
            w = 0.0
            th = 0.0
            e = 0.0
            F = 0.0
            dF = 0.0
            for _ in range(30):
                w = a + g * f
                th = math.tanh(w * inv_eps)
                if fs != 0.0:
                    e = math.exp(-abs(w) * inv_vs)
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
            for i in range(m):
                xi[i] = base[i] + Gf[i] * f
            if npar:
                if jc >= 0:
                    Fp[jc] = -th
                if js >= 0:
                    Fp[js] = -th * e
                    Fp[jv] = -th * fs * e * abs(w) * inv_vs * inv_vs
                den = 1.0 - dF * g
                for j in range(npar):
                    r = n * (j + 1)
                    df = (dF * xi[r] + Fp[j]) / den
                    for i in range(n):
                        xi[r + i] += df * Bd[i]
        return X

    return _drive_steps


_compiled: dict[int, object] = {}


def _kernel(n: int):
    """The compiled loop for ``n`` states (1, 3, 5 in the kit), made or loaded from the cache on first use."""
    kernel = _compiled.get(n)
    if kernel is None:
        import numba  # lazy: loads LLVM (~0.5 s); only a simulation needs it, not `hil` at start

        steps = _steps_for(n)
        # a name of its own per state count: the on-disk cache (index file, symbols of the compiled code) is
        # keyed by it; three closures under one name shared one index and clashed when loaded together
        steps.__name__ = steps.__qualname__ = f"_drive_steps_{n}"
        try:
            kernel = numba.njit(cache=True, nogil=True)(steps)
        except RuntimeError:  # no writable cache folder (a read-only checkout, no writable home): compile in
            kernel = numba.njit(cache=False, nogil=True)(steps)  # memory, each process once
        _compiled[n] = kernel
    return kernel


def load_kernels() -> None:
    """Compile (or load from the cache) the loops of every state count of the kit now: a worker process
    started ahead of its first task does this while the caller still prepares the work."""
    if not AVAILABLE:  # pragma: no cover
        return
    for n in (1, 3, 5):
        z = np.zeros
        drive_steps(z((n, n)), z((1, n, n)), z(n), z((2 * n, 3)), z((2, 3)), z(2 * n), 1, True, True)


def drive_steps(Ad: np.ndarray, dAd: np.ndarray, Bd: np.ndarray, Gam: np.ndarray, w_in: np.ndarray,
                Gf: np.ndarray, n_p: int,
                sens: bool, nonlinear: bool, fc: float = 0.0, fs: float = 0.0, inv_vs: float = 0.0,
                inv_eps: float = 0.0, jc: int = -1, js: int = -1, jv: int = -1) -> np.ndarray:
    """The compiled loop (see :func:`_steps_for`); arrays are made C-contiguous float64 here."""
    if not AVAILABLE:  # pragma: no cover
        raise RuntimeError("numba is not installed: use the 'python' engine")
    c = np.ascontiguousarray
    Ad, dAd = c(Ad, dtype=float), c(dAd, dtype=float)
    w_in = c(w_in, dtype=float).view()
    w_in.flags.writeable = False  # one compiled signature: the held input comes read-only or writable
    moving = np.flatnonzero(dAd.reshape(dAd.shape[0], -1).any(axis=1)) if sens else np.zeros(0, dtype=int)
    na = int(moving[-1]) + 1 if moving.size else 0  # dAd[j] = 0 past the last parameter that moves Ad
    return _kernel(Ad.shape[0])(Ad, dAd, c(Bd, dtype=float), c(Gam, dtype=float), w_in,
                                c(Gf, dtype=float), int(n_p), na, bool(sens), bool(nonlinear), float(fc),
                                float(fs), float(inv_vs), float(inv_eps), int(jc), int(js), int(jv))
