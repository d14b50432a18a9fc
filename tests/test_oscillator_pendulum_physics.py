"""Simulator truths of the oscillator and the cart pendulum (simulators/physics) against the design models."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from identification.design.adjoint_design import simulate_output
from identification.models.ode_models import CartPendulumModel, oscillator_model
from simulators.physics import oscillator, pendulum
from simulators.physics.oscillator import OscillatorTruth
from simulators.physics.pendulum import PendulumTruth

IDEAL_OSC = OscillatorTruth(coulomb1=0.0, coulomb2=0.0, input_lag=0.0, position_noise=0.0,
                            position_resolution=0.0, substeps=4)
IDEAL_PEND = PendulumTruth(cart_coulomb=0.0, joint_coulomb=0.0, input_lag=0.0, angle_noise=0.0,
                           encoder_counts=0, substeps=4)


def _force(n: int, amp: float, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-amp, amp, n)


def test_result_shape_like_crane_simulate_axis():
    for mod, truth, out in ((oscillator, OscillatorTruth(), "x2"), (pendulum, PendulumTruth(), "angle")):
        f = _force(50, 3.0)
        d = mod.simulate(truth, f, 0.01, np.random.default_rng(1))
        assert mod.OUTPUT == out
        assert np.allclose(d["t"], np.arange(50) * 0.01)
        assert np.array_equal(d["force_cmd"], f)
        for key in ("force", out, out + "_true" if out == "x2" else "angle_true"):
            assert d[key].shape == (50,)
        assert d["dt"] == 0.01 and d["substeps"] == truth.substeps
        # seeded: same seed -> same record, other seed -> other noise
        assert np.array_equal(mod.simulate(truth, f, 0.01, 7)[out], mod.simulate(truth, f, 0.01, 7)[out])
        assert not np.array_equal(mod.simulate(truth, f, 0.01, 7)[out], mod.simulate(truth, f, 0.01, 8)[out])


def test_ideal_truths_match_the_design_models():
    """Without the extra effects the truths reproduce the identification models (same physics)."""
    f = _force(100, 8.0)
    d = oscillator.simulate(IDEAL_OSC, f, 0.005)
    _, y, _ = simulate_output(oscillator_model(IDEAL_OSC.model_values()), [1100.0], f, 0.005, 4)
    assert np.abs(d["x2"] - y[:, 0]).max() <= 1e-6 * np.abs(y).max()
    f = 4.0 * np.sin(2 * np.pi * 1.1 * np.arange(100) * 0.02)  # near the pendulum mode
    d = pendulum.simulate(IDEAL_PEND, f, 0.02)
    _, y, _ = simulate_output(CartPendulumModel(IDEAL_PEND.model_values()), [0.2, 0.01], f, 0.02, 4)
    assert np.abs(d["angle"] - y[:, 0]).max() <= 1e-6 * np.abs(y).max()
    assert np.abs(y).max() > 0.1  # the comparison covers a real swing


def test_effects_the_design_model_lacks_are_present():
    f = np.full(200, 2.0)
    base = oscillator.simulate(IDEAL_OSC, f, 0.002)
    fric = oscillator.simulate(replace(IDEAL_OSC, coulomb1=0.5), f, 0.002)
    assert np.abs(fric["x2_true"] - base["x2_true"]).max() > 1e-5
    lag = oscillator.simulate(replace(IDEAL_OSC, input_lag=0.01), f, 0.002)
    assert lag["force"][0] == 0.0 and lag["force"][5] == pytest.approx(2.0 * (1 - np.exp(-1.0)), rel=1e-9)
    quant = oscillator.simulate(replace(IDEAL_OSC, position_resolution=1e-4), f, 0.002)
    assert np.allclose(quant["x2"] / 1e-4, np.round(quant["x2"] / 1e-4))
    noisy = oscillator.simulate(replace(IDEAL_OSC, position_noise=1e-3), f, 0.002, 3)
    assert np.std(noisy["x2"] - noisy["x2_true"]) == pytest.approx(1e-3, rel=0.15)

    fp = _force(100, 4.0, 2)
    enc = pendulum.simulate(replace(IDEAL_PEND, encoder_counts=4096), fp, 0.02)
    q = 2 * np.pi / 4096
    assert np.allclose(enc["angle"] / q, np.round(enc["angle"] / q))
    assert np.abs(enc["angle"] - enc["angle_true"]).max() <= q / 2 + 1e-12
    jf = pendulum.simulate(replace(IDEAL_PEND, joint_coulomb=0.01), fp, 0.02)
    assert np.abs(jf["angle_true"] - enc["angle_true"]).max() > 1e-3


def test_stiff_lag_stays_stable():
    """A lag much shorter than the RK4 step is integrated exactly (no blow-up)."""
    d = oscillator.simulate(replace(IDEAL_OSC, input_lag=1e-6, substeps=2), _force(100, 5.0), 0.01)
    ref = oscillator.simulate(replace(IDEAL_OSC, substeps=2), _force(100, 5.0), 0.01)
    assert np.all(np.isfinite(d["x2"]))
    assert np.abs(d["x2"] - ref["x2"]).max() <= 1e-3 * np.abs(ref["x2"]).max()


def test_from_config_checks_keys_and_values():
    t = OscillatorTruth.from_config({"c2": 1200, "substeps": 3})
    assert t.c2 == 1200.0 and isinstance(t.substeps, int) and t.to_dict()["c2"] == 1200.0
    assert PendulumTruth.from_config(PendulumTruth().to_dict()) == PendulumTruth()
    with pytest.raises(ValueError, match="unknown key"):
        OscillatorTruth.from_config({"c3": 1.0})
    with pytest.raises(ValueError, match="must be a number"):
        PendulumTruth.from_config({"s_p": "long"})
    with pytest.raises(ValueError, match="must be > 0"):
        PendulumTruth.from_config({"m_p": 0.0})
    with pytest.raises(ValueError, match="dt"):
        oscillator.simulate(OscillatorTruth(), np.zeros(3), 0.0)
    with pytest.raises(ValueError, match="non-finite"):
        pendulum.simulate(PendulumTruth(), np.array([0.0, np.nan]), 0.01)


def test_pendulum_model_jacobians_match_finite_differences():
    m = CartPendulumModel()
    rng = np.random.default_rng(4)
    b = np.array([0.2, 0.01])
    for _ in range(3):
        x, u = rng.normal(size=4), rng.normal(size=1)
        f, fx, fb = m.jacobians(x, u, b)
        assert np.allclose(f, m.f(x, u, b)) and np.allclose(fx, m.fx(x, u, b))
        assert np.allclose(fb, m.fb(x, u, b))
        for i in range(4):
            e = np.zeros(4)
            e[i] = 1e-6
            assert np.allclose((m.f(x + e, u, b) - m.f(x - e, u, b)) / 2e-6, fx[:, i], rtol=1e-6, atol=1e-8)
        assert np.allclose((m.f(x, u + 1e-6, b) - m.f(x, u - 1e-6, b)) / 2e-6, m.fu(x, u, b)[:, 0], atol=1e-8)
        for j in range(2):
            e = np.zeros(2)
            e[j] = 1e-8
            assert np.allclose((m.f(x, u, b + e) - m.f(x, u, b - e)) / 2e-8, fb[:, j], rtol=1e-5, atol=1e-6)
    # batched evaluation equals point-wise evaluation
    X, U = rng.normal(size=(5, 4)), rng.normal(size=(5, 1))
    assert np.allclose(m.fx(X, U, b)[2], m.fx(X[2], U[2], b))
    assert np.allclose(m.fb(X, U, b)[4], m.fb(X[4], U[4], b))
