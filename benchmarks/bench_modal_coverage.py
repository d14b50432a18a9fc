"""Coverage of the modal intervals on the simulated machine tool (issue 21, item 5).

For every noise seed: the modal test of configs/machine-tool-sim.toml at one axis position, run on the
simulator's physics without devices (three references T1x/T1y/T1z, random-phase multisine of 2048
samples at 1024 Hz over 10-240 Hz, 3 settling + 2 recorded periods, 100 N rms, noise 1e-3 m/s^2 and
0.05 N), FRFs by H1 (one period per segment, boxcar) or by the local polynomial method (``--frf lpm``:
transients removed, noise variance per line carried into the poles' std), then
:func:`identification.frequency.modal_extraction.extract_modes` (8 modes in 20-220 Hz, as the rig's
[analysis]).
Every extracted mode is matched to the simulator's complex mode nearest in frequency; printed: the
z-scores (error / std) and how often the 95 % intervals hold the true frequency and damping ratio, and
the damping error in %, per mode.

    nice .venv/bin/python benchmarks/bench_modal_coverage.py --seeds 10 [--position 0.05] [--frf h1|lpm]
        [--settle 3]
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from identification.frequency.frf_estimation import h1_estimate, lpm_periodic  # noqa: E402
from identification.frequency.modal_extraction import extract_modes  # noqa: E402
from identification.models.machine_tool_model import complex_modes_of  # noqa: E402
from simulators.physics.machine_tool import MachineToolTruth, simulate_modal_test  # noqa: E402

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "machine-tool-sim.toml"


def multisine(n: int, dt: float, f_lo: float, f_hi: float, amplitude: float, seed: int) -> np.ndarray:
    lines = np.arange(n // 2 + 1) / (n * dt)
    sel = (lines >= f_lo) & (lines <= f_hi)
    spec = np.zeros(n // 2 + 1, dtype=complex)
    spec[sel] = np.exp(1j * np.random.default_rng(seed).uniform(0, 2 * np.pi, sel.sum()))
    x = np.fft.irfft(spec, n)
    return x / np.sqrt(np.mean(x**2)) * amplitude


def simulated_frfs(truth: MachineToolTruth, position: float, cfg: dict, rng: np.random.Generator,
                   frf: str = "h1", settle: int | None = None) -> tuple[np.ndarray, np.ndarray, list]:
    """The lines, FRFs (n_ref, n_resp, n_lines) and (``frf="lpm"``) their variances of one simulated modal
    test of ``cfg``: the plan's multisine at each reference in turn, the settling periods dropped."""
    ex, sim = cfg["excitation"], cfg["simulator"]
    n, dt = int(ex["period"]), float(ex["dt"])
    one_period = multisine(n, dt, ex["f_min"], ex["f_max"], ex["amplitude"], 0)
    settle = ex["settle"] if settle is None else settle
    u = np.tile(one_period, settle + ex["periods"])
    Hs, Vs = [], []
    for dof in cfg["plan"]["inputs"]:
        out = simulate_modal_test(truth, position, u, dt, dof, rng, accel_noise=sim["noise"]["accel"],
                                  force_noise=sim["noise"]["force"], substeps=8)
        skip = settle * n
        if frf == "lpm":
            est = lpm_periodic(out["force"][skip:], out["accel"][skip:], dt, n, f_min=ex["f_min"],
                               f_max=ex["f_max"])
            Vs.append(est.var)
        else:
            est = h1_estimate(out["force"][skip:], out["accel"][skip:], dt, nperseg=n, noverlap=0,
                              window="boxcar")
        Hs.append(est.H)
    return est.freq, np.array(Hs), Vs


def one(seed: int, position: float, cfg: dict, frf: str = "h1", settle: int | None = None) -> dict:
    ex, an, sim = cfg["excitation"], cfg["analysis"], cfg["simulator"]
    truth = MachineToolTruth(sim.get("truth"))
    freq, H, Vs = simulated_frfs(truth, position, cfg, np.random.default_rng(seed), frf, settle)
    with threadpool_limits(limits=1, user_api="blas"):
        fit = extract_modes(freq, H, an["n_modes"], an["f_min"], an["f_max"], kind="accelerance",
                            fit_band=(ex["f_min"], ex["f_max"]), frf_var=np.array(Vs) if Vs else None)
    cm = complex_modes_of(*truth.matrices(position), truth.O, 14)
    k = np.array([np.argmin(np.abs(cm.freq - f)) for f in fit.freq])
    ft, xt = cm.freq[k], cm.xi[k]
    iv = fit.intervals(0.95)
    return {"freq": fit.freq, "xi": fit.xi, "f_true": ft, "xi_true": xt,
            "zf": (fit.freq - ft) / fit.freq_std, "zx": (fit.xi - xt) / fit.xi_std,
            "in_f": (iv["freq"][:, 0] <= ft) & (ft <= iv["freq"][:, 1]),
            "in_x": (iv["xi"][:, 0] <= xt) & (xt <= iv["xi"][:, 1]),
            "xi_err": fit.xi / xt - 1, "xi_rel_std": fit.xi_std / fit.xi}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--position", type=float, default=0.05)
    ap.add_argument("--frf", choices=("h1", "lpm"), default="h1")
    ap.add_argument("--settle", type=int, default=None, help="settling periods (default: the config's)")
    args = ap.parse_args()
    cfg = tomllib.loads(CONFIG.read_text())
    rows = [one(s, args.position, cfg, args.frf, args.settle) for s in range(args.seeds)]
    ft = rows[0]["f_true"]
    print(f"{len(rows)} noise seeds at {1000 * args.position:.0f} mm, FRFs by {args.frf}, "
          f"settle {cfg['excitation']['settle'] if args.settle is None else args.settle} periods")
    print("| mode | f true [Hz] | xi true [%] | xi error mean / min / max [%] | xi rel. std [%] "
          "| z rms f / xi | 95 % holds f / xi |")
    print("|---|---|---|---|---|---|---|")
    for j in range(ft.size):
        err = np.array([r["xi_err"][j] for r in rows]) * 100
        print(f"| {j + 1} | {ft[j]:.2f} | {100 * rows[0]['xi_true'][j]:.3g} | {err.mean():+.1f} / "
              f"{err.min():+.1f} / {err.max():+.1f} | "
              f"{100 * np.mean([r['xi_rel_std'][j] for r in rows]):.2g} "
              f"| {np.sqrt(np.mean([r['zf'][j] ** 2 for r in rows])):.2g} / "
              f"{np.sqrt(np.mean([r['zx'][j] ** 2 for r in rows])):.2g} "
              f"| {np.mean([r['in_f'][j] for r in rows]):.0%} / "
              f"{np.mean([r['in_x'][j] for r in rows]):.0%} |")
    allf = np.mean([x for r in rows for x in r["in_f"]])
    allx = np.mean([x for r in rows for x in r["in_x"]])
    print(f"all modes: 95 % intervals hold the true frequency {allf:.0%}, the true damping ratio {allx:.0%}")


if __name__ == "__main__":
    main()
