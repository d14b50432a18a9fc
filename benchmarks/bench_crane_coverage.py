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
The model's dead time is compared with the drive's own: the model lags its speed by half a sample, as the
drive's speed (the encoder angle differenced over the last sample) lags the motor's (issue 39; before, the
comparison added half a sample to the truth). The simulator's ``encoder_counts = 0`` samples the speed
itself, without that lag; the analysis does not know it, so the draws keep the shipped encoder.

    nice .venv/bin/python benchmarks/bench_crane_coverage.py --draws 20 --decimate 1 5 [--duration 2]
        [--json out.json]; --load out.json prints the tables again

``--select`` (issue 31, item 1) runs what `hil analyze` runs with the shipped settings instead of one fit from
near the truth: ``select_model`` with configs/crane-sim.toml's ``[model_selection]`` (``decimate = 5``, three
starts per candidate from the centre of the box and Latin-hypercube points, never the truth), which screens
the candidates on the 0.5 ms step and refits the choice and its close rivals on the data's 0.1 ms step.
Truths: "right" draws the inertias and stiffnesses (J1, J2, J3, k12, k23) within +-``--spread`` of the
shipped values, no Coulomb/Stribeck friction, one noise seed per draw; "wrong" is the shipped Stribeck truth
with one noise seed per draw. ``--candidates`` limits the kit (default: all 96).

    nice .venv/bin/python benchmarks/bench_crane_coverage.py --select --draws 20 [--candidates 3m+visc+dt ...]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from identification.design.multisine import design_multisine  # noqa: E402
from identification.selection.model_selection import chosen_intervals, fit_structure, select_model  # noqa: E402
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


SELECT_DRAWN = ("J1", "J2", "J3", "k12", "k23")


def shipped_settings() -> dict:
    """configs/crane-sim.toml's [model_selection] as `hil analyze` reads it (thresholds, steps, starts)."""
    from daq.rigs.config import load  # lazy: the config room only for --select

    _, cfg = load(Path(__file__).resolve().parents[1] / "configs" / "crane-sim.toml")
    opts = cfg.model_selection.options()
    for key in ("bounds", "candidates", "n_jobs", "profile_points"):
        opts.pop(key)
    return opts


#: --accept-all: no identifiability thresholds (the shipped ones' verdict is still recorded per candidate)
OPEN = {"max_condition_index": 1e9, "min_pii_ratio": 0.0, "max_rel_std": None}


def one_selection(case: str, draw: int, candidates: list[str] | None, spread: float = 0.2,
                  dt: float = 1e-4, accept_all: bool = False) -> dict:
    """One truth draw through the whole selection with the shipped settings: choice, validity, coverage."""
    rng = np.random.default_rng([draw, 31])
    nominal = CraneTruth()
    if case == "right":
        vals = {k: getattr(nominal, k) * (1 + spread * rng.uniform(-1, 1)) for k in SELECT_DRAWN}
        truth = CraneTruth.from_config({**vals, "coulomb": 0.0, "stribeck_torque": 0.0})
    else:
        truth = nominal
    mt = design_multisine(1.0, 150.0, 100, dt, period=2.0, grid="log", seed=11, max_iter=50)
    mv = design_multisine(1.5, 150.0, 80, dt, period=2.0, grid="lin", seed=22, max_iter=50)
    tr = simulate_axis(truth, mt.scale_to_peak(10.0), dt, rng)
    va = simulate_axis(truth, mv.scale_to_peak(10.0), dt, rng)
    t0 = time.perf_counter()
    shipped = shipped_settings()
    res = select_model((tr["torque_cmd"], tr["speed"], dt), (va["torque_cmd"], va["speed"], dt),
                       candidates=candidates, profile=False, n_jobs=1,
                       **({**shipped, **OPEN} if accept_all else shipped))
    # the shipped thresholds' verdict on each screened candidate (with --accept-all: what they would say)
    verdicts = {c.name: {"max_ci": c.identifiability.max_ci, "min_pii": c.identifiability.min_pii,
                         "max_rel_std": max((c.std_errors[n] / abs(v) if v else math.inf
                                             for n, v in c.params.items()), default=0.0),
                         "reasons": list(c.identifiability.reasons)}
                for c in res.candidates}
    for v in verdicts.values():
        v["shipped_accepts"] = bool(v["max_ci"] < shipped["max_condition_index"]
                                    and v["min_pii"] >= shipped["min_pii_ratio"]
                                    and v["max_rel_std"] <= shipped["max_rel_std"])
    row = {"case": case, "draw": draw, "chosen": res.chosen_name, "seconds": time.perf_counter() - t0,
           "refined": [c.name for c in res.refined], "screen": verdicts}
    rep = res.intervals
    if rep is None:
        return {**row, "names": [], "in_model": [], "in_robust": [], "valid": False, "z": []}
    ref = np.array([getattr(truth, n, 0.0) for n in rep.names])
    inside = {k: ((iv[:, 0] <= ref) & (ref <= iv[:, 1])).tolist() for k, iv in
              (("model", rep.interval(False)), ("robust", rep.interval(True)))}
    return {**row, "names": rep.names, "in_model": inside["model"], "in_robust": inside["robust"],
            "valid": rep.intervals_valid, "residuals_white": rep.adequacy.residuals_white,
            "p_value": rep.adequacy.p_value, "step_ok": rep.step_ok,
            "step_bias_std": None if rep.step_bias is None else np.nan_to_num(rep.step_bias_std).tolist(),
            "z": ((rep.values - ref) / rep.std_robust).tolist()}


