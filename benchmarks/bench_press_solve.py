"""The press model's static state solve (issue 43): ours against scipy's root finder on the same equations.

Every press fit solves the linkage's nonlinear statics (10 degrees of freedom, the bearings' cubic
stiffness) at each of its 14-58 force points, at every evaluation of the fit: the FWER test of
tests/test_uncertainty_test.py makes 13,000 such solves. Ours: Newton on all points at once
(``PressLinkageModel.solve_state``, converged to 1e-10 of the displacements; compiled by default, and the
same iteration in numpy as without numba). The plain one:
``scipy.optimize.root`` (MINPACK's hybrj, the same residual and Jacobian) point by point from the same
linear start. Printed: CPU ms per solve of the 29 points of a loading and unloading staircase (median of
``--repeat``, alternating) and the largest difference of the states, relative to their size.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_press_solve.py --repeat 7
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import scipy.optimize

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from identification.models.press_models import PressLinkageModel  # noqa: E402


def plain_solve(m: PressLinkageModel, p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """The same statics, one point at a time by scipy's root (hybr) from the linear start."""
    K = m.K(p)
    K_lin = K + m._bearing(np.zeros((1, K.shape[0])))[1][0]
    out = []
    for qn in q:
        y0 = np.linalg.solve(K_lin, m.b * qn)
        sol = scipy.optimize.root(lambda y, qn=qn: m.residual(y[None], p, np.array([qn]))[0], y0,
                                  jac=lambda y: K + m._bearing(y[None])[1][0], method="hybr",
                                  options={"xtol": 1e-12})
        out.append(sol.x)
    return np.array(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--solves", type=int, default=100, help="solves per timing")
    args = ap.parse_args()
    m, m_numpy = PressLinkageModel(), PressLinkageModel(compiled=False)
    p = np.array([2.0e8, 1.5e8])
    q = np.r_[np.linspace(0, 20000, 15), np.linspace(20000, 0, 15)[1:]]  # N, as the shipped staircase
    m.solve_state(p, q)  # the compiled solve loaded (or compiled) before any timing
    solvers = {"ours": m.solve_state, "numpy": m_numpy.solve_state,
               "plain": lambda p, q: plain_solve(m, p, q)}
    cpu: dict[str, list[float]] = {k: [] for k in solvers}
    for _ in range(args.repeat):
        for name, solve in solvers.items():
            t0 = time.process_time()
            for _ in range(args.solves):
                solve(p, q)
            cpu[name].append((time.process_time() - t0) / args.solves * 1e3)
    ours, numpy_path, plain = m.solve_state(p, q), m_numpy.solve_state(p, q), plain_solve(m, p, q)
    dev = float(np.max(np.abs(ours - plain)) / np.max(np.abs(plain)))
    dev_numpy = float(np.max(np.abs(ours - numpy_path)) / np.max(np.abs(numpy_path)))
    a, n, b = (float(np.median(cpu[k])) for k in ("ours", "numpy", "plain"))
    print(f"press statics, {q.size} force points up to {q.max():.0f} N, {args.solves} solves a timing")
    print("| solver | CPU ms a solve (median) | speed-up |")
    print("|---|---|---|")
    print(f"| scipy.optimize.root (hybr), point by point | {b:.3f} | 1.00x |")
    print(f"| ours in numpy (no numba), Newton on all points at once | {n:.3f} | {b / n:.1f}x |")
    print(f"| ours compiled (the default), Newton point by point | {a:.3f} | {b / a:.1f}x |")
    print(f"largest state difference {dev:.1e} of the largest displacement (compiled vs numpy "
          f"{dev_numpy:.1e})")


if __name__ == "__main__":
    main()
