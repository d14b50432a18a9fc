"""Family-wise false rejection of the press model-uncertainty test over interim looks (issue 21, item 4).

Plant-truth arrays (the generator of ``tests/test_press_analysis.py`` and ``bench_online_seeds.py
--plant-truth``: the simulator's physics without devices, forces within 20 N of the setpoints, the
config's sigmas over sqrt(n_samples)); for every seed the offline test runs on the first n series for
every look n of the plan, and alpha_min per model and split is kept. Any alpha-spending rule is then a
threshold on those numbers, so one pass gives the per-look and family-wise rejection rate of every rule:
"none" (each look at the full level, today's online verdict), Bonferroni over the looks, and the
Lan-DeMets O'Brien-Fleming and Pocock spending functions
(:func:`identification.selection.uncertainty_test.look_levels`).

    nice .venv/bin/python benchmarks/bench_interim_looks.py --seeds 200 --first 4 [--json out.json]
    nice .venv/bin/python benchmarks/bench_interim_looks.py --load out.json [--table-from 6]  # tables only
    nice .venv/bin/python benchmarks/bench_interim_looks.py --exact 200   # M1 exactly correct, looks 2..10

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

from identification.analyses.online_press import model_verdict  # noqa: E402
from identification.selection.uncertainty_test import SPENDING_RULES, look_levels  # noqa: E402
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


def exact_model(n_rep: int, looks: list[int], seed: int = 12345) -> list[dict]:
    """M1 exactly correct: data from the linkage model itself + Gaussian noise (as the FWER test of
    tests/test_uncertainty_test.py), one staircase per series; look n fits the first n series."""
    from identification.estimation.least_squares import fit_state_model
    from identification.models.press_models import PressLinkageModel
    from identification.selection.uncertainty_test import press_scenarios, run_uncertainty_test

    rng = np.random.default_rng(seed)
    sig = np.array([1.518e-5, 4.895e-6, 3.904e-6])
    m = PressLinkageModel()
    p_true = np.array([2.0e8, 1.5e8])
    qd = np.r_[np.linspace(0, 20000, 15), np.linspace(20000, 0, 15)[1:]]
    n_series = max(looks)
    splits = press_scenarios(29)
    rows = []
    for _ in range(n_rep):
        q = np.tile(qd, (n_series, 1)) * (1 + 0.01 * rng.standard_normal((n_series, 1)))
        z = m.predict(p_true, q.ravel()).reshape(n_series, 29, 3)
        z = z + rng.standard_normal(z.shape) * sig
        out = []
        for n in looks:
            def fit(idx, n=n, z=z, q=q):
                f = fit_state_model(m, z[:n, idx].reshape(-1, 3), q[:n, idx].ravel(), sig,
                                    p_true * np.array([0.8, 1.25]), omega=[1, 1, 0])
                return f.p, f.covariance

            res = run_uncertainty_test(fit, splits, tol=0.05)
            out.append([float(t.alpha_min) for t in res.tests])
        rows.append({"M1": out})
    return rows


def table(rows: list[dict], looks: list[int], n_final: int, tol: float) -> str:
    """Rejection rate per look and family-wise over all looks, per rule and model."""
    n_splits = len(next(iter(rows[0].values()))[0])
    fr = np.array(looks, float) / n_final
    lines = [f"{len(rows)} plant-truth series sets, looks after series {looks}, tol {tol:g} over "
             f"{n_splits} splits (Bonferroni inside a look)",
             "| rule | model | " + " | ".join(f"n={n}" for n in looks) + " | any look (FWER) | final |",
             "|---|---|" + "---|" * (len(looks) + 2)]
    for rule in SPENDING_RULES:
        lv = look_levels(fr, tol, rule)
        for m in [m for m in ("M3", "M2", "M1") if m in rows[0]]:
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
    ap.add_argument("--exact", type=int, default=0, metavar="N",
                    help="N replicates of an exactly correct model (M1 on its own data) instead")
    ap.add_argument("--table-from", type=int, default=None,
                    help="tables for the looks from this series count on only (the alpha re-spent over them)")
    args = ap.parse_args()
    base = tomllib.loads(CONFIG.read_text())
    n_final = base["plan"]["n_series"]
    if args.exact:
        looks = [2, 4, 6, 8, 10]
        rows = exact_model(args.exact, looks)
        if args.json_out:
            Path(args.json_out).write_text(json.dumps({"looks": looks, "rows": rows}))
        print("exactly correct model (M1 on data of the M1 model), looks after series", looks)
        print(table(rows, looks, looks[-1], args.tol))
        return
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
    if args.table_from:
        keep = [i for i, n in enumerate(looks) if n >= args.table_from]
        rows = [{m: [v[i] for i in keep] for m, v in r.items()} for r in rows]
        looks = [looks[i] for i in keep]
    print(table(rows, looks, n_final, args.tol))
    print(f"RuntimeWarnings during the fits: {sum(sum(r.get('runtime_warnings', [0])) for r in rows)}")


if __name__ == "__main__":
    main()
