"""Standard errors and intervals of a GSA estimate (:func:`parameter_intervals`), with the verdict on their
validity (:class:`GSAIntervals`).

The stiffness stage's residual is linearised at the estimate (:func:`_stiffness_fit`), so is the damping
stage's linear least squares (:func:`_damping_fit`); the two are joined, each holding the other's estimate
fixed (:func:`_joint_covariance`). Parameters on a bound, on directions the data do not see, or moving with
a damper on its bound get NaN and a reason; the adequacy checks (:mod:`identification.gsa.checks`) decide
whether the intervals apply.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from identification.estimation.distributions import norm_isf, t_isf
from identification.gsa.checks import (
    MEASUREMENT_RATIO,
    HeldBackResiduals,
    frequency_sigma,
    held_back_checks,
    held_back_problem,
    held_back_residuals,
    measurement_check,
    model_error_problem,
)
from identification.gsa.covariance import (
    IID_LEVEL,
    LsqCov,
    held_moves,
    jacobian,
    lsq_covariance,
    std_of,
    tied_to_bound,
    two_stage_covariance,
    unseen_bound,
    with_unseen,
)
from identification.gsa.modal_residual import (
    ModalModel,
    ScaledEstimate,
    StageSetup,
    a1_damping_shift,
    a1_offset,
    damping_rows,
    modal_residual,
    residual_at,
)
from identification.gsa.reference import ModalReference

METHODS = ("classic", "sandwich")


@dataclass
class GSAIntervals:
    """Standard errors and intervals of every GSA-identified parameter, with the verdict on their validity.

    Stiffness: the Jacobian of the stiffness stage's residual (:func:`modal_residual`) in the fit's scaling
    (the box mapped to [0, 1]); classic ``s2 (J^T J)^-1`` and a sandwich with one variance per residual block
    (the frequencies; each mode shape), the sandwich used when Bartlett's test rejects equal variances.
    Damping: the linear least squares of the damping stage, ``s2 (A^T A)^-1``, plus the stiffness
    uncertainty carried through the damping rows (two-stage delta method). Units: physical.
    """

    names: list[str]
    estimate: np.ndarray
    std: np.ndarray  # the reported std (NaN: not identifiable)
    std_classic: np.ndarray
    std_robust: np.ndarray
    method: str  # "classic" or "sandwich" (stiffness); damping always classic + propagation
    reasons: dict[str, str]  # per parameter with no interval: why
    checks: dict  # p-values and ratios of the adequacy checks
    problems: list[str]  # failed checks (empty: intervals valid)
    level: float = 0.95
    covariance: np.ndarray | None = field(default=None, repr=False)
    dof: np.ndarray | None = None  # per parameter: degrees of freedom of its variance (t quantile)

    @property
    def intervals_valid(self) -> bool:
        return not self.problems

    @property
    def quantiles(self) -> np.ndarray:
        """Per parameter: the two-sided ``level`` quantile of Student's t with the variance's dof (the
        frequency block, which carries most of the stiffness information, has few residual dof)."""
        q = (1 - self.level) / 2
        if self.dof is None:
            return np.full(len(self.names), norm_isf(q))
        d = np.where(np.isfinite(self.dof) & (self.dof > 0), self.dof, 1.0)
        return t_isf(q, np.maximum(d, 1.0))

    @property
    def identifiable(self) -> dict[str, bool]:
        """Identifiable only with valid intervals and a finite std below half the value."""
        ok = self.intervals_valid
        return {n: bool(ok and np.isfinite(s) and s < 0.5 * abs(v))
                for n, v, s in zip(self.names, self.estimate, self.std, strict=True)}

    def ci95(self) -> dict[str, list[float | None]]:
        out = {}
        for n, v, s, z in zip(self.names, self.estimate, self.std, self.quantiles, strict=True):
            ok = np.isfinite(s)
            out[n] = [float(v - z * s) if ok else None, float(v + z * s) if ok else None]
        return out

    @property
    def statement(self) -> str:
        if self.intervals_valid:
            own = ("the natural frequencies within the modal extraction's own uncertainty (no model error "
                   "seen), " if "measurement_frequency_ratio" in self.checks else
                   "no model-error check (the modal data carry no std of their own), ")
            return (own + "fit residuals consistent with the held-back positions and the estimate at the "
                    "residual's optimum: the intervals apply (they count the scatter of the modal data about "
                    "the model, not a bias the modal data share)")
        return "intervals NOT valid - " + "; ".join(self.problems)

    def adequacy_dict(self) -> dict:
        return {"intervals_valid": self.intervals_valid, "statement": self.statement, "method": self.method,
                **self.checks}

    def to_dict(self) -> dict:
        def f(x):
            return float(x) if np.isfinite(x) else None

        def per_name(v):
            return {n: f(x) for n, x in zip(self.names, v, strict=True)}

        return {"level": self.level, "ci95": self.ci95(), "std": per_name(self.std),
                "std_classic": per_name(self.std_classic), "std_robust": per_name(self.std_robust),
                "dof": None if self.dof is None else per_name(self.dof),
                "identifiable": self.identifiable, "not_identifiable_reasons": self.reasons,
                "adequacy": self.adequacy_dict()}

    def format_table(self) -> str:
        lines = [f"{100 * self.level:g} % intervals of the identified parameters ({self.method} covariance "
                 "for stiffness; damping with the stiffness uncertainty carried through)",
                 f"  {'parameter':<10} {'estimate':>11} {'std':>10} {'rel. std':>9} {'lo':>11} {'hi':>11}"
                 "  identifiable"]
        idf = self.identifiable
        for n, v, s, z in zip(self.names, self.estimate, self.std, self.quantiles, strict=True):
            if np.isfinite(s):
                lines.append(f"  {n:<10} {v:>11.4g} {s:>10.3g} {100 * s / abs(v):>8.1f}% {v - z * s:>11.4g} "
                             f"{v + z * s:>11.4g}  {'yes' if idf[n] else 'no'}")
            else:
                lines.append(f"  {n:<10} {v:>11.4g} {'-':>10} {'-':>9} {'-':>11} {'-':>11}  no "
                             f"({self.reasons.get(n, 'no interval')})")
        c = self.checks
        if "measurement_frequency_ratio" in c:
            lines.append(f"model-error check: the frequencies' mean square misfit is "
                         f"{c['measurement_frequency_ratio']:.3g}x what the modal extraction's own std "
                         f"explains (p = {c['p_measurement']:.2g}; flagged at >= {MEASUREMENT_RATIO:g}x and "
                         "significant)")
        lines.append("verdict on the intervals: " + ("valid - " if self.intervals_valid else "")
                     + self.statement)
        return "\n".join(lines)




# ------------------------------------------------------------------------------ the stages, linearised
@dataclass(frozen=True)
class _StiffnessFit:
    """The stiffness stage linearised at the estimate: its residual, Jacobian and covariances."""

    offset: np.ndarray  # assumption A1's offset at the estimate (taken out of the residual)
    r0: np.ndarray
    blocks: np.ndarray  # per residual entry: -1 frequency, k >= 0 the shape of pair k
    free: np.ndarray  # the stiffness parameters off their bounds
    bound: np.ndarray  # ... on a bound
    J_all: np.ndarray  # Jacobian in every stiffness parameter (scaled)
    fit: LsqCov  # over the free ones (the box holds the bound ones)
    full: LsqCov  # every one free: which directions the data see
    moves: np.ndarray  # how the free estimate moves with each bound one (:func:`held_moves`)
    method: str  # "classic", or "sandwich" when the blocks' variances differ

    @property
    def J(self) -> np.ndarray:
        return self.J_all[:, self.free]


@dataclass(frozen=True)
class _DampingFit:
    """The damping stage (linear least squares) at the estimate, and how each stage moves the other."""

    free: np.ndarray  # parameter indices of the dampers off their bounds
    bound: np.ndarray  # ... on a bound
    fit: LsqCov
    full: LsqCov
    moves: np.ndarray
    G_all: np.ndarray  # the damping residual's Jacobian in every stiffness parameter
    D_all: np.ndarray  # the stiffness residual's Jacobian in every damper (through the A1 offset)


def _stiffness_fit(setup: StageSetup, sc: ScaledEstimate) -> _StiffnessFit:
    """Jacobian of the smooth stage residual in the [0, 1] scaling. The covariance holds the parameters on a
    bound (the box clips them), but which directions the data see is decided with them free: held, a bound
    parameter hid the flat direction it shares (ME2_kx and ME3_kx: only their sum is seen; whenever ME2_kx
    sat on a bound ME3_kx got an interval 10x narrower than its scatter)."""
    n_stiff = sc.n_stiff
    off = a1_offset(setup, sc.est)
    r0, blocks, match = modal_residual(setup, sc.est, offset=off)
    free = np.flatnonzero(~sc.at_bound[:n_stiff])
    res = partial(residual_at, setup=setup, row=sc.est, cols=slice(0, n_stiff), lo=sc.lo, span=sc.span,
                  match=match, offset=off)
    J_all = jacobian(res, sc.x[:n_stiff])
    n_pairs = int(blocks.max()) + 1 if blocks.size else 0
    lost = {b: 1.0 for b in range(n_pairs)}
    fit = lsq_covariance(J_all[:, free], r0, blocks, lost)
    full = lsq_covariance(J_all, r0, blocks, lost)
    return _StiffnessFit(offset=off, r0=r0, blocks=blocks, free=free,
                         bound=np.flatnonzero(sc.at_bound[:n_stiff]), J_all=J_all, fit=fit, full=full,
                         moves=held_moves(fit, full, J_all, free),
                         method="sandwich" if fit.p_iid < IID_LEVEL else "classic")


def _damping_system(k_row: np.ndarray, setup: StageSetup, reference: ModalReference,
                    damping_pairs: Sequence[tuple[int, int]], shift: list[np.ndarray]
                    ) -> tuple[np.ndarray, np.ndarray]:
    """The damping stage's rows ``A c = b`` (relative to the reference damping) with the stiffness of
    ``k_row``, A1's damping shift (at the estimate) added to the known part."""
    A, b = [], []
    got = {}
    for i, j in damping_pairs:
        if i not in got:
            xi0, Q, _ = damping_rows(setup, k_row, i)
            got[i] = (xi0 + shift[i], Q)
        xi0, Q = got[i]
        xr = reference.xi[i][j]
        A.append(Q[j] / xr)
        b.append((xr - xi0[j]) / xr)
    return np.array(A), np.array(b)


