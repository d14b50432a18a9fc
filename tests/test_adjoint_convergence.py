"""The shipped adjoint designs converge with the shipped settings (issue 31 item 7, issue 44): within 100
iterations (an iteration count, not a time), at a criterion no worse than the unweighted SQP reached before
(main 61aee90), the end conditions met to round-off, and a first-order optimality check that does not trust
the optimiser's word."""

from __future__ import annotations

import numpy as np
import pytest

from daq.rigs import parse_config
from daq.rigs.adjoint.design import problem_of, run_design
from daq.rigs.config import load_config
from identification.design.adjoint_design import evaluate, projected_gradient_norm
from identification.design.adjoint_sqp import end_jacobian, least_squares_multipliers

# D criterion (-log det of the relatively scaled information) that L-BFGS-B with the terminal penalty reached
# on the shipped configs before: oscillator converged after 824 iterations, pendulum stopped unconverged
# after 905 (|g| 0.067 > 0.05), crane converged after 595 (main 938ce55, the config's method = "lbfgs",
# max_iter = 1000): `hil design adjoint configs/<name>.toml` with method = "lbfgs".
BEFORE = {"oscillator-sim": -21.2286, "pendulum-sim": -34.7783, "crane-adjoint-sim": -67.7027}
# The same with SQP on the unweighted cost (main 61aee90, issue 44): 148 / 48-53 / 64 iterations to these
# criteria (the oscillator's is -21.513661 under OPENBLAS_CORETYPE=Sandybridge); the weighted cost
# (adjoint_sqp.cost_weight) reaches -21.51380 / -35.07495 / -68.27427 in 72-73 / 30-31 / 55-57.
SQP_UNWEIGHTED = {"oscillator-sim": -21.513623, "pendulum-sim": -35.074946, "crane-adjoint-sim": -68.274268}


def _config(name: str):
    path = f"configs/{name}.toml"
    return parse_config(load_config(path), path)[1]


@pytest.mark.slow(reason="the shipped design: 30-75 SQP iterations of the full problem")
@pytest.mark.parametrize("name", ["pendulum-sim", "oscillator-sim", "crane-adjoint-sim"])
def test_shipped_design_converges_within_100_iterations(name):
    cfg = _config(name)
    assert cfg.adjoint.method == "sqp" and cfg.adjoint.max_iter <= 200  # the shipped settings themselves
    res = run_design(cfg)
    assert res.converged, res.status
    assert res.iterations <= 100  # an iteration count: the oscillator took 148 on the unweighted cost
    assert res.info_cost <= min(BEFORE[name], SQP_UNWEIGHTED[name]) + 1e-5  # the same optimum or a better one
    assert res.constraint_residual <= 1e-6  # exact constraints: far inside end_tol (1e-3)
    # first-order check of our own: Lagrangian gradient with least-squares multipliers, projected on the box
    pb = problem_of(cfg)
    ev = evaluate(pb, res.u, None, gradient=True)
    half = 0.5 * (pb.bounds()[1] - pb.bounds()[0]).ravel()
    x = res.u.ravel() / half  # symmetric bounds
    jac = end_jacobian(pb, res.u) * half
    lam = least_squares_multipliers(ev.grad_u.ravel() * half, jac, x)
    lagrangian = ev.grad_u.ravel() + (jac.T @ lam) / half
    assert projected_gradient_norm(pb, res.u, lagrangian) <= 0.05
    assert np.abs(res.u).max() <= cfg.adjoint.u_max


