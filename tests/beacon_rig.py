"""A minimal rig kind for tests of the run lifecycle's edges (secured bus, full disk): one in-process
'lamp' whose safe action switches it off, and a plan that publishes a frame of ``samples`` x ``channels``
every ``period`` s until it is stopped. Real bus, store, recorder and command channel around it."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path

import numpy as np

from daq.bus.frames import Frame
from daq.config.schema import RigConfig
from daq.rigs.base import Rig
from daq.run.announce import runs_dir
from daq.run.lifecycle import RunContext, run
from drivers.safe_state import SafeAction, SafeStep
from tests.polling import poll_until


class BeaconConfig(RigConfig, kw_only=True):
    plan: dict = {}


class Lamp:
    """The one 'device': on while the plan runs; its safe action switches it off."""

    def __init__(self) -> None:
        self.on, self.safe = True, False
        off = SafeAction("lamp", "in-process", (SafeStep("off", 1.0, self.off),))
        self.safe_actions = [("lamp off", off)]

    async def off(self) -> None:
        self.on, self.safe = False, True

    async def identities(self) -> dict:
        return {"lamp": {"model": "test lamp"}}

    async def close(self) -> None:
        pass


class NoSimulator:
    """Stands in for a simulator: the lamp lives in this process."""

    def device_config(self) -> dict:
        return {}


class BeaconRig(Rig):
    kind = "beacon"
    summary = "publishes a frame every 20 ms until stopped"
    schema = BeaconConfig

    def __init__(self, samples: int = 10, channels: int = 1, period: float = 0.02) -> None:
        self.lamp = Lamp()
        self.samples, self.channels, self.period = samples, channels, period

    async def open_devices(self, cfg, tables, backends=None):
        return self.lamp

    def progress_total(self, cfg) -> int:
        return 10_000

    async def plan(self, ctx) -> None:
        k = 0
        while True:
            await ctx.checkpoint(f"before frame {k + 1}")
            data = np.random.default_rng(k).standard_normal((self.samples, self.channels))  # incompressible
            names = [f"x{i}" for i in range(self.channels)]
            await ctx.publish(Frame("beacon.x", ctx.next_seq("beacon.x"), time.time(), 0.002, names,
                                    ["m"] * self.channels, data))
            k += 1
            ctx.advance(1, f"frame {k}")
            await asyncio.sleep(self.period)


class RunThread:
    """`run()` of the lifecycle in a thread of its own (the CLI runs its own event loop in the test's)."""

    def __init__(self, config: dict, store: Path, rig: BeaconRig):
        self.config, self.store, self.rig = config, store, rig
        self.ctx: RunContext | None = None
        self.result = None
        self.error: BaseException | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread = threading.Thread(target=lambda: asyncio.run(self._go()), daemon=True)

    async def _go(self) -> None:
        self.loop = asyncio.get_running_loop()
        try:
            self.result = await run(self.config, self.store, show_progress=False, handle_sigint=False,
                                    simulated_rig=NoSimulator(), on_context=self._context)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def _context(self, ctx: RunContext) -> None:
        self.ctx = ctx

    def announcement(self) -> dict:
        poll_until(lambda: self.error is not None or any(runs_dir(self.store).glob("*.json")), timeout=20)
        assert self.error is None, self.error
        poll_until(lambda: self.ctx is not None and self.ctx.steps_done >= 2, timeout=20)
        (path,) = runs_dir(self.store).glob("*.json")
        return json.loads(path.read_text())

    def stop(self) -> None:
        if self.thread.is_alive() and self.loop is not None and self.ctx is not None:
            self.loop.call_soon_threadsafe(self.ctx.abort)
        self.thread.join(30)


