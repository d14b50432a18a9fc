"""Press candidate models: structure equals the plant up to friction; friction models trained correctly."""

import numpy as np
import pytest

from identification.estimation.least_squares import state_sensitivities
from identification.models import press_kernels
from identification.models.press_models import (
    CoulombFriction,
    MemoryFriction,
    PressConstants,
    PressLinkageModel,
    force_history_features,
    train_friction_models,
)
from simulators.physics.press import PressLinkage, PressTruth, staircase_forces

SIG = np.array([1.518e-5, 4.895e-6, 3.904e-6]) / 10


def test_structure_matches_plant_without_friction():
    t = PressTruth(friction_max=0.0)
    plant = PressLinkage(t)
    qd = staircase_forces()
    z_plant = np.array([plant.respond(q) for q in qd])
    z_model = PressLinkageModel().predict([t.k5, t.k7], qd)
    np.testing.assert_allclose(z_model, z_plant, rtol=1e-10, atol=1e-15)


def test_inverse_model_recovers_force():
    m = PressLinkageModel()
    q = np.linspace(500, 20000, 9)
    z = m.predict([2e8, 1.5e8], q)
    np.testing.assert_allclose(m.inverse_force(np.array([2e8, 1.5e8]), z, SIG), q, rtol=1e-10)


def test_force_history_features():
    q = np.array([0, 10, 20, 15, 5, 5, 12, 30.0])
    s, travel = force_history_features(q)
    np.testing.assert_array_equal(s, [1, 1, 1, -1, -1, -1, 1, 1])
    np.testing.assert_allclose(travel, [0, 10, 20, 5, 15, 15, 7, 25])


def test_friction_models_trained_through_inverse_model():
    rng = np.random.default_rng(4)
    t = PressTruth()
    qd = staircase_forces()
    q = np.clip(qd * (1 + 0.01 * rng.standard_normal((6, 1))) + 20 * rng.standard_normal((6, 29)), 0, None)
    plant = PressLinkage(t)
    for qp in qd:  # preconditioning cycle, as simulate_staircase does
        plant.respond(qp)
    z = np.empty((6, 29, 3))
    f_true = np.empty((6, 29))
    for i in range(6):
        for j in range(29):
            z[i, j] = plant.respond(q[i, j])
            f_true[i, j] = plant.last_friction
    z += rng.standard_normal(z.shape) * SIG
    tr = train_friction_models(z, q, SIG, [0, 1, 2, 3])
    m2, m3 = tr.friction["M2"], tr.friction["M3"]
    assert isinstance(m2, CoulombFriction) and isinstance(m3, MemoryFriction)
    assert m2.q_c == pytest.approx(t.friction_max, rel=0.2)
    inner = slice(1, -1)  # setpoints 2..28 (the unloaded ends are not used by the test)
    err3 = np.abs(m3.friction(q)[4:, inner] - f_true[4:, inner]).max()  # on the unseen test series
    err2 = np.abs(m2.friction(q)[4:, inner] - f_true[4:, inner]).max()
    print(f"max friction error on test series: M3 {err3:.1f} N, M2 {err2:.1f} N")
    assert err3 < 0.03 * t.friction_max and err2 > 0.5 * t.friction_max


def test_friction_coefficient_covariance_matches_monte_carlo():
    """The coefficient covariance that the uncertainty test propagates agrees with the spread of re-fits."""
    from identification.models.press_models import _fit_with_nuisance

    rng = np.random.default_rng(7)
    q = np.tile(staircase_forces(), 4)
    m3 = MemoryFriction()
    X = m3.features(q)
    c_true = rng.normal(0, 300, X.shape[1])
    var = (5.0 + 10.0 * rng.random(q.size)) ** 2  # per-point noise of the inverse-model friction, N^2
    fits = []
    for _ in range(400):
        y = X @ c_true + 0.01 * q + rng.standard_normal(q.size) * np.sqrt(var)
        c, cov = _fit_with_nuisance(X, q, y, y_var=var)
        fits.append(c)
    emp = np.cov(np.array(fits).T)
    assert np.trace(cov) == pytest.approx(np.trace(emp), rel=0.15)
    # what the test uses: the friction predicted from the coefficients (the basis is collinear, so single
    # coefficients are loose while the predicted friction is tight)
    pred_var = np.einsum("ij,jk,ik->i", X, cov, X)
    pred_emp = np.var(np.array(fits) @ X.T, axis=0, ddof=1)
    assert np.median(pred_emp / pred_var) == pytest.approx(1.0, abs=0.15)
    assert np.sqrt(pred_var).max() < 20.0  # N: far tighter than the single coefficients


def _ridge_reference(X: np.ndarray, q: np.ndarray, y: np.ndarray, ridge: float) -> np.ndarray:
    """The same scaled ridge solution in extended precision (x87 long double, eps ~1e-19), for reference."""
    A = np.column_stack([X, q]).astype(np.longdouble)
    scale = np.sqrt((A * A).sum(axis=0))
    As = A / scale
    G = As.T @ As + ridge * np.eye(As.shape[1], dtype=np.longdouble)
    # Gaussian elimination with partial pivoting in long double (numpy's solvers work in double only)
    n = G.shape[0]
    M = np.column_stack([G, As.T @ y.astype(np.longdouble)])
    for k in range(n):
        piv = k + int(np.argmax(np.abs(M[k:, k])))
        M[[k, piv]] = M[[piv, k]]
        M[k + 1:] -= np.outer(M[k + 1:, k] / M[k, k], M[k])
    c = np.zeros(n, dtype=np.longdouble)
    for k in range(n - 1, -1, -1):
        c[k] = (M[k, n] - M[k, k + 1:n] @ c[k + 1:]) / M[k, k]
    return np.asarray(c / scale, float)[:-1]


