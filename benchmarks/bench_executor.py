"""Benchmark: Dask overhead against the local process pool on the same cores and the same workload.

Workload: the Sobol stage plus the stiffness multistarts of the GSA identification (machine-tool
model, 3 positions x 15 modes), once on ``LocalExecutor(2)`` (spawn pool) and once on a Dask
``LocalCluster`` of 2 single-threaded worker processes, alternating, ``--repeat`` times. Worker
start-up is outside the timing (both back ends are warmed up with one small batch first).

    .venv/bin/python benchmarks/bench_executor.py [--repeat 2] [--sobol-n 64] [--n-opt 6]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from daq.executor import LocalExecutor, make_executor
from identification.gsa import identify, reference_from_model
from identification.models.machine_tool_model import (
    DAMPING_NAMES,
    STIFFNESS_NAMES,
    MachineTool,
    as_vector,
    param_bounds,
)


def _warm(x):
    return x


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--sobol-n", type=int, default=64)
    ap.add_argument("--n-opt", type=int, default=6)
    args = ap.parse_args()
    m = MachineTool()
    lo, hi = param_bounds()
    ref = reference_from_model(m, as_vector(None), [0.05, 0.25, 0.55], 15)

    def work(ex):
        t0 = time.perf_counter()
        r = identify(m, ref, STIFFNESS_NAMES, DAMPING_NAMES, lo, hi, sobol_n=args.sobol_n, n_opt=args.n_opt,
                     refine=False, seed=3, executor=ex)
        return time.perf_counter() - t0, r.estimate

    times = {"pool": [], "dask": []}
    with LocalExecutor(2) as pool, make_executor("local", 2) as dx:
        pool.map(_warm, range(4))
        dx.map(_warm, range(4))
        for _ in range(args.repeat):
            for name, ex in (("pool", pool), ("dask", dx)):
                t, est = work(ex)
                times[name].append(t)
                print(f"{name}: {t:.2f} s", flush=True)
    p, d = np.median(times["pool"]), np.median(times["dask"])
    print(f"median wall: pool {p:.2f} s, dask {d:.2f} s, dask/pool {d / p:.3f} (target <= 1.15)")


if __name__ == "__main__":
    main()
