"""The suite's checkout fence as pytest hooks: a run fails when its tests left something new at the top of the
checkout, beyond the caches Python and the tools keep there.

Tests write into their temporary folders, never into the clone they run from: a shipped config that names an
output folder relative to itself (configs/crane-sim.toml exports its excitation to ``../sessions/``) put it
in the checkout when a test ran the config as shipped - in the folder every worker shares, and in a clone the
test's user may not write. The run's first process (the xdist controller, or a run without workers) notes the
checkout's top-level names when the run starts and compares them when it ends; tests/conftest.py registers
this module as a plugin.
"""

from __future__ import annotations

import fnmatch
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: what may appear at the top of the checkout during a run: caches and build records, not results
CACHES = ("__pycache__", ".pytest_cache", ".hypothesis", ".mypy_cache", ".ruff_cache", ".venv*", "*.egg-info")
_KEY = pytest.StashKey[frozenset]()


def top_level_names(root: Path = ROOT) -> frozenset[str]:
    return frozenset(entry.name for entry in root.iterdir())


def left_behind(before: frozenset[str], after: frozenset[str]) -> list[str]:
    """What is new at the top of the checkout and is not a cache, sorted."""
    return sorted(name for name in after - before if not any(fnmatch.fnmatch(name, c) for c in CACHES))


def pytest_sessionstart(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):
        session.config.stash[_KEY] = top_level_names()


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    before = session.config.stash.get(_KEY, None)
    if before is None:
        return
    new = left_behind(before, top_level_names())
    if new:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        message = (f"the tests left {', '.join(new)} in the checkout {ROOT}: a test writes outside its "
                   "temporary folders")
        if reporter is not None:
            reporter.write_line(message, red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
