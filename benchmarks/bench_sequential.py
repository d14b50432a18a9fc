"""Sequential experiment design against repeating the initial design (issue 10), Monte Carlo over noise seeds.

Both strategies start from the same adjoint design, made at a deliberately wrong prior (default: the
oscillator at c2 = 700 N/m, truth 1100 N/m). After every run the parameters are refitted over all runs so
far (first fit: grid scan + Levenberg-Marquardt from the prior, later fits warm-started); the loop stops
when every relative std is <= the target or after ``--max-runs``.

* repeat:     run the initial input again and again;
* sequential: re-solve the adjoint design at the current estimate (``identification.design.sequential_design.
              redesign``: from the previous input, and with ``--start both`` also from F0, the better kept)
              and run that.

Data: the simulator truth (``simulators/physics``, with the effects the model lacks: Coulomb friction,
force lag, quantisation) at the drive cycle of the config, noise of run i of seed s from
``default_rng([s, i])`` - the same draws for both strategies; ``--data model`` uses the identification
model plus Gaussian noise of the design's sigma instead. Side by side, the cost of one redesign: the
warm-started one against the plain ``optimize_input`` from F0 at the same estimate (first redesign of
every seed).

    .venv/bin/python benchmarks/bench_sequential.py [--plant oscillator] [--prior c2=700] [--seeds 10]
        [--target 1.3e-5] [--max-runs 12] [--data physics|model] [--start both|warm] [--json]
    .venv/bin/python benchmarks/bench_sequential.py --latency 8 [--plant pendulum]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from daq.rigs.adjoint.design import lagged_mean  # noqa: E402
from daq.rigs.config import load_config  # noqa: E402
from identification.analyses.adjoint_plants import design_problem, fit_records, reference_inputs  # noqa: E402
from identification.design.adjoint_design import evaluate, optimize_input, simulate_output  # noqa: E402
from identification.design.sequential_design import (  # noqa: E402
    Record,
    earlier_fisher,
    fit_runs,
    predicted_std,
    redesign,
    stop_reason,
)
from simulators.physics import oscillator as osc_sim  # noqa: E402
from simulators.physics import pendulum as pend_sim  # noqa: E402

PHYSICS = {"oscillator": osc_sim, "pendulum": pend_sim}
TRUTH = {"oscillator": osc_sim.OscillatorTruth, "pendulum": pend_sim.PendulumTruth}


class Setup:
    """Truth, design spec, drive cycle and fit settings of a shipped config. The design point (``prior``) is
    the config's ``[adjoint.nominal]`` with ``prior`` over it; ``at_truth``: the simulator truth instead
    (best case). The truth (``values``, ``b_truth``, ``problem_truth``) only simulates data and evaluates."""

    def __init__(self, plant: str, prior: dict[str, float], data: str, at_truth: bool = False):
        cfg = load_config(ROOT / "configs" / f"{plant}-sim.toml")
        self.plant, self.data = plant, data
        self.truth = TRUTH[plant].from_config(cfg["simulator"]["truth"])
        self.spec = dict(cfg["adjoint"])
        self.values = self.truth.model_values()
        nominal = {k: float(v) for k, v in cfg["adjoint"]["nominal"].items()}
        self.prior = {**nominal, **(self.values if at_truth else {}), **prior}
        self.fit_cfg = dict(cfg.get("fit", {}))
        self.cycle = float(cfg["simulator"]["drive"]["cycle_time"])
        self.reps = int(round(self.spec["dt"] / self.cycle))
        self.input_lag = float(cfg.get("fit", {}).get("input_lag", 0.0))
        self.fit_start = float(cfg.get("fit", {}).get("start", 1.0))
        self.problem_truth = design_problem(plant, self.values, self.spec)
        self.names = list(self.problem_truth.model.param_names)
        self.b_truth = self.problem_truth.b.copy()

    def prior_b(self) -> np.ndarray:
        """The design point's values of the identified parameters."""
        return self.problem({}).b

    def problem(self, values: dict[str, float]):
        return design_problem(self.plant, {**self.prior, **values}, self.spec)

    def design_kw(self) -> dict:
        return {k: self.spec[k] for k in ("method", "max_iter", "rounds", "end_tol") if k in self.spec}

    def record(self, u: np.ndarray, seed: int, run: int, model) -> Record:
        """One run of the held input ``u`` (design grid) sampled at the drive cycle, with fresh noise."""
        rng = np.random.default_rng([seed, run])
        force = np.repeat(np.asarray(u, float).ravel(), self.reps)
        if self.data == "physics":
            d = PHYSICS[self.plant].simulate(self.truth, force, self.cycle, rng)
            y = d[PHYSICS[self.plant].OUTPUT]
        else:
            _, y, _ = simulate_output(model, self.b_truth, force, self.cycle, 1)
            y = y[:, 0] + rng.normal(0.0, float(self.spec["sigma"]), y.shape[0])
        return Record(lagged_mean(force, self.input_lag, self.cycle), y, self.cycle)


