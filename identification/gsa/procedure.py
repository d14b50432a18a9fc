"""The identification itself (:func:`identify`, paper's Figure 1 plus the A1 correction) and its local part
alone (:func:`local_refit`, for Monte Carlo refits of one configuration)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from identification.gsa.intervals import GSAIntervals, parameter_intervals
from identification.gsa.modal_residual import GSAOutputs, ModalModel, StageSetup, a1_damping_shift, a1_offset
from identification.gsa.reference import ModalReference
from identification.gsa.result import GSAIdentificationResult, evaluate_model
from identification.gsa.sobol import Map, SobolResult, run_batch, sobol_indices
from identification.gsa.stages import damping_stage, refine_stiffness, select_subproblems, solve_subproblem


@dataclass(frozen=True)
class _Local:
    """The local stages' settings and the pair order of the damping stage."""

    lo: np.ndarray
    hi: np.ndarray
    ranked: list[tuple[int, int]]  # pairs least influenced by stiffness first
    n_damp: int
    maxiter: int
    n_damping_pairs: int
    min_residual_damping: float


def _local_pass(setup: StageSetup, reference: ModalReference, est: np.ndarray, local: _Local, *,
                corrected: bool, refine: bool = True) -> list[tuple[int, int]]:
    """The joint stiffness step (with ``refine``), then the damping stage, on ``est`` in place; with
    ``corrected`` assumption A1's offsets (taken at ``est`` first) come out of both. Returns the damping
    pairs used."""
    n_stiff = setup.n_stiff
    off = a1_offset(setup, est) if corrected else None
    shift = a1_damping_shift(setup, est) if corrected else None
    if refine:
        est[:n_stiff] = refine_stiffness(setup, est, local.lo, local.hi, local.maxiter, off)
    if not local.n_damp:
        return []
    est[n_stiff:], pairs = damping_stage(setup, reference, est, local.ranked, local.lo, local.hi,
                                         local.n_damping_pairs, local.min_residual_damping, shift)
    return pairs


def local_refit(model: ModalModel, reference: ModalReference, stiffness_names: Sequence[str],
                damping_names: Sequence[str], lo: Sequence[float] | np.ndarray,
                hi: Sequence[float] | np.ndarray, start: np.ndarray,
                damping_ranking: Sequence[tuple[int, int]], *, validation: ModalReference | None = None,
                maxiter: int = 60, n_damping_pairs: int = 20, min_residual_damping: float = 0.005,
                n_extra_modes: int = 4) -> tuple[np.ndarray, GSAIntervals]:
    """The local part of :func:`identify` from ``start`` (its joint stiffness step, then the damping stage
    on the pairs in ``damping_ranking`` order) and the intervals of the result.

    Skips the Sobol partition and the subproblems (which find the basin): for Monte Carlo refits of one
    configuration whose pair ranking (``GSAIdentificationResult.damping_ranking``) is known.
    """
    lo, hi = np.asarray(lo, dtype=float), np.asarray(hi, dtype=float)
    setup = StageSetup.of(model, reference, len(stiffness_names), n_extra_modes)
    local = _Local(lo, hi, list(damping_ranking), len(damping_names), maxiter, n_damping_pairs,
                   min_residual_damping)
    est = np.asarray(start, dtype=float).copy()
    dpairs: list[tuple[int, int]] = []
    for corrected in (False, True):
        dpairs = _local_pass(setup, reference, est, local, corrected=corrected)
    iv = parameter_intervals(model, reference, est, stiffness_names, damping_names, lo, hi, dpairs,
                             validation=validation, n_extra_modes=n_extra_modes)
    return est, iv


def _sobol_stage(setup: StageSetup, lo: np.ndarray, hi: np.ndarray, names: list[str], n_pairs: int,
                 sobol_n: int, seed: int, executor: Map | None, n_chunks: int
                 ) -> tuple[SobolResult, SobolResult, int]:
    """Sobol indices of every pair's MACXP and NDD^2 from one sample; and the model evaluations spent."""
    sob = sobol_indices(GSAOutputs(setup), lo, hi, names, sobol_n, seed=seed, executor=executor,
                        n_chunks=n_chunks)
    head, tail = slice(None, n_pairs), slice(n_pairs, None)
    s_mac, s_ndd = (SobolResult(names, sob.S1[sl], sob.ST[sl], sob.S1_conf[sl], sob.ST_conf[sl],
                                sob.n_evaluations) for sl in (head, tail))
    return s_mac, s_ndd, sob.n_evaluations * len(setup.positions)


