"""A sequential redesign adds information to the runs already made (issue 21), instead of designing the best
run on its own.

Problem: the oscillator with two free parameters (c2, d2) on a short 0.3 s horizon, so every design takes a
fraction of a second. Run 1 is the D-optimal input at the nominal design point (c2 = 900 N/m, d2 = 1.5
N*s/m); the redesign is made at an estimate away from it (c2 = 1080, d2 = 2.1). There the first input is no
longer balanced: the accumulated redesign buys more d2 information (its new run alone predicts std(d2)
8.28e-3 against 8.48e-3 for the run-alone design, and std(c2) 0.377 against 0.369), and the joint
information of both runs has the larger determinant (log det 28.149 against 28.140 of the scaled matrix).
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from daq.rigs import parse_config
from daq.rigs.adjoint.online import redesigned_signal
from daq.rigs.config import load_config
from identification.analyses.adjoint_plants import design_problem, reference_inputs
from identification.design.adjoint_design import criterion_value, evaluate, optimize_input
from identification.design.sequential_design import earlier_fisher, predicted_std, redesign

NOMINAL = {"m1": 1.0, "m2": 1.0, "c1": 2000.0, "c2": 900.0, "d1": 2.0, "d2": 1.5}
ESTIMATE = {**NOMINAL, "c2": 1080.0, "d2": 2.1}
SPEC = {"parameters": ["c2", "d2"], "t_f": 0.3, "dt": 0.005, "n_sub": 1, "u_max": 10.0, "sigma": 5e-5,
        "meas_dt": 0.001, "end": {}, "limits": {}}
KW = {"max_iter": 200}


def _logdet(pb, fisher: np.ndarray) -> float:
    return float(np.linalg.slogdet(fisher * np.outer(pb.scales, pb.scales))[1])


@pytest.fixture(scope="module")
def first_input() -> np.ndarray:
    pb0 = design_problem("oscillator", NOMINAL, SPEC)
    return optimize_input(pb0, reference_inputs(pb0)["F0"], **KW).u


def test_accumulated_redesign_targets_what_the_first_run_left_uncertain(first_input):
    pb = design_problem("oscillator", ESTIMATE, SPEC)
    f0 = reference_inputs(pb)["F0"]
    held = earlier_fisher(pb, [first_input])
    alone = redesign(pb, first_input, also_from=f0, **KW)
    joint = redesign(pb, first_input, also_from=f0, earlier=[first_input], **KW)
    # all runs together: the accumulated design holds at least as much information (D criterion) ...
    gain = _logdet(pb, held + joint.fisher) - _logdet(pb, held + alone.fisher)
    assert gain > 1e-3
    # ... with a different second input, which trades c2 information for the weaker d2
    assert np.linalg.norm(joint.u - alone.u) > 0.1 * np.linalg.norm(alone.u)
    assert joint.std[1] < alone.std[1] and joint.std[0] > alone.std[0]
    together = predicted_std(pb, joint.u, earlier=[first_input])
    np.testing.assert_allclose(together, np.sqrt(np.diag(np.linalg.inv(held + joint.fisher))), rtol=1e-12)
    # the criterion the redesign minimised is that of the earlier run's Fisher matrix at the estimate plus
    # the new one's (not at the nominal, where the first input was designed)
    value = criterion_value((held + joint.fisher) * np.outer(pb.scales, pb.scales), "D")[0]
    assert joint.info_cost == pytest.approx(value, rel=1e-12)
    at_nominal = earlier_fisher(design_problem("oscillator", NOMINAL, SPEC), [first_input])
    assert not np.allclose(held, at_nominal, rtol=1e-2)
    np.testing.assert_allclose(held, evaluate(pb, first_input, gradient=False).fisher, rtol=1e-12)


def test_earlier_fisher_is_the_sum_over_the_runs_and_checks_the_grid(first_input):
    pb = design_problem("oscillator", ESTIMATE, SPEC)
    sine = reference_inputs(pb)["sine"]
    one = [evaluate(pb, u, gradient=False).fisher for u in (first_input, sine)]
    np.testing.assert_allclose(earlier_fisher(pb, [first_input, sine]), one[0] + one[1], rtol=1e-12)
    np.testing.assert_array_equal(earlier_fisher(pb, []), np.zeros((2, 2)))
    with pytest.raises(ValueError, match="design grid"):
        earlier_fisher(pb, [first_input[:-1]])


def test_one_parameter_the_accumulated_optimum_is_the_run_alone_one():
    """log(F_prev + F_new) grows with F_new alone: the redesign cannot change for c2 alone."""
    spec = {**SPEC, "parameters": ["c2"]}
    pb0 = design_problem("oscillator", NOMINAL, spec)
    u1 = optimize_input(pb0, reference_inputs(pb0)["F0"], **KW).u
    pb = design_problem("oscillator", ESTIMATE, spec)
    f0 = reference_inputs(pb)["F0"]
    alone = redesign(pb, u1, also_from=f0, **KW)
    joint = redesign(pb, u1, also_from=f0, earlier=[u1], from_alone=False, **KW)
    assert joint.fisher[0, 0] == pytest.approx(alone.fisher[0, 0], rel=1e-3)


def _config(accumulate: bool):
    raw = copy.deepcopy(load_config("configs/oscillator-sim.toml"))
    raw["adjoint"].update(parameters=["c2", "d2"], t_f=0.3, n_sub=1, max_iter=200, end={})
    raw["adjoint"]["nominal"].update(c2=NOMINAL["c2"], d2=NOMINAL["d2"])
    raw["sequential"] = {"accumulate": accumulate}
    return parse_config(raw)[1]


def test_rig_redesign_records_what_it_maximised(first_input):
    values = {"c2": ESTIMATE["c2"], "d2": ESTIMATE["d2"]}
    u1 = first_input[:, 0]
    force_acc, acc = redesigned_signal(_config(True), values, u1, 1, earlier=(u1,))
    force_alone, alone = redesigned_signal(_config(False), values, u1, 1, earlier=(u1,))
    pb = design_problem("oscillator", {**NOMINAL, **values}, SPEC)
    held = earlier_fisher(pb, [u1])
    assert acc["accumulate"] and "all 2 runs together" in acc["objective"]
    np.testing.assert_allclose(acc["prior_fisher"], held, rtol=1e-9)
    assert not alone["accumulate"] and alone["prior_fisher"] is None and "alone" in alone["objective"]
    assert not np.allclose(force_acc, force_alone)
    det = [float(np.linalg.det(np.diag(pb.b) @ (held + np.asarray(i["fisher"])) @ np.diag(pb.b)))
           for i in (acc, alone)]
    assert det[0] > det[1]
    for info in (acc, alone):  # the design's prediction for all runs together is recorded either way
        np.testing.assert_allclose(info["predicted_std_all_runs"],
                                   np.sqrt(np.diag(np.linalg.inv(held + np.asarray(info["fisher"])))))
