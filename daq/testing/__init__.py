"""Testing a lab's own rig configs and plans in pytest (docs/testing-your-rig.md).

``run_simulated(config, speed=10)`` runs a config on its simulated rig through the same run lifecycle as
``hil run`` - every device and the bus on loopback port 0, a temporary store removed afterwards - and returns
the session (streams with units, sample counts, plan outcome, safe state) and the rig's analysis. The pytest
fixture ``hil_sim`` wraps it: ``pytest_plugins = ["daq.testing.plugin"]`` in a conftest.py.
"""

from daq.testing.sim_run import (
    DEFAULT_SPEED,
    SimRun,
    SimSession,
    StreamSummary,
    loopback_config,
    run_simulated,
    run_simulated_async,
)

__all__ = ["DEFAULT_SPEED", "SimRun", "SimSession", "StreamSummary", "loopback_config", "run_simulated",
           "run_simulated_async"]
