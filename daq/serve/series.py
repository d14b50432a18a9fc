"""A stored stream reduced for a plot: at most a given number of points, each bucket of samples as its
first time, mean, minimum and maximum (the min/max envelope keeps spikes a decimated line would drop), and
gaps between measurement windows kept as gaps (a null row). Plain functions over numpy arrays."""

from __future__ import annotations

import math

import numpy as np

GAP_FACTOR = 5.0  # a step in time over this many typical sample spacings is a gap (drawn as a break)


def buckets_of(n: int, points: int) -> int:
    """Samples per bucket so that ``n`` samples make at most ``points`` buckets."""
    return max(1, math.ceil(n / max(1, points)))


Arrays = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def reduce(t: np.ndarray, data: np.ndarray, per: int) -> Arrays:
    """(t, mean, min, max) of consecutive buckets of ``per`` samples (the last may be shorter); ``data`` is
    (n, channels). NaN samples are left out of a bucket's figures."""
    n = len(t)
    if n == 0:
        empty = np.empty((0, data.shape[1]))
        return np.empty(0), empty, empty, empty
    starts = np.arange(0, n, per)
    finite = ~np.isnan(data)
    counts = np.add.reduceat(finite, starts, axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):  # an all-NaN bucket is NaN: fine
        mean = np.add.reduceat(np.where(finite, data, 0.0), starts, axis=0) / counts
    lo = np.minimum.reduceat(np.where(finite, data, np.inf), starts, axis=0)
    hi = np.maximum.reduceat(np.where(finite, data, -np.inf), starts, axis=0)
    lo[~np.isfinite(lo)] = np.nan
    hi[~np.isfinite(hi)] = np.nan
    return t[starts], mean, lo, hi


def with_gaps(t: np.ndarray, *columns: np.ndarray, spacing: float | None) -> tuple[np.ndarray, ...]:
    """``t`` and ``columns`` (rows per time) with a NaN row inserted where time jumps by more than
    :data:`GAP_FACTOR` sample spacings (``spacing``; the median step when None): a plot draws a break."""
    if len(t) < 2:
        return (t, *columns)
    steps = np.diff(t)
    typical = spacing if spacing else float(np.median(steps[steps > 0])) if np.any(steps > 0) else 0.0
    if typical <= 0:
        return (t, *columns)
    cut = np.flatnonzero(steps > GAP_FACTOR * typical) + 1
    if not len(cut):
        return (t, *columns)
    t_out = np.insert(t, cut, t[cut - 1] + typical)
    cols = [np.insert(c.astype(float), cut, np.nan, axis=0) for c in columns]
    return (t_out, *cols)