def campaign(s: Setup, u0: np.ndarray, seed: int, target: float, max_runs: int, sequential: bool) -> dict:
    """Runs until the target (or the budget); returns what it took."""
    pb0 = s.problem({})
    model = pb0.model
    u = u0
    runs: list[Record] = []
    est = None
    rows = []
    design_s = cold_s = 0.0
    cold_std = warm_std = None
    while True:
        runs.append(s.record(u, seed, len(runs), model))
        start = pb0.b * s.fit_start if est is None else est.b
        est = fit_runs(model, runs, start, scan=est is None)
        rows.append({"run": len(runs), "values": est.b.tolist(), "rel_std": est.rel_std.tolist()})
        reason = stop_reason(s.names, est.rel_std.tolist(), target, len(runs), max_runs)
        if reason is not None:
            break
        if sequential:
            pb = s.problem(dict(zip(s.names, est.b.tolist(), strict=True)))
            t0 = time.perf_counter()
            f0 = reference_inputs(pb, s.spec.get("start", 0.5))["F0"] if s.both else None
            res = redesign(pb, u, also_from=f0, **s.design_kw())
            dt = time.perf_counter() - t0
            design_s += dt
            if len(runs) == 1:  # side by side: the plain library call from F0 at the same estimate
                t0 = time.perf_counter()
                f0 = reference_inputs(pb, s.spec.get("start", 0.5))["F0"]
                cold = optimize_input(pb, f0, **s.design_kw())
                cold_s = time.perf_counter() - t0
                cold_std = predicted_std(s.problem_truth, cold.u).tolist()
                warm_std = predicted_std(s.problem_truth, res.u).tolist()
                warm_first_s = dt
            u = res.u
    out = {"seed": seed, "runs": len(runs), "excitation_s": len(runs) * pb0.t_f, "reason": reason,
           "estimate": est.b.tolist(), "rel_std": est.rel_std.tolist(), "error": (est.b - s.b_truth).tolist(),
           "trace": rows, "design_s": design_s}
    if cold_std is not None:
        out.update(first_redesign_s=warm_first_s, cold_design_s=cold_s, first_redesign_std=warm_std,
                   cold_design_std=cold_std)
    return out


def _fit(s: Setup, runs: list[Record], point: dict[str, float], nuisance: dict[str, float], scan: bool):
    """The rig's fit over ``runs`` (``fit_records``: the design's parameters and ``[fit.nuisance]``), started
    at ``point`` (a scan around it when ``scan``, as the online identifier's first fit)."""
    return fit_records(s.plant, point, s.names, nuisance, runs, float(s.spec["sigma"]), start=1.0, scan=scan,
                       friction_eps=s.fit_cfg.get("friction_speed_eps"))


