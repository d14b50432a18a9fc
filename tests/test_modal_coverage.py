"""Issue 31, item 3: the machine tool's modal intervals cover. The simulated modal test's data follow the
structure's FRF (its force channel and the accelerations' direct term carry the hold's lag like the modes
do), and the extraction's 95 % intervals hold the true frequencies and damping ratios."""

import tomllib
from pathlib import Path

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from identification.frequency.frf_estimation import h1_estimate, lpm_periodic
from identification.frequency.modal_extraction import extract_modes
from identification.models.machine_tool_model import MachineTool, as_vector, complex_modes_of
from simulators.physics.machine_tool import MachineToolTruth, simulate_modal_test

CFG = tomllib.loads((Path(__file__).resolve().parents[1] / "configs" / "machine-tool-sim.toml").read_text())
EX, AN = CFG["excitation"], CFG["analysis"]
N, DT = int(EX["period"]), float(EX["dt"])
NOISE = CFG["simulator"]["noise"]


def _multisine(amplitude: float) -> np.ndarray:
    lines = np.arange(N // 2 + 1) / (N * DT)
    sel = (lines >= EX["f_min"]) & (lines <= EX["f_max"])
    spec = np.zeros(N // 2 + 1, dtype=complex)
    spec[sel] = np.exp(1j * np.random.default_rng(0).uniform(0, 2 * np.pi, sel.sum()))
    x = np.fft.irfft(spec, N)
    return x / np.sqrt(np.mean(x**2)) * amplitude


def test_noise_free_simulated_frf_is_the_structures():
    """Before the fix the direct term (mass line) lacked the hold's half-step lag the modes had: 7.4 %
    median, 16 % worst error against the model's FRF, which biased the poles by up to 15-20 of their std;
    now 0.11 % and 0.55 % (the interpolation filter's ripple)."""
    truth = MachineToolTruth(CFG["simulator"]["truth"])
    u = np.tile(_multisine(EX["amplitude"]), EX["settle"] + EX["periods"])
    out = simulate_modal_test(truth, 0.05, u, DT, "T1x", np.random.default_rng(0), substeps=8)
    skip = EX["settle"] * N
    est = h1_estimate(out["force"][skip:], out["accel"][skip:], DT, nperseg=N, noverlap=0, window="boxcar")
    band = (est.freq >= EX["f_min"]) & (est.freq <= EX["f_max"])
    params = as_vector(CFG["simulator"]["truth"])
    Hm = MachineTool().frf(params, 0.05, est.freq[band], "T1x", kind="accelerance")
    rel = np.linalg.norm(est.H[:, band] - Hm, axis=0) / np.linalg.norm(Hm, axis=0)
    assert np.max(rel) < 1e-2 and np.median(rel) < 3e-3, (np.max(rel), np.median(rel))


@pytest.mark.slow(reason="two simulated three-reference modal tests and their modal extractions")
@pytest.mark.parametrize("frf", ["h1", "lpm"])
def test_modal_intervals_on_the_simulated_machine_tool_cover(frf):
    """Two noise seeds x 8 modes at 50 mm, as the rig measures and fits them. Measured over 10 seeds
    (benchmarks/bench_modal_coverage.py): H1 98 % / 100 % (frequency / damping), z RMS 0.1-1.8; before
    the simulator fix 32 % / 59 % with z RMS up to 15. Here: at most 2 of 16 intervals miss, and the
    z-scores' RMS stays below 2 (intervals 3x too narrow fail)."""
    truth = MachineToolTruth(CFG["simulator"]["truth"])
    cm = complex_modes_of(*truth.matrices(0.05), truth.O, 14)
    u = np.tile(_multisine(EX["amplitude"]), EX["settle"] + EX["periods"])
    skip = EX["settle"] * N
    zf, zx, in_f, in_x = [], [], [], []
    for seed in range(2):
        rng = np.random.default_rng(seed)
        Hs, Vs = [], []
        for dof in CFG["plan"]["inputs"]:
            out = simulate_modal_test(truth, 0.05, u, DT, dof, rng, accel_noise=NOISE["accel"],
                                      force_noise=NOISE["force"], substeps=8)
            f, a = out["force"][skip:], out["accel"][skip:]
            if frf == "lpm":
                est = lpm_periodic(f, a, DT, N, f_min=EX["f_min"], f_max=EX["f_max"])
                Vs.append(est.var)
            else:
                est = h1_estimate(f, a, DT, nperseg=N, noverlap=0, window="boxcar")
            Hs.append(est.H)
        with threadpool_limits(limits=1, user_api="blas"):
            fit = extract_modes(est.freq, np.array(Hs), AN["n_modes"], AN["f_min"], AN["f_max"],
                                kind="accelerance", fit_band=(EX["f_min"], EX["f_max"]),
                                frf_var=np.array(Vs) if Vs else None)
        k = np.array([np.argmin(np.abs(cm.freq - x)) for x in fit.freq])
        ft, xt = cm.freq[k], cm.xi[k]
        assert len(set(k)) == k.size
        iv = fit.intervals(0.95)
        in_f += list((iv["freq"][:, 0] <= ft) & (ft <= iv["freq"][:, 1]))
        in_x += list((iv["xi"][:, 0] <= xt) & (xt <= iv["xi"][:, 1]))
        zf += list((fit.freq - ft) / fit.freq_std)
        zx += list((fit.xi - xt) / fit.xi_std)
    assert np.sum(in_f) >= 14 and np.sum(in_x) >= 14, (np.mean(in_f), np.mean(in_x))
    assert np.sqrt(np.mean(np.square(zf))) < 2 and np.sqrt(np.mean(np.square(zx))) < 2
