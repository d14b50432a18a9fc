"""Candidate kit and fixed-step simulation with forward sensitivities."""

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from identification.design.multisine import design_multisine
from identification.models.drive_models import (
    DriveStructure,
    all_structures,
    friction_torque,
    linear_matrices,
    parse_name,
)
from identification.models.drive_simulation import ENGINES, get_engine, prepare_input, simulate
from identification.models.press_models import PressLinkageModel
from simulators.physics.crane import CraneTruth, linear_state_space, simulate_axis
from tests.other_user import as_user, other_user  # noqa: F401 - the fixture of a second OS user

P = dict(J1=0.02, J2=0.06, J3=0.04, k12=2100.0, k23=240.0, d12=0.6, d23=0.1, viscous=0.05, coulomb=0.3,
         stribeck_torque=0.15, stribeck_speed=0.5, dead_time=0.00083, gravity_torque=0.1)


@pytest.fixture(scope="module")
def torque():
    ms = design_multisine(4.0, 150.0, 30, 1e-4, period=0.25, seed=1)
    return ms.scale_to_peak(6.0)


def test_kit_has_96_distinct_models():
    kit = all_structures()
    assert len(kit) == 96
    names = [s.name for s in kit]
    assert len(set(names)) == 96
    assert all(parse_name(n) == s for n, s in zip(names, kit, strict=True))
    s = parse_name("2m+visc+coul+strib+dt+grav")
    assert s.param_names == ["J1", "J2", "k12", "d12", "viscous", "coulomb", "stribeck_torque",
                             "stribeck_speed", "dead_time", "gravity_torque"]
    assert parse_name("3m+visc+dt").n_params == 9 and parse_name("1m").n_params == 1
    assert DriveStructure(3, viscous=True, dead_time=True).name == "3m+visc+dt"
    with pytest.raises(ValueError):
        parse_name("4m+visc")
    with pytest.raises(ValueError):
        parse_name("3m+backlash")


def test_linear_part_matches_independent_truth_code():
    truth = CraneTruth()
    A_truth, B_truth = linear_state_space(truth)
    A, B, dA, dB = linear_matrices(parse_name("3m+visc"), P)
    np.testing.assert_allclose(A, A_truth, rtol=1e-14)
    np.testing.assert_allclose(B, B_truth, rtol=1e-14)
    # derivative of A w.r.t. k12 by hand: only the k12 column entries, divided by inertias
    j = parse_name("3m+visc").param_names.index("k12")
    expect = np.zeros((5, 5))
    expect[0, 3], expect[1, 3] = -1 / P["J1"], 1 / P["J2"]
    np.testing.assert_allclose(dA[j], expect, atol=1e-12)


def test_simulation_equals_truth_without_noise(torque):
    truth = CraneTruth.from_config(dict(coulomb=0.0, stribeck_torque=0.0, speed_noise=0.0, encoder_counts=0))
    d = simulate_axis(truth, torque, 1e-4, 0)
    p = {k: getattr(truth, k) for k in parse_name("3m+visc+dt").param_names}
    # the motor speed itself (no speed lag): the drive's differenced speed is tests/test_crane_dead_time.py's
    s = parse_name("3m+visc+dt")
    r = simulate(s, p, prepare_input(torque, 1e-4, 1, speed_lag=0.0), sensitivities=False)
    assert np.max(np.abs(r.y - d["speed_true"])) < 1e-9 * np.max(np.abs(d["speed_true"]))
    # decimated model (2 kHz) stays well below the measurement noise of the crane (0.01 rad/s)
    r5 = simulate(s, p, prepare_input(torque, 1e-4, 5, speed_lag=0.0), sensitivities=False)
    assert np.sqrt(np.mean((r5.y - d["speed_true"][::5][: r5.y.size]) ** 2)) < 3e-3


def test_nonlinear_path_with_zero_friction_equals_linear_path(torque):
    inp = prepare_input(torque, 1e-4, 5)
    p = dict(P, coulomb=0.0)
    lin = simulate(parse_name("3m+visc+dt"), p, inp)
    nl = simulate(parse_name("3m+visc+coul+dt"), p, inp)
    np.testing.assert_allclose(nl.y, lin.y, atol=1e-12)
    np.testing.assert_allclose(nl.S[:, [0, 1, 2, 3, 4, 5, 6, 7, 9]], lin.S, atol=1e-9)