def _damping_misfit(xk: np.ndarray, sc: ScaledEstimate,
                    system: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """The damping stage's residual (model - data) at other stiffness values ``xk`` (scaled)."""
    A, b = system(sc.row(slice(0, sc.n_stiff), xk))
    return A @ sc.est[sc.damp_cols] - b


def _offset_misfit(xc: np.ndarray, sc: ScaledEstimate, setup: StageSetup, stiff: _StiffnessFit) -> np.ndarray:
    """The stiffness stage's residual at other damping values ``xc`` (scaled), through the A1 offset."""
    return stiff.r0 + stiff.offset - a1_offset(setup, sc.row(sc.damp_cols, xc))


def _damping_fit(setup: StageSetup, reference: ModalReference, sc: ScaledEstimate,
                 damping_pairs: Sequence[tuple[int, int]], stiff: _StiffnessFit) -> _DampingFit:
    """The damping stage at the estimate: its rows come from the stiffness's modes, and the stiffness
    stage's A1 offset from the damping's values - the Jacobians of each in the other join the stages."""
    n_stiff, cc = sc.n_stiff, sc.damp_cols
    system = partial(_damping_system, setup=setup, reference=reference, damping_pairs=damping_pairs,
                     shift=a1_damping_shift(setup, sc.est))
    A, b = system(sc.est)
    free = cc[~sc.at_bound[cc]]
    As, rc = A * sc.span[cc], b - A @ sc.est[cc]
    fit = lsq_covariance(As[:, free - n_stiff], rc)
    full = lsq_covariance(As, rc)
    return _DampingFit(free=free, bound=cc[sc.at_bound[cc]], fit=fit, full=full,
                       moves=held_moves(fit, full, As, free - n_stiff),
                       G_all=jacobian(partial(_damping_misfit, sc=sc, system=system), sc.x[:n_stiff]),
                       D_all=jacobian(partial(_offset_misfit, sc=sc, setup=setup, stiff=stiff), sc.x[cc]))


# ------------------------------------------------------------------------------ the stages joined
Joint = dict[str, tuple[np.ndarray, np.ndarray]]  # per method: (scaled covariance, seen per parameter)


def _joint_covariance(sc: ScaledEstimate, stiff: _StiffnessFit, damp: _DampingFit) -> Joint:
    """Both stages' covariance (free stiffness, then free dampers), each method; a bound parameter's move
    shifts its own stage's free parameters and the other stage's residual."""
    n_stiff = sc.n_stiff
    G, D = damp.G_all[:, stiff.free], damp.D_all[:, damp.free - n_stiff]
    sd_k, sd_c = unseen_bound(stiff.full, stiff.bound), unseen_bound(damp.full, damp.bound - n_stiff)
    held = np.hstack([np.vstack([stiff.moves, -damp.fit.pinv @ damp.G_all[:, stiff.bound] * sd_k]),
                      np.vstack([-stiff.fit.pinv @ damp.D_all[:, damp.bound - n_stiff] * sd_c, damp.moves])])
    return {m: two_stage_covariance(stiff.fit, damp.fit, m, D, G, held) for m in METHODS}


def _untie_from_bound(sc: ScaledEstimate, stiff: _StiffnessFit, damp: _DampingFit, joint: Joint,
                      reasons: dict[str, str]) -> None:
    """A free damper that moves with one on its box bound loses its interval (issue 21), in ``joint``."""
    if not damp.bound.size:
        return
    n_stiff, n_free = sc.n_stiff, stiff.free.size
    sd_k = unseen_bound(stiff.full, stiff.bound)
    every = two_stage_covariance(
        stiff.fit, damp.full, stiff.method, damp.D_all, damp.G_all[:, stiff.free],
        np.vstack([stiff.moves, -damp.full.pinv @ damp.G_all[:, stiff.bound] * sd_k]))[0]
    tied = tied_to_bound(every, joint[stiff.method][0],
                         np.concatenate([np.arange(n_free), n_free + damp.free - n_stiff]),
                         n_free + damp.bound - n_stiff, n_free)
    for row, col in tied.items():
        if not joint[stiff.method][1][row]:
            continue
        on = sc.names[n_stiff + col - n_free]
        reasons[sc.names[damp.free[row - n_free]]] = (
            f"moves with {on}, which sits on its box bound: its value depends on where the box clips "
            f"{on}, which the data do not say")
        for m in joint:
            joint[m][1][row] = False


@dataclass
class _Spread:
    """The joint covariance unpacked per parameter (physical units; NaN where there is no interval)."""

    free: np.ndarray  # the parameters the covariance covers, in its order
    cov_scaled: np.ndarray  # the chosen method's, scaled
    seen: np.ndarray  # per free parameter
    std_classic: np.ndarray
    std_robust: np.ndarray
    cov: np.ndarray
    dof: np.ndarray


def _spread(sc: ScaledEstimate, stiff: _StiffnessFit, damp: _DampingFit | None, joint: Joint,
            reasons: dict[str, str]) -> _Spread:
    """Per parameter: the std of each method, the covariance, the degrees of freedom of its variance; the
    dampers' std always from the chosen stiffness covariance; reasons for the unseen."""
    p, n_stiff, span = len(sc.names), sc.n_stiff, sc.span
    cov = np.full((p, p), np.nan)
    std_c, std_r, dof = np.full(p, np.nan), np.full(p, np.nan), np.full(p, np.nan)
    dof[stiff.free] = stiff.fit.dof_robust if stiff.method == "sandwich" else stiff.fit.dof
    free = stiff.free if damp is None else np.concatenate([stiff.free, damp.free])
    if damp is not None:
        dof[damp.free] = damp.fit.dof
    cov_s, seen = joint[stiff.method]
    for m, out in (("classic", std_c), ("sandwich", std_r)):
        C, ok = joint[m]
        out[free] = np.where(ok, std_of(C) * span[free], np.nan)
    sub = np.where(seen, 1.0, np.nan)
    cov[np.ix_(free, free)] = cov_s * np.outer(span[free] * sub, span[free] * sub)
    if damp is not None:
        fc, dampers = damp.free, slice(stiff.free.size, None)
        std_c[fc] = std_r[fc] = np.where(seen[dampers], std_of(cov_s[dampers, dampers]) * span[fc], np.nan)
        if not damp.fit.dof > 0:
            for q in fc:
                reasons.setdefault(sc.names[q], "no residual degrees of freedom left in the damping stage")
                std_c[q] = std_r[q] = np.nan
    for q in free[~seen]:
        reasons.setdefault(sc.names[q], (
            "the modal data do not see it (near-singular direction of the Jacobian, or it moves with a "
            "parameter on a box bound)" if q < n_stiff else
            "the damping rows do not see it (near-singular direction, its own or the stiffness's, or it "
            "moves with a parameter on a box bound)"))
    return _Spread(free=free, cov_scaled=cov_s, seen=seen, std_classic=std_c, std_robust=std_r, cov=cov,
                   dof=dof)


def _gauss_newton_step(sc: ScaledEstimate, stiff: _StiffnessFit, spread: _Spread) -> tuple[float, str]:
    """How far (in std) a Gauss-Newton step would move the estimate: is it at the residual's optimum?"""
    n_free = stiff.free.size
    cov_k = spread.cov_scaled[:n_free, :n_free]
    with np.errstate(invalid="ignore", divide="ignore"):
        zstep = np.where(spread.seen[:n_free], np.abs(stiff.fit.step) / np.sqrt(np.diag(cov_k)), np.nan)
    zmax = float(np.nanmax(zstep)) if np.any(np.isfinite(zstep)) else 0.0
    if zmax <= 1.0:
        return zmax, ""
    q = stiff.free[int(np.nanargmax(zstep))]
    return zmax, (f"the estimate is {zmax:.2g} std from the optimum of the residual ({sc.names[q]}): "
                  "the fit stopped short of it, the intervals are not centred")


def _drop_past_box(sc: ScaledEstimate, damp: _DampingFit, spread: _Spread, std: np.ndarray, level: float,
                   reasons: dict[str, str]) -> None:
    """A damper whose interval reaches past the box loses it: the bounded solve clips its scatter."""
    fc, est = damp.free, sc.est
    tq = t_isf((1 - level) / 2, np.maximum(np.nan_to_num(spread.dof[fc], nan=1.0), 1.0))
    lo_end, hi_end = est[fc] - tq * std[fc], est[fc] + tq * std[fc]
    past = np.isfinite(std[fc]) & ((lo_end < sc.lo[fc]) | (hi_end > sc.hi[fc]))
    for q in fc[past]:
        reasons[sc.names[q]] = (
            f"its {level:.0%} interval reaches past the box bound: the damping solve clips its scatter "
            "at the bound (it sits on it in other data sets), which the linear std does not describe - "
            "too wide where it is clipped, off-centre where a partner is")
        std[q] = spread.std_classic[q] = spread.std_robust[q] = np.nan
        spread.cov[q, :] = spread.cov[:, q] = np.nan


# ------------------------------------------------------------------------------ the procedure
def parameter_intervals(model: ModalModel, reference: ModalReference, estimate: np.ndarray,
                        stiffness_names: Sequence[str], damping_names: Sequence[str], lo: np.ndarray,
                        hi: np.ndarray, damping_pairs: Sequence[tuple[int, int]], *,
                        validation: ModalReference | None = None, n_extra_modes: int = 4,
                        level: float = 0.95, check_level: float = 0.01) -> GSAIntervals:
    """Standard errors and ``level`` intervals of a GSA estimate (see :class:`GSAIntervals`).

    Checks that make the intervals not valid (each at ``check_level``, Bonferroni over the checks):
    model error - the natural frequencies (identification and held-back positions) miss the model by more
    than the modal extraction's own std explains (:func:`measurement_check`, needs ``freq_std`` in the
    references; at least :data:`MEASUREMENT_RATIO` x the expected mean square, and significant); the residuals
    at the held-back ``validation`` positions larger than the fit's residual scale plus the parameter
    uncertainty predicts; the estimate away from the optimum of the residual the covariance describes (a
    Gauss-Newton step of more than one std). The fit's residual scale alone cannot show a model error: the
    misfit inflates it as much as the held-back residuals (issue 21: 57 % of wrong-structure refits caught).
    Parameters on a box bound, or on directions the data do not see, get NaN and a reason; so do dampers
    that move with one on its bound (:func:`tied_to_bound`) or whose interval would reach past the box.
    """
    names = list(stiffness_names) + list(damping_names)
    sc = ScaledEstimate.of(names, len(stiffness_names), estimate, lo, hi)
    setup = StageSetup.of(model, reference, sc.n_stiff, n_extra_modes)
    reasons = {names[q]: "on the box bound: the data push it outside the search box"
               for q in np.flatnonzero(sc.at_bound)}
    stiff = _stiffness_fit(setup, sc)
    checks: dict = {"stiffness_residual_dof": stiff.fit.dof, "p_equal_block_variances": stiff.fit.p_iid}
    sigma_f = frequency_sigma(reference)
    alpha = check_level / (2 + (validation is not None) + (sigma_f is not None))

    damp = None
    if damping_names and damping_pairs:
        damp = _damping_fit(setup, reference, sc, damping_pairs, stiff)
        joint = _joint_covariance(sc, stiff, damp)
        _untie_from_bound(sc, stiff, damp, joint, reasons)
        checks["damping_residual_dof"] = damp.fit.dof
    else:
        for q in sc.damp_cols:
            reasons.setdefault(names[q], "no damping rows")
        unseen = np.hstack([stiff.fit.null.T, stiff.moves])
        joint = {m: with_unseen(stiff.fit.kept(m), unseen) for m in METHODS}
    spread = _spread(sc, stiff, damp, joint, reasons)
    checks["gauss_newton_step_std"], step_problem = _gauss_newton_step(sc, stiff, spread)
    std = spread.std_robust if stiff.method == "sandwich" else spread.std_classic
    std = np.where(sc.at_bound, np.nan, std)
    if damp is not None:
        _drop_past_box(sc, damp, spread, std, level, reasons)

    problems: list[str] = []
    held: HeldBackResiduals | None = None
    if validation is not None:
        setup_v = setup.at(validation)
        held = held_back_residuals(setup_v, sc, stiff.free)
        found = held_back_checks(setup_v, validation, sc, held,
                                 spread.cov_scaled[:stiff.free.size, :stiff.free.size], stiff.fit,
                                 None if damp is None else damp.fit)
        checks.update({c.key: c.ratio for c in found})
        ps = [c.p for c in found]
        checks["p_validation"] = checks["p_value"] = float(min(1.0, len(ps) * min(ps)))
        if problem := held_back_problem(found, checks["p_validation"], alpha):
            problems.append(problem)
    if sigma_f is not None:  # model error: the frequency residuals against the modal data's own uncertainty
        sigma_fv = frequency_sigma(validation) if validation is not None else None
        fv = None if held is None or sigma_fv is None else held.blocks < 0
        rat_m, p_m, dof_m = measurement_check(
            stiff.J, stiff.r0, stiff.blocks, sigma_f, stiff.fit.block_var, stiff.fit.pinv,
            None if fv is None or held is None else held.J[fv],  # fv is not None only with held
            None if fv is None or held is None else held.r[fv], sigma_fv)
        checks.update(measurement_frequency_ratio=rat_m, p_measurement=p_m, measurement_dof=dof_m)
        if rat_m >= MEASUREMENT_RATIO and p_m < alpha:
            problems.insert(0, model_error_problem(rat_m, p_m, fv is not None))
    if step_problem:
        problems.append(step_problem + (" (the misfit above also bends the residual away from its "
                                         "linearisation)" if problems else ""))
    return GSAIntervals(names=names, estimate=sc.est, std=std, std_classic=spread.std_classic,
                        std_robust=spread.std_robust, method=stiff.method, reasons=reasons, checks=checks,
                        problems=problems, level=float(level), covariance=spread.cov, dof=spread.dof)
