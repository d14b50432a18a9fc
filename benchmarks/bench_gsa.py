"""Benchmark: GSA-guided identification of the machine-tool model (seed 003), ideal and disturbed case.

Reference data: the nominal parameters on the nominal model (hidden from the identification), 15
modes at axis positions 50, 250, 550 mm (identification) and 400 mm (validation), receptance FRFs
10-600 Hz for forces at the table (x, y, z). Ideal case: the same model is identified. Disturbed
case: the model being identified has different non-identified constants
(``MachineToolConstants.disturbed()``: masses, inertias, bed joint, screw). Prints the tables
(Tables 2-5 of the paper), parameter deviations and wall times; runs on a local 2-process pool.

    .venv/bin/python benchmarks/bench_gsa.py [--sobol-n 128] [--n-opt 10] [--workers 2] [--no-refine]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from daq.executor import make_executor
from identification.gsa import fraction_within, identify, reference_from_model
from identification.models.machine_tool_model import (
    DAMPING_NAMES,
    STIFFNESS_NAMES,
    MachineTool,
    MachineToolConstants,
    as_vector,
    param_bounds,
)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sobol-n", type=int, default=128)
    ap.add_argument("--n-opt", type=int, default=10)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-refine", action="store_true")
    args = ap.parse_args()
    truth = as_vector(None)
    lo, hi = param_bounds()
    ref_model = MachineTool()
    freq = np.linspace(10.0, 600.0, 300)
    inputs = ["T1x", "T1y", "T1z"]
    ref = reference_from_model(ref_model, truth, [0.05, 0.25, 0.55], 15, freq, inputs)
    val = reference_from_model(ref_model, truth, [0.4], 15, freq, inputs)
    cases = {"ideal": MachineTool(), "disturbed": MachineTool(MachineToolConstants().disturbed())}
    with make_executor(None, args.workers) as ex:
        for name, model in cases.items():
            t0 = time.perf_counter()
            r = identify(model, ref, STIFFNESS_NAMES, DAMPING_NAMES, lo, hi, validation=val,
                         sobol_n=args.sobol_n, n_opt=args.n_opt, seed=args.seed, executor=ex, truth=truth,
                         refine=not args.no_refine)
            wall = time.perf_counter() - t0
            print(f"\n=== {name} model vs simulated data ===")
            print(r.format_tables())
            print(f"stiffness within 5 %: {100 * fraction_within(r):.0f} %, damping within 30 %: "
                  f"{100 * fraction_within(r, 0.30, 'damping'):.0f} %; worst MACXP (identification) "
                  f"{100 * r.identification['table']['MACXP']['worst']:.2f} %; wall {wall:.1f} s", flush=True)


if __name__ == "__main__":
    main()
