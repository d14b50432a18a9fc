"""Covariance of the least-squares stages in the fit's scaling (the box mapped to [0, 1]): classic and block
sandwich, the directions the data do not see, the two stages joined, and parameters tied to a bound one."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.linalg
import scipy.optimize

from identification.estimation.distributions import chi2_sf

#: a direction of the scaled parameter space whose std exceeds this (in units of the box width) is not seen
MAX_SCALED_STD = 1.0
#: along a direction the data do not see the estimate may sit anywhere in the box: the std of a uniform
#: value over the box width (the exact null direction ME2_kx/ME3_kx scatters by 0.26 in Monte Carlo refits)
BOX_STD = 1.0 / math.sqrt(12.0)
#: a parameter that unseen directions move (by :data:`BOX_STD` each) gets their share in its variance, and
#: no interval when that share exceeds this (the interval would mostly say where the box is); a bare bound on
#: the loading (before issue 21's fix: < 0.1 of the unit vector) let a precise parameter keep an interval far
#: narrower than the flat direction moves it, and took one from a vague parameter it barely changes
MAX_UNSEEN_SHARE = 0.5
#: a free damper gets no interval when a damper on its box bound, moved by its own std (at most
#: :data:`BOX_STD`) with every damper free, would account for more than this share of its variance (issue 21:
#: held at the bound, ME2_cy's std was 6x narrower than its scatter whenever ME3_cy sat on its bound, 0 % of
#: those intervals covered the truth; at 0.5 the well-determined ME1_cy lost its interval in 15 % of refits)
MAX_TIED_SHARE = 0.7
#: p-value below which the residual blocks are taken as having different variances (-> sandwich covariance)
IID_LEVEL = 0.01


def jacobian(fun: Callable[[np.ndarray], np.ndarray], x: np.ndarray, h: float = 1e-5) -> np.ndarray:
    """Central differences (step ``h`` in the scaled parameters)."""
    cols = []
    for q in range(x.size):
        d = np.zeros_like(x)
        d[q] = h
        cols.append((fun(x + d) - fun(x - d)) / (2 * h))
    return np.array(cols).T


def bartlett(ss: np.ndarray, dof: np.ndarray) -> float:
    """p-value of Bartlett's test that blocks with sums of squares ``ss`` and ``dof`` share one variance."""
    ok = dof >= 1
    ss, dof = ss[ok], dof[ok]
    if ss.size < 2 or np.any(ss <= 0):
        return 1.0
    v = ss / dof
    pooled = ss.sum() / dof.sum()
    stat = dof.sum() * np.log(pooled) - np.sum(dof * np.log(v))
    c = 1.0 + (np.sum(1.0 / dof) - 1.0 / dof.sum()) / (3.0 * (ss.size - 1))
    return float(chi2_sf(stat / c, ss.size - 1))


@dataclass
class LsqCov:
    """Covariance of a least-squares estimate in scaled units (NaN rows/columns for unseen parameters)."""

    classic: np.ndarray
    robust: np.ndarray
    seen: np.ndarray  # bool per column: the data determine it
    s2: float
    dof: float
    block_var: dict[int, float]
    block_dof: dict[int, float]  # residual degrees of freedom of each block's variance
    p_iid: float
    pinv: np.ndarray  # (p, n) pseudo-inverse over the seen directions
    dof_robust: np.ndarray  # per parameter: Satterthwaite degrees of freedom of its sandwich variance
    step: np.ndarray  # Gauss-Newton step from the estimate (scaled units)
    null: np.ndarray  # (n_unseen, p) the dropped directions (rows of unit length)
    var_r: np.ndarray  # (n,) per residual: its block's variance (the sandwich's middle)

    def kept(self, method: str) -> np.ndarray:
        """The covariance over the seen directions, no NaN (``classic`` or ``sandwich``): for combining
        with other terms before :func:`with_unseen` adds the dropped directions."""
        var = self.var_r if method == "sandwich" else np.full(self.var_r.shape, self.s2)
        return (self.pinv * var) @ self.pinv.T