def _subproblem_tasks(setup: StageSetup, s_mac: SobolResult, pairs: list[tuple[int, int]], start: np.ndarray,
                      lo: np.ndarray, hi: np.ndarray, *, threshold: float, max_search: int, n_opt: int,
                      seed: int, maxiter: int) -> list[tuple]:
    """One stiffness subproblem per pair over its most sensitive stiffness parameters (total index >=
    ``threshold``, at most ``max_search``), as :func:`solve_subproblem`'s tasks."""
    n_stiff = setup.n_stiff
    tasks = []
    for k, (i, j) in enumerate(pairs):
        st = s_mac.ST[k, :n_stiff]
        order = [int(q) for q in np.argsort(-st) if st[q] >= threshold][:max_search]
        if order:
            tasks.append((setup, i, j, order, lo, hi, start[n_stiff:], int(n_opt), int(seed) * 100003 + k,
                          int(maxiter)))
    return tasks


def identify(model: ModalModel, reference: ModalReference, stiffness_names: Sequence[str],
             damping_names: Sequence[str],
             lo: Sequence[float] | np.ndarray, hi: Sequence[float] | np.ndarray, *,
             validation: ModalReference | None = None,
             start: np.ndarray | None = None, sobol_n: int = 128, threshold: float = 0.01,
             max_search: int = 4, n_opt: int = 20, maxiter: int = 60, refine: bool = True,
             max_subproblem_cost: float = 0.05, n_damping_pairs: int = 20,
             min_residual_damping: float = 0.005, n_extra_modes: int = 4, seed: int = 0,
             executor: Map | None = None, n_chunks: int = 8, truth: np.ndarray | None = None,
             progress: Callable[[str], None] | None = None) -> GSAIdentificationResult:
    """GSA-partitioned identification of stiffness then damping parameters (see :mod:`identification.gsa`).

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
    n_stiff = len(stiffness_names)
    lo, hi = np.asarray(lo, dtype=float), np.asarray(hi, dtype=float)
    rng = np.random.default_rng(seed)
    start = lo + rng.random(lo.size) * (hi - lo) if start is None else np.asarray(start, dtype=float)
    setup = StageSetup.of(model, reference, n_stiff, n_extra_modes)
    n_pos = len(reference.positions)
    pairs = [(i, j) for i in range(n_pos) for j in range(reference.n_modes)]
    say = progress or (lambda msg: None)
    seconds = {}

    t0 = time.perf_counter()  # 1. GSA of MACXP and NDD^2 for every pair, one Sobol sample
    say(f"Sobol sampling: {sobol_n * (len(names) + 2)} parameter sets x {n_pos} positions")
    s_mac, s_ndd, n_eval = _sobol_stage(setup, lo, hi, names, len(pairs), sobol_n, seed, executor, n_chunks)
    seconds["gsa"] = time.perf_counter() - t0

    t0 = time.perf_counter()  # 2. stiffness subproblems, then (optionally) one joint local step
    tasks = _subproblem_tasks(setup, s_mac, pairs, start, lo, hi, threshold=threshold, max_search=max_search,
                              n_opt=n_opt, seed=seed, maxiter=maxiter)
    say(f"stiffness: {len(tasks)} subproblems x {n_opt} starts")
    subs = run_batch(executor, solve_subproblem, tasks)
    chosen = select_subproblems(subs, max_subproblem_cost)  # per parameter: (spread, subproblem, mean)
    est = start.copy()
    for q, (_, _, mean) in chosen.items():
        est[q] = lo[q] + mean * (hi[q] - lo[q])
    n_eval += sum(sp["x"].shape[0] for sp in subs)  # optimisations (evaluations are not counted)
    n_damp = len(damping_names)
    ranked = [pairs[k] for k in np.argsort(s_ndd.ST[:, :n_stiff].sum(axis=1))] if n_damp else []
    local = _Local(lo, hi, ranked, n_damp, maxiter, n_damping_pairs, min_residual_damping)
    if refine:
        say("stiffness: joint refinement over all pairs")
        est[:n_stiff] = refine_stiffness(setup, est, lo, hi, maxiter)
    seconds["stiffness"] = time.perf_counter() - t0

    t0 = time.perf_counter()  # 3. damping by bounded linear least squares on the residual modal damping
    dpairs = _local_pass(setup, reference, est, local, corrected=False, refine=False)
    if refine:  # once more, with assumption A1's own shift (at the estimate) taken out of both stages
        say("stiffness and damping: correction for the undamped-mode assumption")
        dpairs = _local_pass(setup, reference, est, local, corrected=True)
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
        chosen_subproblem={n: chosen[q][1] if q in chosen else None for q, n in enumerate(names[:n_stiff])},
        spread={names[q]: sd for q, (sd, _, _) in chosen.items()}, damping_pairs=dpairs,
        identification=ev_id, validation=ev_val, seconds=seconds, n_evaluations=int(n_eval),
        truth=None if truth is None else np.asarray(truth, dtype=float), intervals=iv, damping_ranking=ranked)
