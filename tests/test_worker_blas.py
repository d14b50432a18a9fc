"""Every process pool of the identification runs BLAS single-threaded in its workers, also in the BLAS
libraries a spawned worker loads only with its first task (numpy's and scipy's OpenBLAS). Before, the
initializers limited only the libraries already loaded - none in a fresh spawned worker - so the crane
screen of `select_model` without an executor ran 2 workers x 2 spinning BLAS threads on 2 cores (10x the
time per candidate under pytest). The press's and the crane's online workers load numpy while their
initializer is unpickled, so they were limited already; they are checked here so that they stay so."""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing

import pytest

from daq.executor import LocalExecutor
from daq.rigs.crane.online import _init_worker as crane_online_init
from daq.rigs.press.online import _worker_init as press_online_init
from identification.selection.model_selection import _SpawnPool


def blas_threads(_: object) -> list[int]:
    """In a worker: the thread counts of every BLAS loaded after importing numpy and scipy's LAPACK."""
    import numpy  # noqa: F401
    import scipy.linalg  # noqa: F401  # scipy brings its own OpenBLAS
    from threadpoolctl import threadpool_info

    return [d["num_threads"] for d in threadpool_info() if d["user_api"] == "blas"]


def spawn_pool(initializer) -> cf.ProcessPoolExecutor:
    return cf.ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                                  initializer=initializer)


@pytest.mark.parametrize("pool", ["select_model", "press verdicts", "crane online", "local executor"])
def test_a_spawned_worker_runs_every_blas_it_loads_single_threaded(pool):
    if pool == "select_model":  # select_model's own pool when no executor is given
        spawn = _SpawnPool(2)
        try:
            counts = spawn.map(blas_threads, range(2))
        finally:
            spawn.close()
    elif pool == "local executor":
        with LocalExecutor(2) as ex:
            counts = ex.map(blas_threads, range(2))
    else:
        with spawn_pool(press_online_init if pool == "press verdicts" else crane_online_init) as ex:
            counts = list(ex.map(blas_threads, range(2)))
    assert all(threads and all(n == 1 for n in threads) for threads in counts), counts