def selection_summary(rows: list[dict]) -> str:
    lines = ["| case | truths | chosen (count) | intervals valid | robust 95 % covers (right model chosen) | "
             "model-based 95 % covers | max time-step bias / std |", "|---|---|---|---|---|---|---|"]
    for case in ("right", "wrong"):
        rs = [r for r in rows if r["case"] == case]
        if not rs:
            continue
        chosen = {}
        for r in rs:
            chosen[r["chosen"]] = chosen.get(r["chosen"], 0) + 1
        right = [r for r in rs if r["chosen"] == "3m+visc+dt"] if case == "right" else rs
        cr = np.mean([x for r in right for x in r["in_robust"]]) if right else float("nan")
        cm = np.mean([x for r in right for x in r["in_model"]]) if right else float("nan")
        sb = max((max(r["step_bias_std"]) for r in rs if r.get("step_bias_std")), default=float("nan"))
        acc = sum(bool(r["screen"].get(r["chosen"], {}).get("shipped_accepts")) for r in rs)
        lines.append(f"| {case} | {len(rs)} | {', '.join(f'{k} ({v})' for k, v in chosen.items())}; "
                     f"shipped thresholds accept it {acc}/{len(rs)} | "
                     f"{sum(r['valid'] for r in rs)}/{len(rs)} | {100 * cr:.1f} % | {100 * cm:.1f} % | "
                     f"{sb:.2g} |")
    return "\n".join(lines)


def per_draw_table(rows: list[dict]) -> str:
    """One line per truth: the choice, whether its intervals are valid, their coverage, and what the right
    model's identifiability measures were (scaled condition index, largest relative standard error)."""
    lines = ["| case | draw | chosen | intervals valid | robust 95 % covers | right model: max cond. index | "
             "max std / value |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        right = r["screen"].get(CASES[r["case"]][1], {})
        lines.append(f"| {r['case']} | {r['draw']} | {r['chosen']} | {'yes' if r['valid'] else 'no'} | "
                     f"{sum(r['in_robust'])}/{len(r['names'])} | {right.get('max_ci', float('nan')):.1f} | "
                     f"{100 * right.get('max_rel_std', float('nan')):.2f} % |")
    return "\n".join(lines)


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
    ap.add_argument("--select", action="store_true", help="the whole selection with the shipped settings")
    ap.add_argument("--candidates", nargs="+", default=None, help="with --select: these models only")
    ap.add_argument("--first", type=int, default=0, help="first draw (split a run over processes)")
    ap.add_argument("--accept-all", action="store_true",
                    help="with --select: no identifiability thresholds (the intervals alone; the shipped "
                         "thresholds' verdict is still recorded)")
    args = ap.parse_args()
    if args.load:
        rows = json.loads(Path(args.load).read_text())
        select = bool(rows) and "chosen" in rows[0]
        print(selection_summary(rows) + "\n\n" + per_draw_table(rows) if select else summary(rows))
        return
    rows = []
    t0 = time.perf_counter()
    if args.select:
        for case in args.cases:
            for d in range(args.first, args.first + args.draws):
                rows.append(one_selection(case, d, args.candidates, accept_all=args.accept_all))
                r = rows[-1]
                print(f"{case} draw {d}: chosen {r['chosen']}, valid {r['valid']}, covered "
                      f"{sum(r['in_robust'])}/{len(r['names'])} ({time.perf_counter() - t0:.0f} s)",
                      file=sys.stderr, flush=True)
                if args.json_out:
                    Path(args.json_out).write_text(json.dumps(rows))
        print(selection_summary(rows) + "\n\n" + per_draw_table(rows))
        return
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
