"""The suite's loopback fence as a pytest plugin: every test phase (setup, call, teardown) fails when it, or a
Python process it started, did something tests/loopback_guard.py refused - even if the code under test
swallowed the error. tests/conftest.py imports the hooks; a nested pytest run loads it with
``-p loopback_fence`` (tests/test_loopback_guard.py).

Importing this module installs the guard in this process and sets, for the processes it starts,
``PYTHONPATH`` (tests/guard_site first: its ``sitecustomize`` installs the guard in a child) and
``$HIL_TEST_GUARD_LOG`` (where a child writes what it refused).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Generator
from pathlib import Path

import loopback_guard
import pytest


class _Fence:
    """The loopback guard of this test process and of the Python processes it starts: what was refused
    since the last look, in-process and in the children's log."""

    def __init__(self) -> None:
        log = Path(tempfile.mkdtemp(prefix="hil-guard-")) / "refused.log"
        log.touch()
        os.chmod(log.parent, 0o755)
        os.chmod(log, 0o666)  # a child running as another OS user can say what it refused
        self.log, self.seen = log, 0
        atexit.register(shutil.rmtree, log.parent, ignore_errors=True)  # gone with this process (see close)
        site = str(Path(__file__).parent / "guard_site")
        os.environ[loopback_guard.LOG_ENV] = str(log)
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (site, os.environ.get("PYTHONPATH")) if p)
        loopback_guard.install()

    def close(self) -> None:
        """Remove the log's folder (a child that still writes to it afterwards is refused quietly)."""
        shutil.rmtree(self.log.parent, ignore_errors=True)

    def take(self) -> list[str]:
        found = loopback_guard.violations()
        loopback_guard.clear()
        with open(self.log, "rb") as f:
            f.seek(self.seen)
            tail = f.read()
        self.seen += len(tail)
        return found + [f"(child) {ln}" for ln in tail.decode(errors="replace").splitlines() if ln]


FENCE = _Fence()


def _fenced() -> Generator[None, object, object]:
    try:
        return (yield)
    finally:
        found = FENCE.take()
        if found:
            pytest.fail("\n".join(found), pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _fenced())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _fenced())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _fenced())


def pytest_collection_finish(session: pytest.Session) -> None:
    found = FENCE.take()
    if found:
        raise pytest.UsageError("a test module reached beyond loopback while it was imported:\n"
                                + "\n".join(found))


def pytest_unconfigure(config: pytest.Config) -> None:
    """The log's folder goes when pytest ends, not only at exit: every full run of the suite left each
    worker's folder in the temporary folder with ``atexit`` alone. The cause: each worker waited for its
    zygote at exit until xdist killed it, before this handler ran (mended in tests/zygote.py's close); a
    worker killed for another reason still leaves nothing here."""
    FENCE.close()
