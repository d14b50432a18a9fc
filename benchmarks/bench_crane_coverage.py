"""Coverage of the crane model's 95 % intervals: structure right and structure wrong (issue 21, item 3).

Truths: simulators/physics/crane.py, each parameter of the shipped config drawn uniformly within
+-``--spread`` (default 20 %) of its value, one noise seed per draw. "right": no Coulomb/Stribeck friction,
fitted with ``3m+visc+dt``; "wrong": the shipped Coulomb + Stribeck friction, fitted with
``3m+visc+coul+dt`` (the model the selection picks; no candidate has the Stribeck term). Training and
validation runs as in configs/crane-sim.toml (2 s multisines at 10 kHz, 10 N*m peak). Every fit starts
at 1.1 x the truth's values (the start does not matter for the intervals as long as the fit converges).

Reported per case and model step (``--decimate``): the share of parameters whose true value lies in the
model-based and in the robust (Newey-West) 95 % intervals, and how often the analysis called the
intervals valid (validation residuals white and independent of the input, time-step bias < 1 std).
The model's dead time is the delay from command to measured speed: the drive's dead time plus half a
sample, because the simulated speed is the encoder angle differenced over the last sample.

    nice .venv/bin/python benchmarks/bench_crane_coverage.py --draws 20 --decimate 1 5 [--duration 2]
        [--json out.json]; --load out.json prints the tables again
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from identification.design.multisine import design_multisine  # noqa: E402
from identification.selection.model_selection import chosen_intervals, fit_structure  # noqa: E402
from simulators.physics.crane import CraneTruth, simulate_axis  # noqa: E402

CASES = {"right": ({"coulomb": 0.0, "stribeck_torque": 0.0}, "3m+visc+dt"),
         "wrong": ({}, "3m+visc+coul+dt")}
DRAWN = ("J1", "J2", "J3", "k12", "k23", "d12", "d23", "viscous", "coulomb", "dead_time")


def one(case: str, draw: int, decimate: int, duration: float = 2.0, spread: float = 0.2,
        dt: float = 1e-4) -> dict:
    """One truth draw of one case: coverage of both intervals and the adequacy verdict."""
    over, model = CASES[case]
    rng = np.random.default_rng([draw, 21])
    nominal = CraneTruth()
    vals = {k: getattr(nominal, k) * (1 + spread * rng.uniform(-1, 1)) for k in DRAWN}
    truth = CraneTruth.from_config({**vals, **over})
    mt = design_multisine(1.0, 150.0, 100, dt, period=duration, grid="log", seed=11, max_iter=50)
    mv = design_multisine(1.5, 150.0, 80, dt, period=duration, grid="lin", seed=22, max_iter=50)
    tr = simulate_axis(truth, mt.scale_to_peak(10.0), dt, rng)
    va = simulate_axis(truth, mv.scale_to_peak(10.0), dt, rng)
    ref = {k: getattr(truth, k) for k in DRAWN}
    ref["dead_time"] += 0.5 * dt if truth.encoder_counts > 0 else 0.0
    start = {k: 1.1 * v for k, v in ref.items()}
    train, valid = (tr["torque_cmd"], tr["speed"], dt), (va["torque_cmd"], va["speed"], dt)
    f = fit_structure(model, *train, n_starts=1, start=start, max_nfev=100, decimate=decimate)
    rep = chosen_intervals(f, train, valid, {}, {"decimate": decimate, "skip": 0, "friction_eps": 0.05})
    tv = np.array([ref[n] for n in rep.names])
    inside = {k: ((iv[:, 0] <= tv) & (tv <= iv[:, 1])) for k, iv in
              (("model", rep.interval(False)), ("robust", rep.interval(True)))}
    return {"case": case, "draw": draw, "decimate": decimate, "names": rep.names,
            "in_model": inside["model"].tolist(), "in_robust": inside["robust"].tolist(),
            "valid": rep.intervals_valid, "residuals_white": rep.adequacy.residuals_white,
            "p_value": rep.adequacy.p_value, "step_ok": rep.step_ok,
            "z": ((rep.values - tv) / rep.std_robust).tolist()}


def summary(rows: list[dict]) -> str:
    lines = ["| case | model step | truths | model-based 95 % covers | robust 95 % covers | intervals valid "
             "| residuals white | time step ok |", "|---|---|---|---|---|---|---|---|"]
    for case in CASES:
        for dec in sorted({r["decimate"] for r in rows}):
            rs = [r for r in rows if r["case"] == case and r["decimate"] == dec]
            if not rs:
                continue
            cm = np.mean([x for r in rs for x in r["in_model"]])
            cr = np.mean([x for r in rs for x in r["in_robust"]])
            lines.append(f"| {case} | {dec} x 0.1 ms | {len(rs)} | {100 * cm:.1f} % | {100 * cr:.1f} % | "
                         f"{sum(r['valid'] for r in rs)}/{len(rs)} | {sum(r['residuals_white'] for r in rs)}"
                         f"/{len(rs)} | {sum(r['step_ok'] for r in rs)}/{len(rs)} |")
    for case in CASES:
        for dec in sorted({r["decimate"] for r in rows}):
            rs = [r for r in rows if r["case"] == case and r["decimate"] == dec]
            if rs:
                names = rs[0]["names"]
                per = np.mean([r["in_robust"] for r in rs if r["names"] == names], axis=0)
                lines.append(f"robust coverage per parameter, {case}, decimate {dec}: " + ", ".join(
                    f"{n} {100 * c:.0f} %" for n, c in zip(names, per, strict=True)))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--draws", type=int, default=20)
    ap.add_argument("--decimate", type=int, nargs="+", default=[1, 5])
    ap.add_argument("--cases", nargs="+", default=list(CASES))
    ap.add_argument("--duration", type=float, default=2.0)
    ap.add_argument("--json", dest="json_out", default=None)
    ap.add_argument("--load", default=None, help="print the table of a saved --json file")
    args = ap.parse_args()
    if args.load:
        print(summary(json.loads(Path(args.load).read_text())))
        return
    rows = []
    t0 = time.perf_counter()
    for dec in args.decimate:
        for case in args.cases:
            for d in range(args.draws):
                rows.append(one(case, d, dec, args.duration))
                print(f"{case} decimate {dec} draw {d}: valid {rows[-1]['valid']}, covered "
                      f"{sum(rows[-1]['in_robust'])}/{len(rows[-1]['names'])} "
                      f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    print(summary(rows))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(rows))


if __name__ == "__main__":
    main()
