"""A lab window's edges: the search over a time axis read a stretch at a time finds, for every sample's own
time and the times just beside it, the index numpy's searchsorted finds on the whole axis, in a few reads -
on steady, gappy, bursty and repeating time axes (seeded)."""

from __future__ import annotations

import numpy as np
import pytest

from daq.lab.reader import EDGE_READ, search_edge


def axes() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(21)
    steady = 1.7e9 + np.arange(40_000) * 1e-4
    gappy = np.concatenate([1.7e9 + np.arange(9_000) * 1e-3, 1.7e9 + 3600 + np.arange(15_000) * 1e-3,
                            1.7e9 + 7200 + np.arange(500) * 0.5])
    bursty = 1.7e9 + np.cumsum(rng.exponential(1e-3, 30_000) * (1 + 500 * (rng.random(30_000) < 0.01)))
    repeats = 1.7e9 + np.repeat(np.arange(6_000) * 0.01, rng.integers(1, 6, 6_000))  # equal times in a row
    return {"steady": steady, "gappy": gappy, "bursty": bursty, "repeats": repeats}


@pytest.mark.parametrize("name", list(axes()))
def test_every_sample_time_and_its_neighbours_find_the_index_searchsorted_finds(name):
    t = axes()[name]
    reads: list[int] = []

    def read(lo: int, hi: int) -> np.ndarray:
        reads.append(hi - lo)
        return t[lo:hi]

    worst = 0
    targets = np.concatenate([t, np.nextafter(t, -np.inf), np.nextafter(t, np.inf), [t[0] - 1, t[-1] + 1]])
    for target in targets[::3] if name == "steady" else targets:
        reads.clear()
        assert search_edge(read, len(t), float(target), float(t[0]), float(t[-1])) == \
            np.searchsorted(t, target, side="left"), target
        worst = max(worst, len(reads))
        assert all(r <= EDGE_READ for r in reads)
    assert worst <= 2 * np.log2(len(t) / EDGE_READ) + 2, worst
    if name == "steady":
        assert worst == 1  # a steady rate: the first guess holds the edge
