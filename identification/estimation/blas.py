"""BLAS threading for the small dense problems of identification.

The matrices of a fit are tiny (tens of columns): multi-threaded OpenBLAS only adds synchronisation, and
with one process per core it oversubscribes the machine (measured 5x slower fits on 2 cores).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from threadpoolctl import threadpool_limits


@contextlib.contextmanager
def single_thread_blas() -> Iterator[None]:
    """Run BLAS single-threaded inside the block."""
    with threadpool_limits(limits=1, user_api="blas"):
        yield


#: Thread-count variables that BLAS/OpenMP libraries read once, when they are loaded.
BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS",
                         "VECLIB_MAXIMUM_THREADS")


def limit_blas_to_one_thread() -> None:
    """Process-pool initializer: one BLAS thread for the worker's whole life - in the libraries loaded now
    (threadpoolctl) and in those loaded later (their thread-count variables). ``threadpool_limits`` alone
    reaches only the libraries already loaded, and a spawned worker loads numpy's and scipy's OpenBLAS with
    its first task: a pool of 2 then ran 2 x 2 spinning BLAS threads on 2 cores (the crane screen under a
    test runner: 10x the time per candidate)."""
    for name in BLAS_THREAD_VARIABLES:
        os.environ[name] = "1"
    threadpool_limits(limits=1, user_api="blas")
