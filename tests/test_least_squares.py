"""Weighted least squares with implicit derivatives: derivatives, known answers, recovery."""

import numpy as np
import pytest

from identification.estimation.covariance import second_order_term
from identification.estimation.least_squares import fit_residuals, fit_state_model, state_sensitivities
from identification.models.press_models import PressLinkageModel

P_TRUE = np.array([2.0e8, 1.5e8])
P_START = P_TRUE * np.array([0.75, 1.25])  # fits start well away from the truth in every parameter
SIG = np.array([1.518e-5, 4.895e-6, 3.904e-6])


class _FirstOrderOnly:
    """Same model without exact second derivatives (forces the finite-difference fallback)."""

    def __init__(self, m):
        self.m, self.n_p, self.n_s = m, m.n_p, m.n_s

    def solve_state(self, p, q):
        return self.m.solve_state(p, q)

    def jacobians(self, y, p, q):
        return self.m.jacobians(y, p, q)

    def observe(self, y, p, q):
        return self.m.observe(y, p, q)

    def observe_jacobians(self, y, p, q):
        return self.m.observe_jacobians(y, p, q)


def test_implicit_derivatives_match_finite_differences():
    m = PressLinkageModel()
    q = np.array([3000.0, 11000.0, 20000.0])
    s = state_sensitivities(m, P_TRUE, q)
    for l in range(2):
        e = np.zeros(2)
        e[l] = 1e-4 * P_TRUE[l]
        fd = (m.predict(P_TRUE + e, q) - m.predict(P_TRUE - e, q)) / (2 * e[l])
        np.testing.assert_allclose(s.dh[:, :, l], fd, rtol=1e-6, atol=1e-9 * np.abs(fd).max())
        sp = state_sensitivities(m, P_TRUE + e, q, second=False)
        sm = state_sensitivities(m, P_TRUE - e, q, second=False)
        fd2 = (sp.dh - sm.dh) / (2 * e[l])
        np.testing.assert_allclose(s.d2h[:, :, :, l], fd2, rtol=1e-5, atol=1e-6 * np.abs(fd2).max())
    # the generic finite-difference fallback agrees with the exact second derivatives
    s_fd = state_sensitivities(_FirstOrderOnly(m), P_TRUE, q)
    np.testing.assert_allclose(s_fd.d2h, s.d2h, rtol=1e-6, atol=1e-6 * np.abs(s.d2h).max())


def test_second_order_term_matches_finite_difference_hessian():
    # Away from the optimum the residuals are large, so H = J^T J + S differs clearly from Gauss-Newton.
    rng = np.random.default_rng(7)
    m = PressLinkageModel()
    q = np.linspace(1000, 20000, 12)
    z = m.predict(P_TRUE, q) + rng.standard_normal((12, 3)) * SIG
    p = P_TRUE * np.array([0.7, 1.4])
    s = state_sensitivities(m, p, q)
    r = ((z - s.h) / SIG).ravel()
    J = -(s.dh / SIG[None, :, None]).reshape(-1, 2)
    r_pp = -(s.d2h / SIG[None, :, None, None]).reshape(-1, 2, 2)
    H = J.T @ J + second_order_term(r, np.ones(r.size), r_pp)

    def f(x):  # objective in relative units x = p / p_ref
        rr = ((z - m.predict(x * p, q)) / SIG).ravel()
        return 0.5 * rr @ rr

    h = 1e-3
    H_fd = np.empty((2, 2))
    for i in range(2):
        for j in range(2):
            ei, ej = np.eye(2)[i] * h, np.eye(2)[j] * h
            one = np.ones(2)
            num = f(one + ei + ej) - f(one + ei - ej) - f(one - ei + ej) + f(one - ei - ej)
            H_fd[i, j] = num / (4 * h * h)
    D = np.diag(p)
    np.testing.assert_allclose(D @ H @ D, H_fd, rtol=2e-4, atol=1e-5 * np.abs(H_fd).max())
    gn = D @ (J.T @ J) @ D
    assert np.abs(gn - H_fd).max() > 0.05 * np.abs(H_fd).max()  # S is essential here


def test_bod_known_answer():
    # Rooney-Biegler / BOD data, y = t0 (1 - exp(-t1 x)); s^2 = RSS / (n - 2), Gauss-Newton covariance
    x = np.array([1, 2, 3, 4, 5, 7.0])
    y = np.array([8.3, 10.3, 19.0, 16.0, 15.6, 19.8])
    fit = fit_residuals(lambda t: y - t[0] * (1 - np.exp(-t[1] * x)), [15.0, 0.4], residual_variance=True,
                        second_order=False)
    assert fit.success
    np.testing.assert_allclose(fit.p, [19.1426, 0.53109], rtol=2e-5)
    np.testing.assert_allclose(fit.std_errors, [2.496, 0.2031], rtol=5e-4)
    # with the second-order term the standard errors grow slightly (curved model, sizeable residuals)
    fit2 = fit_residuals(lambda t: y - t[0] * (1 - np.exp(-t[1] * x)), [15.0, 0.4], residual_variance=True)
    assert np.all(fit2.std_errors > fit.std_errors)


def test_press_fit_recovers_truth_and_sensor_weights():
    rng = np.random.default_rng(11)
    m = PressLinkageModel()
    q = np.tile(np.linspace(0, 20000, 15)[1:], 4)
    z = m.predict(P_TRUE, q) + rng.standard_normal((q.size, 3)) * SIG
    fit = fit_state_model(m, z, q, SIG, P_START)
    assert fit.success and fit.n_obs == q.size * 3
    assert np.all(np.abs(fit.p - P_TRUE) < 4 * fit.std_errors)
    fit_110 = fit_state_model(m, z, q, SIG, P_START, omega=[1, 1, 0])
    assert fit_110.n_obs == q.size * 2
    assert np.trace(fit_110.covariance) > np.trace(fit.covariance)  # fewer sensors, larger covariance
    assert fit.s2 == pytest.approx(1.0, abs=0.35)
