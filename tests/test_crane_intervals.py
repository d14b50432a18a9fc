"""Issue 21, item 3: the crane model's intervals know when the model is wrong or the noise coloured."""

import json

import numpy as np
import pytest

from identification.design.multisine import design_multisine
from identification.estimation.residual_adequacy import INADEQUATE, hac_covariance, residual_adequacy
from identification.selection.model_selection import chosen_intervals, fit_structure, select_model
from simulators.physics.crane import CraneTruth, simulate_axis
from tests.fit_starts import perturbed

DT = 1e-4


def test_adequacy_passes_white_noise_and_catches_colour_and_input_correlation():
    rng = np.random.default_rng(0)
    u = rng.standard_normal(4000)
    white = residual_adequacy(rng.standard_normal(4000), u)
    assert white.intervals_valid and white.residuals_white
    e = np.zeros(4000)
    for k in range(1, e.size):  # AR(1), rho 0.2: the lag-1 colour of the Stribeck crane's residuals
        e[k] = 0.2 * e[k - 1] + rng.standard_normal()
    col = residual_adequacy(e, u)
    assert not col.residuals_white and not col.intervals_valid
    assert col.statement.startswith("model inadequate / residuals coloured")
    leak = rng.standard_normal(4000) + 0.1 * np.roll(u, 3)  # input dynamics the model lacks
    assert residual_adequacy(leak, u).p_input < 1e-3
    # sample-to-sample sensor noise colour (differenced quantisation, MA(1)) is thinned out by the stride
    q = rng.uniform(-0.5, 0.5, 20001)
    ma1 = np.diff(q) + 0.3 * rng.standard_normal(20000)
    assert not residual_adequacy(ma1).residuals_white
    assert residual_adequacy(ma1, stride=5).residuals_white


def test_sandwich_covariance_covers_with_coloured_noise():
    """A line fitted through AR(1) noise (rho 0.8): the classic std is ~3x too small, the Newey-West one
    is within 20 % of the Monte Carlo spread."""
    rng = np.random.default_rng(1)
    n, rho = 2000, 0.8
    t = np.linspace(0, 1, n)
    S = np.stack([np.ones(n), np.sin(2 * np.pi * 3 * t)], axis=1)
    est, robust, classic = [], [], []
    for _ in range(200):
        w = rng.standard_normal(n)
        e = np.empty(n)
        e[0] = w[0]
        for k in range(1, n):
            e[k] = rho * e[k - 1] + w[k]
        b = np.linalg.lstsq(S, e, rcond=None)[0]
        r = S @ b - e
        est.append(b)
        robust.append(np.sqrt(np.diag(hac_covariance(S, r)[0])))
        classic.append(np.sqrt(np.diag(np.linalg.inv(S.T @ S) * (r @ r) / (n - 2))))
    spread = np.std(est, axis=0)
    np.testing.assert_allclose(np.mean(robust, axis=0), spread, rtol=0.2)
    assert np.all(np.mean(classic, axis=0) < 0.5 * spread)


def _runs(truth: CraneTruth, seed: int, duration: float = 0.5):
    mt = design_multisine(2.0, 150.0, 60, DT, period=duration, grid="log", seed=11, max_iter=20)
    mv = design_multisine(2.0, 150.0, 50, DT, period=duration, grid="lin", seed=22, max_iter=20)
    rng = np.random.default_rng(seed)
    tr = simulate_axis(truth, mt.scale_to_peak(10.0), DT, rng)
    va = simulate_axis(truth, mv.scale_to_peak(10.0), DT, rng)
    return (tr["torque_cmd"], tr["speed"], DT), (va["torque_cmd"], va["speed"], DT)


def _reference(truth: CraneTruth, names) -> np.ndarray:
    """The truth's values; the model's dead time is the drive's own (the half-sample lag of the differenced
    speed is modelled apart, issue 39)."""
    return np.array([getattr(truth, n) for n in names])


