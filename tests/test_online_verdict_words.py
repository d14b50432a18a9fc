"""The online press verdict never errors and never claims what it could not compute (issue 31, item 5): on
two or three series the comparison of some splits is singular - those models are "undecided" with the
reason in words (they were called "keep" with an alpha_min of NaN, and numpy warned "All-NaN slice"); one
series, or a press analysis that is singular on the series so far, gives an undecided verdict, not an
error; p-values print readably ("< 1e-6", not "9.52e-109 %")."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from daq.cli.watch import _verdict_text
from identification.analyses import online_press
from identification.analyses.online_press import model_verdict
from simulators.physics.press import SENSOR_NAMES, PressTruth, simulate_staircase, staircase_forces

SIGMAS = np.array([1.518e-5, 4.895e-6, 3.904e-6]) / np.sqrt(100)  # configs/press-sim.toml, 100 readings


@pytest.fixture(scope="module")
def series() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Three series of the shipped staircase on the simulated press (seeded)."""
    rng = np.random.default_rng(0)
    qd = staircase_forces(20000.0, 14)
    q = np.tile(qd, (3, 1)) * (1 + 0.003 * rng.standard_normal((3, qd.size)))
    return simulate_staircase(PressTruth(), q, SIGMAS, rng), q, qd


@pytest.mark.parametrize("n", [2, 3])
def test_a_split_that_cannot_be_compared_leaves_its_model_undecided(series, n):
    z, q, qd = series
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "All-NaN slice encountered"
        v = model_verdict(z[:n], q[:n], qd, SIGMAS, SENSOR_NAMES, n_planned=10)
        d = v.to_dict()
    undecided = [m for m, mv in v.models.items() if np.isnan(mv.alpha_min).any() and not mv.reject]
    assert undecided, "this data set has splits whose fits are singular at two and three series"
    for m in undecided:
        mv = d["models"][m]
        assert mv["verdict"] == "undecided" and mv["undecided"].startswith("not enough series: ")
        assert m in d["undecided"] and m not in d["kept"] and m not in d["rejected"]
    for m in d["kept"]:  # kept only where every split was compared
        assert np.isfinite(v.models[m].alpha_min).all()
    text = _verdict_text(d)
    assert "not enough series" in text and "nan" not in text.lower()


def test_one_series_is_an_undecided_verdict_in_words(series):
    z, q, qd = series
    v = model_verdict(z[:1], q[:1], qd, SIGMAS, SENSOR_NAMES)
    d = v.to_dict()
    assert d["undecided"].startswith("not enough series: ") and "rejected" not in d and "kept" not in d
    assert _verdict_text(d) == d["undecided"]


def test_p_values_print_readably(series):
    fmt = online_press.format_alpha
    assert fmt(9.52e-111) == "< 1e-6" and fmt(0.0) == "< 1e-6"
    assert fmt(0.103) == "0.1" and fmt(3.2e-4) == "0.00032" and fmt(float("nan")) == "not computed"
    z, q, qd = series
    text = _verdict_text(model_verdict(z, q, qd, SIGMAS, SENSOR_NAMES).to_dict())
    assert "e-1" not in text and "e-2" not in text and "e-3" not in text, text  # no 1e-109 %
