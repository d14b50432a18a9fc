"""End-to-end press analysis on simulated data: the paper's qualitative result must come out."""

import json

import numpy as np
import pytest

from daq.rigs.press.plots import plot_estimates, plot_force_displacement
from identification.analyses.press_analysis import analyze_press
from simulators.physics.press import PressTruth, simulate_staircase, staircase_forces

# Per-setpoint values are means over a hold window of 100 samples of sensors with the paper's sigmas, as in
# configs/press-sim.toml: 10 series, the friction models trained on the first 8, tested on the last 2.
SIG_SAMPLE = np.array([1.518e-5, 4.895e-6, 3.904e-6])
SIG = SIG_SAMPLE / 10
N_SERIES = 10


def _data(seed, sig):
    rng = np.random.default_rng(seed)
    qd = staircase_forces()
    # the setpoint correction leaves the actual force within its tolerance of the desired one
    q = np.clip(qd + 20 * rng.standard_normal((N_SERIES, qd.size)), 0, None)
    z = simulate_staircase(PressTruth(), q, sig, rng)
    return z, q, qd


@pytest.fixture(scope="module")
def result():
    z, q, qd = _data(0, SIG)
    return analyze_press(z, q, qd, SIG, train_series=list(range(8)), test_series=[8, 9], tol=0.05,
                         criterion="E"), (z, q, qd)


def test_verdicts_match_paper(result):
    res, _ = result
    print("\n" + res.format_table())
    rej = {m: {t.name: t.reject for t in r.test.tests} for m, r in res.models.items()}
    assert all(rej["M1"].values())
    assert rej["M2"]["loading vs unloading"] and rej["M2"]["alternating"]
    assert not any(rej["M3"].values())
    assert res.to_dict()["verdicts"] == {"M1": "reject", "M2": "reject", "M3": "keep"}
    p3 = res.models["M3"].fit_all
    assert np.all(np.abs(p3.p - [2.0e8, 1.5e8]) < 4 * p3.std_errors)


def test_training_error_of_the_friction_models_enters_the_comparison(result):
    res, _ = result
    for name, n_coef in (("M1", 0), ("M2", 1), ("M3", 12)):
        assert res.models[name].friction_model_size == n_coef
        for t in res.models[name].test.tests:
            C = t.C_training
            assert np.all(np.linalg.eigvalsh(C) >= -1e-9 * max(np.abs(C).max(), 1e-30))
            assert (np.trace(C) > 0) == (n_coef > 0), (name, t.name)


def test_sensor_selection_and_normality(result):
    res, _ = result
    assert res.selection.label == "110"  # D and F kept, the redundant B0 feeler dropped
    table = {r["combination"]: r for r in res.selection.table}
    assert np.isinf(table["101"]["E"])
    assert table["110"]["E"] < table["011"]["E"]
    assert all(r.normal for r in res.normality)


def test_to_dict_is_json_and_plots(result, tmp_path):
    res, (z, q, qd) = result
    d = json.loads(json.dumps(res.to_dict()))
    assert set(d["models"]) == {"M1", "M2", "M3"}
    assert d["sensor_selection"]["combination"] == "110"
    assert len(d["models"]["M1"]["tests"]) == 4
    from identification.models.press_models import PressLinkageModel, train_friction_models

    tr = train_friction_models(z, q, SIG, list(range(8)))
    m = PressLinkageModel()
    curves = {name: m.predict(res.models[name].fit_all.p, (q - fr.friction(q)).ravel()).reshape(z.shape)
              for name, fr in tr.friction.items()}
    p1 = plot_force_displacement(z, q, curves, tmp_path, series=[8, 9])
    p2 = plot_estimates(res, tmp_path)
    assert p1.stat().st_size > 10_000 and p2.stat().st_size > 10_000
    # what the plot draws agrees with the verdict: a kept split's validation estimate lies inside the solid
    # test region, a rejected one outside
    from scipy.stats import chi2

    from daq.rigs.press.plots import test_region_covariance

    for rep in res.models.values():
        for t in rep.test.tests:
            d = t.p_val - t.p_cal
            C = test_region_covariance(t, rep.test.compare)
            inside = d @ np.linalg.solve(C, d) <= chi2.ppf(1 - t.level, 2)
            assert inside == (not t.reject), (rep.name, t.name)


def test_random_splits_join_the_family():
    z, q, qd = _data(1, SIG)
    res = analyze_press(z, q, qd, SIG, n_random_splits=4, seed=3)
    assert res.models["M3"].test.n_tests == 8
    tests = res.models["M3"].test.tests
    assert [t.name for t in tests][4:] == [f"random {i}" for i in range(1, 5)]
    assert all(t.level == pytest.approx(0.05 / 8) for t in tests)  # one Bonferroni family of 8
    assert res.models["M1"].test.reject and not res.models["M3"].test.reject


def test_paper_sigmas_per_sample_lose_power_but_keep_m3():
    # With single-sample sigmas the within-branch splits cannot see the friction; the cross-branch ones can.
    z, q, qd = _data(0, SIG_SAMPLE)
    res = analyze_press(z, q, qd, SIG_SAMPLE)
    print("\n" + res.format_table())
    assert res.models["M1"].test.reject
    assert not res.models["M3"].test.reject


def test_sensor_columns_are_matched_by_name_not_position(result):
    """The same data with the sensor columns in another order gives the same, correctly labelled answer."""
    res, (z, q, qd) = result
    order = [2, 0, 1]  # B0_vertical, D_vertical, F_horizontal
    names = tuple(np.array(["D_vertical", "F_horizontal", "B0_vertical"])[order])
    other = analyze_press(z[:, :, order], q, qd, SIG[order], train_series=list(range(8)), test_series=[8, 9],
                          tol=0.05, criterion="E", sensor_names=names)
    assert other.sensor_names == names
    chosen = {n for n, w in zip(other.sensor_names, other.selection.omega, strict=True) if w}
    assert chosen == {"D_vertical", "F_horizontal"}
    np.testing.assert_allclose(other.models["M3"].fit_all.p, res.models["M3"].fit_all.p, rtol=1e-6)
    assert other.to_dict()["verdicts"] == res.to_dict()["verdicts"]


def test_two_sensors_give_a_labelled_answer(result):
    """A press with only D and F: no selection left to make, the estimates and the test still run."""
    res, (z, q, qd) = result
    two = analyze_press(z[:, :, [1, 0]], q, qd, SIG[[1, 0]], train_series=list(range(8)), test_series=[8, 9],
                        tol=0.05, sensor_names=("F_horizontal", "D_vertical"))
    assert two.sensor_names == ("F_horizontal", "D_vertical") and two.selection.omega.all()
    p3 = two.models["M3"].fit_all
    assert np.all(np.abs(p3.p - [2.0e8, 1.5e8]) < 4 * p3.std_errors)
    assert two.to_dict()["verdicts"]["M1"] == "reject"


def test_unknown_sensor_name_is_refused(result):
    _, (z, q, qd) = result
    with pytest.raises(ValueError, match="no sensor"):
        analyze_press(z, q, qd, SIG, sensor_names=("D_vertical", "F_horizontal", "laser_X"))