def with_unseen(cov: np.ndarray, null_effect: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The covariance ``cov`` of the seen directions plus the unseen ones' (each an independent move of std
    :data:`BOX_STD`), and per parameter whether the data see it: the unseen part at most
    :data:`MAX_UNSEEN_SHARE` of its variance. ``null_effect`` (p, n_unseen): the change of each parameter
    per unit move along each unseen direction."""
    N = np.asarray(null_effect, dtype=float).reshape(cov.shape[0], -1)
    total = cov + BOX_STD ** 2 * (N @ N.T)
    extra = BOX_STD ** 2 * np.sum(N ** 2, axis=1)
    var = np.diag(total)
    with np.errstate(invalid="ignore"):
        return total, np.isfinite(var) & (extra <= MAX_UNSEEN_SHARE * var)


def lsq_covariance(J: np.ndarray, r: np.ndarray, blocks: np.ndarray | None = None,
                    lost: dict[int, float] | None = None) -> LsqCov:
    """``s2 (J^T J)^-1`` and the block sandwich ``(J^T J)^-1 J^T diag(s_b^2) J (J^T J)^-1``, PSD-safe.

    ``blocks`` labels each residual with its block (entries of one block share a variance; default: one
    block); ``lost`` the residual degrees of freedom a block loses to constraints of its own (a projection).
    The pseudo-inverse keeps the singular directions whose std stays below the box width
    (:data:`MAX_SCALED_STD`); a parameter that a dropped direction would move by more than its std allows
    (:func:`with_unseen`) gets NaN.
    """
    n, p = J.shape
    blocks = np.zeros(n, dtype=int) if blocks is None else np.asarray(blocks)
    lost = lost or {}
    if p == 0:
        e = np.zeros((0, 0))
        return LsqCov(e, e, np.zeros(0, bool), math.nan, 0.0, {}, {}, 1.0, np.zeros((0, n)), np.zeros(0),
                       np.zeros(0), np.zeros((0, 0)), np.zeros(n))
    U, s, Vt = np.linalg.svd(J, full_matrices=False)
    n_lost = float(sum(lost.get(int(b), 0.0) for b in np.unique(blocks)))
    rank = int(np.sum(s > 1e-10 * max(s[0], 1e-300)))
    dof = n - rank - n_lost
    s2 = float(r @ r) / dof if dof > 0 else math.nan
    with np.errstate(divide="ignore", invalid="ignore"):
        keep = (s > 1e-10 * max(s[0], 1e-300)) & (np.sqrt(s2) / s < MAX_SCALED_STD)
    pinv = (Vt[keep].T / s[keep]) @ U[:, keep].T
    # block variances from E[r_b^T r_b] = sum_c s_c^2 sum_(i in b, j in c) (I - H)_ij^2 (unbiased under
    # the block model whatever the leverage; non-negative least squares keeps them >= 0)
    labels = np.unique(blocks)
    idx = np.searchsorted(labels, blocks)
    R = np.eye(n) - U[:, keep] @ U[:, keep].T
    R2 = R ** 2
    onehot = np.zeros((n, labels.size))
    onehot[np.arange(n), idx] = 1.0
    M = onehot.T @ R2 @ onehot
    ss = onehot.T @ (r ** 2)
    M -= np.diag([lost.get(int(b), 0.0) for b in labels]) * (np.diag(M) > 0)
    v, _ = scipy.optimize.nnls(M, ss)
    dofs = np.diag(M)
    var = v[idx]
    block_var = {int(b): float(x) for b, x in zip(labels, v, strict=True)}
    block_dof = {int(b): float(x) for b, x in zip(labels, dofs, strict=True)}
    classic, _ = with_unseen(s2 * pinv @ pinv.T, Vt[~keep].T)
    robust, seen = with_unseen((pinv * var) @ pinv.T, Vt[~keep].T)
    # each parameter's variance is a sum of block variances, each estimated with its own dof: Satterthwaite
    parts = ((pinv ** 2) @ onehot) * v[None, :]
    with np.errstate(invalid="ignore", divide="ignore"):
        dof_r = parts.sum(axis=1) ** 2 / np.sum(parts ** 2 / np.maximum(dofs, 1.0)[None, :], axis=1)
    for C in (classic, robust):
        C[~seen, :] = np.nan
        C[:, ~seen] = np.nan
    return LsqCov(classic, robust, seen, s2, dof, block_var, block_dof, bartlett(ss, dofs), pinv,
                   np.nan_to_num(dof_r, nan=1.0), -pinv @ r, Vt[~keep], var)


def std_of(C: np.ndarray) -> np.ndarray:
    """Square roots of a covariance diagonal; NaN (never a root of a negative number) where it is not >= 0."""
    d = np.diag(C).copy() if C.size else np.zeros(0)
    ok = np.isfinite(d) & (d >= 0)
    out = np.full(d.shape, np.nan)
    out[ok] = np.sqrt(d[ok])
    return out


def held_moves(fit: LsqCov, full: LsqCov, J_all: np.ndarray, free: np.ndarray) -> np.ndarray:
    """Per parameter that the fit ``fit`` (over the ``free`` columns of ``J_all``) holds on a bound: how the
    free parameters' estimate would move had it sat elsewhere, ``-pinv J_b``, per unit of :data:`BOX_STD`;
    zero for a bound parameter that the fit with every parameter free (``full``) sees - the box, which clips
    it, is then what fixes it, and the others are taken given its value. Columns for :func:`with_unseen`.
    Without them a bound parameter hid a flat direction it shares with others: ME3_kx, of which with ME2_kx
    only the sum is seen, got an interval 10x narrower than its scatter whenever ME2_kx sat on a bound."""
    bound = np.setdiff1d(np.arange(J_all.shape[1]), free)
    return -(fit.pinv @ J_all[:, bound]) * unseen_bound(full, bound)


def unseen_bound(full: LsqCov, bound: np.ndarray) -> np.ndarray:
    """1.0 for each ``bound`` parameter that ``full`` (every parameter free) does not see, else 0.0."""
    return (~full.seen[bound]).astype(float)


def two_stage_covariance(k: LsqCov, c: LsqCov, method: str, d_kc: np.ndarray, g_ck: np.ndarray,
                          held: np.ndarray | None = None
                          ) -> tuple[np.ndarray, np.ndarray]:
    """Joint covariance (scaled units, stage k's parameters first) of two least-squares stages that each hold
    the other's estimate fixed (the unseen directions' share included), and per parameter whether the data
    see it (:func:`with_unseen`).

    Here stage k (stiffness) minimises a residual that also depends on stage c's parameters (the A1 offset
    is taken at the estimated damping) and stage c (damping) one that depends on stage k's (its rows come
    from the stiffness's modes). Linearised at the estimate, with ``P`` a stage's pseudo-inverse and
    ``d_kc``, ``g_ck`` the Jacobians of stage k's residual in c and of stage c's in k (model minus data):
    ``dk = a - P_k d_kc dc`` and ``dc = b - P_c g_ck dk``, where ``a`` and ``b``, the errors each stage's own
    data cause, are independent with covariances ``k.kept(method)`` and ``c.kept("classic")``. The estimate
    is the fixed point ``[dk; dc] = M^-1 [a; b]``, and a direction one stage does not see reaches the other
    stage's parameters through the same ``M^-1``. Without ``d_kc`` the damping's scatter is missing from the
    stiffness std (issue 21: ME2_ky's predicted std 24 % below its Monte Carlo spread). ``held``
    (pk + pc, n): further inputs ``[a; b]`` of unit :data:`BOX_STD` each (the parameters held on a bound).
    """
    pk, pc = k.pinv.shape[0], c.pinv.shape[0]
    M = np.block([[np.eye(pk), k.pinv @ d_kc], [c.pinv @ g_ck, np.eye(pc)]])
    Mi = np.linalg.inv(M)
    cov = Mi @ scipy.linalg.block_diag(k.kept(method), c.kept("classic")) @ Mi.T
    n_null_k, n_null_c = k.null.shape[0], c.null.shape[0]
    inputs = np.block([[k.null.T, np.zeros((pk, n_null_c))], [np.zeros((pc, n_null_k)), c.null.T]])
    if held is not None:
        inputs = np.hstack([inputs, np.asarray(held).reshape(pk + pc, -1)])
    null = Mi @ inputs
    return with_unseen(cov, null)


def tied_to_bound(every: np.ndarray, held: np.ndarray, rows: np.ndarray, bound: np.ndarray,
                   first: int) -> dict[int, int]:
    """Which parameters of the held covariance ``held`` (the box-bound dampers held at their bound) move with
    a damper on its bound: {row of ``held``: column of ``every`` of that damper}.

    ``every`` is the joint covariance with every damper free (``rows``: its rows in the order of ``held``,
    ``bound``: its rows of the bound dampers). Regressed on the bound dampers, a parameter moves by
    ``beta = C_pb C_bb^-1`` per unit of theirs; a bound damper may sit anywhere within its std of the
    bound (at most :data:`BOX_STD`: the box holds it), so the held covariance lacks ``(beta sd)^2``. Where
    that exceeds :data:`MAX_TIED_SHARE` of the whole, the interval says where the box clips the damper, not
    what the data say. Only rows from ``first`` on (the dampers): the stiffness sees the damping only through
    the A1 offset, and its intervals stay calibrated whatever the dampers' bounds (issue 21)."""
    cbb = every[np.ix_(bound, bound)]
    beta = every[np.ix_(rows, bound)] @ np.linalg.pinv(cbb)
    moves = beta * np.minimum(np.sqrt(np.clip(np.diag(cbb), 0.0, None)), BOX_STD)[None, :]
    extra = np.sum(moves ** 2, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = extra / (np.diag(held) + extra)
    return {int(q): int(bound[np.argmax(np.abs(moves[q]))]) for q in range(first, rows.size)
            if share[q] > MAX_TIED_SHARE}

