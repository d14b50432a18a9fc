"""Sensitivity-guided identification of a structural model from modal data (seed paper 003).

Three steps, as in the paper's Figure 1:

1. **Partition by global sensitivity analysis.** For every (axis position, reference mode) pair,
   Sobol indices (first order S1 and total ST, SALib's Saltelli/Sobol' sampling and estimator)
   of two scalar outputs over the whole parameter box: the MACXP between reference and matched
   model mode, and the squared natural damping difference NDD^2. The parameters with
   ``ST >= threshold`` in a pair's MACXP form that pair's small stiffness subproblem.
2. **Stiffness.** Each subproblem maximises its pair's MACXP over its few parameters (SLSQP in
   the box scaled to [0, 1]) ``n_opt`` times from random starts, the other parameters drawn at
   random each time. Per parameter, the subproblem whose repetitions agree best (smallest
   standard deviation, in units of the parameter's range) gives the estimate: their mean.
3. **Damping.** With the identified stiffness, modal damping is linear in the viscous damping
   parameters (light damping, paper eqs. 11-13): ``xi_i = xi_known_i + sum_n q_in c_n`` with
   ``q_in = phi_i^T C_n phi_i / (2 omega_i)`` for mass-normalised undamped modes. The rows of the
   pairs whose NDD^2 depends least on the stiffness parameters (smallest summed ST) are solved by
   bounded linear least squares, relative to the reference damping.

4. **Correction for A1 and intervals** (with ``refine``). Undamped modes against damped reference modes
   shift both stages' optimum even with the right parameters (up to about one std of a stiffness, and tens
   of per cent for the coupling damping, on noise-free data). The residual the model leaves against its own
   damped modes at the estimate (:func:`_a1_offset`, :func:`_a1_damping_shift`) is taken out and both
   stages run once more. Then every parameter gets a standard error and a 95 % interval
   (:func:`parameter_intervals`, :class:`GSAIntervals`): the Jacobian of the joint step's smooth residual
   (a block sandwich when frequencies and shapes scatter differently), the damping stage's linear least
   squares with the stiffness uncertainty carried through; NaN for what the data do not see or a bound
   holds; a verdict from the held-back positions. Calibration: benchmarks/bench_machine_tool_calibration.py.

Stiffness stage and assumption A1: shapes and frequencies come from the undamped model, and for
the MACXP the model's eigenvalue carries the reference damping ratio, so damping parameters have
no influence on it (the MACXP weighs eigenvalues, and a damping mismatch would otherwise lower it).
The final tables use the full complex modal analysis of the identified model.

The model is duck-typed (``identification.models.machine_tool_model.MachineTool`` fits):
``real_modes_batch(kmat, s, n)``, ``observation(s)``, ``damping_parts(s)``,
``complex_modes(p, s, n)``, ``frf(p, s, freq, input)``. Every batch of model evaluations goes
through ``executor`` (any ``map(fn, items) -> list``; default: the builtin, in this process).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import scipy.linalg
import scipy.optimize
import scipy.stats
from SALib.analyze import sobol as sobol_analyze
from SALib.sample import sobol as sobol_sample

from identification.estimation.tasks import Map, map_tasks
from identification.frequency.modal_metrics import csf, frac, macxp_matrix, ndd, summary_stats

__all__ = [
    "ModalReference", "reference_from_model", "SobolResult", "sobol_indices", "GSAIdentificationResult",
    "identify", "evaluate_model", "GSAIntervals", "parameter_intervals", "local_refit",
]



# ------------------------------------------------------------------------------ reference data
@dataclass
class ModalReference:
    """Measured (or simulated) modal data at axis positions, and optionally FRFs for validation.

    ``lam[i]``: complex eigenvalues (rad/s) of the reference modes at ``positions[i]``;
    ``shapes[i]``: complex shapes at the measured DOFs (n_obs, n_modes); ``xi[i]``: modal damping.
    ``frf[i]``: (n_inputs, n_obs, n_freq) receptances at ``freq`` for forces at ``inputs``.
    ``freq_std[i]`` (Hz) and ``xi_std[i]``: the uncertainty the modal extraction reports for each natural
    frequency and damping ratio (``ModalFit.freq_std`` / ``xi_std``; None: not known). They give
    :func:`parameter_intervals` a noise scale that a model error does not inflate.
    """

    positions: list[float]
    lam: list[np.ndarray]
    shapes: list[np.ndarray]
    xi: list[np.ndarray]
    freq: np.ndarray | None = None
    inputs: list = field(default_factory=list)
    frf: list[np.ndarray] | None = None
    freq_std: list[np.ndarray] | None = None
    xi_std: list[np.ndarray] | None = None

    @property
    def n_modes(self) -> int:
        return int(self.lam[0].size)

    def subset(self, idx: Sequence[int]) -> ModalReference:
        return ModalReference(
            positions=[self.positions[i] for i in idx], lam=[self.lam[i] for i in idx],
            shapes=[self.shapes[i] for i in idx], xi=[self.xi[i] for i in idx], freq=self.freq,
            inputs=list(self.inputs), frf=None if self.frf is None else [self.frf[i] for i in idx],
            freq_std=None if self.freq_std is None else [self.freq_std[i] for i in idx],
            xi_std=None if self.xi_std is None else [self.xi_std[i] for i in idx])


def reference_from_model(model, params, positions: Sequence[float], n_modes: int,
                         freq: np.ndarray | None = None, inputs: Sequence = ()) -> ModalReference:
    """Reference modal data (and FRFs) computed from a model with known parameters."""
    lam, shapes, xi, frfs = [], [], [], []
    for s in positions:
        cm = model.complex_modes(params, s, n_modes)
        lam.append(cm.lam)
        shapes.append(cm.shapes)
        xi.append(cm.xi)
        if freq is not None and inputs:
            frfs.append(np.array([model.frf(params, s, freq, i) for i in inputs]))
    return ModalReference(positions=[float(s) for s in positions], lam=lam, shapes=shapes, xi=xi,
                          freq=None if freq is None else np.asarray(freq, dtype=float), inputs=list(inputs),
                          frf=frfs if frfs else None)


# ------------------------------------------------------------------------------ Sobol indices
@dataclass
class SobolResult:
    names: list[str]
    S1: np.ndarray  # (n_outputs, n_params)
    ST: np.ndarray
    S1_conf: np.ndarray  # 95 % bootstrap half-widths
    ST_conf: np.ndarray
    n_evaluations: int


def sobol_indices(evaluate: Callable[[np.ndarray], np.ndarray], lo: Sequence[float], hi: Sequence[float],
                  names: Sequence[str], n: int, *, seed: int = 0, executor: Map | None = None,
                  n_chunks: int = 8, num_resamples: int = 100) -> SobolResult:
    """First-order and total Sobol indices of every output column of ``evaluate``.

    ``evaluate(X)`` maps a (m, n_params) block of parameter rows to (m, n_outputs) outputs and must
    be picklable; the ``n * (n_params + 2)`` Saltelli rows go to ``executor`` in ``n_chunks``
    blocks. Outputs with zero variance get indices 0.
    """
    names = list(names)
    problem = {"num_vars": len(names), "names": names,
               "bounds": [[float(a), float(b)] for a, b in zip(lo, hi, strict=True)]}
    X = sobol_sample.sample(problem, int(n), calc_second_order=False, seed=int(seed))
    chunks = np.array_split(X, max(1, min(int(n_chunks), X.shape[0])))
    Y = np.vstack([np.atleast_2d(np.asarray(y, dtype=float).reshape(len(c), -1))
                   for c, y in zip(chunks, map_tasks(executor, evaluate, chunks), strict=True)])
    n_out = Y.shape[1]
    P = len(names)
    S1, ST, S1c, STc = (np.zeros((n_out, P)) for _ in range(4))
    for k in range(n_out):
        y = Y[:, k]
        if not np.all(np.isfinite(y)) or np.var(y) <= 1e-300:
            continue
        r = sobol_analyze.analyze(problem, y, calc_second_order=False, num_resamples=num_resamples,
                                  print_to_console=False, seed=int(seed) + k)
        S1[k], ST[k] = np.nan_to_num(r["S1"]), np.nan_to_num(r["ST"])
        S1c[k], STc[k] = np.nan_to_num(r["S1_conf"]), np.nan_to_num(r["ST_conf"])
    return SobolResult(names=names, S1=S1, ST=ST, S1_conf=S1c, ST_conf=STc, n_evaluations=X.shape[0])


# ------------------------------------------------------------------------------ model outputs
def _ref_terms(ref_shape: np.ndarray, ref_lam: np.ndarray) -> np.ndarray:
    """MACXP normaliser of the reference modes."""
    B = ref_shape
    return (np.sum(np.abs(B) ** 2, axis=0) / (2 * np.abs(ref_lam.real))
            + np.abs(np.sum(B * B, axis=0)) / (2 * np.abs(ref_lam)))


def _stiffness_macxp(omega: np.ndarray, A: np.ndarray, B: np.ndarray, lam_ref: np.ndarray,
                     xi_ref: np.ndarray) -> np.ndarray:
    """MACXP (batch, model mode k, ref mode j) of real model shapes whose eigenvalue carries xi_ref_j.

    ``omega`` (b, nk) rad/s, ``A`` (b, n_obs, nk) real observed shapes, ``B`` (n_obs, nj) complex.
    """
    c = np.abs(np.einsum("bok,oj->bkj", A, B))
    u = -xi_ref + 1j * np.sqrt(1.0 - xi_ref ** 2)
    lam_m = omega[:, :, None] * u[None, None, :]
    s_h = np.abs(np.conj(lam_m) + lam_ref[None, None, :])
    s_p = np.abs(lam_m + lam_ref[None, None, :])
    a2 = np.sum(A * A, axis=1)  # (b, nk)
    w = omega[:, :, None]
    d1 = a2[:, :, None] * (1.0 / (2 * w * xi_ref[None, None, :]) + 1.0 / (2 * w))
    d2 = _ref_terms(B, lam_ref)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = (c / s_h + c / s_p) ** 2 / (d1 * d2[None, None, :])
    return np.nan_to_num(out, nan=0.0, posinf=0.0)


@dataclass
class _Setup:
    """Everything a worker needs to evaluate outputs (picklable)."""

    model: object
    positions: list[float]
    lam: list[np.ndarray]
    shapes: list[np.ndarray]
    xi: list[np.ndarray]
    n_k: int  # number of stiffness parameters (first columns of a parameter row)
    n_model_modes: int


def _modal_outputs(setup: _Setup, P: np.ndarray, pos: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """MACXP and model damping of the matched modes for parameter rows P (b, n_params) at one position.

    Returns (macxp (b, nj), xi_model (b, nj), index of matched model mode (b, nj)).
    """
    s = setup.positions[pos]
    omega, Phi = setup.model.real_modes_batch(P[:, :setup.n_k], s, setup.n_model_modes)
    O = setup.model.observation(s)
    A = np.einsum("on,bnk->bok", O, Phi)
    mx = _stiffness_macxp(omega, A, setup.shapes[pos], setup.lam[pos], setup.xi[pos])
    match = np.argmax(mx, axis=1)  # (b, nj)
    best = np.take_along_axis(mx, match[:, None, :], axis=1)[:, 0, :]
    C0, Uc = setup.model.damping_parts(s)
    Ph = np.take_along_axis(Phi, match[:, None, :], axis=2)  # (b, N, nj)
    w = np.take_along_axis(omega, match, axis=1)
    q0 = np.einsum("bik,ij,bjk->bk", Ph, C0, Ph, optimize=True)
    C = np.einsum("bn,nij->bij", P[:, setup.n_k:], Uc) if Uc.shape[0] else 0.0
    qc = np.einsum("bik,bij,bjk->bk", Ph, C, Ph, optimize=True)
    xi_m = (q0 + qc) / (2 * w)
    return best, xi_m, match


class _GSAOutputs:
    """Picklable evaluator: rows -> [MACXP of all pairs, NDD^2 of all pairs] (position-major)."""

    def __init__(self, setup: _Setup):
        self.setup = setup

    def __call__(self, X: np.ndarray) -> np.ndarray:
        mac, nd = [], []
        for i in range(len(self.setup.positions)):
            m, x, _ = _modal_outputs(self.setup, X, i)
            mac.append(m)
            nd.append(ndd(x, self.setup.xi[i][None, :]) ** 2)
        return np.hstack(mac + nd)


# ------------------------------------------------------------------------------ stiffness stage
def _pair_macxp(setup: _Setup, row: np.ndarray, pos: int, mode: int) -> float:
    """MACXP of reference mode ``mode`` at position ``pos`` with its best-matching model mode."""
    s = setup.positions[pos]
    omega, Phi = setup.model.real_modes_batch(row[None, :setup.n_k], s, setup.n_model_modes)
    A = setup.model.observation(s) @ Phi[0]
    B = setup.shapes[pos][:, mode:mode + 1]
    mx = _stiffness_macxp(omega, A[None], B, setup.lam[pos][mode:mode + 1], setup.xi[pos][mode:mode + 1])
    return float(mx.max())


def _solve_subproblem(task: tuple) -> dict:
    """All repetitions of one (position, mode) stiffness subproblem.

    The other stiffness parameters are drawn at random for every repetition, as in the paper.
    """
    setup, pos, mode, search, lo, hi, base_damp, n_opt, seed, maxiter = task
    rng = np.random.default_rng(seed)
    n_k = setup.n_k
    vals, costs = [], []
    for _ in range(n_opt):
        ks = lo[:n_k] + rng.random(n_k) * (hi[:n_k] - lo[:n_k])
        row = np.concatenate([ks, base_damp])
        x0 = rng.random(len(search))

        def f(x, row=row):
            r = row.copy()
            r[search] = lo[search] + np.clip(x, 0, 1) * (hi[search] - lo[search])
            return 1.0 - _pair_macxp(setup, r, pos, mode)

        res = scipy.optimize.minimize(f, x0, method="SLSQP", bounds=[(0.0, 1.0)] * len(search),
                                      options={"maxiter": maxiter, "ftol": 1e-10, "eps": 1e-6})
        vals.append(np.clip(res.x, 0, 1))
        costs.append(float(res.fun))
    return {"position": pos, "mode": mode, "search": list(search), "x": np.array(vals),
            "cost": np.array(costs)}


def _select(subs: list[dict], n_k: int, max_cost: float, bound_tol: float = 1e-3
            ) -> dict[int, tuple[float, int, float]]:
    """Per stiffness parameter: (std, subproblem index, mean) of the subproblem with the smallest spread.

    Subproblems whose median final ``1 - MACXP`` exceeds ``max_cost`` did not fit their mode and are
    left out, as are parameter columns that sit on a bound in every repetition (a zero spread there
    says the optimum lies outside the box, not that it is well determined).
    """
    best: dict[int, tuple[float, int, float]] = {}
    for si, sp in enumerate(subs):
        if np.median(sp["cost"]) > max_cost:
            continue
        for col, q in enumerate(sp["search"]):
            x = sp["x"][:, col]
            if np.all((x <= bound_tol) | (x >= 1 - bound_tol)):
                continue
            sd = float(x.std())
            if q not in best or sd < best[q][0]:
                best[q] = (sd, si, float(x.mean()))
    return best


def _refine(setup: _Setup, p: np.ndarray, lo: np.ndarray, hi: np.ndarray, maxiter: int,
            offset: np.ndarray | None = None) -> np.ndarray:
    """Joint least squares of all stiffness parameters on the residual vector of every pair.

    The residual (:func:`_modal_residual`) is the MACXP criterion in vector form: its squares sum to about
    ``1 - MACXP`` per pair, smooth at the optimum (so the step converges in few iterations, and its Jacobian
    there gives the covariance of :func:`parameter_intervals`).
    """
    n_k = setup.n_k
    span = hi[:n_k] - lo[:n_k]

    def res(x):
        row = p.copy()
        row[:n_k] = lo[:n_k] + np.clip(x, 0, 1) * span
        return _modal_residual(setup, row, offset=offset)[0]

    x0 = np.clip((p[:n_k] - lo[:n_k]) / span, 0.0, 1.0)
    r = scipy.optimize.least_squares(res, x0, bounds=(0.0, 1.0), diff_step=1e-6, max_nfev=20 * maxiter,
                                     x_scale="jac")
    return lo[:n_k] + r.x * span


def _damping_rows(setup: _Setup, p: np.ndarray, pos: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per reference mode at one position: known damping xi0, factors Q (nj, n_c), matched MACXP."""
    s = setup.positions[pos]
    omega, Phi = setup.model.real_modes_batch(p[None, :setup.n_k], s, setup.n_model_modes)
    O = setup.model.observation(s)
    A = np.einsum("on,bnk->bok", O, Phi)
    mx = _stiffness_macxp(omega, A, setup.shapes[pos], setup.lam[pos], setup.xi[pos])[0]
    match = np.argmax(mx, axis=0)
    Ph = Phi[0][:, match]
    w = omega[0][match]
    C0, Uc = setup.model.damping_parts(s)
    xi0 = np.einsum("ik,ij,jk->k", Ph, C0, Ph) / (2 * w)
    Q = np.einsum("ik,nij,jk->kn", Ph, Uc, Ph) / (2 * w[:, None])
    return xi0, Q, mx[match, np.arange(match.size)]


