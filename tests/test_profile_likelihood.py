"""Profile-likelihood intervals: known answers (linear regression, a reparametrisation), open sides, the
executor, and the crane report and plot."""

import json

import numpy as np
import pytest
import scipy.stats

from daq.executor import LocalExecutor, SerialExecutor
from daq.rigs.crane.plots import plot_profiles
from daq.rigs.crane.rig import report_text
from identification.design.multisine import design_multisine
from identification.estimation.profile_likelihood import lr_threshold, profile_likelihood_intervals
from identification.models.drive_models import parse_name
from identification.models.drive_simulation import prepare_input, simulate
from identification.selection.model_selection import select_model
from tests.fit_starts import CRANE_BOUNDS


class LinearRefit:
    """Exact re-fit of y = X b with b_j fixed (module-level class: picklable for process pools)."""

    def __init__(self, X, y):
        self.X, self.y = X, y

    def cost(self, b):
        r = self.y - self.X @ b
        return 0.5 * float(r @ r)

    def __call__(self, j, value, start):
        free = [i for i in range(self.X.shape[1]) if i != j]
        q = np.linalg.lstsq(self.X[:, free], self.y - self.X[:, j] * value, rcond=None)[0]
        b = np.empty(self.X.shape[1])
        b[free], b[j] = q, value
        return self.cost(b), b


def _regression(n=30, sigma=0.3, seed=4):
    rng = np.random.default_rng(seed)
    X = np.column_stack([np.ones(n), rng.uniform(-1, 1, n), rng.uniform(0, 2, n)])
    y = X @ np.array([1.0, -2.0, 0.5]) + rng.normal(0, sigma, n)
    b = np.linalg.lstsq(X, y, rcond=None)[0]
    return X, y, b, np.linalg.inv(X.T @ X)


def test_thresholds():
    assert lr_threshold() == pytest.approx(3.841458820694124)
    assert lr_threshold(0.95, 27) == pytest.approx(scipy.stats.t.ppf(0.975, 27) ** 2)


def test_sigma_known_gives_the_normal_interval():
    X, y, b, XtXi = _regression()
    sigma = 0.3
    f = LinearRefit(X, y)
    se = sigma * np.sqrt(np.diag(XtXi))
    bounds = [(bj - 50 * s, bj + 50 * s) for bj, s in zip(b, se, strict=True)]
    r = profile_likelihood_intervals(f, b, bounds, f.cost(b), sigma ** 2, ["b0", "b1", "b2"],
                                     first_step=0.2 * se)
    z = scipy.stats.norm.ppf(0.975)
    for j in range(3):
        lo, hi = r.interval[j]
        assert lo == pytest.approx(b[j] - z * se[j], rel=1e-9, abs=1e-12)
        assert hi == pytest.approx(b[j] + z * se[j], rel=1e-9, abs=1e-12)
    assert all(r.identifiable) and all(r.clear_minimum)
    # the traced points lie on the exact quadratic profile
    for j in range(3):
        np.testing.assert_allclose(r.lr[j], ((r.grids[j] - b[j]) / se[j]) ** 2, rtol=1e-8, atol=1e-10)


def test_sigma_estimated_gives_the_t_interval_and_matches_fisher():
    X, y, b, XtXi = _regression(seed=7)
    n, p = X.shape
    f = LinearRefit(X, y)
    s2 = 2 * f.cost(b) / (n - p)
    se = np.sqrt(s2 * np.diag(XtXi))
    bounds = [(-100.0, 100.0)] * 3
    r = profile_likelihood_intervals(f, b, bounds, f.cost(b), s2, ["b0", "b1", "b2"], fisher_se=se, dof=n - p)
    t = scipy.stats.t.ppf(0.975, n - p)
    for j in range(3):
        assert r.interval[j][0] == pytest.approx(b[j] - t * se[j], rel=1e-9)
        assert r.interval[j][1] == pytest.approx(b[j] + t * se[j], rel=1e-9)
        assert r.fisher_interval[j] == pytest.approx(r.interval[j], rel=1e-9)
    # half a standard error first, then one step past the threshold: 2 re-fits per side
    assert r.n_refits == 12
    # sqrt(LR) is linear in the distance here, so refinement is skipped: same intervals, no extra re-fit
    r2 = profile_likelihood_intervals(f, b, bounds, f.cost(b), s2, ["b0", "b1", "b2"], fisher_se=se,
                                      dof=n - p, refine=3)
    assert r2.n_refits == 12 and r2.interval == r.interval
    assert "b1" in r.format_table() and "identifiable" in r.format_table()


