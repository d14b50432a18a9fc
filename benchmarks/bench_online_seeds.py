"""Early stopping of the simulated press over noise seeds: series and minutes saved, and the verdict kept?

For every simulator seed, one real run of ``configs/press-sim.toml`` on loopback (the fixed plan, 10 series)
with the online identifier and the stop rule in dry-run mode ([online] dry_run = true): the rule is
evaluated live after every series exactly as in a stopping run (the M1 confidence target AND the
model-uncertainty verdict unchanged for ``--settle`` consecutive series with a model kept, by default)
and the series where it fires is recorded, but the plan goes on. Since the plan never looks ahead, the
session a stopping run would have recorded is the first n* series of this one (same noise, same forces),
so one run gives both sessions: the shortened one (first n* series) and the fixed-plan one (all series).

Both go through the offline press analysis as ``hil analyze`` runs it (the rig's ``analyze`` on the
session's arrays; ``daq.rigs.analysis.analyze_session`` for the full session). Reported per seed: series used,
acquisition time of the series (first step to last measurement; the stopped one includes its waits for
the online verdict, the fixed one has none) and the minutes saved, and the offline verdict of both
sessions as rejected splits per model (M1/M2/M3 of 4); "paper": M1 rejected, M2 rejected, M3 kept.

    .venv/bin/python benchmarks/bench_online_seeds.py [--seeds 1 2 3 4 5] [--rule both] [--target 0.05]
        [--min-series 4] [--settle 2] [--verdict-from 4] [--n-samples N] [--json out.json]

Sessions go to a temporary store (``--store PATH`` keeps them).

``--plant-truth N`` instead applies the same rule to N noise seeds of plant-truth arrays (the generator of
``tests/test_press_analysis.py``: the simulator's physics without devices, forces within 20 N of the
setpoints, the config's sigmas over sqrt(n_samples)): no sessions, only the math, for more seeds.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path

ATTEMPTS = 3


def _series_times(store, sid: str) -> dict[int, tuple[float, float]]:
    """series -> (time of its first step event, time of its last measurement event)."""
    out: dict[int, list[float]] = {}
    for e in store.events(sid):
        if e.stream == "press.plan" and e.kind in ("step", "measurement"):
            t = out.setdefault(int(e.body["series"]), [e.t, e.t])
            t[0], t[1] = min(t[0], e.t), max(t[1], e.t)
    return {k: (v[0], v[1]) for k, v in out.items()}


def _verdict(result) -> dict:
    splits = {m: sum(t.reject for t in r.test.tests) for m, r in result.models.items()}
    verdicts = result.to_dict()["verdicts"]
    m3 = result.models["M3"].fit_all
    return {"verdicts": verdicts, "rejected_splits": splits,
            "paper": verdicts == {"M1": "reject", "M2": "reject", "M3": "keep"},
            "m3_k": m3.p.tolist(), "m3_std": m3.std_errors.tolist()}


def _run_seed(cfg: dict, store_path: Path) -> dict:
    from daq.config.load import parse
    from daq.rigs.analysis import analyze_session
    from daq.rigs.press.rig import RIG
    from daq.run.lifecycle import run
    from daq.store.read_write import SessionStore

    aborted = []
    for _ in range(ATTEMPTS):  # a starved loaded machine can lose a device (the run aborts safely): rerun
        t = time.perf_counter()
        res = asyncio.run(run(cfg, str(store_path), show_progress=False, handle_sigint=False))
        wall = time.perf_counter() - t
        if res.status == "complete":
            break
        aborted.append(res.reason)
        print(f"run aborted ({res.reason}); again", file=sys.stderr, flush=True)
    else:
        raise SystemExit(f"{ATTEMPTS} runs aborted: {aborted}")
    n_fixed = cfg["plan"]["n_series"]
    dry = res.summary.get("dry_run_stop")
    n_stop = int(dry["series"]) if dry else n_fixed
    with SessionStore(store_path) as store:
        _, full, _, _ = analyze_session(store, res.session_id)
        arr = RIG.arrays(store, res.session_id)
        scfg = parse(store.get_session(res.session_id).config, RIG.schema)  # as hil analyze parses it
        short = RIG.analyze(dataclasses.replace(arr, z=arr.z[:n_stop], q=arr.q[:n_stop]), scfg)
        times = _series_times(store, res.session_id)
    durations = [times[k][1] - times[k][0] for k in sorted(times)]
    t0 = times[0][0]
    stopped_s = (times[n_stop - 1][1] - t0) if n_stop <= len(times) else float("nan")
    return {"session": res.session_id, "n_stop": n_stop, "n_fixed": n_fixed, "reason": dry and dry["reason"],
            "stopped_acq_s": stopped_s, "fixed_acq_s": sum(durations), "saved_s": sum(durations[n_stop:]),
            "online_wait_s": res.summary.get("online_wait_s"), "wall_s": wall, "aborted_attempts": aborted,
            "stopped": _verdict(short), "fixed": _verdict(full)}


def _plant_truth(seed: int, base: dict, args) -> dict:
    """The rule on one plant-truth replicate: where it fires, and the verdicts there and at the end."""
    import numpy as np

    from daq.rigs.press.online import StopRule, verdict_options
    from identification.analyses.online_press import estimate_stiffness, model_verdict
    from simulators.physics.press import PressTruth, simulate_staircase, staircase_forces

    n_fixed = base["plan"]["n_series"]
    names = tuple(base["devices"]["sensors"])
    sig = np.array([base["devices"]["sensors"][n]["sigma"] for n in names])
    sig = sig / np.sqrt(base["plan"]["n_samples"])
    rng = np.random.default_rng(seed)
    qd = staircase_forces()
    q = np.clip(qd + 20 * rng.standard_normal((n_fixed, qd.size)), 0, None)
    z = simulate_staircase(PressTruth(), q, sig, rng)
    rule = StopRule(args.rule, args.target, args.min_series, args.settle)
    opts = verdict_options(base.get("analysis") or {})
    patterns, verdicts, n_stop = [], {}, n_fixed
    for n in range(1, n_fixed + 1):
        body = estimate_stiffness(z[:n], q[:n], qd, sig, names).to_dict()
        if n >= args.verdict_from:
            v = model_verdict(z[:n], q[:n], qd, sig, names, **opts)
            verdicts[n] = v
            body["verdict"] = v.to_dict()
        patterns.append(verdicts[n].rejected if n in verdicts else None)
        if rule.reason(body, patterns):
            n_stop = n
            break
    if n_fixed not in verdicts:
        verdicts[n_fixed] = model_verdict(z, q, qd, sig, names, **opts)

    def cell(v) -> dict:
        rej = {m: int(mv.rejected_splits.sum()) for m, mv in v.models.items()}
        return {"rejected_splits": rej, "paper": list(v.rejected) == ["M1", "M2"]}

    return {"seed": seed, "n_stop": n_stop, "stopped": cell(verdicts[n_stop]),
            "fixed": cell(verdicts[n_fixed])}


def _plant_truth_report(rows: list[dict], args, n_fixed: int) -> None:
    n = len(rows)
    hist = {k: sum(r["n_stop"] == k for r in rows) for k in sorted({r["n_stop"] for r in rows})}
    print(f"plant truth, {n} seeds, rule {args.rule} (target {args.target:g}, settle {args.settle}, "
          f"stop from series {args.min_series}, verdicts from {args.verdict_from})")
    mean = sum(r["n_stop"] for r in rows) / n
    print(f"stopped after n series (n: seeds) {hist}; mean {mean:.2f} of {n_fixed}")
    print(f"paper pattern at the stop {sum(r['stopped']['paper'] for r in rows)}/{n}, "
          f"with all {n_fixed} series {sum(r['fixed']['paper'] for r in rows)}/{n}")
    for r in rows:
        if not r["stopped"]["paper"]:
            print(f"  seed {r['seed']}: stopped at {r['n_stop']}, rejected splits "
                  f"{r['stopped']['rejected_splits']}")


def _cell(r: dict) -> str:
    s = r["rejected_splits"]
    return f"{s['M1']}/{s['M2']}/{s['M3']} {'paper' if r['paper'] else 'NOT paper'}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    ap.add_argument("--rule", choices=("target", "verdict", "both"), default="both")
    ap.add_argument("--target", type=float, default=0.05, help="M1's inflated rel. std target")
    ap.add_argument("--min-series", type=int, default=4)
    ap.add_argument("--settle", type=int, default=2)
    ap.add_argument("--verdict-from", type=int, default=4, help="first series count given a verdict")
    ap.add_argument("--n-samples", type=int, default=None, help="readings per setpoint (default: config)")
    ap.add_argument("--n-series", type=int, default=None, help="fixed plan's series (default: config)")
    ap.add_argument("--steps-up", type=int, default=None, help="staircase steps (smoke tests)")
    ap.add_argument("--store", default=None)
    ap.add_argument("--json", dest="json_out", default=None)
    ap.add_argument("--plant-truth", type=int, default=0, metavar="N", help="N plant-truth seeds only")
    args = ap.parse_args()

    from daq.rigs.config import load_config

    base = copy.deepcopy(load_config("configs/press-sim.toml"))
    for key, value in (("n_samples", args.n_samples), ("n_series", args.n_series),
                       ("n_steps_up", args.steps_up)):
        if value:
            base["plan"][key] = value
    base["online"] = {"enabled": True, "stop_rule": args.rule, "target_rel_std": args.target,
                      "min_series": args.min_series, "settle_series": args.settle,
                      "verdict_from": args.verdict_from, "dry_run": True, "wait_timeout": 600.0}
    n_fixed = base["plan"]["n_series"]
    if args.plant_truth:
        rows = [_plant_truth(seed, base, args) for seed in range(args.plant_truth)]
        _plant_truth_report(rows, args, n_fixed)
        return
    tmp = tempfile.TemporaryDirectory()
    store_path = Path(args.store) if args.store else Path(tmp.name) / "seeds.sqlite"
    rows = []
    for seed in args.seeds:
        cfg = copy.deepcopy(base)
        cfg["simulator"]["seed"] = seed
        r = {"seed": seed, **_run_seed(cfg, store_path)}
        rows.append(r)
        print(json.dumps({k: r[k] for k in ("seed", "n_stop", "stopped_acq_s", "fixed_acq_s", "reason")}
                         | {"stopped": _cell(r["stopped"]), "fixed": _cell(r["fixed"])}), flush=True)
    print(f"\nrule {args.rule}: M1 rel. std < {args.target:g} (inflated by RSS/dof); verdict unchanged for "
          f"{args.settle} series with a model kept; verdicts from series {args.verdict_from}, stop from "
          f"series {args.min_series}; budget {n_fixed} series; n_samples {base['plan']['n_samples']}")
    print("offline verdict: rejected splits M1/M2/M3 of 4 (hil analyze); paper = M1, M2 rejected, M3 kept\n")
    print("| seed | series used / fixed | acquisition min stopped / fixed | saved min "
          "| offline verdict, shortened | offline verdict, fixed plan | M3 k5, k7 shortened [1e8 N/m] |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        k = ", ".join(f"{x / 1e8:.4f}" for x in r["stopped"]["m3_k"])
        print(f"| {r['seed']} | {r['n_stop']} / {r['n_fixed']} | {r['stopped_acq_s'] / 60:.2f} / "
              f"{r['fixed_acq_s'] / 60:.2f} | {r['saved_s'] / 60:.2f} | {_cell(r['stopped'])} "
              f"| {_cell(r['fixed'])} | {k} |")
    n = len(rows)
    paper_short, paper_fixed = (sum(r[k]["paper"] for r in rows) for k in ("stopped", "fixed"))
    print(f"\nmean series used {sum(r['n_stop'] for r in rows) / n:.1f} of {n_fixed}; mean saved "
          f"{sum(r['saved_s'] for r in rows) / n / 60:.2f} min; paper pattern on the shortened session "
          f"{paper_short}/{n} (fixed plan {paper_fixed}/{n})")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"args": vars(args), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