# ------------------------------------------------------------------------------ intervals
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
#: held-back residuals flag a structure error when their mean square exceeds the prediction by this factor
#: (std x 1.4) and significantly: with hundreds of shape entries a 1.3x variance, which widens an interval
#: by 14 %, is already "significant"; the check looks for a misfit that matters
VALIDATION_RATIO = 2.0
#: frequency residuals flag a model error when their mean square exceeds what the modal extraction's own
#: uncertainty explains by this factor, and significantly (benchmarks/bench_machine_tool_calibration.py)
MEASUREMENT_RATIO = 2.0


def _shape_terms(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Per column: the unit shape B, turned in phase to the real unit shape A and taken real, minus its
    projection on A -> (n_obs, n) (squares summing to 1 - MAC less the imaginary part no real shape fits)."""
    a = A / np.linalg.norm(A, axis=0)
    b = B / np.linalg.norm(B, axis=0)
    c = np.sum(a * b, axis=0)
    a = a * np.where(c.real < 0, -1.0, 1.0)  # eigenvector signs are arbitrary: point a along b
    c = np.sum(a * b, axis=0)
    u = (b * (np.conj(c) / np.where(np.abs(c) > 0, np.abs(c), 1.0))).real
    return u - a * np.sum(a * u, axis=0)


def _modal_residual(setup: _Setup, k_row: np.ndarray, match: list[np.ndarray] | None = None,
                    offset: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """The stiffness stage's criterion as a smooth residual vector, at every position of ``setup``.

    Per reference mode: ``(omega_model - omega_ref) / (2 xi_ref omega_ref)`` (the weight the MACXP gives a
    frequency error), then :func:`_shape_terms` of the matched real model shape and the reference shape.
    Per pair the squares sum to 1 - MACXP within a few per cent, without its floor from the imaginary part
    of the shapes; unlike ``sqrt(1 - MACXP)`` the vector is smooth at the optimum, which a Jacobian needs.
    Model modes are matched by MACXP unless ``match`` fixes them; ``offset`` (:func:`_a1_offset`) is
    subtracted. Returns (residual, block label per entry: -1 frequency, k >= 0 the shape of pair k, matches).
    """
    rf, rs, lab, matches = [], [], [], []
    k = 0
    for i, s in enumerate(setup.positions):
        omega, Phi = setup.model.real_modes_batch(k_row[None, :setup.n_k], s, setup.n_model_modes)
        A = setup.model.observation(s) @ Phi[0]
        if match is None:
            mx = _stiffness_macxp(omega, A[None], setup.shapes[i], setup.lam[i], setup.xi[i])[0]
            m = np.argmax(mx, axis=0)
        else:
            m = match[i]
        matches.append(m)
        w_ref = np.abs(setup.lam[i])
        rf.append((omega[0][m] - w_ref) / (2 * setup.xi[i] * w_ref))
        e = _shape_terms(A[:, m], setup.shapes[i])
        for j in range(e.shape[1]):
            rs.append(e[:, j])
            lab.append(np.full(e.shape[0], k))
            k += 1
    r = np.concatenate(rf + rs)
    blocks = np.concatenate([np.full(sum(x.size for x in rf), -1)] + lab)
    return (r if offset is None else r - offset), blocks, matches


def _a1_offset(setup: _Setup, p: np.ndarray) -> np.ndarray:
    """What :func:`_modal_residual` leaves at the right parameters: the model's undamped modes against the
    same model's damped modes at ``p`` (stiffness and damping), with the reference's weights.

    Assumption A1 (undamped shapes and frequencies for the stiffness stage) shifts the optimum by this
    residual's projection - in the reduced ideal case by up to about one std of a stiffness parameter.
    Subtracting it from the residual removes that shift to first order (the damping comes from the damping
    stage; it needs only be roughly right).
    """
    rf, rs = [], []
    for i, s in enumerate(setup.positions):
        omega, Phi = setup.model.real_modes_batch(p[None, :setup.n_k], s, setup.n_model_modes)
        A = setup.model.observation(s) @ Phi[0]
        mx = _stiffness_macxp(omega, A[None], setup.shapes[i], setup.lam[i], setup.xi[i])[0]
        m = np.argmax(mx, axis=0)
        cm = setup.model.complex_modes(p, s, setup.n_model_modes)
        kc = np.argmin(np.abs(cm.freq[None, :] - omega[0][m][:, None] / (2 * np.pi)), axis=1)
        w_ref = np.abs(setup.lam[i])
        rf.append((omega[0][m] - np.abs(cm.lam[kc])) / (2 * setup.xi[i] * w_ref))
        e = _shape_terms(A[:, m], cm.shapes[:, kc])
        rs += [e[:, j] for j in range(e.shape[1])]
    return np.concatenate(rf + rs)


def _a1_damping_shift(setup: _Setup, p: np.ndarray) -> list[np.ndarray]:
    """Per position and reference mode: the model's damping ratio from its complex modes at ``p`` minus the
    light-damping formula's (``xi0 + Q c``, undamped shapes). Added to the formula's known part, it removes
    the formula's own error to first order (non-proportional damping, e.g. the coupling's, is where the
    formula is worst)."""
    out = []
    for i, s in enumerate(setup.positions):
        xi0, Q, _ = _damping_rows(setup, p, i)
        omega, Phi = setup.model.real_modes_batch(p[None, :setup.n_k], s, setup.n_model_modes)
        A = setup.model.observation(s) @ Phi[0]
        m = np.argmax(_stiffness_macxp(omega, A[None], setup.shapes[i], setup.lam[i], setup.xi[i])[0], axis=0)
        cm = setup.model.complex_modes(p, s, setup.n_model_modes)
        kc = np.argmin(np.abs(cm.freq[None, :] - omega[0][m][:, None] / (2 * np.pi)), axis=1)
        out.append(cm.xi[kc] - (xi0 + Q @ p[setup.n_k:]))
    return out


def _jacobian(fun: Callable[[np.ndarray], np.ndarray], x: np.ndarray, h: float = 1e-5) -> np.ndarray:
    """Central differences (step ``h`` in the scaled parameters)."""
    cols = []
    for q in range(x.size):
        d = np.zeros_like(x)
        d[q] = h
        cols.append((fun(x + d) - fun(x - d)) / (2 * h))
    return np.array(cols).T


def _bartlett(ss: np.ndarray, dof: np.ndarray) -> float:
    """p-value of Bartlett's test that blocks with sums of squares ``ss`` and ``dof`` share one variance."""
    ok = dof >= 1
    ss, dof = ss[ok], dof[ok]
    if ss.size < 2 or np.any(ss <= 0):
        return 1.0
    v = ss / dof
    pooled = ss.sum() / dof.sum()
    stat = dof.sum() * np.log(pooled) - np.sum(dof * np.log(v))
    c = 1.0 + (np.sum(1.0 / dof) - 1.0 / dof.sum()) / (3.0 * (ss.size - 1))
    return float(scipy.stats.chi2.sf(stat / c, ss.size - 1))