def test_unidentifiable_parameter_stays_open_to_the_bounds():
    rng = np.random.default_rng(2)
    n = 40
    a = rng.uniform(-1, 1, n)
    X = np.column_stack([np.ones(n), a, a])  # b1 and b2 only enter as b1 + b2
    y = 0.5 + 1.5 * a + rng.normal(0, 0.1, n)
    b = np.linalg.lstsq(X, y, rcond=None)[0]
    f = LinearRefit(X, y)
    r = profile_likelihood_intervals(f, b, [(-10, 10)] * 3, f.cost(b), 0.01, ["b0", "b1", "b2"],
                                     first_step=[0.01, 0.5, 0.5])
    assert r.identifiable == [True, False, False]
    assert r.interval[1] == (None, None) and r.interval[2] == (None, None)
    assert r.grids[1][0] == -10 and r.grids[1][-1] == 10  # traced to both bounds
    d = r.to_dict()
    assert d["parameters"][1]["interval"] == [None, None] and d["parameters"][0]["identifiable"]


def test_same_intervals_through_a_process_pool():
    X, y, b, XtXi = _regression()
    f = LinearRefit(X, y)
    se = 0.3 * np.sqrt(np.diag(XtXi))
    args = (f, b, [(-100.0, 100.0)] * 3, f.cost(b), 0.09, ["b0", "b1", "b2"])
    serial = profile_likelihood_intervals(*args, fisher_se=se)
    with LocalExecutor(2) as ex:
        pooled = profile_likelihood_intervals(*args, fisher_se=se, executor=ex)
    assert pooled.interval == serial.interval


class LogSlopeRefit:
    """y = exp(theta) * x + c: the profile of theta is the linear profile of a = exp(theta), re-mapped."""

    def __init__(self, x, y):
        self.X, self.y = np.column_stack([x, np.ones_like(x)]), y

    def cost(self, p):
        r = self.y - self.X @ np.array([np.exp(p[0]), p[1]])
        return 0.5 * float(r @ r)

    def __call__(self, j, value, start):
        p = np.array(start, dtype=float)
        p[j] = value
        if j == 0:
            p[1] = float(np.mean(self.y - np.exp(value) * self.X[:, 0]))
        else:
            p[0] = np.log(float(np.dot(self.X[:, 0], self.y - value) / np.dot(self.X[:, 0], self.X[:, 0])))
        return self.cost(p), p


def test_profile_interval_follows_a_reparametrisation_and_refine_finds_it():
    """Profile intervals are invariant under theta = log(a): their ends are log of the ends for a (the
    Fisher interval is not). The profile in theta is not quadratic, so the crossing needs refinement."""
    rng = np.random.default_rng(11)
    x = rng.uniform(0, 1, 25)
    sigma = 0.4
    y = 0.8 * x + 0.3 + rng.normal(0, sigma, x.size)
    X = np.column_stack([x, np.ones_like(x)])
    a, c = np.linalg.lstsq(X, y, rcond=None)[0]
    se_a = sigma * np.sqrt(np.linalg.inv(X.T @ X)[0, 0])
    z = scipy.stats.norm.ppf(0.975)
    want = (np.log(a - z * se_a), np.log(a + z * se_a))  # exact (sigma known)
    f = LogSlopeRefit(x, y)
    th = np.array([np.log(a), c])
    se_th = se_a / a  # delta method
    args = (f, th, [(-10.0, 3.0), (-10.0, 10.0)], f.cost(th), sigma ** 2, ["theta", "c"])
    coarse = profile_likelihood_intervals(*args, fisher_se=[se_th, 0.1], which=[0])
    fine = profile_likelihood_intervals(*args, fisher_se=[se_th, 0.1], which=[0], refine=4)
    assert fine.interval[0] == pytest.approx(want, rel=1e-6)
    err_coarse = max(abs(u - w) for u, w in zip(coarse.interval[0], want, strict=True))
    err_fine = max(abs(u - w) for u, w in zip(fine.interval[0], want, strict=True))
    assert err_fine < 1e-3 * err_coarse
    # the Fisher interval is symmetric in theta, the true one is not
    lo, hi = fine.interval[0]
    assert (th[0] - lo) > 1.1 * (hi - th[0])
    assert fine.side_status == [("closed", "closed")] and fine.verdict(0) == "identifiable"


