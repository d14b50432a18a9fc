"""Profile-likelihood intervals: known answers on linear regression, an unidentifiable parameter, executor."""

import numpy as np
import pytest
import scipy.stats

from daq.executor import LocalExecutor
from identification.profile_likelihood import lr_threshold, profile_likelihood_intervals


class LinearRefit:
    """Exact re-fit of y = X b with b_j fixed (module-level class: picklable for process pools)."""

    def __init__(self, X, y):
        self.X, self.y = X, y

    def cost(self, b):
        r = self.y - self.X @ b
        return 0.5 * float(r @ r)

    def __call__(self, j, value, start):
        free = [i for i in range(self.X.shape[1]) if i != j]
        q = np.linalg.lstsq(self.X[:, free], self.y - self.X[:, j] * value, rcond=None)[0]
        b = np.empty(self.X.shape[1])
        b[free], b[j] = q, value
        return self.cost(b), b


def _regression(n=30, sigma=0.3, seed=4):
    rng = np.random.default_rng(seed)
    X = np.column_stack([np.ones(n), rng.uniform(-1, 1, n), rng.uniform(0, 2, n)])
    y = X @ np.array([1.0, -2.0, 0.5]) + rng.normal(0, sigma, n)
    b = np.linalg.lstsq(X, y, rcond=None)[0]
    return X, y, b, np.linalg.inv(X.T @ X)


def test_thresholds():
    assert lr_threshold() == pytest.approx(3.841458820694124)
    assert lr_threshold(0.95, 27) == pytest.approx(scipy.stats.t.ppf(0.975, 27) ** 2)


def test_sigma_known_gives_the_normal_interval():
    X, y, b, XtXi = _regression()
    sigma = 0.3
    f = LinearRefit(X, y)
    se = sigma * np.sqrt(np.diag(XtXi))
    bounds = [(bj - 50 * s, bj + 50 * s) for bj, s in zip(b, se, strict=True)]
    r = profile_likelihood_intervals(f, b, bounds, f.cost(b), sigma ** 2, ["b0", "b1", "b2"],
                                     first_step=0.2 * se)
    z = scipy.stats.norm.ppf(0.975)
    for j in range(3):
        lo, hi = r.interval[j]
        assert lo == pytest.approx(b[j] - z * se[j], rel=1e-9, abs=1e-12)
        assert hi == pytest.approx(b[j] + z * se[j], rel=1e-9, abs=1e-12)
    assert all(r.identifiable) and all(r.clear_minimum)
    # the traced points lie on the exact quadratic profile
    for j in range(3):
        np.testing.assert_allclose(r.lr[j], ((r.grids[j] - b[j]) / se[j]) ** 2, rtol=1e-8, atol=1e-10)


def test_sigma_estimated_gives_the_t_interval_and_matches_fisher():
    X, y, b, XtXi = _regression(seed=7)
    n, p = X.shape
    f = LinearRefit(X, y)
    s2 = 2 * f.cost(b) / (n - p)
    se = np.sqrt(s2 * np.diag(XtXi))
    bounds = [(-100.0, 100.0)] * 3
    r = profile_likelihood_intervals(f, b, bounds, f.cost(b), s2, ["b0", "b1", "b2"], fisher_se=se, dof=n - p)
    t = scipy.stats.t.ppf(0.975, n - p)
    for j in range(3):
        assert r.interval[j][0] == pytest.approx(b[j] - t * se[j], rel=1e-9)
        assert r.interval[j][1] == pytest.approx(b[j] + t * se[j], rel=1e-9)
        assert r.fisher_interval[j] == pytest.approx(r.interval[j], rel=1e-9)
    # half a standard error first, then one step past the threshold: 2 re-fits per side
    assert r.n_refits == 12
    assert "b1" in r.format_table() and "identifiable" in r.format_table()


def test_unidentifiable_parameter_stays_open_to_the_bounds():
    rng = np.random.default_rng(2)
    n = 40
    a = rng.uniform(-1, 1, n)
    X = np.column_stack([np.ones(n), a, a])  # b1 and b2 only enter as b1 + b2
    y = 0.5 + 1.5 * a + rng.normal(0, 0.1, n)
    b = np.linalg.lstsq(X, y, rcond=None)[0]
    f = LinearRefit(X, y)
    r = profile_likelihood_intervals(f, b, [(-10, 10)] * 3, f.cost(b), 0.01, ["b0", "b1", "b2"],
                                     first_step=[0.01, 0.5, 0.5])
    assert r.identifiable == [True, False, False]
    assert r.interval[1] == (None, None) and r.interval[2] == (None, None)
    assert r.grids[1][0] == -10 and r.grids[1][-1] == 10  # traced to both bounds
    d = r.to_dict()
    assert d["parameters"][1]["interval"] == [None, None] and d["parameters"][0]["identifiable"]


def test_same_intervals_through_a_process_pool():
    X, y, b, XtXi = _regression()
    f = LinearRefit(X, y)
    se = 0.3 * np.sqrt(np.diag(XtXi))
    args = (f, b, [(-100.0, 100.0)] * 3, f.cost(b), 0.09, ["b0", "b1", "b2"])
    serial = profile_likelihood_intervals(*args, fisher_se=se)
    with LocalExecutor(2) as ex:
        pooled = profile_likelihood_intervals(*args, fisher_se=se, executor=ex)
    assert pooled.interval == serial.interval
