"""Where our process pools' workers come from: a fork server that imported numpy and scipy once.

A pool worker used to be spawned: a fresh interpreter that imported numpy, scipy and the task's modules
before its first task, ~1.5-2 CPU-s each (two workers of the crane's selection: 3.8-4.4 CPU-s). A fork
server is started once per process that makes pools, imports ``PRELOAD`` and then forks every worker of
every pool that process makes, so a worker starts with those modules already imported. The server is a
fresh interpreter, like a spawned worker, so a worker never inherits the pool maker's threads or their
locks (asyncio executors, ZeroMQ I/O), which is why these pools do not fork the maker itself. The server's
only other threads are OpenBLAS's, which OpenBLAS stops before every fork (``pthread_atfork``): the server
has one thread when it forks (checked in /proc). The workers' initializers (one BLAS thread) run in each
worker as before.
"""

from __future__ import annotations

import multiprocessing
from multiprocessing.context import BaseContext

#: what the fork server imports before its first fork (what every pool's tasks need)
PRELOAD = ("numpy", "scipy.linalg", "scipy.optimize")


def pool_context() -> BaseContext:
    """The ``mp_context`` of our process pools (the fork server's preload is set before it starts)."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(PRELOAD))
    return context
