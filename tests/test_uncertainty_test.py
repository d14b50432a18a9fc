"""Algorithm 1 building blocks: Shapiro-Wilk, Table 3 splits, Bonferroni error-rate control."""

import numpy as np
import pytest

from identification.estimation.ellipsoid import alpha_min
from identification.estimation.least_squares import fit_state_model
from identification.models.press_models import PressLinkageModel
from identification.selection.uncertainty_test import (
    paired_differences,
    press_scenarios,
    random_splits,
    run_uncertainty_test,
    shapiro_table,
)

SIG = np.array([1.518e-5, 4.895e-6, 3.904e-6])


def test_shapiro_reference_values():
    # the 20-value example used in scipy's own Shapiro-Wilk tests: W = 0.900473, p = 0.042090
    x = np.array([0.11, 7.87, 4.61, 10.14, 7.95, 3.14, 0.46, 4.43, 0.21, 4.75, 0.71, 1.52, 3.24,
                  0.93, 0.42, 4.97, 9.53, 4.55, 0.47, 6.66])
    z = np.zeros((2, 20, 1))
    z[1, :, 0] = x  # paired difference z2 - z1 = x
    row = shapiro_table(z, ("s",))[0]
    assert row.W == pytest.approx(0.900473, abs=1e-6)
    assert row.p_value == pytest.approx(0.042090, abs=1e-6)
    assert not row.normal


def test_paired_differences_layout():
    z = np.arange(6 * 4 * 3, dtype=float).reshape(6, 4, 3)
    d = paired_differences(z)
    assert d.shape == (12, 3)
    np.testing.assert_allclose(d, 12.0)  # consecutive series differ by 4*3 in this layout


def test_press_scenarios_match_table_3():
    sc = press_scenarios(29)
    one = {k: ([int(i) + 1 for i in c], [int(i) + 1 for i in v]) for k, (c, v) in sc.items()}
    assert one["loading halves"] == (list(range(2, 15, 2)), list(range(3, 16, 2)))
    assert one["unloading halves"] == (list(range(15, 28, 2)), list(range(16, 29, 2)))
    assert one["loading vs unloading"] == (list(range(2, 15)), list(range(15, 29)))
    assert one["alternating"] == (list(range(3, 28, 2)), list(range(2, 29, 2)))
    rs = random_splits(29, 3, np.random.default_rng(0))
    for c, v in rs.values():
        assert len(set(c) & set(v)) == 0 and sorted(np.r_[c, v]) == list(range(1, 28))


@pytest.mark.slow(reason="Monte Carlo over many replicates of the uncertainty test")
def test_familywise_error_rate_of_a_correct_model():
    """Data from the M1 structural model itself + Gaussian noise: the FWER over 200 replicates is at most 5 %
    up to the replicates' own binomial scatter (two std: 1.5 % at 200), as in test_interim_looks.py."""
    rng = np.random.default_rng(12345)
    m = PressLinkageModel()
    p_true = np.array([2.0e8, 1.5e8])
    p_start = p_true * np.array([0.8, 1.25])  # every fit starts well away from the truth
    qd = np.r_[np.linspace(0, 20000, 15), np.linspace(20000, 0, 15)[1:]]
    q = np.tile(qd, (2, 1)) * (1 + 0.01 * rng.standard_normal((2, 1)))
    z0 = m.predict(p_true, q.ravel()).reshape(2, 29, 3)
    splits = press_scenarios(29)
    n_rep, rej, rej_paper = 200, 0, 0
    for _ in range(n_rep):
        z = z0 + rng.standard_normal(z0.shape) * SIG

        def fit(idx, z=z):
            f = fit_state_model(m, z[:, idx].reshape(-1, 3), q[:, idx].ravel(), SIG, p_start, omega=[1, 1, 0])
            return f.p, f.covariance

        res = run_uncertainty_test(fit, splits, tol=0.05)
        rej += res.reject
        rej_paper += any(alpha_min(t.p_cal, t.C_cal, t.p_val) < t.level for t in res.tests)
    fwer, fwer_paper = rej / n_rep, rej_paper / n_rep
    print(f"FWER difference-covariance rule: {fwer:.3f}; paper's C_cal-only rule: {fwer_paper:.3f}")
    assert fwer <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / n_rep), fwer
    assert fwer_paper > fwer  # comparing a noisy p_val against C_cal alone over-rejects
