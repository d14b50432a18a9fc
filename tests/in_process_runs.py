"""Runs of a simulated config on the in-process backends (simulators/in_process.py): the same plan, driver
code and run lifecycle as over the protocols on loopback, without the protocol round trips. For the tests
of plans and of the run lifecycle; the faults of a protocol itself (stalls, lost connections, stale or
swapped replies) keep their end-to-end tests over the real protocols."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from daq.rigs import parse_config
from daq.rigs.config import with_sim_speed
from daq.run.lifecycle import RunResult, run
from simulators.in_process import in_process


async def run_in_process(config: dict, store_path: str | Path, **kwargs: Any) -> RunResult:
    """``run(config, store_path, **kwargs)`` with the config's simulator started here and its devices
    reached in-process (a ``simulated_rig`` in ``kwargs`` is used instead, and left running)."""
    sim = kwargs.pop("simulated_rig", None)
    if sim is not None:
        return await run(config, store_path, simulated_rig=sim, backends=in_process(sim), **kwargs)
    rig, cfg = parse_config(copy.deepcopy(config))
    cfg = with_sim_speed(cfg, kwargs.pop("sim_speed", None))  # the simulator's clock runs at the run's speed
    sim = rig.simulator(cfg)
    await sim.start()
    try:
        return await run(cfg, store_path, simulated_rig=sim, backends=in_process(sim), **kwargs)
    finally:
        await sim.stop()
