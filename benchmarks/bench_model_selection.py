"""Benchmark: full 96-candidate model selection on the simulated stacker-crane axis.

Truth: simulators/physics/crane.py with 3 masses + viscous friction + dead time (Coulomb =
Stribeck = gravity = 0), encoder quantisation and speed noise. Training and validation runs:
2 s multisines at 10 kHz (the [excitation] settings of configs/crane-sim.toml, 10 N*m peak).
For every noise seed the whole selection runs (default settings of crane_analysis.DEFAULTS);
prints the candidate table of the first seed, per-seed outcome and wall times.

    .venv/bin/python benchmarks/bench_model_selection.py [--seeds 0 1 2 3 4] [--n-starts 3]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from identification.crane_analysis import analyze_crane
from identification.multisine import design_multisine
from simulators.physics.crane import CraneTruth, simulate_axis

TRUE_MODEL = "3m+visc+dt"


def crane_runs(seed: int, duration: float = 2.0, peak: float = 10.0, dt: float = 1e-4):
    """Training and validation runs ``(u, y, dt)`` of the linear-friction truth for one noise seed."""
    truth = CraneTruth.from_config({"coulomb": 0.0, "stribeck_torque": 0.0, "gravity_torque": 0.0})
    mt = design_multisine(1.0, 150.0, 100, dt, period=duration, grid="log", seed=11, max_iter=50)
    mv = design_multisine(1.5, 150.0, 80, dt, period=duration, grid="lin", seed=22, max_iter=50)
    rng = np.random.default_rng(seed)
    tr = simulate_axis(truth, mt.scale_to_peak(peak), dt, rng)
    va = simulate_axis(truth, mv.scale_to_peak(peak), dt, rng)
    return (tr["torque_cmd"], tr["speed"], dt), (va["torque_cmd"], va["speed"], dt)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--n-starts", type=int, default=None)
    ap.add_argument("--json", default=None, help="write per-seed summaries here")
    args = ap.parse_args()
    section = {} if args.n_starts is None else {"n_starts": args.n_starts}
    outcome = []
    for i, seed in enumerate(args.seeds):
        train, valid = crane_runs(seed)
        t0 = time.perf_counter()
        res = analyze_crane(train, valid, section)
        wall = time.perf_counter() - t0
        if i == 0:
            print(res.format_table())
            if res.profile is not None:
                print("profile likelihood, clear minimum:",
                      dict(zip(res.profile.names, res.profile.clear_minimum, strict=True)))
        ok = res.chosen_name == TRUE_MODEL
        chosen = res.chosen
        outcome.append({"seed": seed, "chosen": res.chosen_name, "correct": ok, "wall_s": wall,
                        "valid_fit": chosen.valid_fit if chosen else None,
                        "max_ci": chosen.identifiability.max_ci if chosen else None,
                        "params": chosen.params if chosen else None})
        print(f"seed {seed}: chosen {res.chosen_name} ({'correct' if ok else 'WRONG'}), wall {wall:.1f} s",
              flush=True)
    n_ok = sum(o["correct"] for o in outcome)
    walls = [o["wall_s"] for o in outcome]
    print(f"\n{n_ok}/{len(outcome)} seeds select {TRUE_MODEL}; wall per selection: "
          f"mean {np.mean(walls):.1f} s, max {np.max(walls):.1f} s (2 worker processes)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(outcome, fh, indent=1)


if __name__ == "__main__":
    main()