@pytest.mark.slow(reason="fits the crane model on four short simulated records")
def test_crane_intervals_right_structure_cover_wrong_structure_is_flagged():
    """Structure right (no Coulomb/Stribeck in the truth) at the model step of the samples: the adequacy
    check passes and the intervals hold the truth. The shipped truth (Coulomb + Stribeck, which no
    candidate has): the check fails and says so, so no parameter is called identifiable. Before, both
    fits printed intervals as if valid (8 of 10 truths outside them on the shipped session)."""
    opts = {"decimate": 1, "skip": 0, "friction_eps": 0.05}
    right = CraneTruth.from_config({"coulomb": 0.0, "stribeck_torque": 0.0})
    covered = []
    for seed in (0, 1):
        train, valid = _runs(right, seed)
        names = ("J1", "J2", "J3", "k12", "k23", "d12", "d23", "viscous", "dead_time")
        ref = dict(zip(names, _reference(right, names), strict=True))
        # one start 10-25 % off in every parameter, each by its own factor (one factor for all leaves the
        # poles at the truth's)
        fit = fit_structure("3m+visc+dt", *train, n_starts=1, start=perturbed(ref, seed=100 + seed),
                            max_nfev=100, decimate=1)
        rep = chosen_intervals(fit, train, valid, {}, opts)
        # A right structure is no evidence against adequacy. Not `intervals_valid` at its 5 % level: that
        # is a coin with 5 % per record (18/20 valid in benchmarks/bench_crane_coverage.py), and which
        # record lands below 5 % moves with the scipy/BLAS build (p = 0.015 on the lowest versions).
        assert rep.adequacy.p_value > 1e-3, rep.statement
        iv = rep.interval(robust=True)
        tv = _reference(right, rep.names)
        covered += list((iv[:, 0] <= tv) & (tv <= iv[:, 1]))
    assert np.mean(covered) >= 0.8, covered

    wrong = CraneTruth()  # the shipped truth: Coulomb + Stribeck friction
    train, valid = _runs(wrong, 0, duration=1.0)
    start = perturbed({n: getattr(wrong, n) for n in ("J1", "J2", "J3", "k12", "k23", "d12", "d23", "viscous",
                                                      "coulomb", "dead_time")}, seed=102)
    fit = fit_structure("3m+visc+coul+dt", *train, n_starts=1, start=start, max_nfev=100, decimate=5)
    rep = chosen_intervals(fit, train, valid, {}, {**opts, "decimate": 5})
    # far below any level's edge (the p-value itself, 1e-10 and less, moves with the BLAS kernel)
    assert not rep.intervals_valid and rep.adequacy.p_value < 1e-4
    assert INADEQUATE in rep.statement
    assert not any(rep.identifiable.values())


@pytest.mark.slow(reason="one candidate selected on a short simulated record")
def test_selection_json_carries_ci95_and_adequacy():
    train, valid = _runs(CraneTruth(), 3)
    res = select_model(train, valid, candidates=["3m+visc+coul+dt"], n_starts=1, max_nfev=20, profile=True,
                       profile_points=3, n_jobs=1, min_validation_fit=0.0, max_condition_index=1e9,
                       min_pii_ratio=0.0)
    d = json.loads(json.dumps(res.to_dict()))
    assert set(d["ci95"]) == set(res.chosen.params)
    assert all(lo < hi for lo, hi in d["ci95"].values())
    assert {"residuals_white", "p_value", "intervals_valid"} <= set(d["adequacy"])
    assert d["adequacy"]["intervals_valid"] is False  # wrong structure (and 2 kHz model step)
    assert "model inadequate" in res.format_table() or "time step" in res.format_table()
    # a closed profile is not called identifiable when the intervals are not valid (issue 21)
    assert not any(p["identifiable"] for p in d["profile"]["parameters"])
    assert all(p["verdict"].startswith(("closed, not graded", "open")) for p in d["profile"]["parameters"])