@dataclass
class _LsqCov:
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
        with other terms before :func:`_unseen` adds the dropped directions."""
        var = self.var_r if method == "sandwich" else np.full(self.var_r.shape, self.s2)
        return (self.pinv * var) @ self.pinv.T


def _unseen(cov: np.ndarray, null_effect: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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


def _lsq_covariance(J: np.ndarray, r: np.ndarray, blocks: np.ndarray | None = None,
                    lost: dict[int, float] | None = None) -> _LsqCov:
    """``s2 (J^T J)^-1`` and the block sandwich ``(J^T J)^-1 J^T diag(s_b^2) J (J^T J)^-1``, PSD-safe.

    ``blocks`` labels each residual with its block (entries of one block share a variance; default: one
    block); ``lost`` the residual degrees of freedom a block loses to constraints of its own (a projection).
    The pseudo-inverse keeps the singular directions whose std stays below the box width
    (:data:`MAX_SCALED_STD`); a parameter that a dropped direction would move by more than its std allows
    (:func:`_unseen`) gets NaN.
    """
    n, p = J.shape
    blocks = np.zeros(n, dtype=int) if blocks is None else np.asarray(blocks)
    lost = lost or {}
    if p == 0:
        e = np.zeros((0, 0))
        return _LsqCov(e, e, np.zeros(0, bool), math.nan, 0.0, {}, {}, 1.0, np.zeros((0, n)), np.zeros(0),
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
    classic, _ = _unseen(s2 * pinv @ pinv.T, Vt[~keep].T)
    robust, seen = _unseen((pinv * var) @ pinv.T, Vt[~keep].T)
    # each parameter's variance is a sum of block variances, each estimated with its own dof: Satterthwaite
    parts = ((pinv ** 2) @ onehot) * v[None, :]
    with np.errstate(invalid="ignore", divide="ignore"):
        dof_r = parts.sum(axis=1) ** 2 / np.sum(parts ** 2 / np.maximum(dofs, 1.0)[None, :], axis=1)
    for C in (classic, robust):
        C[~seen, :] = np.nan
        C[:, ~seen] = np.nan
    return _LsqCov(classic, robust, seen, s2, dof, block_var, block_dof, _bartlett(ss, dofs), pinv,
                   np.nan_to_num(dof_r, nan=1.0), -pinv @ r, Vt[~keep], var)


def _std(C: np.ndarray) -> np.ndarray:
    """Square roots of a covariance diagonal; NaN (never a root of a negative number) where it is not >= 0."""
    d = np.diag(C).copy() if C.size else np.zeros(0)
    ok = np.isfinite(d) & (d >= 0)
    out = np.full(d.shape, np.nan)
    out[ok] = np.sqrt(d[ok])
    return out


@dataclass
class GSAIntervals:
    """Standard errors and intervals of every GSA-identified parameter, with the verdict on their validity.

    Stiffness: the Jacobian of the stiffness stage's residual (:func:`_modal_residual`) in the fit's scaling
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
            return np.full(len(self.names), scipy.stats.norm.isf(q))
        d = np.where(np.isfinite(self.dof) & (self.dof > 0), self.dof, 1.0)
        return scipy.stats.t.isf(q, np.maximum(d, 1.0))

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


