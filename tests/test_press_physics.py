"""Plant truth of the press linkage: equilibrium, hysteresis, interface."""

import numpy as np
import pytest

from simulators.physics.press import (
    SENSOR_NAMES,
    PressLinkage,
    PressTruth,
    simulate_staircase,
    staircase_forces,
)


def test_config_round_trip_and_validation():
    t = PressTruth.from_config({"k5": 2.1e8, "friction_max": 800})
    assert PressTruth.from_config(t.to_dict()) == t
    with pytest.raises(ValueError):
        PressTruth.from_config({"k55": 1.0})
    with pytest.raises(ValueError):
        PressTruth.from_config({"k7": -1.0})


def test_respond_shape_scale_and_equilibrium():
    plant = PressLinkage(PressTruth())
    z = plant.respond(20000.0)
    assert z.shape == (3,) and PressLinkage.SENSOR_NAMES == SENSOR_NAMES
    assert 100e-6 < z[0] < 1000e-6  # a few hundred micrometres at q_max
    q_in = 20000.0 - plant.last_friction
    f, _ = plant._bearing_terms(plant.y)
    res = plant._K @ plant.y + f - plant._load * q_in
    assert np.max(np.abs(res)) < 1e-6 * q_in  # Newton solved the equilibrium


def test_f_horizontal_separates_k5_from_k7():
    # Vertical D sees both bars, horizontal F does not see bar 5 (statically determinate load paths).
    base = PressTruth(friction_max=0.0)
    soft5 = PressTruth(friction_max=0.0, k5=base.k5 * 0.8)
    soft7 = PressTruth(friction_max=0.0, k7=base.k7 * 0.8)
    z0, z5, z7 = (PressLinkage(t).respond(1e4) for t in (base, soft5, soft7))
    assert abs(z5[0] - z0[0]) > 0.05 * abs(z0[0]) and abs(z7[0] - z0[0]) > 0.05 * abs(z0[0])
    assert abs(z5[1] - z0[1]) < 1e-9 and abs(z7[1] - z0[1]) > 0.05 * abs(z0[1])
    assert z0[2] == pytest.approx(base.b0_ratio * z0[0])


def test_hysteresis_visible_continuous_and_rate_independent():
    t = PressTruth()
    plant = PressLinkage(t)
    qd = staircase_forces(t.q_max)
    z = np.array([plant.respond(q) for q in qd])
    # same force on the way down gives a larger displacement (friction held the linkage)
    gap_f = np.abs(z[21, 1]) - np.abs(z[7, 1])
    assert gap_f > 5 * 4.895e-6
    # friction is continuous: a 1 N step changes it by less than 5 N (Coulomb would jump by 2 q_c)
    plant.reset()
    for q in np.linspace(0, 10000, 50):
        plant.respond(q)
    f0 = plant.last_friction
    plant.respond(9999.0)
    assert abs(plant.last_friction - f0) < 5.0
    # rate independence: a finer path through the same turning points ends in the same state
    a, b = PressLinkage(t), PressLinkage(t)
    for q in (0, 15000, 3000, 9000):
        za = a.respond(q)
    fine = [np.linspace(0, 15000, 40), np.linspace(15000, 3000, 33), np.linspace(3000, 9000, 7)]
    for q in np.concatenate(fine):
        zb = b.respond(q)
    np.testing.assert_allclose(za, zb, rtol=1e-9, atol=1e-13)
    # reset returns to the virgin state
    a.reset()
    np.testing.assert_allclose(a.respond(0.0), 0.0, atol=1e-15)


def test_simulate_staircase_shapes_and_noise():
    rng = np.random.default_rng(3)
    qd = staircase_forces()
    q = np.tile(qd, (6, 1))
    sig = np.array([1.518e-5, 4.895e-6, 3.904e-6])
    z = simulate_staircase(PressTruth(), q, sig, rng)
    z0 = simulate_staircase(PressTruth(), q, np.zeros(3), rng)
    assert z.shape == (6, 29, 3)
    np.testing.assert_allclose((z - z0).std(axis=(0, 1)), sig, rtol=0.15)


def test_guide_friction_grows_with_the_process_force():
    """The saturated friction is friction_max + friction_load_slope * |q_P| (guide normal force)."""
    t = PressTruth(friction_load_slope=0.03)
    plant = PressLinkage(t)
    for q in np.linspace(0.0, 40000.0, 400):  # a long monotone load saturates every stop operator
        plant.respond(q)
    assert plant.last_friction == pytest.approx(t.friction_max + 0.03 * 40000.0, rel=1e-9)
    flat = PressLinkage(PressTruth(friction_load_slope=0.0))
    for q in np.linspace(0.0, 40000.0, 400):
        flat.respond(q)
    assert flat.last_friction == pytest.approx(t.friction_max, rel=1e-9)
    with pytest.raises(ValueError):
        PressTruth.from_config({"friction_load_slope": -0.01})
