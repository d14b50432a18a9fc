"""Adequacy checks of the intervals: held-back residuals against their prediction, and the natural
frequencies against the modal extraction's own uncertainty (model error)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

import numpy as np

from identification.estimation.distributions import chi2_sf, f_sf
from identification.gsa.covariance import LsqCov, jacobian
from identification.gsa.modal_residual import (
    ScaledEstimate,
    StageSetup,
    a1_damping_shift,
    a1_offset,
    damping_rows,
    modal_residual,
    residual_at,
)
from identification.gsa.reference import ModalReference

#: held-back residuals flag a structure error when their mean square exceeds the prediction by this factor
#: (std x 1.4) and significantly: with hundreds of shape entries a 1.3x variance, which widens an interval
#: by 14 %, is already "significant"; the check looks for a misfit that matters
VALIDATION_RATIO = 2.0
#: frequency residuals flag a model error when their mean square exceeds what the modal extraction's own
#: uncertainty explains by this factor, and significantly (benchmarks/bench_machine_tool_calibration.py)
MEASUREMENT_RATIO = 2.0


def f_check(r: np.ndarray, var: np.ndarray, dof_fit: float, lost: float = 0.0) -> tuple[float, float]:
    """Mean square of held-back residuals over their predicted variance, and the one-sided p-value of that
    ratio as F(n, ``dof_fit``) (the variance is an estimate with ``dof_fit`` degrees of freedom)."""
    n = max(r.size - lost, 1.0)
    ratio = float(np.sum(r ** 2 / var)) / n
    return ratio, float(f_sf(ratio, n, max(dof_fit, 1.0)))


def frequency_sigma(ref: ModalReference) -> np.ndarray | None:
    """The modal data's own std of each frequency residual of :func:`modal_residual` (position-major), from
    the extraction's ``freq_std``: ``sigma_f / (2 xi f)``; None when the reference carries no std."""
    if ref.freq_std is None:
        return None
    out = []
    for lam, xi, fs in zip(ref.lam, ref.xi, ref.freq_std, strict=True):
        f = np.abs(lam) / (2 * np.pi)
        out.append(np.asarray(fs, dtype=float) / (2 * xi * f))
    sig = np.concatenate(out)
    return sig if np.all(np.isfinite(sig) & (sig > 0)) else None


def measurement_check(J: np.ndarray, r: np.ndarray, blocks: np.ndarray, sigma: np.ndarray,
                       block_var: dict[int, float], pinv: np.ndarray, Jv: np.ndarray | None = None,
                       rv: np.ndarray | None = None, sigma_v: np.ndarray | None = None
                       ) -> tuple[float, float, float]:
    """Frequency residuals against the modal data's own uncertainty, not the fit's residual scale.

    Linearised, the identification residual is ``(I - H) e`` (``H`` the hat matrix of ``J``) and a
    held-back frequency residual ``e_v - J_v pinv e``; ``e`` has the extraction's frequency variances and,
    for the shape entries, the fit's shape block variances (they enter only through the hat matrix). The
    sum of squares of all frequency residuals is compared with its expectation under a right structure, as
    a scaled chi-square (Satterthwaite). A model error adds a misfit that the extraction's std does not
    contain, so the ratio grows with it - unlike the fit's own scale, which the misfit inflates as well.
    Returns (mean square / expected, p-value, effective degrees of freedom).
    """
    n = r.size
    U, s, _ = np.linalg.svd(J, full_matrices=False)
    rank = int(np.sum(s > 1e-10 * max(s[0], 1e-300))) if s.size else 0
    fsel = np.flatnonzero(blocks < 0)
    var = np.array([block_var.get(int(b), 0.0) for b in blocks])
    var[fsel] = sigma ** 2
    Uf = U[fsel, :rank]
    L = np.eye(n)[fsel] - Uf @ U[:, :rank].T  # frequency rows of I - H
    rows, q, got = [L], [r[fsel]], [sigma]
    if Jv is not None and rv is not None and sigma_v is not None:
        rows.append(-Jv @ pinv)
        q.append(rv)
        got.append(sigma_v)
    n_v = sum(x.size for x in q) - fsel.size
    # covariance of the stacked frequency residuals: the identification errors through L (and the
    # prediction), plus the held-back positions' own errors on the diagonal
    Lall = np.vstack(rows)
    V = (Lall * var) @ Lall.T
    if n_v:
        V[fsel.size:, fsel.size:] += np.diag(got[-1] ** 2)
    qq = np.concatenate(q)
    tr, tr2 = float(np.trace(V)), float(np.sum(V * V))
    if not tr > 0:
        return math.nan, 1.0, 0.0
    g, h = tr2 / tr, tr ** 2 / tr2
    ss = float(qq @ qq)
    return ss / tr, float(chi2_sf(ss / g, h)), h