def _held_moves(fit: _LsqCov, full: _LsqCov, J_all: np.ndarray, free: np.ndarray) -> np.ndarray:
    """Per parameter that the fit ``fit`` (over the ``free`` columns of ``J_all``) holds on a bound: how the
    free parameters' estimate would move had it sat elsewhere, ``-pinv J_b``, per unit of :data:`BOX_STD`;
    zero for a bound parameter that the fit with every parameter free (``full``) sees - the box, which clips
    it, is then what fixes it, and the others are taken given its value. Columns for :func:`_unseen`.
    Without them a bound parameter hid a flat direction it shares with others: ME3_kx, of which with ME2_kx
    only the sum is seen, got an interval 10x narrower than its scatter whenever ME2_kx sat on a bound."""
    bound = np.setdiff1d(np.arange(J_all.shape[1]), free)
    return -(fit.pinv @ J_all[:, bound]) * _flat(full, bound)


def _flat(full: _LsqCov, bound: np.ndarray) -> np.ndarray:
    """1.0 for each ``bound`` parameter that ``full`` (every parameter free) does not see, else 0.0."""
    return (~full.seen[bound]).astype(float)


def _two_stage_covariance(k: _LsqCov, c: _LsqCov, method: str, d_kc: np.ndarray, g_ck: np.ndarray,
                          held: np.ndarray | None = None
                          ) -> tuple[np.ndarray, np.ndarray]:
    """Joint covariance (scaled units, stage k's parameters first) of two least-squares stages that each hold
    the other's estimate fixed (the unseen directions' share included), and per parameter whether the data
    see it (:func:`_unseen`).

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
    nk, nc = k.null.shape[0], c.null.shape[0]
    inputs = np.block([[k.null.T, np.zeros((pk, nc))], [np.zeros((pc, nk)), c.null.T]])
    if held is not None:
        inputs = np.hstack([inputs, np.asarray(held).reshape(pk + pc, -1)])
    null = Mi @ inputs
    return _unseen(cov, null)


def _tied_to_bound(every: np.ndarray, held: np.ndarray, rows: np.ndarray, bound: np.ndarray,
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


def _f_check(r: np.ndarray, var: np.ndarray, dof_fit: float, lost: float = 0.0) -> tuple[float, float]:
    """Mean square of held-back residuals over their predicted variance, and the one-sided p-value of that
    ratio as F(n, ``dof_fit``) (the variance is an estimate with ``dof_fit`` degrees of freedom)."""
    n = max(r.size - lost, 1.0)
    ratio = float(np.sum(r ** 2 / var)) / n
    return ratio, float(scipy.stats.f.sf(ratio, n, max(dof_fit, 1.0)))


def _frequency_sigma(ref: ModalReference) -> np.ndarray | None:
    """The modal data's own std of each frequency residual of :func:`_modal_residual` (position-major), from
    the extraction's ``freq_std``: ``sigma_f / (2 xi f)``; None when the reference carries no std."""
    if ref.freq_std is None:
        return None
    out = []
    for lam, xi, fs in zip(ref.lam, ref.xi, ref.freq_std, strict=True):
        f = np.abs(lam) / (2 * np.pi)
        out.append(np.asarray(fs, dtype=float) / (2 * xi * f))
    sig = np.concatenate(out)
    return sig if np.all(np.isfinite(sig) & (sig > 0)) else None