def test_an_estimate_on_its_bound_and_a_better_optimum_are_reported():
    X, y, b, XtXi = _regression()
    f = LinearRefit(X, y)
    se = 0.3 * np.sqrt(np.diag(XtXi))
    bounds = [(b[0], 100.0), (-100.0, 100.0), (-100.0, 100.0)]  # b0 sits on its lower bound
    r = profile_likelihood_intervals(f, b, bounds, f.cost(b), 0.09, ["b0", "b1", "b2"], fisher_se=se)
    assert r.side_status[0] == ("at bound", "closed") and r.interval[0][0] is None
    assert r.verdict(0) == "identifiable (estimate at bound)" and r.identifiable[0] and r.better_cost is None
    assert f"{b[0]:.5g} (bound)" in r.format_table()
    assert r.to_dict()["parameters"][0]["side_status"] == ["at bound", "closed"]
    r.graded = False  # an adequacy check found the model wrong: closed, but not called identifiable
    assert r.verdict(1) == "closed, not graded (intervals not valid)"
    assert r.to_dict()["parameters"][1]["closed"] and not r.to_dict()["parameters"][1]["identifiable"]
    r.graded = True
    # an "optimum" that is not the minimum: a re-fit goes below its cost, and the result says so
    b_off = b + 3 * se
    r2 = profile_likelihood_intervals(f, b_off, [(-100.0, 100.0)] * 3, f.cost(b_off), 0.09,
                                      ["b0", "b1", "b2"], fisher_se=se)
    assert r2.better_cost is not None and r2.better_cost < f.cost(b_off)
    assert "not the minimum" in r2.format_table()


class CountingExecutor(SerialExecutor):
    """The in-process executor, recording which function each batch ran and how many items it had."""

    def __init__(self):
        self.batches: list[tuple[str, int]] = []

    def imap_unordered(self, fn, items):
        items = list(items)
        self.batches.append((getattr(fn, "__name__", type(fn).__name__), len(items)))
        return super().imap_unordered(fn, items)


def test_crane_profile_runs_on_the_executor_and_is_reported_and_plotted(tmp_path):
    """A drive model fitted to data from itself (white noise, input held over the model step so the
    decimated model is exact): every profile closes, next to the Fisher interval, around the truth."""
    truth = {"J1": 0.02, "J2": 0.06, "k12": 2100.0, "d12": 0.6, "viscous": 0.05}
    s = parse_name("2m+visc")
    dt, dec = 1e-4, 5
    runs = []
    for k, grid in enumerate(("log", "lin")):
        ms = design_multisine(4.0, 150.0, 40, dec * dt, period=0.5, grid=grid, seed=7 + k)
        u = np.repeat(ms.scale_to_peak(8.0), dec)
        y = simulate(s, truth, prepare_input(u, dt, 1), sensitivities=False).y
        runs.append((u, y + np.random.default_rng(20 + k).normal(0, 0.01, y.size), dt))
    ex = CountingExecutor()
    # one start: the centre of bounds that put it away from the truth (tests/fit_starts.py)
    res = select_model(runs[0], runs[1], CRANE_BOUNDS, candidates=["2m+visc"], n_starts=1, decimate=dec,
                       profile_points=6, executor=ex)
    prof = res.profile
    assert ex.batches[-1] == ("_trace", 2 * len(s.param_names))  # every direction is one executor task
    assert prof.names == s.param_names and all(prof.identifiable) and prof.better_cost is None
    assert prof.threshold == pytest.approx(scipy.stats.chi2.ppf(0.95, 1))
    for i, name in enumerate(prof.names):
        lo, hi = prof.interval[i]
        flo, fhi = prof.fisher_interval[i]
        assert lo < truth[name] < hi, name  # seeded: the 95 % intervals hold the truth here
        # the model is nearly linear in its parameters at this noise: both intervals agree to a few %
        tol = 0.05 * (fhi - flo)
        assert lo == pytest.approx(flo, abs=tol) and hi == pytest.approx(fhi, abs=tol)
    text = report_text(res)
    assert "profile likelihood of 2m+visc" in text and "Fisher lo" in text
    rows = [line.split() for line in text.splitlines() if line.endswith("]") and "identifiable" in line]
    assert [r[0] for r in rows] == s.param_names
    d = json.loads(json.dumps(res.to_dict()))
    p0 = d["profile"]["parameters"][0]
    assert p0["verdict"] == "identifiable" and len(p0["interval"]) == 2 and len(p0["fisher_interval"]) == 2
    png = plot_profiles(prof, tmp_path / "profiles.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
