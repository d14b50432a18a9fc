"""Monte Carlo calibration of the machine-tool parameter intervals (issue 21, item 5).

Reduced case (as tests/test_gsa_identification.py and configs/machine-tool-sim.toml): modal data of the
first 8 modes at axis positions 50 and 550 mm (identification) and 300 mm (validation). One truth, drawn
once off the model's nominal values (stiffness x U(0.88, 1.12), damping x exp(U(-0.3, 0.3)), seeded);
every fit starts at the nominal values (the prior), never at the truth. Per seed, noise is drawn on the
modal data the fit consumes: natural frequencies with a relative std of ``--freq-noise`` x the mode's
damping ratio (a share of the half-power bandwidth, how an EMA's frequency error scales), damping ratios
with a relative std ``--xi-noise``, shapes with complex noise of ``--shape-noise`` x the shape's RMS per DOF.

The full GSA procedure (:func:`identify`: Sobol partition, subproblems, joint step, damping stage) runs once
per case on seed 0's data; its damping-pair ranking is kept, and every seed is refitted by the local part
(:func:`local_refit`: joint stiffness step and damping stage from the nominal values) - the subproblems only
find the basin, which the nominal start is already in. Cases: ``ideal`` (the data come from the model's
own structure) and ``disturbed`` (the data come from :meth:`MachineToolConstants.disturbed`: other masses,
bed joint and screw constants than the model has - a structure error).

Printed per case and parameter: the RMS of the predicted std, the spread (std) of the estimates over the
seeds, their ratio, the coverage of the truth by the 95 % intervals (over the seeds that have an interval)
and how often the parameter has one; then the summary and the wall time.

    nice .venv/bin/python benchmarks/bench_machine_tool_calibration.py --seeds 100
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from identification.gsa import (  # noqa: E402
    ModalReference,
    identify,
    local_refit,
    reference_from_model,
)
from identification.models.machine_tool_model import (  # noqa: E402
    DAMPING_NAMES,
    PARAM_NAMES,
    STIFFNESS_NAMES,
    MachineTool,
    MachineToolConstants,
    as_vector,
    param_bounds,
)

POSITIONS, VALIDATION, N_MODES = [0.05, 0.55], [0.3], 8


def draw_truth(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    nom = as_vector(None)
    k = 1.0 + rng.uniform(-0.12, 0.12, len(STIFFNESS_NAMES))
    c = np.exp(rng.uniform(-0.3, 0.3, len(DAMPING_NAMES)))
    return nom * np.concatenate([k, c])


def noisy(ref: ModalReference, rng: np.random.Generator, f_noise: float, xi_noise: float,
          shape_noise: float, std_dof: float = 0.0) -> ModalReference:
    """The modal data with measurement noise (see the module docstring), and the std an EMA would report
    for each frequency and damping ratio: the noise's own std (of the noisy values, as the extraction knows
    only those), times ``sqrt(chi2(std_dof) / std_dof)`` per mode when ``std_dof`` > 0 - an EMA estimates
    its std (from the stabilisation orders and the FRF noise), it does not know it."""
    lam, shapes, xis, fstd, xstd = [], [], [], [], []
    for L, S, X in zip(ref.lam, ref.shapes, ref.xi, strict=True):
        w = np.abs(L) * (1.0 + f_noise * X * rng.standard_normal(L.size))
        x = X * (1.0 + xi_noise * rng.standard_normal(X.size))
        lam.append(w * (-x + 1j * np.sqrt(1.0 - x ** 2)))
        xis.append(x)
        rms = np.linalg.norm(S, axis=0) / np.sqrt(S.shape[0])
        z = rng.standard_normal(S.shape) + 1j * rng.standard_normal(S.shape)
        shapes.append(S + shape_noise * rms * z / np.sqrt(2.0))
        est = np.sqrt(rng.chisquare(std_dof, (2, L.size)) / std_dof) if std_dof > 0 else np.ones((2, L.size))
        fstd.append(f_noise * x * w / (2 * np.pi) * est[0])
        xstd.append(xi_noise * x * est[1])
    return ModalReference(list(ref.positions), lam, shapes, xis, freq_std=fstd, xi_std=xstd)


def run_case(name: str, args, truth: np.ndarray) -> dict:
    lo, hi = param_bounds()
    nominal = as_vector(None)
    model = MachineTool()
    plant = MachineTool(MachineToolConstants().disturbed()) if name == "disturbed" else model
    ref0 = reference_from_model(plant, truth, POSITIONS, N_MODES)
    val0 = reference_from_model(plant, truth, VALIDATION, N_MODES)
    noise = (args.freq_noise, args.xi_noise, args.shape_noise, args.std_dof)
    t0 = time.perf_counter()
    rng = np.random.default_rng(args.seed)
    full = identify(model, noisy(ref0, rng, *noise), STIFFNESS_NAMES, DAMPING_NAMES, lo, hi,
                    validation=noisy(val0, rng, *noise), start=nominal, sobol_n=32, n_opt=4, maxiter=40,
                    seed=0, truth=truth)
    t_full = time.perf_counter() - t0
    est, std, quant, valid, why, ratios = [], [], [], [], [], []
    t0 = time.perf_counter()
    for k in range(args.seeds):
        rng = np.random.default_rng(args.seed + k)
        e, iv = local_refit(model, noisy(ref0, rng, *noise), STIFFNESS_NAMES, DAMPING_NAMES, lo, hi, nominal,
                            full.damping_ranking, validation=noisy(val0, rng, *noise), maxiter=40)
        est.append(e)
        std.append(iv.std)
        quant.append(iv.quantiles)
        valid.append(iv.intervals_valid)
        why.append(iv.problems)
        ratios.append(iv.checks.get("measurement_frequency_ratio", np.nan))
    t_refit = (time.perf_counter() - t0) / args.seeds
    return {"full": full, "t_full": t_full, "t_refit": t_refit, "est": np.array(est), "std": np.array(std),
            "q": np.array(quant), "valid": np.array(valid), "why": why,
            "ratio": np.array(ratios)}


def report(name: str, res: dict, truth: np.ndarray) -> None:
    E, S, valid = res["est"], res["std"], res["valid"]
    n = E.shape[0]
    has = np.isfinite(S)
    inside = (np.abs(E - truth) <= res["q"] * S) & has
    spread = E.std(axis=0, ddof=1)
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a parameter with no interval in any refit
        pred = np.sqrt(np.nanmean(np.where(has, S, np.nan) ** 2, axis=0))
        ratio = pred / spread
        cover = inside.sum(axis=0) / has.sum(axis=0)
    bias = (E.mean(axis=0) - truth) / truth
    print(f"\n### {name}: {n} seeded refits from the nominal values\n")
    print("| parameter | bias of the mean [%] | predicted std [%] | spread [%] | predicted / spread | 95 % "
          "coverage | has an interval |")
    print("|---|---|---|---|---|---|---|")
    for j, p in enumerate(PARAM_NAMES):
        print(f"| {p} | {100 * bias[j]:+.2f} | {100 * pred[j] / truth[j]:.3g} "
              f"| {100 * spread[j] / truth[j]:.3g} "
              f"| {ratio[j]:.2f} | {cover[j]:.0%} | {has[:, j].mean():.0%} |")
    always = has.all(axis=0)
    within = np.abs(ratio[always] - 1.0) <= 0.2
    off = ", ".join(np.array(PARAM_NAMES)[always][~within])
    print(f"\nparameters with an interval in every refit: {always.sum()} of {len(PARAM_NAMES)}; predicted "
          f"std within 20 % of the spread: {within.sum()} of them ({off or 'none'} not)")
    print(f"coverage of the truth, all (seed, parameter) intervals: {inside.sum() / has.sum():.1%} "
          f"(stiffness {inside[:, :16].sum() / has[:, :16].sum():.1%}, damping "
          f"{inside[:, 16:].sum() / max(has[:, 16:].sum(), 1):.1%}); refits with intervals_valid: "
          f"{valid.mean():.0%}")
    if valid.any() and not valid.all():
        iv, ih = inside[valid], has[valid]
        print(f"coverage over the refits whose intervals are valid: {iv.sum() / ih.sum():.1%}")
    bad = [w for w in res["why"] if w]
    model_error = np.array([any(p.startswith("model error") for p in w) for w in res["why"]])
    held_back = np.array([any(p.startswith("the held-back") for p in w) for w in res["why"]])
    step = np.array([any(p.startswith("the estimate is") for p in w) for w in res["why"]])
    r = res["ratio"]
    print(f"flagged by: model error (frequencies vs the EMA's std) {model_error.mean():.0%}, held-back "
          f"positions vs the fit's scale {held_back.mean():.0%}, Gauss-Newton step {step.mean():.0%}; "
          f"frequency mean square / EMA-explained: median {np.nanmedian(r):.2f}, 5-95 % "
          f"{np.nanpercentile(r, 5):.2f}-{np.nanpercentile(r, 95):.2f}")
    if bad:
        print(f"first reason given when not valid: {bad[0][0][:400]}")
    f = res["full"]
    dev = f.relative_deviation()
    print(f"full GSA procedure on seed {0}'s data: {f.seconds['total']:.1f} s; stiffness deviation max "
          f"{100 * np.abs(dev[:16]).max():.1f} %, intervals "
          f"{'valid' if f.intervals.intervals_valid else 'NOT valid'}"
          f"; local refit {res['t_refit']:.2f} s each")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1000)
    ap.add_argument("--truth-seed", type=int, default=123)
    ap.add_argument("--freq-noise", type=float, default=0.05)
    ap.add_argument("--xi-noise", type=float, default=0.05)
    ap.add_argument("--shape-noise", type=float, default=0.02)
    ap.add_argument("--std-dof", type=float, default=20.0,
                    help="degrees of freedom of the EMA's reported std (0: it reports the exact noise std)")
    ap.add_argument("--cases", default="ideal,disturbed")
    args = ap.parse_args()
    truth = draw_truth(args.truth_seed)
    t0 = time.perf_counter()
    print(f"noise: frequency {args.freq_noise:g} x xi (relative), damping {args.xi_noise:g} (relative), "
          f"shapes {args.shape_noise:g} x RMS; truth seed {args.truth_seed}, noise seeds {args.seed}...")
    with threadpool_limits(limits=1, user_api="blas"):
        for name in args.cases.split(","):
            report(name, run_case(name, args, truth), truth)
    print(f"\nwall time {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
