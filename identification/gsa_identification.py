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

Stiffness stage and assumption A1: shapes and frequencies come from the undamped model, and for
the MACXP the model's eigenvalue carries the reference damping ratio, so damping parameters have
no influence on it (the MACXP weighs eigenvalues, and a damping mismatch would otherwise lower it).
The final tables use the full complex modal analysis of the identified model.

The model is duck-typed (``identification.machine_tool_model.MachineTool`` fits):
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
import scipy.optimize
from SALib.analyze import sobol as sobol_analyze
from SALib.sample import sobol as sobol_sample

from identification.modal_metrics import csf, frac, macxp_matrix, ndd, summary_stats

__all__ = [
    "ModalReference", "reference_from_model", "SobolResult", "sobol_indices", "GSAIdentificationResult",
    "identify", "evaluate_model",
]

Map = Callable[[Callable, Sequence], list]


def _default_map(fn, items) -> list:
    return list(map(fn, items))


def _run(executor, fn, items) -> list:
    ex = executor if executor is not None else _default_map
    m = getattr(ex, "map", ex)
    return list(m(fn, list(items)))


# ------------------------------------------------------------------------------ reference data
@dataclass
class ModalReference:
    """Measured (or simulated) modal data at axis positions, and optionally FRFs for validation.

    ``lam[i]``: complex eigenvalues (rad/s) of the reference modes at ``positions[i]``;
    ``shapes[i]``: complex shapes at the measured DOFs (n_obs, n_modes); ``xi[i]``: modal damping.
    ``frf[i]``: (n_inputs, n_obs, n_freq) receptances at ``freq`` for forces at ``inputs``.
    """

    positions: list[float]
    lam: list[np.ndarray]
    shapes: list[np.ndarray]
    xi: list[np.ndarray]
    freq: np.ndarray | None = None
    inputs: list = field(default_factory=list)
    frf: list[np.ndarray] | None = None

    @property
    def n_modes(self) -> int:
        return int(self.lam[0].size)

    def subset(self, idx: Sequence[int]) -> ModalReference:
        return ModalReference(
            positions=[self.positions[i] for i in idx], lam=[self.lam[i] for i in idx],
            shapes=[self.shapes[i] for i in idx], xi=[self.xi[i] for i in idx], freq=self.freq,
            inputs=list(self.inputs), frf=None if self.frf is None else [self.frf[i] for i in idx])


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
                   for c, y in zip(chunks, _run(executor, evaluate, chunks), strict=True)])
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


def _refine(setup: _Setup, p: np.ndarray, lo: np.ndarray, hi: np.ndarray, maxiter: int) -> np.ndarray:
    """Joint least squares of all stiffness parameters on sqrt(1 - MACXP) of every pair."""
    n_k = setup.n_k
    span = hi[:n_k] - lo[:n_k]

    def res(x):
        row = p.copy()
        row[:n_k] = lo[:n_k] + np.clip(x, 0, 1) * span
        out = []
        for i in range(len(setup.positions)):
            s = setup.positions[i]
            omega, Phi = setup.model.real_modes_batch(row[None, :n_k], s, setup.n_model_modes)
            A = setup.model.observation(s) @ Phi[0]
            mx = _stiffness_macxp(omega, A[None], setup.shapes[i], setup.lam[i], setup.xi[i])[0]
            out.append(np.sqrt(np.clip(1.0 - mx.max(axis=0), 0.0, None)))
        return np.concatenate(out)

    x0 = (p[:n_k] - lo[:n_k]) / span
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
            lines.append("parameter deviation from truth, %")
            for n, d, e in zip(self.names, dev, self.estimate, strict=True):
                lines.append(f"  {n:<10} {e:>12.4g} {100 * d:>+8.2f}")
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
        }


# ------------------------------------------------------------------------------ the procedure
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
    subs = _run(executor, _solve_subproblem, tasks)
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
    if n_c:
        inter = s_ndd.ST[:, :n_k].sum(axis=1)
        ranked = [pairs[k] for k in np.argsort(inter)]
        rows = {i: _damping_rows(setup, est, i) for i in range(n_pos)}
        A, b = [], []
        chosen_rows = []
        for i, j in ranked[:max(int(n_damping_pairs), n_c)]:
            xi0, Q, _ = rows[i]
            res = reference.xi[i][j] - xi0[j]
            chosen_rows.append((i, j, res, Q[j], reference.xi[i][j]))
        keep = [r for r in chosen_rows if r[2] >= min_residual_damping]
        if len(keep) < n_c:
            keep = chosen_rows
        for i, j, res, qrow, xr in keep:
            A.append(qrow / xr)
            b.append(res / xr)
            dpairs.append((i, j))
        sol = scipy.optimize.lsq_linear(np.array(A), np.array(b), bounds=(lo[n_k:], hi[n_k:]))
        est[n_k:] = sol.x
    seconds["damping"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    ev_id = evaluate_model(model, est, reference, n_extra_modes)
    ev_val = evaluate_model(model, est, validation, n_extra_modes) if validation is not None else None
    seconds["evaluation"] = time.perf_counter() - t0
    seconds["total"] = time.perf_counter() - t_all
    return GSAIdentificationResult(
        names=names, stiffness_names=list(stiffness_names), damping_names=list(damping_names), estimate=est,
        start=start, lo=lo, hi=hi, sobol_macxp=s_mac, sobol_ndd2=s_ndd, pairs=pairs, subproblems=subs,
        chosen_subproblem=chosen, spread=spread, damping_pairs=dpairs, identification=ev_id,
        validation=ev_val, seconds=seconds, n_evaluations=int(n_eval),
        truth=None if truth is None else np.asarray(truth, dtype=float))


def fraction_within(result: GSAIdentificationResult, tol: float = 0.05, which: str = "stiffness") -> float:
    """Share of the (stiffness or damping) parameters within ``tol`` relative deviation of the truth."""
    dev = result.relative_deviation()
    if dev is None:
        return math.nan
    n_k = len(result.stiffness_names)
    d = dev[:n_k] if which == "stiffness" else dev[n_k:]
    return float(np.mean(np.abs(d) <= tol))