def two_runs(s: Setup, seeds: int, per_seed: bool = False) -> dict:
    """Run 1 designed at the design point, run 2 redesigned at the run-1 estimate: the run-alone redesign
    (the new run's own information) against the accumulated one (all runs together). Predicted std after
    both runs (design model, sigma of the design, at the run-1 estimate and at the truth) and the Monte Carlo
    spread of the two-run estimates over ``seeds`` noise draws (the same draws for both designs).

    The second inputs are designed once, at seed 0's run-1 estimate (other seeds' run-1 estimates differ
    by a few 1e-5 relative; ``per_seed`` redesigns at every seed's own, much slower); every seed refits its
    own data: run 1 from the design point with the scan, both runs warm-started from its run-1 estimate."""
    pb0 = s.problem({})
    kw = s.design_kw()
    start = float(s.spec.get("start", 0.5))
    t0 = time.perf_counter()
    u1 = optimize_input(pb0, reference_inputs(pb0, start)["F0"], **kw).u
    print(f"run 1 designed at {dict(zip(s.names, pb0.b.tolist(), strict=True))}: "
          f"{time.perf_counter() - t0:.0f} s", flush=True)
    nuisance = {n: float(s.prior.get(n, v)) for n, v in s.fit_cfg.get("nuisance", {}).items()}
    point = {**s.prior, **{n: float(v) for n, v in zip(s.names, s.prior_b(), strict=True)}}

    def run1(seed: int):
        r = s.record(u1, seed, 0, pb0.model)
        f = _fit(s, [r], point, nuisance, scan=True)
        return r, f

    def designs(fit) -> dict[str, np.ndarray]:
        est = dict(zip(fit.names, fit.estimate.tolist(), strict=True))
        pb = s.problem({n: est[n] for n in s.names})
        f0 = reference_inputs(pb, start)["F0"]
        alone = redesign(pb, u1, also_from=f0, **kw)
        acc = redesign(pb, u1, also_from=f0, earlier=[u1], **kw)  # the rig's (from_alone)
        held = earlier_fisher(pb, [u1])
        crit = {k: evaluate(replace(pb, prior_fisher=held), r.u, gradient=False).info_cost
                for k, r in (("alone", alone), ("joint", acc))}
        return {"pb": pb, "run-alone": alone.u, "accumulated": acc.u, "crit": crit,
                "acc_is_joint": bool(np.any(acc.u != alone.u))}

    t0 = time.perf_counter()
    ref = designs(run1(0)[1])
    print(f"redesigns at seed 0's run-1 estimate {ref['pb'].b.tolist()}: {time.perf_counter() - t0:.0f} s; "
          f"joint criterion (-log det of the scaled joint information) run-alone {ref['crit']['alone']:.4f}, "
          f"accumulated {ref['crit']['joint']:.4f}"
          f"{'' if ref['acc_is_joint'] else ' (the run-alone design kept: no better joint optimum found)'}",
          flush=True)
    names = ("run-alone", "accumulated")
    pred = {n: {"at_estimate": predicted_std(ref["pb"], ref[n], earlier=[u1]).tolist(),
                "at_truth": predicted_std(s.problem_truth, ref[n], earlier=[u1]).tolist(),
                "second_run_alone_at_truth": predicted_std(s.problem_truth, ref[n]).tolist()} for n in names}
    pred["run 1 only"] = {"at_estimate": predicted_std(ref["pb"], u1).tolist(),
                          "at_truth": predicted_std(s.problem_truth, u1).tolist()}
    est: dict[str, list] = {n: [] for n in (*names, "run 1 only")}
    resid: dict[str, list] = {n: [] for n in est}
    t0 = time.perf_counter()
    for seed in range(seeds):
        r1, f1 = run1(seed)
        k = len(s.names)
        est["run 1 only"].append(f1.estimate[:k])
        resid["run 1 only"].append(f1.residual_based_std[:k])
        d = designs(f1) if per_seed and seed else ref
        warm = {**s.prior, **dict(zip(f1.names, f1.estimate.tolist(), strict=True))}
        warm_nuisance = {n: warm[n] for n in nuisance}
        for n in names:
            r2 = s.record(d[n], seed, 1, pb0.model)
            f = _fit(s, [r1, r2], warm, warm_nuisance, scan=False)
            est[n].append(f.estimate[:k])
            resid[n].append(f.residual_based_std[:k])
    mc_s = time.perf_counter() - t0
    out = {"seeds": seeds, "per_seed": per_seed, "mc_s": mc_s, "truth": s.b_truth.tolist(),
           "design_point": pb0.b.tolist(), "redesign_point": ref["pb"].b.tolist(), "crit": ref["crit"],
           "acc_is_joint": ref["acc_is_joint"],
           "change": float(np.linalg.norm(ref["accumulated"] - ref["run-alone"])
                           / np.linalg.norm(ref["run-alone"])),
           "rows": {}}
    for n in est:
        e = np.array(est[n])
        out["rows"][n] = {"predicted_at_estimate": pred[n]["at_estimate"],
                          "predicted_at_truth": pred[n]["at_truth"],
                          "second_run_alone_at_truth": pred[n].get("second_run_alone_at_truth"),
                          "mc_std": e.std(axis=0, ddof=1).tolist(), "mc_mean": e.mean(axis=0).tolist(),
                          "resid_std_median": np.median(np.array(resid[n]), axis=0).tolist()}
    return out


