"""identification.estimation.distributions gives what scipy.stats gives (the same Cephes functions),
over seeded draws of arguments and at the edges the analyses meet (negative statistics, tiny tails)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats as st

from identification.estimation import distributions as d

rng = np.random.default_rng(20261129)
X = rng.uniform(0.0, 80.0, 500)
Q = rng.uniform(1e-9, 1 - 1e-9, 500)
K = rng.integers(1, 60, 500)
K2 = rng.integers(1, 400, 500).astype(float) + rng.uniform(0, 1, 500)  # t and F take real dof


@pytest.mark.parametrize(("ours", "theirs"), [
    (lambda: d.chi2_sf(X, K), lambda: st.chi2.sf(X, K)),
    (lambda: d.chi2_ppf(Q, K), lambda: st.chi2.ppf(Q, K)),
    (lambda: d.f_sf(X / 10, K, K2), lambda: st.f.sf(X / 10, K, K2)),
    (lambda: d.f_ppf(Q, K, K2), lambda: st.f.ppf(Q, K, K2)),
    (lambda: d.norm_ppf(Q), lambda: st.norm.ppf(Q)),
    (lambda: d.norm_isf(Q), lambda: st.norm.isf(Q)),
    (lambda: d.t_ppf(Q, K2), lambda: st.t.ppf(Q, K2)),
    (lambda: d.t_isf(Q, K2), lambda: st.t.isf(Q, K2)),
], ids=["chi2_sf", "chi2_ppf", "f_sf", "f_ppf", "norm_ppf", "norm_isf", "t_ppf", "t_isf"])
def test_each_function_is_scipy_stats_to_rounding(ours, theirs):
    np.testing.assert_allclose(ours(), theirs(), rtol=1e-11, atol=0)


def test_the_edges_the_analyses_meet():
    assert d.chi2_sf(-3.0, 4) == st.chi2.sf(-3.0, 4) == 1.0  # a statistic below zero
    assert d.f_sf(-1.0, 2, 7) == st.f.sf(-1.0, 2, 7) == 1.0
    assert 0 < d.chi2_sf(900.0, 2) == pytest.approx(st.chi2.sf(900.0, 2), rel=1e-11)  # a far tail, not 0
    assert np.isnan(d.chi2_sf(np.nan, 3)) and np.isnan(st.chi2.sf(np.nan, 3))
