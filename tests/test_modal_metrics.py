"""Known answers of the modal and FRF agreement measures (seed 003: MACXP, NDD, FRAC, CSF)."""

import numpy as np
import pytest

from identification.frequency.modal_metrics import csf, frac, macxp, macxp_matrix, ndd, summary_stats


def _mode(rng, n=12):
    return rng.normal(size=n) + 1j * 0.2 * rng.normal(size=n)


def test_macxp_identical_is_one_and_invariant_to_complex_scaling(rng):
    phi = _mode(rng)
    lam = -3.0 + 2j * np.pi * 80.0
    assert macxp(phi, lam, phi, lam) == pytest.approx(1.0, abs=1e-12)
    for a in (2.5, -1.0, 1j, 0.3 - 4.0j):
        assert macxp(a * phi, lam, phi, lam) == pytest.approx(1.0, abs=1e-12)
        assert macxp(phi, lam, a * phi, lam) == pytest.approx(1.0, abs=1e-12)


def test_macxp_orthogonal_is_zero():
    e1 = np.array([1.0, 0.0, 0.0, 0.0])
    e2 = np.array([0.0, 1.0, 0.0, 0.0])
    lam = -2.0 + 300j
    assert macxp(e1, lam, e2, lam) == pytest.approx(0.0, abs=1e-15)
    assert macxp(e1 * (1 + 1j), lam, e2 * 1j, lam) == pytest.approx(0.0, abs=1e-15)


def test_macxp_weighs_eigenvalues():
    phi = np.array([1.0, 0.5, -0.2])
    w, zeta = 2 * np.pi * 100.0, 0.02
    lam = w * (-zeta + 1j * np.sqrt(1 - zeta ** 2))
    # same shape, frequency 1 % off: |conj(l1) + l2| = |-2 sigma + i dw| instead of 2 sigma
    lam2 = 1.01 * w * (-zeta + 1j * np.sqrt(1 - zeta ** 2))
    m = macxp(phi, lam2, phi, lam)
    assert 0.5 < m < 0.95
    # damping three times the reference: for real shapes the Hermitian term gives 4 s1 s2 / (s1 + s2)^2
    lam3 = w * (-3 * zeta + 1j * np.sqrt(1 - 9 * zeta ** 2))
    assert macxp(phi, lam3, phi, lam) == pytest.approx(0.75, abs=0.01)
    # matrix form agrees with the pairwise one
    M = macxp_matrix(np.stack([phi, phi], 1), [lam, lam2], phi[:, None], [lam])
    assert M[:, 0] == pytest.approx([1.0, m])


def test_ndd_frac_csf_known_values(rng):
    assert ndd(0.03, 0.02) == pytest.approx(0.5)
    assert ndd([0.01, 0.02], [0.02, 0.02]) == pytest.approx([-0.5, 0.0])
    H = rng.normal(size=(3, 200)) + 1j * rng.normal(size=(3, 200))
    assert frac(H, H) == pytest.approx(np.ones(3))
    assert csf(H, H) == pytest.approx(np.ones(3))
    # FRAC is blind to scale, CSF is not: CSF(H, 2H) = 2 * 2 / (1 + 4)
    assert frac(H, 2 * H) == pytest.approx(np.ones(3))
    assert csf(H, 2 * H) == pytest.approx(np.full(3, 0.8))
    G = rng.normal(size=(3, 200)) + 1j * rng.normal(size=(3, 200))
    assert np.all(frac(H, G) < 0.1)


def test_summary_stats_bad_side():
    v = np.arange(1, 101) / 100.0
    s = summary_stats(v)
    assert s["worst"] == 0.01 and s["p5"] == pytest.approx(np.percentile(v, 5)) and s["median"] == 0.505
    s = summary_stats(v, higher_is_better=False)
    assert s["worst"] == 1.0 and s["p5"] == pytest.approx(np.percentile(v, 95))