@pytest.mark.parametrize("name", ["3m+visc+dt+grav", "2m+visc+coul+strib+dt", "1m+coul+grav"])
def test_sensitivities_match_finite_differences(torque, name):
    s = parse_name(name)
    inp = prepare_input(torque, 1e-4, 5)
    r = simulate(s, P, inp)
    for j, pn in enumerate(s.param_names):
        h = 1e-6 * abs(P[pn]) if pn != "dead_time" else 1e-9  # dead time: stay inside one interpolation cell
        up = simulate(s, dict(P, **{pn: P[pn] + h}), inp, sensitivities=False).y
        dn = simulate(s, dict(P, **{pn: P[pn] - h}), inp, sensitivities=False).y
        fd = (up - dn) / (2 * h)
        err = np.max(np.abs(fd - r.S[:, j])) / np.max(np.abs(fd))
        assert err < 1e-5, (pn, err)


def test_friction_derivatives():
    args = (0.3, 0.15, 0.5, 0.05)
    for w in (-0.7, -0.01, 0.02, 1.3):
        F, dF, dc, ds, dv = friction_torque(w, *args)
        h = 1e-7
        fd = (friction_torque(w + h, *args)[0] - friction_torque(w - h, *args)[0]) / (2 * h)
        assert dF == pytest.approx(fd, rel=1e-5)
        assert dv == pytest.approx((friction_torque(w, 0.3, 0.15, 0.5 + h, 0.05)[0]
                                    - friction_torque(w, 0.3, 0.15, 0.5 - h, 0.05)[0]) / (2 * h), rel=1e-5)
        assert dc == pytest.approx(-np.tanh(w / 0.05))
        assert F == pytest.approx(-np.tanh(w / 0.05) * (0.3 + 0.15 * np.exp(-abs(w) / 0.5)))


def test_stiff_friction_stays_stable(torque):
    # very light motor inertia and large Coulomb friction: explicit friction would blow up at 2 kHz
    p = dict(P, J1=0.002, coulomb=3.0)
    r = simulate(parse_name("1m+coul"), p, prepare_input(torque, 1e-4, 5), friction_eps=0.01)
    assert np.all(np.isfinite(r.y)) and np.all(np.isfinite(r.S))
    assert np.max(np.abs(r.y)) < 1e3


def test_compiled_engine_equals_python_loop_on_every_candidate(torque):
    """The compiled step loop (identification/models/drive_kernels.py, the default) runs the same
    recursion as the
    Python loop / numpy block lifting it replaced: outputs and sensitivities agree to round-off, and repeat
    bit for bit."""
    assert get_engine() == "compiled" and ENGINES == ("compiled", "python")
    inp = prepare_input(torque[:1000], 1e-4, 5)  # 200 steps: the Python loop is slow
    for s in all_structures():
        for sens in (True, False):
            with threadpool_limits(1):  # 12 x 12 matrix exponentials: BLAS threads only cost
                a = simulate(s, P, inp, sensitivities=sens, engine="python")
                b = simulate(s, P, inp, sensitivities=sens, engine="compiled")
            np.testing.assert_allclose(b.y, a.y, rtol=0, atol=1e-11 * np.max(np.abs(a.y)), err_msg=s.name)
            if sens:
                scale = np.max(np.abs(a.S), axis=0)
                np.testing.assert_allclose(b.S / scale, a.S / scale, rtol=0, atol=1e-10, err_msg=s.name)
    s = parse_name("3m+visc+coul+strib+dt+grav")
    again = simulate(s, P, inp, engine="compiled")
    assert np.array_equal(again.S, simulate(s, P, inp, engine="compiled").S)


