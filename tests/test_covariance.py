"""Covariance (eq. 10) against Monte-Carlo, and confidence ellipsoids."""

import numpy as np
import pytest
from scipy.stats import chi2

from identification.estimation.covariance import covariance_matrix
from identification.estimation.ellipsoid import alpha_min, confidence_ellipsoid
from identification.estimation.least_squares import fit_residuals, fit_state_model
from identification.models.press_models import PressLinkageModel

P_TRUE = np.array([2.0e8, 1.5e8])
P_START = P_TRUE * np.array([0.8, 1.25])  # every fit starts well away from the truth
SIG = np.array([1.518e-5, 4.895e-6, 3.904e-6])


@pytest.mark.slow(reason="Monte Carlo of the covariance")
def test_covariance_matches_monte_carlo():
    rng = np.random.default_rng(2024)
    m = PressLinkageModel()
    q = np.linspace(0, 20000, 15)[1:]
    z0 = m.predict(P_TRUE, q)
    ref = fit_state_model(m, z0, q, SIG, P_START)
    n_rep = 500
    est = np.empty((n_rep, 2))
    for i in range(n_rep):
        z = z0 + rng.standard_normal(z0.shape) * SIG
        est[i] = fit_state_model(m, z, q, SIG, P_START, second_order=False).p
    emp = np.cov(est.T)
    ratio = np.trace(emp) / np.trace(ref.covariance)
    print(f"empirical/analytic trace ratio = {ratio:.4f}")
    assert abs(ratio - 1) < 0.10
    assert abs(np.mean(est[:, 1]) - P_TRUE[1]) < 4 * np.sqrt(emp[1, 1] / n_rep)


def test_covariance_with_second_order_term_is_the_estimator_sensitivity():
    """Eq. 10 is C = G G^T with G = dp/dz the sensitivity of the estimate to the (unit-sigma) data.

    G by finite differences of re-fits on the BOD data (sizeable residuals, curved model): the covariance
    with S matches it; the Gauss-Newton covariance (S dropped) does not.
    """
    x = np.array([1, 2, 3, 4, 5, 7.0])
    y = np.array([8.3, 10.3, 19.0, 16.0, 15.6, 19.8])

    def fit(data):
        # started about 20 % below the optimum (19.14, 0.531) in both parameters
        return fit_residuals(lambda t: data - t[0] * (1 - np.exp(-t[1] * x)), [15.0, 0.4])

    ref = fit(y)
    h = 1e-4
    G = np.stack([(fit(y + h * e).p - fit(y - h * e).p) / (2 * h) for e in np.eye(y.size)], axis=1)
    C_fd = G @ G.T
    rel = lambda C: np.abs(C - C_fd).max() / np.abs(C_fd).max()  # noqa: E731
    print(f"relative deviation from dp/dz: with S {rel(ref.covariance):.2e}, Gauss-Newton "
          f"{rel(ref.covariance_gn):.2e}")
    assert rel(ref.covariance) < 5e-4
    assert rel(ref.covariance_gn) > 0.01


def test_covariance_formula_reduces_to_gauss_newton():
    rng = np.random.default_rng(1)
    J = rng.standard_normal((20, 3))
    C, H = covariance_matrix(J)
    np.testing.assert_allclose(C, np.linalg.inv(J.T @ J), rtol=1e-10)
    w = np.r_[np.ones(10), np.zeros(10)]
    Cw, _ = covariance_matrix(J, w)
    np.testing.assert_allclose(Cw, np.linalg.inv(J[:10].T @ J[:10]), rtol=1e-10)
    S = 0.1 * np.eye(3)
    Cs, Hs = covariance_matrix(J, None, S)
    Hi = np.linalg.inv(J.T @ J + S)
    np.testing.assert_allclose(Cs, Hi @ J.T @ J @ Hi, rtol=1e-10)


def test_ellipsoid_and_alpha_min():
    C = np.array([[4.0, 1.0], [1.0, 2.0]])
    p = np.array([1.0, -1.0])
    ell = confidence_ellipsoid(p, C, 0.05)
    assert ell.radius2 == pytest.approx(chi2.ppf(0.95, 2))
    w = np.linalg.eigvalsh(C)
    np.testing.assert_allclose(np.sort(ell.semi_axes), np.sqrt(w * ell.radius2))
    # a point on the boundary has alpha_min equal to the level
    v = ell.axes[:, 1] * ell.semi_axes[1]
    assert alpha_min(p, C, p + v) == pytest.approx(0.05, rel=1e-9)
    assert ell.contains(p + 0.99 * v) and not ell.contains(p + 1.01 * v)
    assert alpha_min(p, C, p + v, C) > 0.05  # comparing two noisy estimates widens the region
    b = ell.boundary_2d(50)
    d2 = np.einsum("ni,ij,nj->n", b - p, np.linalg.inv(C), b - p)
    np.testing.assert_allclose(d2, ell.radius2, rtol=1e-9)