@dataclass(frozen=True)
class HeldBackResiduals:
    """The stiffness stage's residual at the held-back positions and its Jacobian in the free stiffness."""

    r: np.ndarray
    blocks: np.ndarray  # -1: frequency, k >= 0: the shape of pair k
    J: np.ndarray


@dataclass(frozen=True)
class HeldBackCheck:
    """One group of held-back residuals against its prediction: mean square over predicted, p-value."""

    kind: str  # "frequency", "shape" or "damping"
    ratio: float
    p: float

    @property
    def key(self) -> str:
        return f"validation_{self.kind}_ratio"


def held_back_residuals(setup: StageSetup, sc: ScaledEstimate, free_k: np.ndarray) -> HeldBackResiduals:
    """The residual at the held-back positions of ``setup`` (A1 offset taken out), matched once at the
    estimate, and its Jacobian in the free stiffness parameters ``free_k``."""
    off = a1_offset(setup, sc.est)
    r, blocks, match = modal_residual(setup, sc.est, offset=off)
    res = partial(residual_at, setup=setup, row=sc.est, cols=free_k, lo=sc.lo, span=sc.span, match=match,
                  offset=off)
    return HeldBackResiduals(r=r, blocks=blocks, J=jacobian(res, sc.x[free_k]))


def held_back_checks(setup: StageSetup, validation: ModalReference, sc: ScaledEstimate,
                     held: HeldBackResiduals, cov_k: np.ndarray, stiff: LsqCov, damp: LsqCov | None
                     ) -> list[HeldBackCheck]:
    """Do the held-back positions scatter as the fit's residuals predict? Frequencies and shapes against the
    stiffness stage's block variances plus the parameter uncertainty (``cov_k``, scaled, free stiffness), the
    damping ratios (with a damping stage ``damp``) against its residual scale; each an F test."""
    pv = np.einsum("ij,jk,ik->i", held.J, cov_k, held.J)
    shape_b = [b_ for b_ in stiff.block_var if b_ >= 0]
    shape_var = float(np.mean([stiff.block_var[b_] for b_ in shape_b])) if shape_b else math.nan
    bv, rv = held.blocks, held.r
    var = np.where(bv < 0, stiff.block_var.get(-1, stiff.s2), shape_var) + pv
    fsel = bv < 0
    n_pairs = int(bv.max()) + 1 if bv.size else 0
    out = [HeldBackCheck("frequency", *f_check(rv[fsel], var[fsel], stiff.block_dof.get(-1, stiff.dof))),
           HeldBackCheck("shape", *f_check(rv[~fsel], var[~fsel], sum(stiff.block_dof[b_] for b_ in shape_b),
                                           float(n_pairs)))]
    n_stiff = sc.n_stiff
    if damp is not None and np.isfinite(damp.s2) and len(sc.names) > n_stiff:
        xi_v = []
        shift_v = a1_damping_shift(setup, sc.est)
        for i in range(len(validation.positions)):
            xi0, Q, _ = damping_rows(setup, sc.est, i)
            xi_v.append((validation.xi[i] - xi0 - shift_v[i] - Q @ sc.est[n_stiff:]) / validation.xi[i])
        rd = np.concatenate(xi_v)
        out.append(HeldBackCheck("damping", *f_check(rd, np.full(rd.size, damp.s2), damp.dof)))
    return out


def held_back_problem(found: list[HeldBackCheck], p_value: float, alpha: float) -> str:
    """The verdict's words when a held-back group misses its prediction by :data:`VALIDATION_RATIO` or more,
    significantly (Bonferroni over the groups, at ``alpha``); empty when none does."""
    ps = [c.p for c in found]
    big = [c.p for c in found if c.ratio >= VALIDATION_RATIO]
    if not (big and len(ps) * min(big) < alpha):
        return ""
    parts = [f"{c.kind} {c.ratio:.3g}x" for c in found]
    return ("the held-back positions' residuals exceed what the fit's residual scale and "
            f"parameter uncertainty predict (mean square / predicted: {', '.join(parts)}; "
            f"p = {p_value:.2g}): the model's structure does not carry over "
            "(modelling error), so the estimate may sit off the truth by more than its std")


def model_error_problem(ratio: float, p: float, held_back: bool) -> str:
    """The verdict's words for frequencies that miss the model by more than the modal data's own std."""
    where = "identification and held-back positions" if held_back else "identification positions"
    return (f"model error: the natural frequencies at the {where} miss the model by {ratio:.3g}x the "
            f"variance the modal extraction reports for them (p = {p:.2g}) - the "
            "model's structure (masses, joints, constants it holds fixed) does not match the machine, or "
            "the modal data carry a bias beyond their reported std; the intervals then count the misfit "
            "as if it were noise and the estimate may sit off the truth by more than its std")