def test_compiled_loop_is_its_own_source_to_the_bit(torque):
    """The compiled loop of each state count (1, 3, 5 states: loops unrolled, zero dAd products left out)
    gives exactly the numbers of the same source run as plain Python: the compilation changes no sum."""
    from identification.models import drive_kernels, drive_simulation

    inp = prepare_input(torque[:300], 1e-4, 5)  # 60 steps: plain Python is slow
    for name in ("1m+visc+coul+grav", "2m+visc+coul+strib+dt", "3m+visc+coul+strib+dt+grav", "3m+visc+dt"):
        s = parse_name(name)
        compiled = simulate(s, P, inp)
        plain = {n: drive_kernels._steps_for(n) for n in (1, 3, 5)}  # the uncompiled source
        kernels, drive_kernels._compiled = drive_kernels._compiled, plain
        try:
            again = simulate(s, P, inp)
        finally:
            drive_kernels._compiled = kernels
        assert drive_simulation.get_engine() == "compiled"
        assert np.array_equal(again.y, compiled.y) and np.array_equal(again.S, compiled.S), name


def test_held_input_keeps_the_last_delay(torque):
    """A candidate without a dead time asks for the same delayed input at every evaluation: it is made once,
    read-only, and a new delay is computed afresh."""
    inp = prepare_input(torque, 1e-4, 5)
    v, dv = inp.held(2.5e-4)
    assert inp.held(2.5e-4)[0] is v and not v.flags.writeable and not dv.flags.writeable
    fresh = prepare_input(torque, 1e-4, 5)
    other = inp.held(1e-3)
    assert np.array_equal(other[0], fresh.held(1e-3)[0]) and not np.array_equal(other[0], v)
    assert np.array_equal(inp.held(2.5e-4)[0], v)


def test_one_compiled_signature_for_fits_and_validations(torque):
    """A fit's simulation (sensitivities: a fresh, writable held input) and a validation's (no sensitivities:
    the read-only held input) run the same compiled code: one signature per state count, so a fresh checkout
    compiles each loop once (before: twice, ~2.7 CPU-s more in every worker's first run)."""
    from identification.models import drive_kernels

    inp = prepare_input(torque[:500], 1e-4, 5)
    for name in ("1m+visc+coul", "3m+visc+dt"):
        s = parse_name(name)
        simulate(s, P, inp, sensitivities=True)
        simulate(s, P, inp, sensitivities=False)
        kernel = drive_kernels._compiled[s.n_states]
        assert len(kernel.signatures) == 1, (name, kernel.signatures)


def test_compiled_loops_without_a_writable_cache_folder(other_user):  # noqa: F811
    """A checkout the user cannot write (here: another OS user running this one's copy) and no writable home
    either (a service account): numba finds no cache folder; the loops and the press's state solve are
    compiled in memory instead of `hil analyze` failing with numba's "cannot cache function ...: no locator
    available", with the numbers of the cached ones."""
    code = ("import os, sys\n"
            "os.environ.update(HOME='/nonexistent', XDG_CACHE_HOME='/nonexistent/cache')\n"
            "import numpy as np\n"
            "from identification.models.drive_models import parse_name\n"
            "from identification.models.drive_simulation import prepare_input, simulate\n"
            f"P = {P!r}\n"
            "u = 2.0 * np.sin(np.arange(500) * 0.05)\n"
            "r = simulate(parse_name('1m+visc+coul'), P, prepare_input(u, 1e-4, 5))\n"
            "print(r.S.tobytes().hex())\n"
            "from identification.models.press_models import PressLinkageModel\n"  # the press's compiled solve
            "m = PressLinkageModel()\n"
            "assert m.compiled\n"
            "print(m.solve_state(np.array([2e8, 1.5e8]), np.linspace(0.0, 2e4, 29)).tobytes().hex())\n")
    out = as_user(other_user, "-c", code, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    drive, press = out.stdout.split()
    y = PressLinkageModel().solve_state(np.array([2e8, 1.5e8]), np.linspace(0.0, 2e4, 29))
    assert np.array_equal(np.frombuffer(bytes.fromhex(press), dtype=y.dtype).reshape(y.shape), y)
    u = 2.0 * np.sin(np.arange(500) * 0.05)
    here = simulate(parse_name("1m+visc+coul"), P, prepare_input(u, 1e-4, 5))
    theirs = np.frombuffer(bytes.fromhex(drive), dtype=here.S.dtype).reshape(here.S.shape)
    # the same loops: equal up to the order another BLAS kernel may sum in (the child picks its own)
    np.testing.assert_allclose(theirs, here.S, rtol=1e-12, atol=1e-12 * float(np.abs(here.S).max()))