def _measurement_check(J: np.ndarray, r: np.ndarray, blocks: np.ndarray, sigma: np.ndarray,
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
    return ss / tr, float(scipy.stats.chi2.sf(ss / g, h)), h


def parameter_intervals(model, reference: ModalReference, estimate: np.ndarray,
                        stiffness_names: Sequence[str], damping_names: Sequence[str], lo: np.ndarray,
                        hi: np.ndarray, damping_pairs: Sequence[tuple[int, int]], *,
                        validation: ModalReference | None = None, n_extra_modes: int = 4,
                        level: float = 0.95, check_level: float = 0.01) -> GSAIntervals:
    """Standard errors and ``level`` intervals of a GSA estimate (see :class:`GSAIntervals`).

    Checks that make the intervals not valid (each at ``check_level``, Bonferroni over the checks):
    model error - the natural frequencies (identification and held-back positions) miss the model by more
    than the modal extraction's own std explains (:func:`_measurement_check`, needs ``freq_std`` in the
    references; at least :data:`MEASUREMENT_RATIO` x the expected mean square, and significant); the residuals
    at the held-back ``validation`` positions larger than the fit's residual scale plus the parameter
    uncertainty predicts; the estimate away from the optimum of the residual the covariance describes (a
    Gauss-Newton step of more than one std). The fit's residual scale alone cannot show a model error: the
    misfit inflates it as much as the held-back residuals (issue 21: 57 % of wrong-structure refits caught).
    Parameters on a box bound, or on directions the data do not see, get NaN and a reason; so do dampers
    that move with one on its bound (:func:`_tied_to_bound`) or whose interval would reach past the box.
    """
    names = list(stiffness_names) + list(damping_names)
    n_k, p = len(stiffness_names), len(names)
    est = np.asarray(estimate, dtype=float)
    lo, hi = np.asarray(lo, dtype=float), np.asarray(hi, dtype=float)
    span = hi - lo
    x = (est - lo) / span
    n_mm = reference.n_modes + int(n_extra_modes)
    setup = _Setup(model=model, positions=list(reference.positions), lam=reference.lam,
                   shapes=reference.shapes, xi=reference.xi, n_k=n_k, n_model_modes=n_mm)
    reasons: dict[str, str] = {}
    at_bound = (x <= 1e-6) | (x >= 1 - 1e-6)
    for q in np.flatnonzero(at_bound):
        reasons[names[q]] = "on the box bound: the data push it outside the search box"

    # stiffness: Jacobian of the smooth stage residual in the [0, 1] scaling. The covariance holds the
    # parameters on a bound (the box clips them), but which directions the data see is decided with them
    # free: held, a bound parameter hid the flat direction it shares (ME2_kx and ME3_kx: only their sum is
    # seen; whenever ME2_kx sat on a bound ME3_kx got an interval 10x narrower than its scatter)
    off = _a1_offset(setup, est)
    r0, blocks, match = _modal_residual(setup, est, offset=off)
    free_k = np.flatnonzero(~at_bound[:n_k])

    def res_k(xk, setup=setup, match=match):
        row = est.copy()
        row[:n_k] = lo[:n_k] + xk * span[:n_k]
        return _modal_residual(setup, row, match, off)[0]

    J_all = _jacobian(res_k, x[:n_k])
    Jk = J_all[:, free_k]
    n_pairs = int(blocks.max()) + 1 if blocks.size else 0
    lost = {b: 1.0 for b in range(n_pairs)}
    lc = _lsq_covariance(Jk, r0, blocks, lost)
    full_k = _lsq_covariance(J_all, r0, blocks, lost)
    bound_k = np.flatnonzero(at_bound[:n_k])
    moves_k = _held_moves(lc, full_k, J_all, free_k)
    method = "sandwich" if lc.p_iid < IID_LEVEL else "classic"
    cov = np.full((p, p), np.nan)
    std_c, std_r = np.full(p, np.nan), np.full(p, np.nan)
    dof = np.full(p, np.nan)
    dof[free_k] = lc.dof_robust if method == "sandwich" else lc.dof
    checks: dict = {"stiffness_residual_dof": lc.dof, "p_equal_block_variances": lc.p_iid}
    problems: list[str] = []
    sigma_f = _frequency_sigma(reference)
    sigma_fv = _frequency_sigma(validation) if validation is not None else None
    n_checks = 2 + (validation is not None) + (sigma_f is not None)
    alpha = check_level / n_checks

    # damping: the linear stage, joined with the stiffness stage (each holds the other's estimate fixed:
    # the damping rows come from the stiffness's modes, the A1 offset from the damping's values)
    n_c = len(damping_names)
    cc = n_k + np.arange(n_c)
    free = free_k
    joint = {}
    ld = None
    if n_c and damping_pairs:
        shift = _a1_damping_shift(setup, est)

        def rows_at(k_row):
            A, b = [], []
            got = {}
            for i, j in damping_pairs:
                if i not in got:
                    xi0, Q, _ = _damping_rows(setup, k_row, i)
                    got[i] = (xi0 + shift[i], Q)
                xi0, Q = got[i]
                xr = reference.xi[i][j]
                A.append(Q[j] / xr)
                b.append((xr - xi0[j]) / xr)
            return np.array(A), np.array(b)

        A, b = rows_at(est)
        fc = cc[~at_bound[cc]]
        As, rc = A * span[cc], b - A @ est[cc]
        ld = _lsq_covariance(As[:, fc - n_k], rc)
        full_c = _lsq_covariance(As, rc)
        bound_c = cc[at_bound[cc]]
        moves_c = _held_moves(ld, full_c, As, fc - n_k)

        def res_c(xk):  # the damping stage's residual (model - data) at other stiffness values
            row = est.copy()
            row[:n_k] = lo[:n_k] + xk * span[:n_k]
            A2, b2 = rows_at(row)
            return A2 @ est[cc] - b2

        def res_off(xc):  # the stiffness stage's residual at other damping values (through the A1 offset)
            row = est.copy()
            row[cc] = lo[cc] + xc * span[cc]
            return r0 + off - _a1_offset(setup, row)

        G_all, D_all = _jacobian(res_c, x[:n_k]), _jacobian(res_off, x[cc])
        G, D = G_all[:, free_k], D_all[:, fc - n_k]
        # a bound parameter's move shifts its own stage's free parameters and the other stage's residual
        sd_k, sd_c = _flat(full_k, bound_k), _flat(full_c, bound_c - n_k)
        held = np.hstack([np.vstack([moves_k, -ld.pinv @ G_all[:, bound_k] * sd_k]),
                          np.vstack([-lc.pinv @ D_all[:, bound_c - n_k] * sd_c, moves_c])])
        for m_ in ("classic", "sandwich"):
            joint[m_] = _two_stage_covariance(lc, ld, m_, D, G, held)
        if bound_c.size:  # a free damper that moves with one on its bound: no interval (issue 21)
            nk_ = free_k.size
            every = _two_stage_covariance(lc, full_c, method, D_all, G,
                                          np.vstack([moves_k, -full_c.pinv @ G_all[:, bound_k] * sd_k]))[0]
            tied = _tied_to_bound(every, joint[method][0], np.concatenate([np.arange(nk_), nk_ + fc - n_k]),
                                  nk_ + bound_c - n_k, nk_)
            for row, col in tied.items():
                if not joint[method][1][row]:
                    continue
                on = names[n_k + col - nk_]
                reasons[names[fc[row - nk_]]] = (
                    f"moves with {on}, which sits on its box bound: its value depends on where the box clips "
                    f"{on}, which the data do not say")
                for m_ in joint:
                    joint[m_][1][row] = False
        free = np.concatenate([free_k, fc])
        dof[fc] = ld.dof
        checks["damping_residual_dof"] = ld.dof
        s2_c = ld.s2
    else:
        s2_c = math.nan
        for q in range(n_k, p):
            reasons.setdefault(names[q], "no damping rows")
        for m_ in ("classic", "sandwich"):
            joint[m_] = _unseen(lc.kept(m_), np.hstack([lc.null.T, moves_k]))
    cov_s, seen = joint[method]
    for m_, out in (("classic", std_c), ("sandwich", std_r)):
        C, ok = joint[m_]
        out[free] = np.where(ok, _std(C) * span[free], np.nan)
    sub = np.where(seen, 1.0, np.nan)
    cov[np.ix_(free, free)] = cov_s * np.outer(span[free] * sub, span[free] * sub)
    nk = free_k.size
    if ld is not None:  # the damping's std from the chosen stiffness covariance, whichever it is
        fcs = slice(nk, None)
        std_c[fc] = std_r[fc] = np.where(seen[fcs], _std(cov_s[fcs, fcs]) * span[fc], np.nan)
        if not ld.dof > 0:
            for q in fc:
                reasons.setdefault(names[q], "no residual degrees of freedom left in the damping stage")
                std_c[q] = std_r[q] = np.nan
    for q in free[~seen]:
        reasons.setdefault(names[q], (
            "the modal data do not see it (near-singular direction of the Jacobian, or it moves with a "
            "parameter on a box bound)" if q < n_k else
            "the damping rows do not see it (near-singular direction, its own or the stiffness's, or it "
            "moves with a parameter on a box bound)"))
    cov_k_s = cov_s[:nk, :nk]  # scaled, the free stiffness parameters (the damping's share included)

    # the estimate at the optimum of the residual (Gauss-Newton step)
    with np.errstate(invalid="ignore", divide="ignore"):
        zstep = np.where(seen[:nk], np.abs(lc.step) / np.sqrt(np.diag(cov_k_s)), np.nan)
    zmax = float(np.nanmax(zstep)) if np.any(np.isfinite(zstep)) else 0.0
    checks["gauss_newton_step_std"] = zmax
    if zmax > 1.0:
        q = free_k[int(np.nanargmax(zstep))]
        step_problem = (f"the estimate is {zmax:.2g} std from the optimum of the residual ({names[q]}): "
                        "the fit stopped short of it, the intervals are not centred")
    else:
        step_problem = ""
    std = std_r if method == "sandwich" else std_c
    std = np.where(at_bound, np.nan, std)
    if ld is not None:  # a damper's interval that reaches past the box: the bounded solve clips its scatter
        tq = scipy.stats.t.isf((1 - level) / 2, np.maximum(np.nan_to_num(dof[fc], nan=1.0), 1.0))
        past = np.isfinite(std[fc]) & ((est[fc] - tq * std[fc] < lo[fc]) | (est[fc] + tq * std[fc] > hi[fc]))
        for q in fc[past]:
            reasons[names[q]] = (
                f"its {level:.0%} interval reaches past the box bound: the damping solve clips its scatter "
                "at the bound (it sits on it in other data sets), which the linear std does not describe - "
                "too wide where it is clipped, off-centre where a partner is")
            std[q] = std_c[q] = std_r[q] = np.nan
            cov[q, :] = cov[:, q] = np.nan

    # validation: do the held-back positions scatter as the fit's residuals predict?
    Jv = rv = bv = None
    if validation is not None:
        vs = _Setup(model=model, positions=list(validation.positions), lam=validation.lam,
                    shapes=validation.shapes, xi=validation.xi, n_k=n_k, n_model_modes=n_mm)
        off_v = _a1_offset(vs, est)
        rv, bv, mv = _modal_residual(vs, est, offset=off_v)

        def res_v(xf, vs=vs, mv=mv):
            row = est.copy()
            row[free_k] = lo[free_k] + xf * span[free_k]
            return _modal_residual(vs, row, mv, off_v)[0]

        Jv = _jacobian(res_v, x[free_k])
        pv = np.einsum("ij,jk,ik->i", Jv, cov_k_s, Jv)
        shape_b = [b_ for b_ in lc.block_var if b_ >= 0]
        shape_var = float(np.mean([lc.block_var[b_] for b_ in shape_b])) if shape_b else math.nan
        var = np.where(bv < 0, lc.block_var.get(-1, lc.s2), shape_var) + pv
        fsel = bv < 0
        n_vp = int(bv.max()) + 1 if bv.size else 0
        rat_f, p_f = _f_check(rv[fsel], var[fsel], lc.block_dof.get(-1, lc.dof))
        rat_s, p_s = _f_check(rv[~fsel], var[~fsel], sum(lc.block_dof[b_] for b_ in shape_b), float(n_vp))
        ps = [p_f, p_s]
        checks.update(validation_frequency_ratio=rat_f, validation_shape_ratio=rat_s)
        if np.isfinite(s2_c) and n_c:
            xi_v = []
            shift_v = _a1_damping_shift(vs, est)
            for i in range(len(validation.positions)):
                xi0, Q, _ = _damping_rows(vs, est, i)
                xi_v.append((validation.xi[i] - xi0 - shift_v[i] - Q @ est[n_k:]) / validation.xi[i])
            rd = np.concatenate(xi_v)
            rat_d, p_d = _f_check(rd, np.full(rd.size, s2_c), checks["damping_residual_dof"])
            checks.update(validation_damping_ratio=rat_d)
            ps.append(p_d)
        ratios = [checks[k] for k in ("validation_frequency_ratio", "validation_shape_ratio",
                                      "validation_damping_ratio") if k in checks]
        checks["p_validation"] = checks["p_value"] = float(min(1.0, len(ps) * min(ps)))
        big = [p_ for p_, r_ in zip(ps, ratios, strict=True) if r_ >= VALIDATION_RATIO]
        if big and len(ps) * min(big) < alpha:
            parts = [f"{k.split('_')[1]} {checks[k]:.3g}x" for k in
                     ("validation_frequency_ratio", "validation_shape_ratio", "validation_damping_ratio")
                     if k in checks]
            problems.append("the held-back positions' residuals exceed what the fit's residual scale and "
                            f"parameter uncertainty predict (mean square / predicted: {', '.join(parts)}; "
                            f"p = {checks['p_validation']:.2g}): the model's structure does not carry over "
                            "(modelling error), so the estimate may sit off the truth by more than its std")

    # model error: the frequency residuals against the modal data's own uncertainty
    if sigma_f is not None:
        fv = None if bv is None or sigma_fv is None else bv < 0
        rat_m, p_m, dof_m = _measurement_check(
            Jk, r0, blocks, sigma_f, lc.block_var, lc.pinv, None if fv is None else Jv[fv],
            None if fv is None else rv[fv], sigma_fv)
        checks.update(measurement_frequency_ratio=rat_m, p_measurement=p_m, measurement_dof=dof_m)
        if rat_m >= MEASUREMENT_RATIO and p_m < alpha:
            where = "identification and held-back positions" if fv is not None else "identification positions"
            problems.insert(0, (
                f"model error: the natural frequencies at the {where} miss the model by {rat_m:.3g}x the "
                f"variance the modal extraction reports for them (p = {p_m:.2g}) - the "
                "model's structure (masses, joints, constants it holds fixed) does not match the machine, or "
                "the modal data carry a bias beyond their reported std; the intervals then count the misfit "
                "as if it were noise and the estimate may sit off the truth by more than its std"))
    if step_problem:
        problems.append(step_problem + (" (the misfit above also bends the residual away from its "
                                         "linearisation)" if problems else ""))
    return GSAIntervals(names=names, estimate=est, std=std, std_classic=std_c, std_robust=std_r,
                        method=method, reasons=reasons, checks=checks, problems=problems, level=float(level),
                        covariance=cov, dof=dof)


# ------------------------------------------------------------------------------ evaluation
def evaluate_model(model, params: np.ndarray, reference: ModalReference, n_extra_modes: int = 4) -> dict:
    """Per position: MACXP and |NDD| of every reference mode (complex modal analysis, matched by
    MACXP) and FRAC/CSF of every reference FRF; plus the summary statistics over all positions."""
    per_pos = []
    for i, s in enumerate(reference.positions):
        cm = model.complex_modes(params, s, reference.n_modes + n_extra_modes)
        mx = macxp_matrix(cm.shapes, cm.lam, reference.shapes[i], reference.lam[i])
        match = np.argmax(mx, axis=0)
        mac = mx[match, np.arange(match.size)]
        nd = np.abs(ndd(cm.xi[match], reference.xi[i]))
        entry = {"position": s, "macxp": mac, "ndd": nd, "freq_model": cm.freq[match],
                 "freq_ref": np.abs(reference.lam[i]) / (2 * np.pi), "xi_model": cm.xi[match],
                 "xi_ref": reference.xi[i]}
        if reference.frf is not None and reference.freq is not None:
            Hm = np.array([model.frf(params, s, reference.freq, inp) for inp in reference.inputs])
            entry["frac"] = frac(Hm, reference.frf[i]).ravel()
            entry["csf"] = csf(Hm, reference.frf[i]).ravel()
        per_pos.append(entry)

    def cat(key):
        return np.concatenate([e[key] for e in per_pos]) if all(key in e for e in per_pos) else None

    table = {}
    for key, label, better in (("frac", "FRAC", True), ("csf", "CSF", True), ("macxp", "MACXP", True),
                               ("ndd", "NDD", False)):
        v = cat(key)
        if v is not None:
            table[label] = summary_stats(v, higher_is_better=better)
    return {"positions": per_pos, "table": table}


# ------------------------------------------------------------------------------ result
@dataclass
class GSAIdentificationResult:
    names: list[str]
    stiffness_names: list[str]
    damping_names: list[str]
    estimate: np.ndarray  # identified parameters (names order)
    start: np.ndarray  # the preliminary model
    lo: np.ndarray
    hi: np.ndarray
    sobol_macxp: SobolResult  # outputs: (position, mode) pairs, position-major
    sobol_ndd2: SobolResult
    pairs: list[tuple[int, int]]  # (position index, mode index) of each output row
    subproblems: list[dict]
    chosen_subproblem: dict[str, int | None]  # per stiffness parameter, index into subproblems
    spread: dict[str, float]  # std of the chosen subproblem, in units of the range
    damping_pairs: list[tuple[int, int]]
    identification: dict  # evaluate_model on the identification positions
    validation: dict | None  # ... on the held-back positions
    seconds: dict[str, float]
    n_evaluations: int
    truth: np.ndarray | None = None
    intervals: GSAIntervals | None = None  # standard errors, 95 % intervals, validity verdict
    #: (position, mode) pairs, least stiffness-sensitive NDD^2 first (the damping stage's order)
    damping_ranking: list[tuple[int, int]] = field(default_factory=list)

    def as_dict_params(self) -> dict[str, float]:
        return {n: float(v) for n, v in zip(self.names, self.estimate, strict=True)}

    def relative_deviation(self, truth: np.ndarray | None = None) -> np.ndarray | None:
        t = self.truth if truth is None else np.asarray(truth, dtype=float)
        return None if t is None else (self.estimate - t) / t

    def format_tables(self) -> str:
        lines = []
        for title, ev in (("identification positions", self.identification), ("validation", self.validation)):
            if not ev:
                continue
            pos = ", ".join(f"{1000 * e['position']:.0f}" for e in ev["positions"])
            lines.append(f"{title} (axis position {pos} mm), in %")
            cols = [c for c in ("FRAC", "CSF", "MACXP", "NDD") if c in ev["table"]]
            lines.append(f"  {'':<14}" + "".join(f"{c:>9}" for c in cols))
            for key, label in (("worst", "worst"), ("p5", "5 % pct"), ("mean", "mean"), ("median", "median")):
                lines.append(f"  {label:<14}" + "".join(f"{100 * ev['table'][c][key]:>9.2f}" for c in cols))
        dev = self.relative_deviation()
        if dev is not None:
            lines.append("parameter deviation from truth, % (and in interval std, where there is one)")
            std = self.intervals.std if self.intervals is not None else np.full(len(self.names), np.nan)
            for n, d, e, t, sd in zip(self.names, dev, self.estimate, self.truth, std, strict=True):
                z = f" {(e - t) / sd:>+7.2f} std" if np.isfinite(sd) and sd > 0 else ""
                lines.append(f"  {n:<10} {e:>12.4g} {100 * d:>+8.2f}{z}")
        if self.intervals is not None:
            lines.append(self.intervals.format_table())
        lines.append("wall time: " + ", ".join(f"{k} {v:.1f} s" for k, v in self.seconds.items()))
        return "\n".join(lines)

    def to_dict(self) -> dict:
        def ev(e):
            if not e:
                return None
            return {"table": e["table"], "positions": [
                {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in p.items()}
                for p in e["positions"]]}

        return {
            "names": self.names,
            "estimate": self.as_dict_params(),
            "start": {n: float(v) for n, v in zip(self.names, self.start, strict=True)},
            "relative_deviation": None if self.truth is None else dict(
                zip(self.names, self.relative_deviation().tolist(), strict=True)),
            "sobol": {"pairs": [list(p) for p in self.pairs],
                      "macxp": {"S1": self.sobol_macxp.S1.tolist(), "ST": self.sobol_macxp.ST.tolist()},
                      "ndd2": {"S1": self.sobol_ndd2.S1.tolist(), "ST": self.sobol_ndd2.ST.tolist()}},
            "subproblems": [{"pair": [s["position"], s["mode"]],
                             "search": [self.names[j] for j in s["search"]],
                             "std": s["x"].std(axis=0).tolist(), "mean_cost": float(s["cost"].mean())}
                            for s in self.subproblems],
            "chosen_subproblem": self.chosen_subproblem,
            "damping_pairs": [list(p) for p in self.damping_pairs],
            "identification": ev(self.identification),
            "validation": ev(self.validation),
            "seconds": self.seconds,
            "n_evaluations": self.n_evaluations,
            "ci95": self.intervals.ci95() if self.intervals is not None else None,
            "adequacy": self.intervals.adequacy_dict() if self.intervals is not None else None,
            "intervals": self.intervals.to_dict() if self.intervals is not None else None,
        }


# ------------------------------------------------------------------------------ the procedure
def _damping_stage(setup: _Setup, reference: ModalReference, est: np.ndarray, ranked: list[tuple[int, int]],
                   lo: np.ndarray, hi: np.ndarray, n_damping_pairs: int, min_residual_damping: float,
                   shift: list[np.ndarray] | None = None) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """Damping parameters by bounded linear least squares on the relative residual modal damping of the
    first ``n_damping_pairs`` of ``ranked`` (pairs least influenced by stiffness first); returns the
    damping values and the pairs used. ``shift`` (:func:`_a1_damping_shift`) corrects the formula."""
    n_k = setup.n_k
    n_c = lo.size - n_k
    rows = {i: _damping_rows(setup, est, i) for i in range(len(setup.positions))}
    if shift is not None:
        rows = {i: (xi0 + shift[i], Q, mx) for i, (xi0, Q, mx) in rows.items()}
    chosen_rows = []
    for i, j in ranked[:max(int(n_damping_pairs), n_c)]:
        xi0, Q, _ = rows[i]
        chosen_rows.append((i, j, reference.xi[i][j] - xi0[j], Q[j], reference.xi[i][j]))
    keep = [r for r in chosen_rows if r[2] >= min_residual_damping]
    if len(keep) < n_c:
        keep = chosen_rows
    A = np.array([qrow / xr for _, _, _, qrow, xr in keep])
    b = np.array([res / xr for _, _, res, _, xr in keep])
    sol = scipy.optimize.lsq_linear(A, b, bounds=(lo[n_k:], hi[n_k:]))
    return sol.x, [(i, j) for i, j, _, _, _ in keep]


def local_refit(model, reference: ModalReference, stiffness_names: Sequence[str],
                damping_names: Sequence[str], lo: Sequence[float], hi: Sequence[float], start: np.ndarray,
                damping_ranking: Sequence[tuple[int, int]], *, validation: ModalReference | None = None,
                maxiter: int = 60, n_damping_pairs: int = 20, min_residual_damping: float = 0.005,
                n_extra_modes: int = 4) -> tuple[np.ndarray, GSAIntervals]:
    """The local part of :func:`identify` from ``start`` (its joint stiffness step, then the damping stage
    on the pairs in ``damping_ranking`` order) and the intervals of the result.

    Skips the Sobol partition and the subproblems (which find the basin): for Monte Carlo refits of one
    configuration whose pair ranking (``GSAIdentificationResult.damping_ranking``) is known.
    """
    lo, hi = np.asarray(lo, dtype=float), np.asarray(hi, dtype=float)
    n_k = len(stiffness_names)
    setup = _Setup(model=model, positions=list(reference.positions), lam=reference.lam,
                   shapes=reference.shapes, xi=reference.xi, n_k=n_k,
                   n_model_modes=reference.n_modes + int(n_extra_modes))
    est = np.asarray(start, dtype=float).copy()
    dpairs: list[tuple[int, int]] = []
    for corrected in (False, True):
        off = _a1_offset(setup, est) if corrected else None
        shift = _a1_damping_shift(setup, est) if corrected else None
        est[:n_k] = _refine(setup, est, lo, hi, maxiter, off)
        if len(damping_names):
            est[n_k:], dpairs = _damping_stage(setup, reference, est, list(damping_ranking), lo, hi,
                                               n_damping_pairs, min_residual_damping, shift)
    iv = parameter_intervals(model, reference, est, stiffness_names, damping_names, lo, hi, dpairs,
                             validation=validation, n_extra_modes=n_extra_modes)
    return est, iv


def identify(model, reference: ModalReference, stiffness_names: Sequence[str], damping_names: Sequence[str],
             lo: Sequence[float], hi: Sequence[float], *, validation: ModalReference | None = None,
             start: np.ndarray | None = None, sobol_n: int = 128, threshold: float = 0.01,
             max_search: int = 4, n_opt: int = 20, maxiter: int = 60, refine: bool = True,
             max_subproblem_cost: float = 0.05, n_damping_pairs: int = 20,
             min_residual_damping: float = 0.005, n_extra_modes: int = 4, seed: int = 0,
             executor: Map | None = None, n_chunks: int = 8, truth: np.ndarray | None = None,
             progress: Callable[[str], None] | None = None) -> GSAIdentificationResult:
    """GSA-partitioned identification of stiffness then damping parameters (see the module docstring).

    Parameter vectors are ordered ``stiffness_names + damping_names`` with bounds ``lo``/``hi``;
    ``start`` is the preliminary model (default: uniform random in the box, seeded) whose values
    stay for parameters that no subproblem searches. ``refine=False`` is the paper's procedure;
    ``refine=True`` (default) adds one local step after it: all stiffness parameters together,
    least squares on ``sqrt(1 - MACXP)`` of every pair (about linear in the parameter error near
    the optimum), started at the GSA estimate - the subproblems find the basin, the joint step
    removes what the other, randomly drawn parameters left in each subproblem's mean. ``truth``
    only annotates the result.
    """
    t_all = time.perf_counter()
    names = list(stiffness_names) + list(damping_names)
    n_k = len(stiffness_names)
    lo = np.asarray(lo, dtype=float)
    hi = np.asarray(hi, dtype=float)
    rng = np.random.default_rng(seed)
    start = lo + rng.random(lo.size) * (hi - lo) if start is None else np.asarray(start, dtype=float)
    setup = _Setup(model=model, positions=list(reference.positions), lam=reference.lam,
                   shapes=reference.shapes, xi=reference.xi, n_k=n_k,
                   n_model_modes=reference.n_modes + int(n_extra_modes))
    n_pos, n_modes = len(reference.positions), reference.n_modes
    pairs = [(i, j) for i in range(n_pos) for j in range(n_modes)]
    say = progress or (lambda msg: None)
    seconds = {}

    # 1. GSA of MACXP and NDD^2 for every pair, one Sobol sample
    t0 = time.perf_counter()
    say(f"Sobol sampling: {sobol_n * (len(names) + 2)} parameter sets x {n_pos} positions")
    sob = sobol_indices(_GSAOutputs(setup), lo, hi, names, sobol_n, seed=seed, executor=executor,
                        n_chunks=n_chunks)
    n_pairs = len(pairs)
    head, tail = slice(None, n_pairs), slice(n_pairs, None)
    s_mac, s_ndd = (SobolResult(names, sob.S1[sl], sob.ST[sl], sob.S1_conf[sl], sob.ST_conf[sl],
                                sob.n_evaluations) for sl in (head, tail))
    seconds["gsa"] = time.perf_counter() - t0
    n_eval = sob.n_evaluations * n_pos

    # 2. stiffness subproblems, then (optionally) one joint local step
    t0 = time.perf_counter()
    searches = []
    for k, (i, j) in enumerate(pairs):
        st = s_mac.ST[k, :n_k]
        order = [int(q) for q in np.argsort(-st) if st[q] >= threshold][:max_search]
        if order:
            searches.append((k, i, j, order))
    est = start.copy()
    chosen: dict[str, int | None] = {n: None for n in names[:n_k]}
    spread: dict[str, float] = {}
    say(f"stiffness: {len(searches)} subproblems x {n_opt} starts")
    tasks = [(setup, i, j, order, lo, hi, start[n_k:], int(n_opt), int(seed) * 100003 + k, int(maxiter))
             for k, i, j, order in searches]
    subs = map_tasks(executor, _solve_subproblem, tasks)
    n_eval += sum(sp["x"].shape[0] for sp in subs)  # optimisations (evaluations are not counted)
    for q, (sd, si, mean) in _select(subs, n_k, max_subproblem_cost).items():
        est[q] = lo[q] + mean * (hi[q] - lo[q])
        chosen[names[q]], spread[names[q]] = si, sd
    if refine:
        say("stiffness: joint refinement over all pairs")
        est[:n_k] = _refine(setup, est, lo, hi, maxiter)
    seconds["stiffness"] = time.perf_counter() - t0

    # 3. damping by bounded linear least squares on the residual modal damping
    t0 = time.perf_counter()
    n_c = len(damping_names)
    dpairs: list[tuple[int, int]] = []
    ranked: list[tuple[int, int]] = []
    if n_c:
        inter = s_ndd.ST[:, :n_k].sum(axis=1)
        ranked = [pairs[k] for k in np.argsort(inter)]
        est[n_k:], dpairs = _damping_stage(setup, reference, est, ranked, lo, hi, n_damping_pairs,
                                           min_residual_damping)
    if refine:  # once more, with assumption A1's own shift (at the estimate) taken out of both stages
        say("stiffness and damping: correction for the undamped-mode assumption")
        off, shift = _a1_offset(setup, est), _a1_damping_shift(setup, est)
        est[:n_k] = _refine(setup, est, lo, hi, maxiter, off)
        if n_c:
            est[n_k:], dpairs = _damping_stage(setup, reference, est, ranked, lo, hi, n_damping_pairs,
                                               min_residual_damping, shift)
    seconds["damping"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    ev_id = evaluate_model(model, est, reference, n_extra_modes)
    ev_val = evaluate_model(model, est, validation, n_extra_modes) if validation is not None else None
    seconds["evaluation"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    iv = parameter_intervals(model, reference, est, stiffness_names, damping_names, lo, hi, dpairs,
                             validation=validation, n_extra_modes=n_extra_modes)
    seconds["intervals"] = time.perf_counter() - t0
    seconds["total"] = time.perf_counter() - t_all
    return GSAIdentificationResult(
        names=names, stiffness_names=list(stiffness_names), damping_names=list(damping_names), estimate=est,
        start=start, lo=lo, hi=hi, sobol_macxp=s_mac, sobol_ndd2=s_ndd, pairs=pairs, subproblems=subs,
        chosen_subproblem=chosen, spread=spread, damping_pairs=dpairs, identification=ev_id,
        validation=ev_val, seconds=seconds, n_evaluations=int(n_eval),
        truth=None if truth is None else np.asarray(truth, dtype=float), intervals=iv,
        damping_ranking=ranked)


def fraction_within(result: GSAIdentificationResult, tol: float = 0.05, which: str = "stiffness") -> float:
    """Share of the (stiffness or damping) parameters within ``tol`` relative deviation of the truth."""
    dev = result.relative_deviation()
    if dev is None:
        return math.nan
    n_k = len(result.stiffness_names)
    d = dev[:n_k] if which == "stiffness" else dev[n_k:]
    return float(np.mean(np.abs(d) <= tol))