def two_runs_table(plant: str, names: list[str], r: dict) -> str:
    lines = [f"| plant | after | parameter | predicted std (design model, at run-1 estimate) | predicted at "
             f"truth | MC std ({r['seeds']} seeds) | resid. std (median) | MC mean (truth) |",
             "|---" * 8 + "|"]
    for n, row in r["rows"].items():
        for j, p in enumerate(names):
            lines.append(f"| {plant} | {n if n == 'run 1 only' else 'run 1 + ' + n + ' run 2'} | {p} | "
                         f"{row['predicted_at_estimate'][j]:.4g} | {row['predicted_at_truth'][j]:.4g} | "
                         f"{row['mc_std'][j]:.4g} | {row['resid_std_median'][j]:.4g} | "
                         f"{row['mc_mean'][j]:.6g} ({r['truth'][j]:.6g}) |")
    return "\n".join(lines)


def latency(plant: str, n_runs: int) -> dict:
    """Trace-to-estimate latency on the simulated rig: ``n_runs`` runs of the config's adjoint input
    (redesign off, unreachable target) through the OPC UA drive at 20x; per run the time from the
    ``trajectory_end`` event to the published estimate, and the fit's own time (``elapsed_s``); side by
    side the plain ``fit_parameters`` (scipy least_squares) on the last run alone from the same start."""
    import asyncio
    import tempfile

    from daq.rigs import parse_config
    from daq.rigs.adjoint.design import problem_of
    from daq.run.lifecycle import run
    from daq.store.read_write import SessionStore
    from identification.design.adjoint_design import fit_parameters

    cfg = load_config(ROOT / "configs" / f"{plant}-sim.toml")
    cfg.pop("store", None)
    cfg["simulator"]["speed"] = 20.0
    with tempfile.TemporaryDirectory() as tmp:
        cfg["plan"].update(trajectory=f"{tmp}/missing.csv", design_if_missing=True)
        cfg["sequential"] = {"enabled": True, "target_rel_std": 1e-12, "max_runs": n_runs, "redesign": False}
        res = asyncio.run(run(cfg, f"{tmp}/s.sqlite", show_progress=False, handle_sigint=False))
        with SessionStore(f"{tmp}/s.sqlite") as st:
            ests = [e for e in st.events(res.session_id, kind="estimate") if e.stream == f"{plant}.online"]
            trace = st.read_stream(res.session_id, f"{plant}.trace").data.astype(float)
            n = int(st.events(res.session_id, kind="trajectory_start")[-1].body["n"])
            dt = float(st.events(res.session_id, kind="trajectory_start")[-1].body["dt"])
    lat = [e.t - e.body["trigger_t"] for e in ests]
    fit_s = [e.body["elapsed_s"] for e in ests]
    _, c = parse_config(cfg)
    pb = problem_of(c)
    last = trace[-n:]
    t0 = time.perf_counter()
    fit_parameters(pb.model, lagged_mean(last[:, 0], c.fit.input_lag, dt), dt, last[:, 2],
                   np.asarray(ests[0].body["values"]), n_sub=1)
    plain = time.perf_counter() - t0
    return {"runs": len(ests), "latency_s": lat, "fit_s": fit_s, "latency_median_s": statistics.median(lat),
            "latency_worst_s": max(lat), "latency_median_after_first_s": statistics.median(lat[1:]),
            "plain_fit_last_run_s": plain, "status": res.status}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--plant", default="oscillator", choices=sorted(PHYSICS))
    ap.add_argument("--prior", action="append", default=None,
                    help="name=value over the config's [adjoint.nominal] design point")
    ap.add_argument("--design-at-truth", action="store_true",
                    help="design at the simulator truth: best case, a real rig has no truth")
    ap.add_argument("--two-runs", action="store_true",
                    help="run 1 at the design point, run 2 redesigned at its estimate: run-alone vs "
                         "accumulated redesign, predicted and Monte Carlo std after two runs")
    ap.add_argument("--per-seed", action="store_true", help="--two-runs: redesign at every seed's estimate")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--target", type=float, default=1.3e-5, help="every relative std <= this")
    ap.add_argument("--max-runs", type=int, default=12)
    ap.add_argument("--data", choices=("physics", "model"), default="physics")
    ap.add_argument("--start", choices=("both", "warm"), default="both",
                    help="redesign from the previous input and F0, keep the better (both), or warm only")
    ap.add_argument("--latency", type=int, default=0, metavar="RUNS",
                    help="only measure trace-to-estimate latency on the simulated rig over RUNS runs")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.latency:
        r = latency(a.plant, a.latency)
        print(json.dumps(r) if a.json else
              f"{a.plant}: {r['runs']} runs, trajectory_end -> estimate median {r['latency_median_s']:.3f} "
              f"s, worst {r['latency_worst_s']:.3f} s (first run, with the grid scan: "
              f"{r['latency_s'][0]:.3f} s; median of the later, warm-started ones "
              f"{r['latency_median_after_first_s']:.3f} s); fit "
              f"alone {[round(x, 3) for x in r['fit_s']]} s; plain fit_parameters on the last run alone "
              f"{r['plain_fit_last_run_s']:.3f} s")
        return
    prior = {k: float(v) for k, v in (p.split("=", 1) for p in a.prior or [])}
    s = Setup(a.plant, prior, a.data, a.design_at_truth)
    if a.two_runs:
        print(f"{a.plant}: design point {'(simulator truth, best case) ' if a.design_at_truth else ''}"
              f"{dict(zip(s.names, s.prior_b().tolist(), strict=True))}, truth "
              f"{dict(zip(s.names, s.b_truth.tolist(), strict=True))}, data {a.data}", flush=True)
        r = two_runs(s, a.seeds, a.per_seed)
        print(f"second inputs differ by {r['change']:.3f} (relative 2-norm); Monte Carlo {r['mc_s']:.0f} s\n")
        print(two_runs_table(a.plant, s.names, r))
        if a.json:
            print(json.dumps({"plant": a.plant, "prior": s.prior, **r}))
        return
    s.both = a.start == "both"
    pb0 = s.problem({})
    t0 = time.perf_counter()
    init = optimize_input(pb0, reference_inputs(pb0, s.spec.get("start", 0.5))["F0"], **s.design_kw())
    t_init = time.perf_counter() - t0
    at_truth = predicted_std(s.problem_truth, init.u)
    best = optimize_input(s.problem_truth, reference_inputs(s.problem_truth)["F0"], **s.design_kw())
    best_std = predicted_std(s.problem_truth, best.u)
    log = sys.stderr if a.json else sys.stdout
    print(f"{a.plant}: prior {prior}, truth {dict(zip(s.names, s.b_truth.tolist(), strict=True))}, data "
          f"{a.data}, target rel. std {a.target:g}, budget {a.max_runs} runs of {pb0.t_f:g} s, "
          f"redesign start {a.start}", file=log)
    print(f"initial design at the prior: {t_init:.1f} s; predicted rel. std at the truth "
          f"{(at_truth / np.abs(s.b_truth)).tolist()} (design made at the truth: "
          f"{(best_std / np.abs(s.b_truth)).tolist()})", file=log)
    results: dict[str, list[dict]] = {"repeat": [], "sequential": []}
    for seed in range(a.seeds):
        for name in results:
            r = campaign(s, init.u, seed, a.target, a.max_runs, name == "sequential")
            results[name].append(r)
            print(f"seed {seed:2d} {name:<10} runs {r['runs']:2d}  rel. std {r['rel_std']}  error "
                  f"{r['error']}  design {r['design_s']:.1f} s", file=log)
    summary = {}
    for name, rs in results.items():
        runs = [r["runs"] for r in rs]
        reached = [r["reason"].startswith("confidence") for r in rs]
        summary[name] = {"mean_runs": statistics.fmean(runs), "median_runs": statistics.median(runs),
                         "max_runs": max(runs), "min_runs": min(runs), "reached": sum(reached),
                         "mean_excitation_s": statistics.fmean(r["excitation_s"] for r in rs),
                         "median_excitation_s": statistics.median(r["excitation_s"] for r in rs),
                         "mean_design_s": statistics.fmean(r["design_s"] for r in rs)}
    firsts = [r for r in results["sequential"] if "cold_design_s" in r]
    if firsts:
        summary["redesign"] = {
            "warm_s_median": statistics.median(r["first_redesign_s"] for r in firsts),
            "cold_s_median": statistics.median(r["cold_design_s"] for r in firsts),
            "warm_std_at_truth_median": np.median([r["first_redesign_std"] for r in firsts], axis=0).tolist(),
            "cold_std_at_truth_median": np.median([r["cold_design_std"] for r in firsts], axis=0).tolist()}
    print("\n| strategy | seeds at target | runs mean | runs median | runs min-max | excitation s mean | "
          "excitation s median | design s mean |", file=log)
    print("|---|---|---|---|---|---|---|---|", file=log)
    for name in results:
        m = summary[name]
        print(f"| {name} | {m['reached']}/{a.seeds} | {m['mean_runs']:.2f} | {m['median_runs']:g} | "
              f"{m['min_runs']}-{m['max_runs']} | {m['mean_excitation_s']:.2f} | "
              f"{m['median_excitation_s']:g} | {m['mean_design_s']:.1f} |", file=log)
    if firsts:
        r = summary["redesign"]
        how = "from the previous input and F0, better kept" if s.both else "from the previous input"
        print(f"\nfirst redesign (median over seeds; {how}): {r['warm_s_median']:.2f} s, predicted std "
              f"at the truth {r['warm_std_at_truth_median']}; plain optimize_input from F0 "
              f"{r['cold_s_median']:.2f} s, {r['cold_std_at_truth_median']}", file=log)
    if a.json:
        print(json.dumps({"plant": a.plant, "prior": prior, "target": a.target, "data": a.data,
                          "start": a.start,
                          "initial_std_at_truth": at_truth.tolist(), "best_std_at_truth": best_std.tolist(),
                          "summary": summary, "results": results}))


if __name__ == "__main__":
    main()
