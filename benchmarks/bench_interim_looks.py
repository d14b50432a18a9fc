"""Family-wise false rejection of the press model-uncertainty test over interim looks (issue 21, item 4).

Plant-truth arrays (the generator of ``tests/test_press_analysis.py`` and ``bench_online_seeds.py
--plant-truth``: the simulator's physics without devices, forces within 20 N of the setpoints, the
config's sigmas over sqrt(n_samples)); for every seed the offline test runs on the first n series for
every look n of the plan, and alpha_min per model and split is kept. Any alpha-spending rule is then a
threshold on those numbers, so one pass gives the per-look and family-wise rejection rate of every rule:
"none" (each look at the full level, today's online verdict), Bonferroni over the looks, and the
Lan-DeMets O'Brien-Fleming and Pocock spending functions
(:func:`identification.uncertainty_test.look_levels`).

    nice .venv/bin/python benchmarks/bench_interim_looks.py --seeds 200 --first 4 [--json out.json]
    nice .venv/bin/python benchmarks/bench_interim_looks.py --load out.json     # tables only

M3 is the model the full experiment keeps (the paper's answer); its rejection at any look is a false
rejection. M1 and M2 rows give the power that is left.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import tomllib
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from identification.online_press import model_verdict  # noqa: E402
from identification.uncertainty_test import SPENDING_RULES, look_levels  # noqa: E402
from simulators.physics.press import PressTruth, simulate_staircase, staircase_forces  # noqa: E402

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "press-sim.toml"


def one_seed(seed: int, first: int, base: dict) -> dict:
    """alpha_min[model][look][split] of one plant-truth replicate."""
    names = tuple(base["devices"]["sensors"])
    n_series = base["plan"]["n_series"]
    sig = np.array([base["devices"]["sensors"][n]["sigma"] for n in names])
    sig = sig / np.sqrt(base["plan"]["n_samples"])
    rng = np.random.default_rng(seed)
    qd = staircase_forces()
    q = np.clip(qd + 20 * rng.standard_normal((n_series, qd.size)), 0, None)
    z = simulate_staircase(PressTruth(), q, sig, rng)
    out: dict = {}
    for n in range(first, n_series + 1):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            v = model_verdict(z[:n], q[:n], qd, sig, names)
        for m, mv in v.models.items():
            out.setdefault(m, []).append([None if not np.isfinite(a) else float(a) for a in mv.alpha_min])
        n_warn = sum(issubclass(w.category, RuntimeWarning) for w in caught)
        out.setdefault("runtime_warnings", []).append(n_warn)
    return out


def table(rows: list[dict], looks: list[int], n_final: int, tol: float) -> str:
    """Rejection rate per look and family-wise over all looks, per rule and model."""
    n_splits = len(rows[0]["M3"][0])
    fr = np.array(looks, float) / n_final
    lines = [f"{len(rows)} plant-truth series sets, looks after series {looks}, tol {tol:g} over "
             f"{n_splits} splits (Bonferroni inside a look)",
             "| rule | model | " + " | ".join(f"n={n}" for n in looks) + " | any look (FWER) | final |",
             "|---|---|" + "---|" * (len(looks) + 2)]
    for rule in SPENDING_RULES:
        lv = look_levels(fr, tol, rule)
        for m in ("M3", "M2", "M1"):
            a = np.array([[[np.nan if x is None else x for x in look] for look in r[m]] for r in rows])
            rej = np.nanmin(np.where(np.isnan(a), 1.0, a), axis=2) < (lv / n_splits)[None, :]
            per = rej.mean(axis=0)
            lines.append(f"| {rule} | {m} | " + " | ".join(f"{100 * x:.1f}" for x in per)
                         + f" | **{100 * rej.any(axis=1).mean():.1f}** | {100 * per[-1]:.1f} |")
    lines.append("levels per look (family, before / n_splits): " + "; ".join(
        f"{r}: " + ", ".join(f"{x:.3g}" for x in look_levels(fr, tol, r)) for r in SPENDING_RULES))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--first", type=int, default=4, help="first look (series count)")
    ap.add_argument("--tol", type=float, default=0.05)
    ap.add_argument("--json", dest="json_out", default=None)
    ap.add_argument("--load", default=None, help="print the tables of a saved --json file")
    args = ap.parse_args()
    base = tomllib.loads(CONFIG.read_text())
    n_final = base["plan"]["n_series"]
    if args.load:
        saved = json.loads(Path(args.load).read_text())
        rows, looks = saved["rows"], saved["looks"]
    else:
        looks = list(range(args.first, n_final + 1))
        rows = []
        t0 = time.perf_counter()
        for seed in range(args.seeds):
            rows.append(one_seed(seed, args.first, base))
            if args.json_out and (seed + 1) % 10 == 0:
                Path(args.json_out).write_text(json.dumps({"looks": looks, "rows": rows}))
                print(f"{seed + 1} seeds, {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
        if args.json_out:
            Path(args.json_out).write_text(json.dumps({"looks": looks, "rows": rows}))
    print(table(rows, looks, n_final, args.tol))
    print(f"RuntimeWarnings during the fits: {sum(sum(r['runtime_warnings']) for r in rows)}")


if __name__ == "__main__":
    main()
