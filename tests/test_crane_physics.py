"""Crane axis truth: modes, decay, dead time, measurement, reproducibility."""

from __future__ import annotations

import tomllib
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import scipy.linalg
import scipy.signal

from simulators.physics import crane
from simulators.physics.crane import CraneTruth, simulate_axis

ROOT = Path(__file__).resolve().parents[1]
DT = 1e-4
QUIET = {"speed_noise": 0.0, "encoder_counts": 0, "speed_resolution": 0.0}


def _linear(**kw) -> CraneTruth:
    return replace(CraneTruth(), coulomb=0.0, stribeck_torque=0.0, **{**QUIET, **kw})


def test_defaults_are_the_shipped_config():
    cfg = tomllib.loads((ROOT / "configs" / "crane-sim.toml").read_text())
    truth = CraneTruth.from_config(cfg["simulator"]["truth"])
    assert truth == CraneTruth()
    assert CraneTruth.from_config(truth.to_dict()) == truth


@pytest.mark.parametrize("bad", [{"J1": 0.0}, {"coulomb": -1.0}, {"nonsense": 1.0}, {"k12": "x"}])
def test_from_config_rejects_bad_values(bad):
    with pytest.raises(ValueError):
        CraneTruth.from_config(bad)


def test_state_matrix_modes_match_mass_spring_eigenproblem():
    t = CraneTruth()
    M = np.diag([t.J1, t.J2, t.J3])
    K = np.array([[t.k12, -t.k12, 0], [-t.k12, t.k12 + t.k23, -t.k23], [0, -t.k23, t.k23]])
    undamped = np.sqrt(scipy.linalg.eigh(K, M, eigvals_only=True)[1:]) / (2 * np.pi)
    f, zeta = t.eigen()
    np.testing.assert_allclose(f, undamped, rtol=0.01)
    assert np.all((zeta > 0.005) & (zeta < 0.1))
    assert 10 < f[0] < 25 and 40 < f[1] < 100


def test_simulated_resonances_sit_at_the_eigenfrequencies():
    t = _linear()
    rng = np.random.default_rng(5)
    u = rng.normal(0.0, 2.0, 200_000)  # 20 s of white torque
    out = simulate_axis(t, u, DT, rng)
    f, puu = scipy.signal.welch(out["torque"], fs=1 / DT, nperseg=2**14)
    _, puy = scipy.signal.csd(out["torque"], out["speed"], fs=1 / DT, nperseg=2**14)
    mag = np.abs(puy / puu)
    f_modes, _ = t.eigen()
    for fm, (lo, hi) in zip(f_modes, [(8.0, 25.0), (35.0, 100.0)], strict=True):
        band = (f >= lo) & (f <= hi)
        peak = f[band][np.argmax(mag[band])]
        assert abs(peak - fm) < 1.0, (peak, fm)


def test_viscous_decay_of_a_coasting_axis():
    t = _linear()
    out = simulate_axis(t, np.zeros(20_000), DT, 0, initial_speed=3.0)
    j_total = t.J1 + t.J2 + t.J3
    k = np.arange(5_000, 20_000, 2_500)
    expected = 3.0 * np.exp(-t.viscous / j_total * out["t"][k])
    np.testing.assert_allclose(out["speed_true"][k], expected, rtol=0.01)
    assert np.all(np.diff(np.abs(out["speed_true"][::1000])) < 0)


def test_coulomb_friction_decelerates_linearly_and_stops():
    t = replace(CraneTruth(), viscous=0.0, stribeck_torque=0.0, coulomb=0.5, **QUIET)
    j_total = t.J1 + t.J2 + t.J3
    out = simulate_axis(t, np.zeros(20_000), DT, 0, initial_speed=2.0)
    w = out["speed_true"]
    slope = np.polyfit(out["t"][500:3500], w[500:3500], 1)[0]
    assert slope == pytest.approx(-t.coulomb / j_total, rel=0.03)
    t_stop = 2.0 * j_total / t.coulomb  # 0.48 s
    assert np.all(np.abs(w[int(1.5 * t_stop / DT) :]) < 0.05)


def test_dead_time_shifts_the_response():
    rng = np.random.default_rng(3)
    u = rng.normal(0.0, 3.0, 5_000)
    lag = 8
    base = simulate_axis(_linear(dead_time=0.0), u, DT, 0)
    late = simulate_axis(_linear(dead_time=lag * DT), u, DT, 0)
    np.testing.assert_allclose(late["speed_true"][lag:], base["speed_true"][:-lag], atol=1e-9)
    np.testing.assert_allclose(late["torque"][lag:], u[:-lag], atol=1e-12)
    assert np.all(late["torque"][:lag] == 0.0)
    # a fractional delay lies between the neighbouring whole-sample delays
    half = simulate_axis(_linear(dead_time=(lag + 0.5) * DT), u, DT, 0)["torque"]
    np.testing.assert_allclose(half[lag + 1 :], 0.5 * (u[1:-lag] + u[: -lag - 1]), atol=1e-12)


def test_encoder_quantisation_and_noise():
    t = replace(CraneTruth(), speed_noise=0.0, encoder_counts=2**12)
    u = 2.0 * np.sin(2 * np.pi * 3.0 * np.arange(10_000) * DT)
    out = simulate_axis(t, u, DT, 0)
    quantum = 2 * np.pi / 2**12 / DT
    steps = out["speed"] / quantum
    np.testing.assert_allclose(steps, np.round(steps), atol=1e-6)
    # the measured speed is the mean over the previous sample: error stays within a quantum + lag
    err = out["speed"][1:] - 0.5 * (out["speed_true"][1:] + out["speed_true"][:-1])
    assert np.abs(err).max() < 1.05 * quantum
    noisy = simulate_axis(replace(t, encoder_counts=0, speed_noise=0.05), u, DT, 1)
    assert np.std(noisy["speed"] - noisy["speed_true"]) == pytest.approx(0.05, rel=0.05)


def test_seeded_runs_are_reproducible():
    u = np.random.default_rng(9).normal(0.0, 3.0, 4_000)
    a = simulate_axis(CraneTruth(), u, DT, np.random.default_rng(1))
    b = simulate_axis(CraneTruth(), u, DT, np.random.default_rng(1))
    c = simulate_axis(CraneTruth(), u, DT, np.random.default_rng(2))
    np.testing.assert_array_equal(a["speed"], b["speed"])
    assert not np.array_equal(a["speed"], c["speed"])
    np.testing.assert_array_equal(a["speed_true"], c["speed_true"])


def test_modal_integration_matches_plain_state_loop_with_friction():
    t = replace(CraneTruth(), gravity_torque=0.2)
    u = np.random.default_rng(4).normal(0.0, 2.0, 3_000)
    out = simulate_axis(t, u, DT, 0)
    n_sub = out["substeps"]
    A, B = crane.linear_state_space(t)
    Ad, Bd = crane._zoh(A, B, DT / n_sub)
    u_sub = crane._delayed_substep_input(u, DT, t.dead_time, n_sub) + t.gravity_torque
    X = crane._simulate_dense(t, Ad, Bd, np.zeros(5), u_sub)
    np.testing.assert_allclose(out["speed_true"], X[0, ::n_sub][: u.size], atol=1e-9)
    # friction has an effect at all
    lin = simulate_axis(replace(t, coulomb=0.0, stribeck_torque=0.0), u, DT, 0)
    assert np.abs(lin["speed_true"] - out["speed_true"]).max() > 0.01
