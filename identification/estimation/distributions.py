"""Tail probabilities and quantiles of the chi-square, F, normal and Student t distributions, from
scipy.special: the same Cephes functions scipy.stats calls for these (``chi2.sf`` is ``chdtrc``, ``f.sf``
``fdtrc``, ``norm.ppf`` ``ndtri``, ``t.ppf`` ``stdtrit``), without importing scipy.stats - 0.3-0.9 s of a
command's start, on the critical path of every ``hil analyze``."""

from __future__ import annotations

import numpy as np
from scipy import special


def chi2_sf(x, dof):
    """P(X > x) for X ~ chi2(dof)."""
    return special.chdtrc(dof, np.maximum(x, 0.0))


def chi2_ppf(q, dof):
    """The q-quantile of chi2(dof)."""
    return special.chdtri(dof, 1.0 - np.asarray(q, dtype=float))


def f_sf(x, dfn, dfd):
    """P(X > x) for X ~ F(dfn, dfd)."""
    return special.fdtrc(dfn, dfd, np.maximum(x, 0.0))


def f_ppf(q, dfn, dfd):
    """The q-quantile of F(dfn, dfd)."""
    return special.fdtri(dfn, dfd, q)


def norm_ppf(q):
    """The q-quantile of the standard normal."""
    return special.ndtri(q)


def norm_isf(q):
    """The standard normal's value exceeded with probability q."""
    return -special.ndtri(q)


def t_ppf(q, dof):
    """The q-quantile of Student's t(dof)."""
    return special.stdtrit(dof, q)


def t_isf(q, dof):
    """Student's t(dof) value exceeded with probability q."""
    return -special.stdtrit(dof, q)
