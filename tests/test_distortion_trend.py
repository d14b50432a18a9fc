"""The crane's distortion plan and the slow transient: the rigid-body mode of a viscous-only crane decays
with J / viscous = 2.4 s, far longer than the plan's 2 s of settling; what is left of it over the measured
periods is removed as a polynomial trend (identification/frequency/nonlinear_distortion.remove_trend).
Without that, a linear crane is called nonlinear."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import msgspec
import numpy as np
import pytest

from daq.config.load import read_toml
from daq.rigs.crane.distortion_config import DistortionTable, design_realisations, excited_bins
from identification.frequency.nonlinear_distortion import distortion_from_records, remove_trend
from simulators.physics.crane import CraneTruth, simulate_axis

CFG = read_toml("configs/crane-sim.toml")
TABLE = msgspec.convert(CFG["distortion"], DistortionTable)
DT = 1e-4  # the drive's cycle: the trace's sample time


def test_a_periodic_signal_passes_a_polynomial_trend_goes():
    rng = np.random.default_rng(0)
    one = rng.normal(size=500)
    periodic = np.tile(one, (3, 1))
    np.testing.assert_allclose(remove_trend(periodic, 3), periodic, atol=1e-12)
    t = np.linspace(0, 1, 1500).reshape(3, 500)
    out = remove_trend(periodic + 2.0 - 5 * t + 3 * t**3, 3)
    np.testing.assert_allclose(out - out.mean(), periodic - periodic.mean(), atol=1e-9)
    np.testing.assert_array_equal(remove_trend(periodic, 0), periodic)


def test_the_shipped_plan_fits_the_drive_and_its_realisations_share_one_amplitude_spectrum():
    runs = design_realisations(TABLE, DT, 20.0)
    n_per, n = TABLE.samples(DT)
    assert len(runs) == TABLE.n_realisations and all(r.size == n for r in runs)
    assert n <= CFG["devices"]["drive"]["max_samples"]
    assert max(np.abs(r).max() for r in runs) == pytest.approx(TABLE.amplitude * 20.0)
    bins = excited_bins(TABLE, DT)
    spectra = np.abs(np.fft.rfft(np.array([r[:n_per] for r in runs]), axis=1))
    np.testing.assert_allclose(spectra[:, bins], np.broadcast_to(spectra[0, bins], (len(runs), bins.size)),
                               rtol=1e-9)
    free = np.setdiff1d(np.arange(1, int(TABLE.f_max * TABLE.period) + 1), bins)
    assert np.max(spectra[:, free]) < 1e-9 * np.max(spectra)
    assert np.any(free % 2 == 1) and np.any(free % 2 == 0)  # odd and even detection lines


def _verdicts(truth: CraneTruth, seed: int, trend_degree: int):
    table = msgspec.structs.replace(TABLE, seed=seed)
    runs = [simulate_axis(truth, u, DT, rng=seed * 100 + m)
            for m, u in enumerate(design_realisations(table, DT, 20.0))]
    return distortion_from_records([r["torque_cmd"] for r in runs], [r["speed"] for r in runs], DT,
                                   round(table.period / DT), excited_bins(table, DT), settle=table.n_settle,
                                   alpha=table.alpha, trend_degree=trend_degree)[1]


@pytest.mark.slow(reason="seven 4-s crane simulations at 10 kHz (about 7 s of CPU)")
def test_a_viscous_only_crane_is_linear_once_the_slow_transient_is_removed():
    """Three seeds of the viscous-only crane under the shipped plan: with the cubic trend removed, none
    is flagged (measured p 0.05-0.9); without, every one is (p < 1e-6) - the transient, not the plant."""
    truth = CraneTruth.from_config(CFG["simulator"]["truth"])
    viscous = dataclasses.replace(truth, coulomb=0.0, stribeck_torque=0.0)
    for seed in range(3):
        assert not _verdicts(viscous, seed, TABLE.trend_degree).detected
        raw = _verdicts(viscous, seed, 0)
        assert raw.detected and raw.p_value < 1e-6
    shipped = _verdicts(truth, 0, TABLE.trend_degree)
    assert shipped.detected and shipped.level_db > 10


@pytest.mark.parametrize("config, old, new, words", [
    ("crane-sim.toml", "period = 1.0 ", "period = 10.0 ",
     "[distortion].n_periods: 400000 samples per realisation exceed [devices.drive].max_samples"),
    ("crane-sim.toml", "n_realisations = 3 ", "n_realisations = 1 ", "[distortion].n_realisations"),
    ("machine-tool-sim.toml", '# input = "T1x"', 'input = "X9"  #',
     "[distortion].input: 'X9' is not a measured"),
])
def test_a_distortion_plan_that_cannot_run_is_one_line_from_check(tmp_path, config, old, new, words):
    from click.testing import CliRunner

    from daq.cli.main import main

    text = (Path("configs") / config).read_text()
    assert old in text
    path = tmp_path / config
    path.write_text(text.replace(old, new))
    res = CliRunner().invoke(main, ["check", str(path)])
    assert res.exit_code != 0 and words in res.output and "Traceback" not in res.output, res.output


def test_a_session_without_the_measurement_says_so():
    from daq.rigs.crane import distortion

    out = distortion.analyze({}, TABLE)
    assert out.to_dict() is None and "not measured" in out.note and "[distortion] was off" in out.note
    one = {"distortion 1": (np.zeros(4), np.zeros(40000), np.zeros(40000), DT)}
    assert "only one distortion run" in distortion.analyze(one, TABLE).note
