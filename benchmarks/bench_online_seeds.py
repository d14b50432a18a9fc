"""Early stopping of the simulated press over noise seeds: series and minutes saved, and the verdict kept?

For every simulator seed, two real runs of ``configs/press-sim.toml`` on loopback:

* the fixed plan (the config as shipped, [online] off: README command 1 with another seed);
* the same plan with the online identifier and a stop rule ([online] stop_rule, by default "both": the M1
  confidence target AND the model-uncertainty verdict unchanged for ``--settle`` consecutive series),
  capped by the plan's series.

Both sessions then go through the offline analysis exactly as ``hil analyze`` runs it
(``daq.analysis.analyze_session``). Reported per seed: series used, acquisition time (first staircase step
to ``plan_end``; preconditioning excluded, the same in both) and what it saved, the stop reason, and the
offline verdict of both sessions as rejected splits per model (M1/M2/M3 out of 4). "paper" means M1
rejected, M2 rejected, M3 kept (the paper's pattern).

    .venv/bin/python benchmarks/bench_online_seeds.py [--seeds 1 2 3 4 5] [--rule both] [--target 0.05]
        [--min-series 4] [--settle 2] [--n-samples N] [--json out.json]

Sessions go to a temporary store (``--store PATH`` keeps them).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import sys
import tempfile
import time
from pathlib import Path

ATTEMPTS = 3

def _acquisition_s(store, sid: str) -> float:
    """Seconds from the first staircase step to plan_end (preconditioning excluded)."""
    ev = store.events(sid)
    t0 = next(e.t for e in ev if e.stream == "press.plan" and e.kind == "step")
    t1 = next(e.t for e in reversed(ev) if e.stream == "press.plan" and e.kind == "plan_end")
    return t1 - t0


def _offline(store, sid: str) -> dict:
    """The ``hil analyze`` verdict of a session: rejected splits per model and the model verdicts."""
    from daq.analysis import analyze_session

    _, result, _, _ = analyze_session(store, sid)
    d = result.to_dict()
    splits = {m: sum(t.reject for t in r.test.tests) for m, r in result.models.items()}
    n_tests = len(next(iter(result.models.values())).test.tests)
    verdicts = d["verdicts"]
    paper = verdicts == {"M1": "reject", "M2": "reject", "M3": "keep"}
    m3 = result.models["M3"].fit_all
    return {"verdicts": verdicts, "rejected_splits": splits, "n_tests": n_tests, "paper": paper,
            "m3_k": m3.p.tolist(), "m3_std": m3.std_errors.tolist()}


def _run(cfg: dict, store_path: Path) -> dict:
    from daq.lifecycle import run
    from daq.store import SessionStore

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
    with SessionStore(store_path) as store:
        out = {"session": res.session_id, "series": res.summary.get("series", cfg["plan"]["n_series"]),
               "acquisition_s": _acquisition_s(store, res.session_id), "wall_s": wall,
               "stop_reason": res.summary.get("stop_reason"),
               "online_wait_s": res.summary.get("online_wait_s"),
               "aborted_attempts": aborted, **_offline(store, res.session_id)}
    return out


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
    ap.add_argument("--n-samples", type=int, default=None, help="readings per setpoint (default: config)")
    ap.add_argument("--n-series", type=int, default=None, help="fixed plan's series (default: config)")
    ap.add_argument("--steps-up", type=int, default=None, help="staircase steps (smoke tests)")
    ap.add_argument("--store", default=None)
    ap.add_argument("--json", dest="json_out", default=None)
    args = ap.parse_args()

    from daq.config import load_config

    base = copy.deepcopy(load_config("configs/press-sim.toml"))
    for key, value in (("n_samples", args.n_samples), ("n_series", args.n_series),
                       ("n_steps_up", args.steps_up)):
        if value:
            base["plan"][key] = value
    n_fixed = base["plan"]["n_series"]
    tmp = tempfile.TemporaryDirectory()
    store_path = Path(args.store) if args.store else Path(tmp.name) / "seeds.sqlite"
    rows = []
    for seed in args.seeds:
        fixed_cfg = copy.deepcopy(base)
        fixed_cfg["simulator"]["seed"] = seed
        stop_cfg = copy.deepcopy(fixed_cfg)
        stop_cfg["online"] = {"enabled": True, "stop_rule": args.rule, "target_rel_std": args.target,
                              "min_series": args.min_series, "settle_series": args.settle,
                              "wait_timeout": 120.0}
        stopped = _run(stop_cfg, store_path)
        fixed = _run(fixed_cfg, store_path)
        row = {"seed": seed, "stopped": stopped, "fixed": fixed}
        rows.append(row)
        print(json.dumps({"seed": seed, "series": stopped["series"],
                          "acq_s": round(stopped["acquisition_s"], 1),
                          "fixed_acq_s": round(fixed["acquisition_s"], 1), "stopped": _cell(stopped),
                          "fixed": _cell(fixed), "reason": stopped["stop_reason"]}), flush=True)
    print(f"\nrule {args.rule}: M1 rel. std < {args.target:g} (inflated by RSS/dof), verdict unchanged for "
          f"{args.settle} series, from series {args.min_series}; budget {n_fixed} series; "
          f"n_samples {base['plan']['n_samples']}")
    print("offline verdict = rejected splits M1/M2/M3 of 4 (hil analyze); paper = M1, M2 rejected, M3 kept\n")
    print("| seed | series used (fixed) | acquisition min stopped / fixed | saved min | online wait s "
          "| offline verdict stopped | offline verdict fixed | M3 k5, k7 stopped [1e8 N/m] |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        s, f = r["stopped"], r["fixed"]
        k = ", ".join(f"{x / 1e8:.4f}" for x in s["m3_k"])
        print(f"| {r['seed']} | {s['series']} ({f['series']}) | {s['acquisition_s'] / 60:.2f} / "
              f"{f['acquisition_s'] / 60:.2f} | {(f['acquisition_s'] - s['acquisition_s']) / 60:.2f} | "
              f"{s['online_wait_s'] or 0:.1f} | {_cell(s)} | {_cell(f)} | {k} |")
    n = len(rows)
    used = sum(r["stopped"]["series"] for r in rows) / n
    saved = sum(r["fixed"]["acquisition_s"] - r["stopped"]["acquisition_s"] for r in rows) / n / 60
    print(f"\nmean series used {used:.1f} of {n_fixed}; mean saved {saved:.2f} min; paper pattern kept on "
          f"the shortened session {sum(r['stopped']['paper'] for r in rows)}/{n} "
          f"(fixed plan {sum(r['fixed']['paper'] for r in rows)}/{n})")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"args": vars(args), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
