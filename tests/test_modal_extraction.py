"""Modal extraction (LSCF + stabilisation + LSFD): known answers on synthetic FRFs, and a short simulated
machine-tool session (SCPI front end on loopback) whose extracted modes and identification meet a reduced
version of issue 11's ideal-case targets."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from daq.config.load import parse, read_toml
from daq.rigs.machine_tool.rig import MachineToolConfig, analyze, mt_arrays
from daq.run.lifecycle import run
from daq.store.read_write import SessionStore
from identification.frequency.modal_extraction import (
    extract_modes,
    lscf_pole_sets,
    lscf_poles,
    lsfd,
    stable_poles,
    synthesize,
)
from identification.frequency.modal_metrics import macxp_matrix
from identification.gsa import fraction_within
from identification.models.machine_tool_model import complex_modes_of
from simulators.physics.machine_tool import MachineToolTruth

# a synthetic structure: a close pair (41.0 / 42.5 Hz), a heavily damped top mode, one mode just above
# the reported band (inside the excited band) and one above the excited band
F_TRUE = np.array([41.0, 42.5, 75.0, 120.0, 185.0, 215.0, 262.0])  # Hz
XI_TRUE = np.array([0.010, 0.012, 0.018, 0.022, 0.040, 0.015, 0.020])
N_IN_BAND = 5


@pytest.fixture(autouse=True)
def one_blas_thread():
    """Small matrices: one BLAS thread each is faster, and fair to the other jobs on the machine."""
    with threadpool_limits(limits=1, user_api="blas"):
        yield

BAND = (20.0, 200.0)
EXCITED = (10.0, 240.0)


def synthetic(rng: np.random.Generator, n_ref: int = 2, n_resp: int = 8):
    """Accelerances (n_ref, n_resp, n_freq) of a viscously damped modal model, the poles and shapes."""
    w = 2 * np.pi * F_TRUE
    lam = -XI_TRUE * w + 1j * w * np.sqrt(1 - XI_TRUE**2)
    shapes = rng.normal(size=(n_resp, lam.size)) + 0.05j * rng.normal(size=(n_resp, lam.size))
    drive = shapes[:n_ref]  # the references are the first response DOFs
    q = 1.0 / (2j * lam.imag * 500.0)  # modal scaling of a 500 kg structure
    res = q[None, None, :] * drive[:, None, :] * shapes[None, :, :]  # (n_ref, n_resp, n_modes), m/N/s
    freq = np.arange(1, 513) * 0.5
    jw = 2j * np.pi * freq
    rec = np.sum(res[..., None] / (jw - lam[:, None]) + res.conj()[..., None] / (jw - lam.conj()[:, None]),
                 axis=2)
    return freq, rec * jw**2, lam, shapes, res


def mac(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.abs(a.conj().T @ b) ** 2 / np.outer(np.sum(np.abs(a) ** 2, 0), np.sum(np.abs(b) ** 2, 0))


def test_lsfd_recovers_residues_exactly_for_known_poles():
    freq, acc, lam, _, res = synthetic(np.random.default_rng(1))
    band = (freq >= 10) & (freq <= 300)
    H = acc[..., band].reshape(-1, band.sum())
    r, _, _, Hfit = lsfd(freq[band], H, lam, residuals=False, kind="accelerance")
    np.testing.assert_allclose(r, res.reshape(-1, lam.size), rtol=1e-7, atol=1e-12)
    assert np.linalg.norm(Hfit - H) / np.linalg.norm(H) < 1e-9


def test_stable_poles_drop_a_merged_close_pair_and_noise_poles():
    """Low orders see one pole between two close modes; high orders resolve the pair; noise wanders."""
    rng = np.random.default_rng(7)

    def pole(f, xi):
        w = 2 * np.pi * f
        return complex(-xi * w, w * np.sqrt(1 - xi**2))

    sets = []
    for order in range(12):
        p = [pole(100.0 * (1 + 1e-4 * rng.normal()), 0.02 * (1 + 0.03 * rng.normal()))]
        if order < 5:  # merged: one pole between 73.5 and 75.9 Hz
            p.append(pole(74.8 + 0.05 * rng.normal(), 0.012))
        else:
            p += [pole(73.5 + 0.01 * rng.normal(), 0.018), pole(75.9 + 0.01 * rng.normal(), 0.019)]
        p += [pole(f, x) for f, x in zip(rng.uniform(20, 200, 3), rng.uniform(0.005, 0.08, 3), strict=True)]
        sets.append(np.array(p))
    poles, support = stable_poles(sets)
    f = np.sort(np.abs(poles) / (2 * np.pi))
    np.testing.assert_allclose(f, [73.5, 75.9, 100.0], atol=0.05)
    assert support.min() >= 7 / 12


def noisy_synthetic(seed: int, noise: float = 0.01):
    """The synthetic structure's accelerances with complex white noise of ``noise`` x each FRF's RMS."""
    rng = np.random.default_rng(seed)
    freq, acc, lam, shapes, res = synthetic(rng)
    rms = np.sqrt(np.mean(np.abs(acc[..., (freq >= 10) & (freq <= 240)]) ** 2, axis=-1, keepdims=True))
    noisy = acc + noise * rms * (rng.normal(size=acc.shape) + 1j * rng.normal(size=acc.shape)) / np.sqrt(2)
    return freq, acc, noisy, shapes


@pytest.mark.parametrize("seed", range(20))
def test_extract_modes_known_answer_with_noise(seed):
    """All five in-band modes (the close pair included, however weakly the references drive one of them),
    their damping and shapes come back from accelerances with 1 % noise; the mode just above the band is
    fitted as an out-of-band pole instead of bending the top mode's shape. Seeds 0, 9 and 11 lost a mode of
    the close pair before the LSCF was solved by QR with Sanathanan-Koerner steps."""
    freq, acc, noisy, shapes = noisy_synthetic(seed)
    fit = extract_modes(freq, noisy, N_IN_BAND, *BAND, kind="accelerance", fit_band=EXCITED)
    assert fit.lam.size == N_IN_BAND
    np.testing.assert_allclose(fit.freq, F_TRUE[:N_IN_BAND], rtol=2e-3)
    np.testing.assert_allclose(fit.xi, XI_TRUE[:N_IN_BAND], rtol=0.1)
    assert np.all(np.diag(mac(fit.shapes, shapes[:, :N_IN_BAND])) > 0.995)
    assert np.any(np.abs(np.abs(fit.lam_out) / (2 * np.pi) - 215.0) < 1.0)
    # where modes are reported, the identified modal model reproduces the noise-free FRFs below the noise
    # level (1 %); over the whole excited band the residual terms stand in for the 262 Hz mode above it,
    # which is fitted only approximately near the band's top (fit error up to about 3x the noise)
    band = (freq >= BAND[0]) & (freq <= BAND[1])
    Hs = synthesize(fit, freq[band], kind="accelerance")
    assert np.linalg.norm(Hs - acc[..., band]) / np.linalg.norm(acc[..., band]) < 0.02
    assert fit.fit_error < 0.035


def test_without_the_excited_band_the_top_mode_suffers():
    """The reason for ``fit_band``: a mode just above a band fitted on its own (no room above it) is lumped
    into the residual terms and bends the shapes of the modes below it."""
    freq, acc, _, shapes, _ = synthetic(np.random.default_rng(0))
    wide = extract_modes(freq, acc, N_IN_BAND, *BAND, kind="accelerance", fit_band=EXCITED)
    assert np.diag(mac(wide.shapes, shapes[:, :N_IN_BAND])).min() > 0.9999
    # fitted on its own, the band loses a mode from the stabilisation diagram (with some BLAS kernels) or
    # keeps it with a bent shape (with others): either way the top mode suffers
    try:
        own = extract_modes(freq, acc, N_IN_BAND, *BAND, kind="accelerance", headroom=1.0)
    except ValueError as exc:
        assert "stable modes found" in str(exc), exc
    else:
        assert np.diag(mac(own.shapes, shapes[:, :N_IN_BAND])).min() < 0.99


# --------------------------------------------------------------------------------- simulated session


def session_config() -> dict:
    cfg = copy.deepcopy(read_toml("configs/machine-tool-sim.toml"))
    cfg["plan"].update(positions=[0.05, 0.55], validation=[])
    cfg["analysis"].update(sobol_n=8, n_opt=2, maxiter=20, workers=1)
    return cfg


@pytest.mark.slow(reason="a modal test over SCPI, then a Sobol-guided identification")
async def test_simulated_session_meets_a_reduced_target(tmp_path):
    """Noisy modal test through the SCPI front end: every extracted mode matches the simulator's truth
    (MACXP >= 0.99), and a small-budget identification reaches worst MACXP >= 0.99 with 3 in 4 stiffness
    parameters within 5 %."""
    raw = session_config()
    # at sim speed 10 (the plan's waits and the simulated machine on one clock, tests/test_sim_clock.py): the
    # same plan and physics over SCPI, in simulated seconds, with a tenth of the waiting
    result = await run(raw, tmp_path / "s.sqlite", show_progress=False, handle_sigint=False, sim_speed=10.0)
    assert result.status == "complete", result.reason
    with SessionStore(tmp_path / "s.sqlite") as store:
        arrays = mt_arrays(store, result.session_id)
    cfg = parse(raw, MachineToolConfig)
    out = analyze(arrays, cfg)
    truth = MachineToolTruth(raw["simulator"]["truth"])
    for p, fit in zip(arrays.positions, out.fits, strict=True):
        cm = complex_modes_of(*truth.matrices(p), truth.O, 12)
        mx = macxp_matrix(cm.shapes, cm.lam, fit.shapes, fit.lam)
        assert mx.max(axis=0).min() >= 0.99, (p, mx.max(axis=0))
        assert len(set(mx.argmax(axis=0))) == fit.lam.size  # no mode found twice, none spurious
    assert out.gsa.identification["table"]["MACXP"]["worst"] >= 0.99
    assert fraction_within(out.gsa, 0.05) >= 0.75


def test_lscf_uniform_weights_change_nothing():
    freq, acc, _, _, _ = synthetic(np.random.default_rng(3))
    band = (freq >= 10) & (freq <= 240)
    H = acc[..., band].reshape(-1, band.sum())
    a = lscf_poles(freq[band], H, 20, 300.0)
    b = lscf_poles(freq[band], H, 20, 300.0, weights=np.full(band.sum(), 3.0))
    a, b = (np.sort_complex(p[(p.imag > 0) & (p.real < 0) & (p.imag < 2 * np.pi * 240)]) for p in (a, b))
    np.testing.assert_allclose(a, b, rtol=1e-5)
    # the in-band modes are among the poles
    for f in F_TRUE[:N_IN_BAND]:
        assert np.min(np.abs(np.abs(a) / (2 * np.pi) - f)) < 0.01 * f


@pytest.mark.parametrize("per_frf", [False, True])
def test_lscf_solves_the_same_least_squares_as_all_its_rows(per_frf):
    """The fit reduces each FRF's rows to a triangle before it solves, and takes the first step of every
    order of a diagram from the top order's triangles: its poles at each order, after the first step and
    after a reweighted one, are those of the same least squares solved on all the rows at once, by both
    projections (one span when the weights differ only by a factor per FRF, one per FRF otherwise)."""
    import scipy.linalg

    rng = np.random.default_rng(5)
    freq, _, noisy, _ = noisy_synthetic(5)
    band = (freq >= 10) & (freq <= 240)
    f, H = freq[band], noisy[..., band].reshape(-1, band.sum())
    W = rng.uniform(0.5, 2.0, H.shape) if per_frf else np.broadcast_to(rng.uniform(0.5, 2.0, f.size), H.shape)
    orders, top = [16, 20, 24], 300.0
    Wn = W / np.sqrt(np.mean(np.abs(W * H) ** 2, axis=1, keepdims=True))  # as lscf_poles scales them
    ts = 0.5 / top

    def real(M: np.ndarray) -> np.ndarray:
        return np.concatenate([M.real, M.imag], axis=-2)

    def all_rows(order: int, iterations: int) -> np.ndarray:
        X = np.exp(2j * np.pi * f * ts)[:, None] ** np.arange(order + 1)
        Wk = Wn
        for _step in range(iterations + 1):
            rows = []
            for w, h in zip(Wk, H, strict=True):  # every FRF's numerator projected out, then one solve
                Q = np.linalg.qr(real(w[:, None] * X))[0]
                Y = real((w * h)[:, None] * X)
                rows.append(Y - Q @ (Q.T @ Y))
            Z = np.concatenate(rows)
            a = np.append(scipy.linalg.lstsq(Z[:, :order], -Z[:, order], lapack_driver="gelsy")[0], 1.0)
            g = 1.0 / np.abs(X @ a)
            Wk = Wn * (g / np.sqrt(np.mean(g**2)))[None, :]
        return np.log(np.roots(a[::-1]).astype(complex)) / ts

    def physical(p: np.ndarray) -> np.ndarray:
        return np.sort_complex(p[(p.imag > 0) & (p.real < 0) & (p.imag < 2 * np.pi * 240)])

    for iterations in (0, 1):
        ours = lscf_pole_sets(f, H, orders, top, weights=W, iterations=iterations)
        for order, poles in zip(orders, ours, strict=True):
            assert physical(poles).size >= N_IN_BAND
            np.testing.assert_allclose(physical(poles), physical(all_rows(order, iterations)), rtol=1e-7,
                                       err_msg=f"order {order}, {iterations} reweighted steps")


def test_fewer_lines_than_unknowns_end_in_one_clear_message():
    """Five lines against orders up to 44 (more unknowns than rows): no stable mode, said in one line - not an
    error from inside LAPACK."""
    rng = np.random.default_rng(3)
    H = rng.standard_normal((3, 5)) + 1j * rng.standard_normal((3, 5))
    with pytest.raises(ValueError, match="only 0 stable modes found"):
        extract_modes(np.linspace(10.0, 20.0, 5), H, 1, 10.0, 20.0)


def test_stabilisation_does_not_hinge_on_round_off():
    """Data perturbed at 1e-12 of their size (what another BLAS build or library version changes) give the
    same modes: every in-band mode holds a column at every order of the diagram (support 1 or nearly)."""
    freq, _, noisy, _ = noisy_synthetic(11)
    rng = np.random.default_rng(99)
    fits = [
        extract_modes(freq, noisy * (1 + 1e-12 * rng.normal(size=noisy.shape)), N_IN_BAND, *BAND,
                      kind="accelerance", fit_band=EXCITED)
        for _ in range(2)
    ]
    np.testing.assert_allclose(fits[0].freq, fits[1].freq, rtol=1e-6)
    np.testing.assert_allclose(fits[0].xi, fits[1].xi, rtol=1e-4)
    assert fits[0].support.min() >= 0.85, fits[0].support


def test_lscf_is_solved_without_normal_equations():
    """A weak mode beside a strong one (seed 11: the 41 Hz mode is driven at 6 % of its 42.5 Hz neighbour)
    keeps its damping at every order once the linearised error is reweighted; a single linear step
    (iterations=0, classic LSCF) biases it by a factor of several at the high orders."""
    freq, _, noisy, _ = noisy_synthetic(11)
    band = (freq >= EXCITED[0]) & (freq <= EXCITED[1])
    H = noisy[..., band].reshape(-1, band.sum())

    def pole_near(p: np.ndarray, f: float) -> complex:
        p = p[(p.imag > 0) & (p.real < 0)]
        return p[np.argmin(np.abs(np.abs(p) / (2 * np.pi) - f))]

    for order in (30, 40, 50):
        lam = pole_near(lscf_poles(freq[band], H, order, 300.0), 41.0)
        assert abs(abs(lam) / (2 * np.pi) - 41.0) < 0.05
        assert abs(-lam.real / abs(lam) / XI_TRUE[0] - 1) < 0.1
    lam = pole_near(lscf_poles(freq[band], H, 50, 300.0, iterations=0), 41.0)
    assert abs(-lam.real / abs(lam) / XI_TRUE[0] - 1) > 0.5