@pytest.mark.skipif(np.finfo(np.longdouble).eps > 1e-18, reason="needs an extended-precision long double")
def test_memory_friction_coefficients_do_not_depend_on_rounding():
    """The arctan units are nearly collinear; the coefficients must come out to the accuracy the data
    allow, not to what the BLAS's rounding leaves of a squared condition number (the online verdict
    differed from the offline one in the 5th digit when the worker ran with one BLAS thread)."""
    from identification.models.press_models import _fit_with_nuisance

    rng = np.random.default_rng(11)
    q = np.tile(staircase_forces(), 4) + 20 * rng.standard_normal(4 * 29)
    m3 = MemoryFriction()
    X = m3.features(q)
    y = X @ rng.normal(0, 300, X.shape[1]) + 0.01 * q + 5 * rng.standard_normal(q.size)
    c, _ = _fit_with_nuisance(X, q, y, ridge=m3.ridge)
    ref = _ridge_reference(X, q, y, m3.ridge)
    np.testing.assert_allclose(c, ref, rtol=1e-8, atol=1e-8 * np.abs(ref).max())


def _bearings_one_at_a_time(m: PressLinkageModel, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The bearing forces and their Jacobian summed bearing by bearing: the reference for the one-pass
    ``_bearing`` of the model (the hot path of every press fit)."""
    k, beta = m.c.k_joint, m.c.joint_beta
    f, Jb = np.zeros((len(y), 10)), np.zeros((len(y), 10, 10))
    for i, j in m.bearings:
        si = slice(2 * i, 2 * i + 2)
        d = y[:, si] - (y[:, 2 * j:2 * j + 2] if j >= 0 else 0.0)
        d2 = np.einsum("ni,ni->n", d, d)
        g = k * (1 + beta * d2)[:, None] * d
        kt = k * ((1 + beta * d2)[:, None, None] * np.eye(2) + 2 * beta * np.einsum("ni,nj->nij", d, d))
        f[:, si] += g
        Jb[:, si, si] += kt
        if j >= 0:
            sj = slice(2 * j, 2 * j + 2)
            f[:, sj] -= g
            Jb[:, si, sj] -= kt
            Jb[:, sj, si] -= kt
            Jb[:, sj, sj] += kt
    return f, Jb


@pytest.mark.parametrize("scale", [0.0, 1e-6, 1e-4, 1e-2])
def test_the_bearings_in_one_pass_equal_them_one_at_a_time_to_the_bit(scale):
    m = PressLinkageModel()
    rng = np.random.default_rng(21)
    for n in (1, 29, 400):
        y = rng.standard_normal((n, 10)) * scale
        f, Jb = m._bearing(y)
        f_ref, Jb_ref = _bearings_one_at_a_time(m, y)
        assert np.array_equal(f, f_ref) and np.array_equal(Jb, Jb_ref)
        assert np.array_equal(Jb, Jb.transpose(0, 2, 1))  # a stiffness: symmetric


def test_a_node_in_two_bearings_is_refused():
    m = PressLinkageModel()
    m.bearings = ((1, 2), (2, -1))
    with pytest.raises(ValueError, match="two bearings"):
        m._bearing_index()


@pytest.mark.skipif(not press_kernels.AVAILABLE, reason="numba is not installed")
def test_the_compiled_state_solve_and_derivatives_are_the_numpy_ones():
    """The compiled Newton solve and state derivatives (the default with numba) against the numpy ones (all
    points at once, the Jacobians and E_second of the model): the same states, outputs and first and second
    derivatives to round-off, at the truth and at the stiffnesses a wandering fit tries, at forces from none
    to beyond the press's range; a singular linkage refused alike."""
    fast, slow = PressLinkageModel(), PressLinkageModel(compiled=False)
    assert fast.compiled and not slow.compiled
    assert slow.state_derivatives(np.array([2e8, 1.5e8]), np.ones(3), True) is None  # the numpy path
    rng = np.random.default_rng(8)
    for n in (1, 14, 29, 58, 400):
        for _ in range(6):
            p = np.array([2e8, 1.5e8]) * np.exp(rng.uniform(-3.0, 3.0, 2))
            q = rng.uniform(-5e3, 6e4, n)
            y_fast, y_slow = fast.solve_state(p, q), slow.solve_state(p, q)
            scale = float(np.abs(y_slow).max())
            np.testing.assert_allclose(y_fast, y_slow, rtol=1e-12, atol=1e-13 * scale)
            residual = fast.residual(y_fast, p, q)
            assert np.abs(residual).max() <= 1e-6 * np.abs(q).max()  # N: the statics hold
            a, b = state_sensitivities(fast, p, q, second=True), state_sensitivities(slow, p, q, second=True)
            for got, want in ((a.h, b.h), (a.dy, b.dy), (a.dh, b.dh), (a.d2h, b.d2h)):
                np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-11 * float(np.abs(want).max()))
            first = state_sensitivities(fast, p, q, second=False)
            assert first.d2h is None and np.array_equal(first.dh, a.dh)
    for model in (fast, slow):  # no lever, no bars: nothing holds the linkage
        bare = PressLinkageModel(PressConstants(k_lever=0.0, k_guide=0.0, k_joint=0.0),
                                 compiled=model.compiled)
        with pytest.raises(np.linalg.LinAlgError, match="Singular"):
            bare.solve_state(np.zeros(2), np.array([1e3, 2e3]))
    with pytest.raises(np.linalg.LinAlgError, match="Singular"):  # a state where nothing holds the linkage
        press_kernels.state_derivatives(np.zeros((10, 10)), fast.K5, fast.K7, np.zeros((2, 10)),
                                        fast._bearing_first, fast._bearing_second, 0.0, 0.0, True)