def test_end_jacobian_matches_finite_differences():
    """The constraint Jacobian SQP relies on, from the adjoint sweeps, against central differences (a
    nonlinear plant: the pendulum)."""
    from identification.analyses.adjoint_plants import design_problem

    pb = design_problem("pendulum", _nominal_pendulum(), {"t_f": 0.5, "dt": 0.05})
    u = np.random.default_rng(5).uniform(-4.0, 4.0, size=(pb.n_samples, 1))
    jac = end_jacobian(pb, u)
    scales = np.array([c.scale for c in pb.end_conditions])
    fd = np.empty_like(jac)
    for k in range(u.size):
        up, um = u.copy(), u.copy()
        up[k, 0] += 1e-5
        um[k, 0] -= 1e-5
        fd[:, k] = (evaluate(pb, up, gradient=False).end_residuals
                    - evaluate(pb, um, gradient=False).end_residuals) / 2e-5 / scales
    np.testing.assert_allclose(jac, fd, rtol=1e-5, atol=1e-6 * np.abs(fd).max())


@pytest.mark.slow(reason="the augmented-Lagrangian L-BFGS-B comparison takes hundreds of iterations")
def test_sqp_meets_end_conditions_exactly_on_a_coarse_grid():
    from identification.analyses.adjoint_plants import design_problem, reference_inputs
    from identification.design.adjoint_design import optimize_input

    pb = design_problem("pendulum", _nominal_pendulum(), {"t_f": 2.0, "dt": 0.1})
    res = optimize_input(pb, reference_inputs(pb)["F0"], method="sqp", max_iter=200)
    assert res.converged, res.status
    assert max(abs(v) for v in res.end_residuals.values()) <= 1e-8  # rad, m/s, rad/s (scales 0.01)
    lbfgs = optimize_input(pb, reference_inputs(pb)["F0"], method="lbfgs", max_iter=300, rounds=6)
    assert res.iterations < lbfgs.iterations
    assert res.info_cost <= lbfgs.info_cost + 1e-3


def _nominal_pendulum() -> dict[str, float]:
    return {k: float(v) for k, v in load_config("configs/pendulum-sim.toml")["adjoint"]["nominal"].items()}


def test_the_cost_weight_sets_the_first_step_by_the_steepest_sample():
    """SLSQP minimises ``weight * cost``: ``reach`` half-ranges for the steepest sample of the start's
    gradient, whatever the cost's scale (a factor c on the cost divides the weight by c); no gradient to
    scale by (zero, non-finite, empty) leaves the cost as it is."""
    from identification.design.adjoint_sqp import STEP_REACH, cost_weight

    g = np.array([0.02, -0.4, 0.1])
    assert cost_weight(g) == pytest.approx(STEP_REACH / 0.4)
    assert cost_weight(1e3 * g, reach=2.0) * 1e3 == pytest.approx(cost_weight(g, reach=2.0))
    assert cost_weight(np.zeros(3)) == 1.0
    assert cost_weight(np.array([np.nan, 1.0])) == 1.0 and cost_weight(np.array([np.inf])) == 1.0
    assert cost_weight(np.zeros(0)) == 1.0


def test_long_inputs_are_designed_on_a_coarser_grid_first():
    """The crane's 1000 samples are designed on 125 first; the shipped oscillator (200) and pendulum (100)
    are too short to coarsen."""
    from identification.design.adjoint_sqp import coarsening

    assert coarsening(1000) == 8
    assert coarsening(200) == 1 and coarsening(100) == 1
    assert coarsening(250) == 2 and coarsening(999) == 1  # 125 samples of 2; odd: no coarser grid


def test_a_coarse_design_keeps_its_value_on_the_fine_grid():
    """Why the coarse grid may start the fine one: an input held k samples has the same information and
    end state on either grid (same integration step), so the coarse design is feasible and as good there."""
    from dataclasses import replace

    pb = problem_of(_config("crane-adjoint-sim"))
    coarse = replace(pb, dt=pb.dt * 8, n_samples=pb.n_samples // 8, n_sub=pb.n_sub * 8)
    u = np.random.default_rng(3).choice([-10.0, 10.0], size=(coarse.n_samples, 1))
    a, b = evaluate(coarse, u, gradient=False), evaluate(pb, np.repeat(u, 8, axis=0), gradient=False)
    assert a.info_cost == pytest.approx(b.info_cost, abs=1e-9)
    np.testing.assert_allclose(a.end_residuals, b.end_residuals, rtol=1e-9, atol=1e-12)
