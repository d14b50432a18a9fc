"""The two fitting stages: stiffness subproblems (SLSQP on one pair's MACXP) and their selection, the joint
stiffness least squares, and the damping stage's bounded linear least squares."""

from __future__ import annotations

from functools import partial

import numpy as np
import scipy.optimize

from identification.gsa.modal_residual import StageSetup, damping_rows, pair_macxp, residual_at
from identification.gsa.reference import ModalReference


def _pair_cost(x: np.ndarray, setup: StageSetup, row: np.ndarray, search: list[int], lo: np.ndarray,
               hi: np.ndarray, pos: int, mode: int) -> float:
    """``1 - MACXP`` of one pair with the ``search`` parameters of ``row`` at ``x`` (scaled to [0, 1])."""
    r = row.copy()
    r[search] = lo[search] + np.clip(x, 0, 1) * (hi[search] - lo[search])
    return 1.0 - pair_macxp(setup, r, pos, mode)


def solve_subproblem(task: tuple) -> dict:
    """All repetitions of one (position, mode) stiffness subproblem.

    The other stiffness parameters are drawn at random for every repetition, as in the paper.
    """
    setup, pos, mode, search, lo, hi, base_damp, n_opt, seed, maxiter = task
    rng = np.random.default_rng(seed)
    n_stiff = setup.n_stiff
    vals, costs = [], []
    for _ in range(n_opt):
        ks = lo[:n_stiff] + rng.random(n_stiff) * (hi[:n_stiff] - lo[:n_stiff])
        row = np.concatenate([ks, base_damp])
        x0 = rng.random(len(search))
        cost = partial(_pair_cost, setup=setup, row=row, search=search, lo=lo, hi=hi, pos=pos, mode=mode)
        res = scipy.optimize.minimize(cost, x0, method="SLSQP", bounds=[(0.0, 1.0)] * len(search),
                                      options={"maxiter": maxiter, "ftol": 1e-10, "eps": 1e-6})
        vals.append(np.clip(res.x, 0, 1))
        costs.append(float(res.fun))
    return {"position": pos, "mode": mode, "search": list(search), "x": np.array(vals),
            "cost": np.array(costs)}


def select_subproblems(subs: list[dict], max_cost: float, bound_tol: float = 1e-3
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


def _clipped_residual(x: np.ndarray, setup: StageSetup, row: np.ndarray, lo: np.ndarray, span: np.ndarray,
                      offset: np.ndarray | None) -> np.ndarray:
    """The stiffness stage's residual with the stiffness of ``row`` at ``x`` (scaled, clipped to the box)."""
    return residual_at(np.clip(x, 0, 1), setup, row, slice(0, setup.n_stiff), lo, span, offset=offset)


def refine_stiffness(setup: StageSetup, p: np.ndarray, lo: np.ndarray, hi: np.ndarray, maxiter: int,
                     offset: np.ndarray | None = None) -> np.ndarray:
    """Joint least squares of all stiffness parameters on the residual vector of every pair.

    The residual (:func:`modal_residual`) is the MACXP criterion in vector form: its squares sum to about
    ``1 - MACXP`` per pair, smooth at the optimum (so the step converges in few iterations, and its Jacobian
    there gives the covariance of :func:`parameter_intervals`).
    """
    n_stiff = setup.n_stiff
    span = hi[:n_stiff] - lo[:n_stiff]
    res = partial(_clipped_residual, setup=setup, row=p, lo=lo, span=hi - lo, offset=offset)
    x0 = np.clip((p[:n_stiff] - lo[:n_stiff]) / span, 0.0, 1.0)
    r = scipy.optimize.least_squares(res, x0, bounds=(0.0, 1.0), diff_step=1e-6, max_nfev=20 * maxiter,
                                     x_scale="jac")
    return lo[:n_stiff] + r.x * span


def damping_stage(setup: StageSetup, reference: ModalReference, est: np.ndarray,
                  ranked: list[tuple[int, int]], lo: np.ndarray, hi: np.ndarray, n_damping_pairs: int,
                  min_residual_damping: float, shift: list[np.ndarray] | None = None
                  ) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """Damping parameters by bounded linear least squares on the relative residual modal damping of the
    first ``n_damping_pairs`` of ``ranked`` (pairs least influenced by stiffness first); returns the
    damping values and the pairs used. ``shift`` (:func:`a1_damping_shift`) corrects the formula."""
    n_stiff = setup.n_stiff
    n_damp = lo.size - n_stiff
    rows = {i: damping_rows(setup, est, i) for i in range(len(setup.positions))}
    if shift is not None:
        rows = {i: (xi0 + shift[i], Q, mx) for i, (xi0, Q, mx) in rows.items()}
    chosen_rows = []
    for i, j in ranked[:max(int(n_damping_pairs), n_damp)]:
        xi0, Q, _ = rows[i]
        chosen_rows.append((i, j, reference.xi[i][j] - xi0[j], Q[j], reference.xi[i][j]))
    keep = [r for r in chosen_rows if r[2] >= min_residual_damping]
    if len(keep) < n_damp:
        keep = chosen_rows
    A = np.array([qrow / xr for _, _, _, qrow, xr in keep])
    b = np.array([res / xr for _, _, res, _, xr in keep])
    sol = scipy.optimize.lsq_linear(A, b, bounds=(lo[n_stiff:], hi[n_stiff:]))
    return sol.x, [(i, j) for i, j, _, _, _ in keep]

