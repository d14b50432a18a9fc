"""One executor interface, two back ends: the same numbers from the local process pool and from Dask."""

import numpy as np
import pytest
from dask.distributed import Client, LocalCluster

from daq.executor import DaskExecutor, LocalExecutor, SerialExecutor, make_executor
from identification.design.multisine import design_multisine
from identification.gsa import identify, reference_from_model
from identification.models.drive_models import parse_name
from identification.models.drive_simulation import prepare_input, simulate
from identification.models.machine_tool_model import (
    DAMPING_NAMES,
    STIFFNESS_NAMES,
    MachineTool,
    as_vector,
    param_bounds,
)
from identification.selection.model_selection import select_model
from tests.fit_starts import CRANE_BOUNDS, alternating


def _square(x):
    return x * x


@pytest.fixture(scope="module")
def dask_client():
    # every listener on loopback (Dask's defaults listen on all interfaces and look up a route to 8.8.8.8)
    cluster = LocalCluster(n_workers=1, threads_per_worker=2, processes=False, protocol="tcp://",
                           host="127.0.0.1", dashboard_address="127.0.0.1:0",
                           worker_dashboard_address="127.0.0.1:0")
    client = Client(cluster)
    yield client
    client.close()
    cluster.close()


@pytest.fixture(scope="module")
def pool():
    with LocalExecutor(2) as ex:
        yield ex


def _blas_threads(_):
    import scipy.linalg  # noqa: F401  # scipy brings its own OpenBLAS, loaded here for the first time
    from threadpoolctl import threadpool_info

    return [d["num_threads"] for d in threadpool_info() if d["user_api"] == "blas"]


def test_local_workers_run_every_blas_single_threaded(pool):
    """A worker loads numpy's and scipy's BLAS only with its first task; both must run one thread (2 workers
    x 2 BLAS threads on 2 cores made the crane screen burn ~5x the CPU)."""
    for threads in pool.map(_blas_threads, range(4)):
        assert threads and all(n == 1 for n in threads), threads


def test_map_keeps_order_on_every_back_end(dask_client, pool):
    items = list(range(23))
    want = [i * i for i in items]
    with DaskExecutor(dask_client) as dx:
        assert dx.map(_square, items) == want
        assert sorted(i for i, _ in dx.imap_unordered(_square, items)) == items
        assert dx.n_workers == 2
    assert dask_client.status == "running"  # a client passed in is left open
    assert pool.map(_square, items) == want and pool(_square, []) == []
    assert SerialExecutor().map(_square, items) == want
    assert isinstance(make_executor(None, 1), SerialExecutor)
    with make_executor(None, 2) as ex:
        assert isinstance(ex, LocalExecutor) and ex.n_workers == 2


def _gsa(executor):
    m = MachineTool()
    truth = as_vector(None)
    lo, hi = param_bounds()
    ref = reference_from_model(m, truth, [0.25], 6)
    return identify(m, ref, STIFFNESS_NAMES, DAMPING_NAMES, lo, hi, start=alternating(truth), sobol_n=16,
                    n_opt=2, maxiter=15, refine=False, seed=5, executor=executor, n_chunks=4)


def test_gsa_identification_same_on_pool_and_dask(dask_client, pool):
    a = _gsa(pool)
    with DaskExecutor(dask_client) as dx:
        b = _gsa(dx)
    c = _gsa(None)
    # the Sobol indices agree to round-off; the SLSQP multistarts (finite-difference gradients) may
    # amplify last-digit differences of the eigen-solver along flat directions: compare in units of
    # each parameter's search range
    np.testing.assert_allclose(a.sobol_macxp.ST, b.sobol_macxp.ST, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(a.sobol_ndd2.ST, c.sobol_ndd2.ST, rtol=1e-9, atol=1e-12)
    span = a.hi - a.lo
    assert np.max(np.abs(a.estimate - b.estimate) / span) < 1e-3
    assert np.max(np.abs(a.estimate - c.estimate) / span) < 1e-3


def _runs():
    dt = 1e-4
    s = parse_name("2m+visc+dt")
    true = dict(J1=0.02, J2=0.06, k12=2100.0, d12=0.6, viscous=0.05, dead_time=0.0008)
    out = []
    for k, (f_min, grid) in enumerate(((4.0, "log"), (6.0, "lin"))):
        ms = design_multisine(f_min, 150.0, 40, dt, period=0.5, grid=grid, seed=k)
        u = ms.scale_to_peak(8.0)
        y = simulate(s, true, prepare_input(u, dt, 1), sensitivities=False).y
        out.append((u, y + np.random.default_rng(10 + k).normal(0, 0.01, y.size), dt))
    return out


def test_crane_selection_same_on_pool_and_dask(dask_client, pool):
    train, valid = _runs()
    # one start per candidate: the centre of bounds that put it away from the truth (tests/fit_starts.py)
    kw = dict(bounds=CRANE_BOUNDS, candidates=["1m+visc+dt", "2m+visc", "2m+visc+dt"], n_starts=1, seed=0,
              decimate=5, profile_points=3)
    a = select_model(train, valid, executor=pool, **kw)
    with DaskExecutor(dask_client) as dx:
        b = select_model(train, valid, executor=dx, **kw)
    c = select_model(train, valid, n_jobs=1, **kw)
    assert a.chosen_name == b.chosen_name == c.chosen_name == "2m+visc+dt"
    for x in (b, c):
        for ca, cx in zip(a.candidates, x.candidates, strict=True):
            assert ca.name == cx.name
            # the same fits in other processes (other BLAS threading): equal far inside their std, not to the
            # last digits, which move with the round-off (the optimiser stops at xtol = 1e-10 of the box)
            assert ca.valid_cost == pytest.approx(cx.valid_cost, rel=1e-6)
            for n, v in ca.params.items():
                sd = ca.std_errors.get(n, float("nan"))
                tol = 1e-3 * sd if np.isfinite(sd) and sd > 0 else 1e-6 * abs(v)
                assert abs(cx.params[n] - v) <= tol, (ca.name, n, v, cx.params[n], sd)
        np.testing.assert_allclose(np.array(x.profile.interval, dtype=float),
                                   np.array(a.profile.interval, dtype=float), rtol=1e-6)


def test_warm_starts_every_worker_before_any_batch():
    """``warm`` starts the pool's workers at once, each importing the named function's module and calling
    it, and returns without waiting; a batch after it runs as before. The serial executor has nothing to
    start."""
    with LocalExecutor(2) as ex:
        ex.warm("identification.selection.model_selection:warm_up")
        assert ex._pool is not None and len(ex._pool._processes) == 2
        assert ex.map(_square, [1, 2, 3]) == [1, 4, 9]
    SerialExecutor().warm("identification.selection.model_selection:warm_up")  # no workers: nothing
