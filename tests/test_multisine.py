"""Multisine design: crest factor, leakage-free spectrum, grids, export."""

import numpy as np
import pytest

from daq.plots.excitation import export_trajectory, plot_multisine
from identification.design.multisine import crest_factor, design_multisine, multisine_lines


def test_crest_factor_100_flat_lines():
    r = design_multisine(1.0, 100.0, 100, 1e-4, seed=0)
    assert r.frequencies.size == 100
    assert r.crest_factor <= 1.45
    # the starts it is compared against
    assert 1.6 < r.crest_factor_schroeder < 1.8
    assert r.crest_factor_random > 2.0
    assert r.crest_factor < r.crest_factor_schroeder
    assert np.max(np.abs(r.signal)) == pytest.approx(1.0)
    assert crest_factor(r.signal) == pytest.approx(r.crest_factor)


def test_clipping_alone_beats_schroeder():
    r = design_multisine(1.0, 100.0, 100, 1e-4, method="clip")
    assert r.crest_factor < r.crest_factor_schroeder - 0.1


def test_spectrum_exactly_on_requested_lines():
    r = design_multisine(2.0, 150.0, 40, 1e-4, n_periods=3, amplitudes=np.linspace(1, 2, 40))
    x = r.signal
    assert x.size == 3 * r.n_per_period
    spec = np.fft.rfft(x) * 2 / x.size
    f = np.fft.rfftfreq(x.size, r.dt)
    excited = np.isin(np.round(f * r.period * 1e6), np.round(r.frequencies * r.period * 1e6))
    assert excited.sum() == 40
    # leakage-free: everything outside the lines is at round-off level
    assert np.max(np.abs(spec[~excited])) < 1e-12
    np.testing.assert_allclose(np.abs(spec[excited]), r.amplitudes, rtol=1e-9)
    # requested amplitude shape (ratio 1:2) preserved
    assert r.amplitudes[-1] / r.amplitudes[0] == pytest.approx(2.0)
    assert r.frequencies.min() >= 2.0 - 1e-9 and r.frequencies.max() <= 150.0 + 1e-9


def test_odd_and_log_grids():
    n_per, bins = multisine_lines(1.0, 200.0, 100, 1e-4, odd_only=True)
    assert np.all(bins % 2 == 1) and np.unique(bins).size == 100
    n_per, bins = multisine_lines(0.5, 300.0, 60, 1e-4, grid="log")
    f = bins / (n_per * 1e-4)
    assert np.unique(bins).size == 60 and np.all(np.diff(bins) > 0)
    assert f[0] == pytest.approx(0.5) and f[-1] == pytest.approx(300.0)
    # upper part is geometric: ratios of the top lines roughly constant
    ratios = f[-10:] / f[-11:-1]
    assert np.ptp(ratios) < 0.02
    with pytest.raises(ValueError):
        multisine_lines(1.0, 6000.0, 10, 1e-4)  # above Nyquist


def test_export_and_plot(tmp_path):
    r = design_multisine(1.0, 50.0, 20, 1e-3, n_periods=2)
    p = export_trajectory(r, tmp_path / "traj.csv", peak=2.5)
    data = np.loadtxt(p, delimiter=",", skiprows=1)
    assert data.shape == (r.signal.size, 2)
    assert np.max(np.abs(data[:, 1])) == pytest.approx(2.5, rel=1e-6)
    assert open(p).readline().strip() == "t [s],torque [N*m]"
    z = np.load(export_trajectory(r, tmp_path / "traj.npz", peak=2.5))
    np.testing.assert_allclose(z["value"], r.scale_to_peak(2.5))
    assert str(z["unit"]) == "N*m"
    png = plot_multisine(r, tmp_path / "ms.png")
    assert png.stat().st_size > 1000
