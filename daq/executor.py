"""Where batches of independent model evaluations run: a local process pool or a Dask cluster.

The identification code never starts processes itself; it takes a ``map``-like callable
(``executor.map(fn, items) -> list``) and hands it whole batches (Sobol samples in chunks,
multistart runs, candidate models, profile-likelihood directions). This module supplies the
two back ends behind that one interface:

* :class:`LocalExecutor` - a ``concurrent.futures`` process pool whose workers a fork server makes
  (:mod:`identification.estimation.pool_context`; a child forked from the caller would inherit the locks
  of its threads: asyncio executors, ZeroMQ I/O, BLAS pools) with BLAS single-threaded in every worker
  (:func:`one_blas_thread`): the matrices are small and one BLAS thread per process is what fills the
  cores (2 x 2 threads on 2 cores was 5x slower);
* :class:`DaskExecutor` - ``dask.distributed``: a running scheduler (``tcp://host:8786``), an
  existing ``Client`` or a ``LocalCluster``; every task runs with BLAS single-threaded too;
* :class:`SerialExecutor` - in this process, for one worker and for debugging.

It lives in ``daq/`` (the room for processes and I/O) so that ``identification/`` stays plain math.
Functions and items must be picklable (module-level functions, ``functools.partial`` of them).
"""

from __future__ import annotations

import concurrent.futures as cf
import importlib
import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from threadpoolctl import threadpool_limits

from identification.estimation.blas import BLAS_THREAD_VARIABLES, limit_blas_to_one_thread
from identification.estimation.pool_context import pool_context

__all__ = ["Executor", "SerialExecutor", "LocalExecutor", "DaskExecutor", "make_executor", "one_blas_thread"]


class Executor:
    """``map(fn, items) -> list`` in item order, ``imap_unordered`` for progress; a context manager."""

    n_workers: int = 1

    def imap_unordered(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> Iterator[tuple[int, Any]]:
        """Yield ``(index, fn(item))`` as results complete."""
        raise NotImplementedError

    def map(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> list:
        items = list(items)
        out: list = [None] * len(items)
        for i, r in self.imap_unordered(fn, items):
            out[i] = r
        return out

    __call__ = map  # an executor is itself a map-like callable

    def warm(self, target: str) -> None:
        """Start the workers now and let each call ``target`` (``"module:function"``, imported there: this
        process need not have imported it yet) to load what the first batch needs while the caller still
        prepares it; returns at once. Here (no workers of its own): nothing."""

    def close(self) -> None:
        """Release workers/connections (idempotent)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


#: Make this process's BLAS single-threaded for good: the libraries loaded now and those a worker loads
#: with its first task (the identification package's pool initializer, under the name the docs give).
one_blas_thread = limit_blas_to_one_thread


class _SingleThreadBlas:
    """Picklable wrapper: call ``fn`` with BLAS limited to one thread (also in libraries ``fn`` loads)."""

    def __init__(self, fn: Callable[[Any], Any]):
        self.fn = fn

    def __call__(self, item: Any) -> Any:
        for name in BLAS_THREAD_VARIABLES:
            os.environ[name] = "1"
        with threadpool_limits(limits=1, user_api="blas"):
            return self.fn(item)


def _call_named(target: str) -> None:
    """Import ``module`` and call its ``function`` (``target = "module:function"``), in a worker."""
    module, _, name = target.partition(":")
    getattr(importlib.import_module(module), name)()


class SerialExecutor(Executor):
    """Runs every item here, in order, BLAS single-threaded (same numerics as the workers)."""

    def imap_unordered(self, fn, items):
        with threadpool_limits(limits=1, user_api="blas"):
            for i, item in enumerate(items):
                yield i, fn(item)


class LocalExecutor(Executor):
    """Process pool (workers from the fork server); started on first use, reused until :meth:`close`."""

    def __init__(self, workers: int | None = None):
        self.n_workers = max(1, int(workers or os.cpu_count() or 1))
        self._pool: cf.ProcessPoolExecutor | None = None

    def _ensure(self) -> cf.ProcessPoolExecutor:
        if self._pool is None:
            self._pool = cf.ProcessPoolExecutor(max_workers=self.n_workers, mp_context=pool_context(),
                                                initializer=one_blas_thread)
        return self._pool

    def warm(self, target: str) -> None:
        """One ``target`` call per worker, not waited for: each submit starts a worker (a spawn takes a second
        or more on a loaded machine, importing numpy, scipy and the compiled code another), all start now."""
        pool = self._ensure()
        for _ in range(self.n_workers):
            pool.submit(_call_named, target)

    def imap_unordered(self, fn, items):
        pool = self._ensure()
        futs = {pool.submit(fn, item): i for i, item in enumerate(items)}
        try:
            for f in cf.as_completed(futs):
                yield futs[f], f.result()
        finally:
            for f in futs:
                f.cancel()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


class DaskExecutor(Executor):
    """Tasks on a Dask distributed cluster.

    ``target`` is a scheduler address (``"tcp://10.0.0.5:8786"``), a ``distributed.Client`` or a
    ``distributed.LocalCluster``. A client created here is closed by :meth:`close`; one passed in is
    left open. Tasks are submitted with ``pure=False`` (no hashing of large arguments, and a
    re-submitted batch really runs again).
    """

    def __init__(self, target: Any, *, own_cluster: Any = None):
        from dask.distributed import Client

        self._cluster = own_cluster  # a LocalCluster made by make_executor, closed with us
        self._own = not isinstance(target, Client)
        self.client = Client(target) if self._own else target
        info = self.client.scheduler_info()
        n = sum(int(w.get("nthreads", 1)) for w in info.get("workers", {}).values())
        self.n_workers = max(1, n)

    def imap_unordered(self, fn, items):
        from dask.distributed import as_completed

        items = list(items)
        if not items:
            return
        futs = self.client.map(_SingleThreadBlas(fn), items, pure=False)
        index = {f.key: i for i, f in enumerate(futs)}
        try:
            for f in as_completed(futs):
                yield index[f.key], f.result()
        finally:
            for f in futs:
                f.release()

    def close(self) -> None:
        if self._own and self.client is not None:
            self.client.close()
            self.client = None
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None


def make_executor(scheduler: str | None = None, workers: int | None = None) -> Executor:
    """Executor for a config/CLI choice.

    ``scheduler=None``: local process pool with ``workers`` processes (default: all cores; one
    worker gives the in-process :class:`SerialExecutor`). ``scheduler="local"``: a Dask
    ``LocalCluster`` of ``workers`` single-threaded worker processes (closed with the executor).
    Any other string: the address of a running Dask scheduler.
    """
    if scheduler is None or scheduler == "":
        n = max(1, int(workers or os.cpu_count() or 1))
        return SerialExecutor() if n == 1 else LocalExecutor(n)
    if scheduler == "local":
        from dask.distributed import LocalCluster

        n = max(1, int(workers or os.cpu_count() or 1))
        # scheduler, workers and the scheduler's HTTP endpoint on loopback only: a cluster of this PC's own
        # processes has no business listening on every interface (Dask's default)
        cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, host="127.0.0.1",
                               dashboard_address="127.0.0.1:0", worker_dashboard_address="127.0.0.1:0")
        return DaskExecutor(cluster, own_cluster=cluster)
    return DaskExecutor(scheduler)
