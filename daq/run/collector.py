"""The garbage collector during a plan: what the run built before the plan is out of the collector's sight.

By the time a plan starts, a run holds its modules, drivers, bus and store: several hundred thousand objects
that live as long as the run. Every full collection during the plan walked all of them again - pauses of
0.1-0.25 s in the run's event loop, 0.84 of a simulated oscillator run's 4.9 CPU-s (0.47 with this). One
collection, then ``gc.freeze`` before the plan; ``gc.unfreeze`` after it, so a process that runs plan after
plan (a lab's tests, a served rig) still collects each run's reference cycles."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def frozen_for_the_plan() -> Iterator[None]:
    """What exists now out of the collector's sight (after a collection) until the block ends."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
