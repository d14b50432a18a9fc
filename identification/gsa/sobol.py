"""Sobol indices of a batch evaluator (SALib's Saltelli/Sobol' sampling and estimator), its batches through
any ``map``-like executor."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from SALib.analyze import sobol as sobol_analyze
from SALib.sample import sobol as sobol_sample

Map = Callable[[Callable, Sequence], list]


def _default_map(fn, items) -> list:
    return list(map(fn, items))


def run_batch(executor, fn, items) -> list:
    ex = executor if executor is not None else _default_map
    m = getattr(ex, "map", ex)
    return list(m(fn, list(items)))


@dataclass
class SobolResult:
    names: list[str]
    S1: np.ndarray  # (n_outputs, n_params)
    ST: np.ndarray
    S1_conf: np.ndarray  # 95 % bootstrap half-widths
    ST_conf: np.ndarray
    n_evaluations: int


def sobol_indices(evaluate: Callable[[np.ndarray], np.ndarray], lo: Sequence[float] | np.ndarray,
                  hi: Sequence[float] | np.ndarray,
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
                   for c, y in zip(chunks, run_batch(executor, evaluate, chunks), strict=True)])
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

