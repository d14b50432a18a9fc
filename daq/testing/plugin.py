"""The pytest side of :mod:`daq.testing`: the ``hil_sim`` fixture and the ``--hil-sim-speed`` option.

A lab's ``conftest.py`` names this module once: ``pytest_plugins = ["daq.testing.plugin"]``; its tests then
take ``hil_sim`` and call it with a config (docs/testing-your-rig.md). Only this module needs pytest.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

from daq.testing.sim_run import DEFAULT_SPEED, SimRun, run_simulated, run_simulated_async

__all__ = ["SimRunner", "hil_sim", "pytest_addoption"]

SPEED_OPTION = "--hil-sim-speed"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("hil").addoption(
        SPEED_OPTION, type=float, default=None, metavar="X",
        help=f"the clock speed of hil_sim runs that name none (default {DEFAULT_SPEED:g})")


class SimRunner:
    """``hil_sim(config, speed=..., overrides=..., analyze=..., read=...)``: :func:`run_simulated` with the
    session's default speed; ``await hil_sim.run_async(...)`` in an async test."""

    def __init__(self, speed: float = DEFAULT_SPEED):
        self.speed = speed

    def __call__(self, config: str | Path, *, speed: float | None = None,
                 overrides: Mapping[str, Any] | None = None, analyze: bool = True,
                 read: Iterable[str] = ()) -> SimRun:
        return run_simulated(config, speed=self._speed(speed), overrides=overrides, analyze=analyze,
                             read=read)

    async def run_async(self, config: str | Path, *, speed: float | None = None,
                        overrides: Mapping[str, Any] | None = None, analyze: bool = True,
                        read: Iterable[str] = ()) -> SimRun:
        return await run_simulated_async(config, speed=self._speed(speed), overrides=overrides,
                                         analyze=analyze, read=read)

    def _speed(self, speed: float | None) -> float:
        return self.speed if speed is None else speed


@pytest.fixture
def hil_sim(request: pytest.FixtureRequest) -> SimRunner:
    """Runs a rig config on its simulated rig (loopback, port 0, a temporary store) and returns the session
    and its analysis; the speed is ``--hil-sim-speed`` when given, else 10."""
    speed = request.config.getoption(SPEED_OPTION, default=None)
    return SimRunner(DEFAULT_SPEED if speed is None else float(speed))
