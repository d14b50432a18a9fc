"""BLAS threading for the small dense problems of identification.

The matrices of a fit are tiny (tens of columns): multi-threaded OpenBLAS only adds synchronisation, and
with one process per core it oversubscribes the machine (measured 5x slower fits on 2 cores).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from threadpoolctl import threadpool_limits


@contextlib.contextmanager
def single_thread_blas() -> Iterator[None]:
    """Run BLAS single-threaded inside the block."""
    with threadpool_limits(limits=1, user_api="blas"):
        yield


def limit_blas_to_one_thread() -> None:
    """Process-pool initializer: one BLAS thread for the worker's whole life."""
    threadpool_limits(limits=1, user_api="blas")
