"""Monte Carlo calibration of the drive rigs' reported uncertainty (issue 21): predicted std vs the spread of
seeded refits, for the oscillator, the pendulum and the crane-adjoint rig.

For each shipped config (``configs/<kind>-sim.toml``): the adjoint input is designed at the design point
the rig uses - ``[adjoint.nominal]``, prior knowledge off the simulator truth - exactly as ``hil design
adjoint`` does (``daq.rigs.adjoint.design.run_design``); ``--design-at-truth`` designs at the simulator truth
instead (best case, a real rig cannot). Each seed simulates one run of that input with the plant physics the
simulated drive hosts (``simulators/physics``, with the effects the fit model lacks: friction, actuator lag,
quantisation), held per drive cycle, noise from ``default_rng([seed, 0])``, and analyses it with the rig's
own ``hil analyze`` code (``daq.rigs.adjoint.rig.analyze``: the fit from the design point, the nuisance
parameters of ``[fit.nuisance]``). The truth only simulates the data and is compared with at the end.

Per parameter: the Monte Carlo spread of the estimates (sample std over the seeds) against
* ``pred.``: the predicted std the rig reports (design noise sigma, Jacobian at the design point, marginal
  over the nuisance parameters) - what the design promised;
* ``resid.``: the fit's residual-based std (residual variance, Jacobian at the estimate), median over seeds;
* ``robust``: the fit's Newey-West sandwich std over time (HAC, Bartlett weights, Andrews' bandwidth),
  median over seeds, and how often the rig reported it (``ci95`` uses it when the fit's residuals fail
  Ljung-Box, else the residual-based std) - the classic std takes the residuals as white, the crane's
  speed differenced from encoder counts has negatively correlated quantisation noise;
* ``noise``: the fit's noise std (``hil analyze --json`` ``noise_std``): the sandwich with the part of the
  residual the input explains taken out as model error
  (:func:`identification.estimation.residual_adequacy.noise_covariance`), median over seeds - what the
  spread of
  repeated runs should be, from the record alone.
Ratio = MC std / reported std; the issue's target is 0.8-1.2. The mean error (bias) is shown beside it in
units of the MC std: a spread can be calibrated while the estimate is off (unmodelled friction).

    .venv/bin/python benchmarks/bench_drive_calibration.py [--seeds 100] [--design-at-truth]
        [--only oscillator,pendulum,crane-adjoint] [--json out.json] [--noise-only K]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from daq.rigs import parse_config  # noqa: E402
from daq.rigs.adjoint.design import nominal_values, run_design, simulator_truth  # noqa: E402
from daq.rigs.adjoint.rig import Record, Runs, analyze  # noqa: E402
from daq.rigs.config import load_config  # noqa: E402
from simulators.crane_drive import get_plant  # noqa: E402

KINDS = ("oscillator", "pendulum", "crane-adjoint")
#: the sensor of each plant without its noise: the crane's speed still differenced over one cycle (an encoder
#: of 2^40 counts), the others' output exact
QUIET = {"crane": {"encoder_counts": 2**40, "speed_noise": 0.0},
         "oscillator": {"position_noise": 0.0, "position_resolution": 0.0},
         "pendulum": {"angle_noise": 0.0, "encoder_counts": 0}}
TARGET = 0.2  # |ratio - 1| within this


def config_of(kind: str, at_truth: bool):
    """The shipped config; with ``at_truth`` its design point replaced by the simulator truth (best case)."""
    raw = load_config(ROOT / "configs" / f"{kind}-sim.toml")
    raw.pop("store", None)
    cfg = parse_config(raw)[1]
    if at_truth:
        truth = simulator_truth(cfg)
        raw["adjoint"]["nominal"] = {k: truth.get(k, v) for k, v in nominal_values(cfg).items()}
        cfg = parse_config(raw)[1]
    return cfg


def simulate_run(cfg, force: np.ndarray, seed: int, noise_free: bool = False) -> Record:
    """One run of the held input ``force`` (design grid) on the plant physics at the drive cycle.

    ``noise_free`` (evaluation only): the same run without the sensor noise (:data:`QUIET`)."""
    plant = get_plant(cfg.adjoint.plant)
    truth = plant.truth.from_config(dict(cfg.simulator.truth))
    if noise_free:
        truth = dataclasses.replace(truth, **QUIET[cfg.adjoint.plant])
    cycle = float(cfg.simulator.drive.cycle_time)
    reps = int(round(cfg.adjoint.dt / cycle))
    cmd = np.repeat(np.asarray(force, float).ravel(), reps)
    d = plant.simulate(truth, cmd, cycle, np.random.default_rng([seed, 0]))
    applied = d.get("force", d.get("torque", cmd))
    return Record(np.arange(cmd.size) * cycle, cmd, np.asarray(applied, float),
                  np.asarray(d[plant.output], float), cycle, {"design": "adjoint"})


def noise_only(cfg, force: np.ndarray, seeds: int) -> np.ndarray:
    """Robust std (per seed) of the rig's fit to a record without model error: the fitted model's output
    plus the seed's sensor noise (measured minus the noise-free run). The spread of the estimate over the
    seeds comes from that noise alone, as in the real runs; what is missing is the deterministic misfit
    (friction, lag the model lacks), which the robust covariance cannot tell from slow noise in one
    record. Evaluation only: the noise is taken from the simulator."""
    out = []
    for seed in range(seeds):
        rec = simulate_run(cfg, force, seed)
        clean = simulate_run(cfg, force, seed, noise_free=True)
        a = analyze(Runs([rec], 1), cfg)
        synth = dataclasses.replace(rec, output=a.y_fit[: rec.output.size] + (rec.output - clean.output))
        b = analyze(Runs([synth], 1), cfg)
        out.append(np.concatenate([b.robust_std, b.noise_std]))
    return np.array(out)


def calibrate(kind: str, seeds: int, at_truth: bool, n_noise_only: int = 0) -> dict:
    cfg = config_of(kind, at_truth)
    t0 = time.perf_counter()
    design = run_design(cfg)
    design_s = time.perf_counter() - t0
    print(f"\n## {kind}: design at {'the simulator truth (best case)' if at_truth else '[adjoint.nominal]'} "
          f"{dict(zip(design.param_names, design.b.tolist(), strict=True))}: {design_s:.0f} s, "
          f"{design.status}", flush=True)
    force = design.u[:, 0]
    est, pred, resid, robust, noise, used, ok, cover = [], None, [], [], [], 0, 0, []
    t0 = time.perf_counter()
    for seed in range(seeds):
        a = analyze(Runs([simulate_run(cfg, force, seed)], 1), cfg)
        est.append(a.estimate)
        resid.append(a.residual_std)
        robust.append(a.robust_std if a.robust_std is not None else np.full(len(a.names), np.nan))
        noise.append(a.noise_std if a.noise_std is not None else np.full(len(a.names), np.nan))
        used += bool(a.intervals is not None and a.intervals.robust)
        pred = a.predicted_std  # at the design point: the same for every seed
        ok += bool(a.fit_success)
        truth = a.truth
        cover.append([a.ci95[n][0] is not None and a.ci95[n][0] <= t <= a.ci95[n][1]
                      for n, t in zip(a.names, a.truth, strict=True)])
        if (seed + 1) % 10 == 0 and seed + 1 < seeds:  # progress: the slow crane prints as it goes
            e, r, q = np.array(est), np.array(robust), np.array(noise)
            print(f"  {seed + 1} seeds: MC std / robust std, / noise std (medians) " + ", ".join(
                f"{n} {e[:, j].std(ddof=1) / np.nanmedian(r[:, j]):.2f}, "
                f"{e[:, j].std(ddof=1) / np.nanmedian(q[:, j]):.2f}" for j, n in enumerate(a.names)) +
                  f" ({time.perf_counter() - t0:.0f} s)", flush=True)
    fits_s = time.perf_counter() - t0
    est, resid, robust, noise = np.array(est), np.array(resid), np.array(robust), np.array(noise)
    mc = est.std(axis=0, ddof=1)
    quiet = quiet_noise = None
    if n_noise_only:
        both = np.nanmedian(noise_only(cfg, force, n_noise_only), axis=0)
        quiet, quiet_noise = both[: len(design.param_names)], both[len(design.param_names):]
    rows = []
    for j, n in enumerate(design.param_names):
        r_med = float(np.median(resid[:, j]))
        rob_med = float(np.nanmedian(robust[:, j]))
        noise_med = float(np.nanmedian(noise[:, j]))
        rows.append({"parameter": n, "truth": float(truth[j]), "design_point": float(design.b[j]),
                     "mc_mean": float(est[:, j].mean()), "mc_std": float(mc[j]),
                     "bias_in_mc_std": float((est[:, j].mean() - truth[j]) / mc[j]),
                     "predicted_std": float(pred[j]), "ratio_predicted": float(mc[j] / pred[j]),
                     "residual_std_median": r_med, "ratio_residual": float(mc[j] / r_med),
                     "robust_std_median": rob_med, "ratio_robust": float(mc[j] / rob_med),
                     "noise_std_median": noise_med, "ratio_noise": float(mc[j] / noise_med),
                     "ci95_covers_truth": float(np.mean(np.array(cover)[:, j])),
                     "robust_noise_only_median": None if quiet is None else float(quiet[j]),
                     "ratio_robust_noise_only": None if quiet is None else float(mc[j] / quiet[j]),
                     "noise_std_noise_only_median": None if quiet is None else float(quiet_noise[j]),
                     "ratio_noise_noise_only": None if quiet is None else float(mc[j] / quiet_noise[j])})
    return {"kind": kind, "seeds": seeds, "at_truth": at_truth, "design_status": design.status,
            "robust_reported": used, "noise_only_seeds": n_noise_only if quiet is not None else 0,
            "design_s": design_s, "fits_s": fits_s, "fits_converged": ok, "rows": rows}


def table(results: list[dict]) -> str:
    lines = ["| rig | parameter | truth | design point | MC mean | bias / MC std | MC std | pred. std | "
             "MC / pred. | resid. std (median) | MC / resid. | robust std (median) | MC / robust | "
             "noise std (median) | MC / noise | robust reported | ci95 covers truth |", "|---" * 17 + "|"]
    for res in results:
        for r in res["rows"]:
            def mark(x: float) -> str:
                return f"{x:.2f}" + ("" if abs(x - 1) <= TARGET else " (miss)")
            lines.append(f"| {res['kind']} ({res['seeds']} seeds) | {r['parameter']} | {r['truth']:.6g} | "
                         f"{r['design_point']:.6g} | {r['mc_mean']:.6g} | {r['bias_in_mc_std']:+.1f} | "
                         f"{r['mc_std']:.3g} | {r['predicted_std']:.3g} | {mark(r['ratio_predicted'])} | "
                         f"{r['residual_std_median']:.3g} | {mark(r['ratio_residual'])} | "
                         f"{r['robust_std_median']:.3g} | {mark(r['ratio_robust'])} | "
                         f"{r['noise_std_median']:.3g} | {mark(r['ratio_noise'])} | "
                         f"{res['robust_reported']}/{res['seeds']} | {100 * r['ci95_covers_truth']:.0f} % |")
            if r.get("robust_noise_only_median") is not None:
                lines.append(f"| {res['kind']} | {r['parameter']}: without the model error "
                             f"({res['noise_only_seeds']} seeds) | | | | | | | | | | "
                             f"{r['robust_noise_only_median']:.3g} | "
                             f"{mark(r['ratio_robust_noise_only'])} | "
                             f"{r['noise_std_noise_only_median']:.3g} | "
                             f"{mark(r['ratio_noise_noise_only'])} | | |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=100)
    ap.add_argument("--only", default=",".join(KINDS))
    ap.add_argument("--design-at-truth", action="store_true",
                    help="design at the simulator truth: best case, a real rig has no truth")
    ap.add_argument("--json", default=None, help="also write the results to this file")
    ap.add_argument("--noise-only", type=int, default=0, metavar="K",
                    help="also the robust and noise std of K refits without the model error "
                         "(evaluation only)")
    a = ap.parse_args()
    results = []
    for kind in a.only.split(","):
        res = calibrate(kind, a.seeds, a.design_at_truth, a.noise_only)
        results.append(res)
        print(f"{res['fits_converged']}/{res['seeds']} fits converged, {res['fits_s']:.0f} s of fits",
              flush=True)
        print(table([res]), flush=True)
    print("\n" + table(results))
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
