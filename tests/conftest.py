"""Shared pytest fixtures (kept small and generic) and the run's header: the versions it ran with."""

from __future__ import annotations

import os
import platform
from collections import Counter
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import checkout_fence
import numpy as np
import pytest
from bytecode_cache import start_compiling, start_compiling_kernels, write_rewritten_tests

# the loopback fence (tests/loopback_fence.py): a test that reaches beyond this machine or opens a serial
# device it did not create fails; tests/ is on sys.path (pytest puts the conftest's folder there)
from loopback_fence import (  # noqa: F401  (hooks: pytest finds them by name in this module)
    pytest_collection_finish,
    pytest_runtest_call,
    pytest_runtest_setup,
    pytest_runtest_teardown,
    pytest_unconfigure,
)

# the libraries whose versions decide numbers and protocol behaviour: a red run names them, so it can
# be reproduced (`pip install -c constraints-lowest.txt` pins the lowest declared ones)
REPORTED = ("numpy", "scipy", "pymodbus", "asyncua", "pyzmq", "pyserial", "h5py", "msgspec", "dask", "pytest")


def _blas() -> str:
    """The BLAS/LAPACK libraries numpy and scipy loaded, with their version and threads."""
    import scipy.linalg  # noqa: F401  (loads scipy's own BLAS, which may differ from numpy's)
    from threadpoolctl import threadpool_info

    rows = {
        f"{i.get('internal_api')} {i.get('version')} ({i.get('filepath', '').rsplit('/', 1)[-1]}, "
        f"{i.get('num_threads')} threads)"
        for i in threadpool_info()
        if i.get("user_api") == "blas"
    }
    return "; ".join(sorted(rows)) or "unknown"


def pytest_configure(config: pytest.Config) -> None:
    """One BLAS thread in each test process (the pytest workers; not the processes the tests start, which keep
    the product's own setting). The suite runs four workers on two cores: a BLAS of two threads per worker
    only adds spinning threads, as in the product's own pools (identification/estimation/blas.py). Measured
    on the numeric modules (tests/test_modal_*, machine tool, uncertainty test, crane intervals, adjoint
    convergence, `-n 3`): 284 CPU-s and 153 s wall with two threads, 221 CPU-s and 127 s with one. Only the
    order of floating-point sums inside BLAS changes; every test holds on any machine's BLAS anyway."""
    import scipy.linalg  # noqa: F401  (scipy's own OpenBLAS, beside numpy's: both loaded before the limit)
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1, user_api="blas")
    # the checkout fence (tests/checkout_fence.py): a run whose tests left results in the checkout fails
    config.pluginmanager.register(checkout_fence, "checkout_fence")


@pytest.fixture(autouse=True)
def _blas_variables_as_the_worker_started():
    """A `hil run` invoked in this worker (CliRunner) makes its process's BLAS single-threaded for good,
    variables included (daq.cli.common.rig_process); restored after each test, so the processes later tests
    start keep the product's own setting whatever ran before them in this worker."""
    from identification.estimation.blas import BLAS_THREAD_VARIABLES

    saved = {name: os.environ.get(name) for name in BLAS_THREAD_VARIABLES}
    yield
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """The run's first process (the xdist controller, before it starts the workers) writes the project's
    bytecode, the test modules' rewritten code and numba's cache of our kernels once, so that no process the
    run starts compiles them again (tests/bytecode_cache.py)."""
    config = session.config
    if not hasattr(config, "workerinput"):
        root = Path(__file__).resolve().parents[1]
        compiling = start_compiling(root)
        kernels = start_compiling_kernels(root) if config.getoption("numprocesses", None) else None
        if config.getoption("numprocesses", None):
            write_rewritten_tests(config, Path(__file__).parent)
        if compiling is not None:
            compiling.wait()  # a file that does not compile fails in the test that imports it, as it would
        if kernels is not None:
            kernels.wait()  # whatever it says: a kernel that does not compile fails in the tests that use it


def pytest_report_header(config: pytest.Config) -> list[str]:
    def ver(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "missing"

    libs = " ".join(f"{name}={ver(name)}" for name in REPORTED)
    return [f"python {platform.python_version()}: {libs}", f"BLAS: {_blas()}"]


@pytest.fixture
def rng() -> np.random.Generator:
    """A seeded random generator: every random draw in the tests is reproducible."""
    return np.random.default_rng(12345)


@pytest.fixture
def beacon():
    """The minimal rig kind of tests/beacon_rig.py, registered for one test."""
    from daq import rigs
    from tests.beacon_rig import BeaconRig

    rig = rigs.register(BeaconRig())
    yield rig
    rigs.unregister("beacon")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Modules with the most tests marked slow run first. pytest-xdist deals whole modules (``--dist
    loadscope``) to whichever worker is free, in collection order: a long module dealt last keeps one worker
    busy while the other has nothing left (longest first bounds that wait by the short modules)."""
    module = {id(item): item.nodeid.split("::", 1)[0] for item in items}
    slow = Counter(module[id(item)] for item in items if item.get_closest_marker("slow"))
    first: dict[str, int] = {}
    for i, item in enumerate(items):
        first.setdefault(module[id(item)], i)
    items.sort(key=lambda item: (-slow[module[id(item)]], first[module[id(item)]]))  # stable: order within
