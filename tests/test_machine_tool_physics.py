"""Machine-tool identification model (matrices, position dependence, modes, FRFs) and the simulator's truth
(the same structure today; its time-domain modal test + H1 follow the model's FRFs)."""

import dataclasses

import numpy as np
import pytest

from identification.frequency.frf_estimation import h1_estimate
from identification.models.machine_tool_model import (
    DAMPING_NAMES,
    NOMINAL,
    PARAM_NAMES,
    STIFFNESS_NAMES,
    MachineTool,
    MachineToolConstants,
    as_vector,
    param_bounds,
)
from simulators.physics import machine_tool as sim


def test_parameters_and_bounds():
    assert len(PARAM_NAMES) == 27 and len(STIFFNESS_NAMES) == 16 and len(DAMPING_NAMES) == 11
    lo, hi = param_bounds()
    nom = as_vector(None)
    k = len(STIFFNESS_NAMES)
    np.testing.assert_allclose(lo[:k], 0.7 * nom[:k])
    np.testing.assert_allclose(hi[:k], 1.3 * nom[:k])
    np.testing.assert_allclose(lo[k:], nom[k:] / 3)
    np.testing.assert_allclose(hi[k:], 3 * nom[k:])
    assert as_vector({"FB_kz": 1.0})[PARAM_NAMES.index("FB_kz")] == 1.0
    with pytest.raises(ValueError, match="unknown"):
        as_vector({"nope": 1.0})


def test_matrices_symmetric_positive_and_position_dependent():
    m = MachineTool()
    M1, K1, C1 = m.matrices(None, 0.05)
    M2, K2, C2 = m.matrices(None, 0.55)
    for A in (K1, C1, K2, C2):
        np.testing.assert_allclose(A, A.T, atol=1e-6 * np.abs(A).max())
    for A in (K1, K2):
        assert np.linalg.eigvalsh(A).min() > 0  # no rigid-body mode left: every DOF is held
    assert np.linalg.eigvalsh(C1).min() > -1e-9 * np.abs(C1).max()
    np.testing.assert_array_equal(M1, M2)
    assert np.abs(K1 - K2).max() > 1e-3 * np.abs(K1).max()
    # K is linear in every spring except the nut, which is in series with the shaft
    p = as_vector(None)
    q = p.copy()
    q[PARAM_NAMES.index("LGS_ky")] *= 1.2
    _, Kq, _ = m.matrices(q, 0.25)
    _, Kp, _ = m.matrices(p, 0.25)
    U = m._units(0.25)[2][STIFFNESS_NAMES.index("LGS_ky")]
    np.testing.assert_allclose(Kq - Kp, 0.2 * NOMINAL["LGS_ky"] * U, atol=1e-6 * np.abs(Kp).max())


def test_modes_light_damping_and_consistent_analyses():
    m = MachineTool()
    w, V = m.real_modes(None, 0.25, 15)
    cm = m.complex_modes(None, 0.25, 15)
    f = w / (2 * np.pi)
    assert 30 < f[0] < 60 and f[-1] < 600
    assert np.all((cm.xi > 0.002) & (cm.xi < 0.06))
    np.testing.assert_allclose(cm.freq, f, rtol=0.01)
    # mass-normalised undamped modes
    np.testing.assert_allclose(V.T @ m.M @ V, np.eye(15), atol=1e-9)
    wb, Vb = m.real_modes_batch(as_vector(None)[None, :16], 0.25, 15)
    np.testing.assert_allclose(wb[0], w, rtol=1e-10)
    # the table's first modes move with the axis position, the bed's hardly
    f_pos = np.array([m.real_modes(None, s, 15)[0] for s in (0.05, 0.55)]) / (2 * np.pi)
    assert np.max(np.abs(f_pos[1] / f_pos[0] - 1)) > 0.01


def test_disturbed_constants_shift_modes():
    base = MachineTool()
    dist = MachineTool(MachineToolConstants().disturbed())
    f0 = base.real_modes(None, 0.25, 15)[0]
    f1 = dist.real_modes(None, 0.25, 15)[0]
    rel = np.abs(f1 / f0 - 1)
    assert 0.002 < rel.max() < 0.1


def test_receptance_static_limit_and_accelerance():
    m = MachineTool()
    M, K, C = m.matrices(None, 0.25)
    O = m.observation(0.25)
    j = m.obs_labels.index("T1y")
    H = m.frf(None, 0.25, np.array([1e-3]), "T1y")[:, 0]
    np.testing.assert_allclose(H.real, O @ np.linalg.solve(K, O[j]), rtol=1e-6)
    freq = np.array([50.0, 120.0])
    Ha = m.frf(None, 0.25, freq, j, kind="accelerance")
    Hr = m.frf(None, 0.25, freq, j)
    np.testing.assert_allclose(Ha, -(2 * np.pi * freq) ** 2 * Hr)


@pytest.mark.parametrize("disturbed", [False, True])
def test_simulated_truth_is_the_model_structure(disturbed, rng):
    """The simulator assembles its truth on its own, element by element; with the same constants and
    values it gives the model's matrices and sensors (so estimates can be compared with the truth)."""
    p = as_vector(None) * rng.uniform(0.8, 1.2, len(PARAM_NAMES))
    assert sim.PARAM_NAMES == PARAM_NAMES and sim.NOMINAL == NOMINAL
    consts, tconsts = MachineToolConstants(), sim.TruthConstants()
    assert dataclasses.asdict(consts) == dataclasses.asdict(tconsts)
    if disturbed:
        consts, tconsts = consts.disturbed(), tconsts.disturbed()
    m = MachineTool(consts)
    truth = sim.MachineToolTruth(dict(zip(PARAM_NAMES, p, strict=True)), tconsts)
    assert truth.obs_labels == m.obs_labels
    np.testing.assert_array_equal(truth.O, m.observation(0.0))
    for s in (0.0, 0.3, consts.travel):
        for a, b in zip(m.matrices(p, s), truth.matrices(s), strict=True):
            np.testing.assert_allclose(b, a, rtol=0, atol=1e-13 * np.abs(a).max())
    with pytest.raises(ValueError, match="unknown"):
        sim.MachineToolTruth({"nope": 1.0})


def test_time_domain_modal_test_and_h1_match_the_model(rng):
    m = MachineTool()
    dt = 1.0 / 2048
    n = 2 ** 15
    force = rng.normal(0.0, 100.0, n)  # N, white random excitation at the table
    out = sim.simulate_modal_test(sim.MachineToolTruth(), 0.25, force, dt, "T1x", rng, accel_noise=1e-3)
    assert out["accel"].shape == (n, len(m.obs_labels))
    est = h1_estimate(out["force"], out["accel"], dt, nperseg=2048, f_max=400.0)
    band = (est.freq > 20) & (est.freq < 350)
    Hm = m.frf(None, 0.25, est.freq[band], "T1x", kind="accelerance")
    k = m.obs_labels.index("T1x")
    rel = np.abs(est.H[k, band] - Hm[k]) / np.abs(Hm[k])
    assert np.median(rel) < 0.05
    assert np.median(est.coherence[k, band]) > 0.95
    assert est.n_averages > 20
