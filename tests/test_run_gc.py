"""The run keeps what it loaded before the plan out of the garbage collector's sight while the plan runs
(daq/run/collector.py, around the plan in daq/run/lifecycle.py), and puts it back in sight when the plan
ends: a process that runs plan after plan (a lab's test, a served rig) must still collect each run's
reference cycles."""

from __future__ import annotations

import asyncio
import gc

from tests.in_process_runs import run_in_process
from tests.test_press_experiment import short_config


async def test_the_plan_runs_with_the_runs_objects_frozen_and_they_are_collectable_after_it(tmp_path):
    gc.unfreeze()  # whatever an earlier test or the worker's start froze: counted from nothing here
    seen: list[int] = []

    async def watch() -> None:
        """The freeze count until the plan's freeze is seen, then no more: the count walks every frozen
        object (19 ms for 414,000 of them on a slow machine), and asked every 20 ms for the whole plan it
        took the run's event loop from the simulated press, which fell behind its clock and stopped."""
        while not seen or seen[-1] <= 10_000:
            seen.append(gc.get_freeze_count())
            await asyncio.sleep(0.05)

    watcher = asyncio.create_task(watch())
    try:
        # speed 4: what is tested is the collector, not the speed (a press at 10 in a busy worker of a slow
        # 2-core machine can fall behind its clock and stop, as it should: tests/test_sim_clock.py)
        result = await run_in_process(short_config(n_series=3, n_steps_up=1), tmp_path / "s.sqlite",
                                      show_progress=False, handle_sigint=False, sim_speed=4.0)
    finally:
        watcher.cancel()
    assert result.status == "complete", result.reason
    assert max(seen) > 10_000  # the modules, drivers, bus and store, frozen while the plan ran
    assert gc.get_freeze_count() == 0  # and in the collector's sight again after it

    class Cycle:
        pass

    a, b = Cycle(), Cycle()
    a.other, b.other = b, a
    del a, b
    assert gc.collect() >= 2  # a cycle made after the run is collected
