"""Identifiability measures (seed 004, eqs. 6-9) and profile likelihood on constructed cases."""

import numpy as np
import pytest

from identification.estimation.identifiability import analyze_identifiability, profile_likelihood


def _columns(seed=0, n=400, k=3):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, k))


def test_orthogonal_columns_are_accepted_and_formulas_hold():
    X = _columns()
    ranges = np.array([2.0, 0.5, 10.0])
    S = X / ranges  # after range scaling every column is X_j
    r = analyze_identifiability(S, ranges, ["a", "b", "c"])
    np.testing.assert_allclose(r.pii, np.linalg.norm(X, axis=0))
    Xt = X / np.linalg.norm(X, axis=0)
    sv = np.linalg.svd(Xt, compute_uv=False)
    np.testing.assert_allclose(np.sort(r.condition_indices), np.sort(sv[0] / sv))
    assert r.collinearity_index == pytest.approx(1 / sv[-1])
    np.testing.assert_allclose(r.scaled_covariance, np.linalg.inv(X.T @ X), rtol=1e-10)
    assert r.accepted and r.max_ci < 2 and r.reasons == []


def test_collinear_case_is_rejected():
    X = _columns(1)
    rng = np.random.default_rng(2)
    # third column = combination of the first two plus 1 % independent part
    X[:, 2] = X[:, 0] - 0.7 * X[:, 1] + 0.01 * rng.normal(size=X.shape[0])
    r = analyze_identifiability(X, np.ones(3), ["a", "b", "c"])
    assert r.max_ci > 30
    assert r.collinearity_index > 20
    assert not r.accepted
    assert any("collinear" in s for s in r.reasons)
    # all three parameters take part in the near-dependency
    assert np.all(r.variance_proportions > 0.3)
    # the scaled variances blow up compared with the orthogonal case
    assert np.min(np.diag(r.scaled_covariance)) > 100 * np.max(
        np.diag(analyze_identifiability(_columns(1), np.ones(3)).scaled_covariance))


def test_unimportant_parameter_is_rejected_and_threshold_is_configurable():
    X = _columns(3)
    X[:, 1] *= 0.005  # 0.5 % of the others
    r = analyze_identifiability(X, np.ones(3), ["a", "b", "c"])
    assert r.min_pii < 0.01 and not r.accepted
    assert "b" in r.reasons[0]
    assert analyze_identifiability(X, np.ones(3), min_pii_ratio=0.001).accepted
    # range scaling matters: a 100x larger search range makes the parameter important again
    assert analyze_identifiability(X, np.array([1.0, 100.0, 1.0])).accepted


def test_profile_likelihood_clear_and_flat():
    # J(p) = |A p - b|^2 with p1, p2 well determined and p3 entering only through p2 + p3 -> flat profiles
    A = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 1.0], [1.0, 1.0, 1.0], [2.0, -1.0, -1.0]])
    b = A @ np.array([1.0, 2.0, 3.0]) + np.array([0.1, -0.1, 0.05, 0.0])

    def cost(p):
        e = A @ p - b
        return float(e @ e)

    p_opt = np.linalg.lstsq(A, b, rcond=None)[0]

    def refit(j, value):
        free = [i for i in range(3) if i != j]
        rhs = b - A[:, j] * value
        q = np.linalg.lstsq(A[:, free], rhs, rcond=None)[0]
        p = np.zeros(3)
        p[free] = q
        p[j] = value
        return cost(p)

    # well-posed version: drop the third parameter
    A2 = A[:, :2]
    p2 = np.linalg.lstsq(A2, b, rcond=None)[0]

    def refit2(j, value):
        k = 1 - j
        q = (A2[:, k] @ (b - A2[:, j] * value)) / (A2[:, k] @ A2[:, k])
        p = np.zeros(2)
        p[j], p[k] = value, q
        e = A2 @ p - b
        return float(e @ e)

    e2 = A2 @ p2 - b
    r2 = profile_likelihood(refit2, ["p1", "p2"], p2, [(-5, 5), (-5, 10)], float(e2 @ e2), n_grid=11)
    assert all(r2.clear_minimum)
    r3 = profile_likelihood(refit, ["p1", "p2", "p3"], p_opt, [(-5, 5), (-5, 10), (-5, 10)], cost(p_opt),
                            n_grid=11)
    assert r3.clear_minimum == [True, False, False]
    assert np.ptp(r3.costs[2]) < 1e-9
