"""Benchmark: full 96-candidate model selection on the simulated stacker-crane axis.

Two cases (``--case``):

* ``linear`` (default): truth simulators/physics/crane.py with 3 masses + viscous friction + dead time
  (Coulomb = Stribeck = gravity = 0), encoder quantisation and speed noise; the noise seed varies
  (``--seeds``). The right answer is ``3m+visc+dt``.
* ``shipped``: the session `hil run configs/crane-sim.toml` records (the shipped truth with Coulomb and
  Stribeck friction; noise seeds ``[4, 0]`` and ``[4, 1]`` of its simulated drive: the same arrays, bit
  for bit, as the stored session). The selection picks ``3m+visc+coul+dt``.

Training and validation runs: 2 s multisines at 10 kHz (the [excitation] settings of configs/crane-sim.toml,
10 N*m peak). Every selection runs the default settings of crane_analysis.DEFAULTS (2 worker processes, or a
Dask LocalCluster of 2 workers with ``--dask``).

``--engines python compiled`` runs each selection with both simulation engines side by side in this one
process (``python``: the step loop before issue 23; ``compiled``:
identification/models/drive_kernels.py), prints
the wall-time ratio and checks the verdict: same chosen model, every estimate of it within one standard
error of the other engine's.

    .venv/bin/python benchmarks/bench_model_selection.py [--case linear|shipped] [--seeds 0 1 2 3 4]
        [--engines compiled] [--dask] [--n-starts 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from identification.analyses.crane_analysis import analyze_crane, selection_options
from identification.design.multisine import design_multisine
from identification.models.drive_simulation import set_engine
from identification.selection.model_selection import select_model
from simulators.physics.crane import CraneTruth, simulate_axis

TRUE_MODEL = {"linear": "3m+visc+dt", "shipped": "3m+visc+coul+dt"}


def crane_runs(seed: int, duration: float = 2.0, peak: float = 10.0, dt: float = 1e-4, case: str = "linear"):
    """Training and validation runs ``(u, y, dt)`` of one case; ``seed``: the noise seed (linear case)."""
    mt = design_multisine(1.0, 150.0, 100, dt, period=duration, grid="log", seed=11, max_iter=50)
    mv = design_multisine(1.5, 150.0, 80, dt, period=duration, grid="lin", seed=22, max_iter=50)
    if case == "shipped":  # configs/crane-sim.toml: default truth, drive seed 4, run i -> rng([4, i])
        truth = CraneTruth()
        rngs = [np.random.default_rng([4, 0]), np.random.default_rng([4, 1])]
    else:
        truth = CraneTruth.from_config({"coulomb": 0.0, "stribeck_torque": 0.0, "gravity_torque": 0.0})
        rng = np.random.default_rng(seed)
        rngs = [rng, rng]
    tr = simulate_axis(truth, mt.scale_to_peak(peak), dt, rngs[0])
    va = simulate_axis(truth, mv.scale_to_peak(peak), dt, rngs[1])
    return (tr["torque_cmd"], tr["speed"], dt), (va["torque_cmd"], va["speed"], dt)


def run_selection(train, valid, section: dict, engine: str, dask: bool):
    """One whole selection with ``engine`` in this process and in the workers it starts."""
    os.environ["HIL_SIM_ENGINE"] = engine  # read by the spawned pool / Dask workers at import
    set_engine(engine)
    t0 = time.perf_counter()
    if dask:
        from daq.executor import make_executor  # lazy: dask only with --dask

        opts = selection_options(section)
        bounds = opts.pop("bounds")
        with make_executor("local", opts["n_jobs"]) as ex:
            t0 = time.perf_counter()  # the cluster's start is not the selection's
            res = select_model(train, valid, bounds, executor=ex, **opts)
    else:
        res = analyze_crane(train, valid, section)
    return res, time.perf_counter() - t0


def compare(a, b) -> tuple[bool, float]:
    """Same chosen model, and the largest |difference| of its estimates in units of the standard error."""
    if a.chosen_name != b.chosen_name or a.chosen is None:
        return False, float("inf")
    worst = 0.0
    for n, v in a.chosen.params.items():
        se = max(a.chosen.std_errors.get(n, np.nan), b.chosen.std_errors.get(n, np.nan))
        worst = max(worst, abs(v - b.chosen.params[n]) / se)
    return worst <= 1.0, worst


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", choices=sorted(TRUE_MODEL), default="linear")
    ap.add_argument("--seeds", type=int, nargs="+", default=None, help="noise seeds (default 0..4)")
    ap.add_argument("--engines", nargs="+", choices=("python", "compiled"), default=["compiled"])
    ap.add_argument("--dask", action="store_true", help="run the candidates on a Dask LocalCluster")
    ap.add_argument("--n-starts", type=int, default=None)
    ap.add_argument("--json", default=None, help="write per-seed summaries here")
    args = ap.parse_args()
    seeds = args.seeds or ([0, 1, 2, 3, 4] if args.case == "linear" else [4])
    section = {} if args.n_starts is None else {"n_starts": args.n_starts}
    true_model = TRUE_MODEL[args.case]
    outcome = []
    where = "Dask LocalCluster" if args.dask else "process pool"
    print(f"case {args.case}, engines {args.engines}, {where}, "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
    for i, seed in enumerate(seeds):
        train, valid = crane_runs(seed, case=args.case)
        res = {}
        for engine in args.engines:
            r, wall = run_selection(train, valid, section, engine, args.dask)
            res[engine] = (r, wall)
            ok = r.chosen_name == true_model
            chosen = r.chosen
            if i == 0 and engine == args.engines[-1]:
                print(r.format_table())
            outcome.append({"seed": seed, "engine": engine, "chosen": r.chosen_name, "correct": ok,
                            "wall_s": wall, "valid_fit": chosen.valid_fit if chosen else None,
                            "max_ci": chosen.identifiability.max_ci if chosen else None,
                            "params": chosen.params if chosen else None,
                            "std_errors": chosen.std_errors if chosen else None,
                            "n_evals": sum(c.n_evals for c in r.candidates)})
            print(f"seed {seed} [{engine}]: chosen {r.chosen_name} ({'correct' if ok else 'WRONG'}), "
                  f"wall {wall:.1f} s, {outcome[-1]['n_evals']} simulations with sensitivities, "
                  f"load {os.getloadavg()[0]:.1f}", flush=True)
        if len(res) == 2:
            (ra, wa), (rb, wb) = res["python"], res["compiled"]
            same, worst = compare(ra, rb)
            print(f"seed {seed}: python / compiled wall = {wa:.1f} / {wb:.1f} s = {wa / wb:.2f}x; "
                  f"{'same choice' if ra.chosen_name == rb.chosen_name else 'DIFFERENT CHOICE'}, estimates "
                  f"differ by at most {worst:.2g} standard errors ({'ok' if same else 'NOT ok'})", flush=True)
    for engine in args.engines:
        rows = [o for o in outcome if o["engine"] == engine]
        walls = [o["wall_s"] for o in rows]
        n_ok = sum(o["correct"] for o in rows)
        print(f"\n[{engine}] {n_ok}/{len(rows)} seeds select {true_model}; wall per selection:"
              f" mean {np.mean(walls):.1f} s, max {np.max(walls):.1f} s (2 workers)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(outcome, fh, indent=1)


if __name__ == "__main__":
    main()
