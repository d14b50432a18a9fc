"""A served `hil serve` for tests: the real server (uvicorn on 127.0.0.1, port 0) in a thread of its own,
and beacon rig kinds (tests/beacon_rig.py) that run through the real lifecycle with a stand-in simulator."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import numpy as np

from daq.bus.frames import Frame
from daq.serve.server import Server
from tests.beacon_rig import BeaconRig
from tests.polling import poll_until


class _NoDevices:
    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass


class ServedBeacon(BeaconRig):
    """The beacon with a 'simulator' (nothing to start), so a config file with simulated = true runs it as
    `hil run` would; ``[plan] frames = N`` ends the plan after N frames (0: until stopped)."""

    def __init__(self, kind: str, samples: int = 10, channels: int = 1, period: float = 0.02,
                 note_bytes: int = 0) -> None:
        super().__init__(samples, channels, period)
        self.kind = kind
        self.note_bytes = note_bytes  # > 0: an event of about this size after every frame (heavy traffic)

    def simulator(self, raw):
        return _NoDevices()

    def simulated_devices(self, sim, raw) -> dict:
        return {}

    async def plan(self, ctx) -> None:
        frames = int(ctx.config.plan.get("frames", 0))
        k = 0
        names = [f"x{i}" for i in range(self.channels)]
        while frames <= 0 or k < frames:
            await ctx.checkpoint(f"before frame {k + 1}")
            data = np.random.default_rng(k).standard_normal((self.samples, self.channels))
            await ctx.publish(Frame("beacon.x", ctx.next_seq("beacon.x"), time.time(), 0.002, names,
                                    ["m"] * self.channels, data))
            if self.note_bytes:
                await ctx.event("beacon.log", "note", frame=k, text="n" * self.note_bytes)
            k += 1
            ctx.advance(1, f"frame {k}")
            await asyncio.sleep(self.period)
        await ctx.event("beacon.plan", "plan_end", frames=k)


def beacon_config(folder: Path, name: str, kind: str, frames: int = 0) -> Path:
    path = folder / name
    path.write_text(f'[rig]\nkind = "{kind}"\nname = "{name}"\nsimulated = true\n\n'
                    f'[plan]\nframes = {frames}\n')
    return path


class ServerThread:
    """`Server.serve()` in a thread with its own event loop; ``url``, ``token`` once started."""

    def __init__(self, configs: Path, store: Path, token_file: Path, host: str = "127.0.0.1"):
        self.said: list[str] = []
        self.server = Server(configs, store, token_file, host=host, port=0, say=self.said.append)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=lambda: asyncio.run(self._go()), daemon=True)

    async def _go(self) -> None:
        self.loop = asyncio.get_running_loop()
        try:
            await self.server.serve(install_signals=False)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def start(self) -> ServerThread:
        self.thread.start()
        poll_until(lambda: self.error is not None or self.server.started.is_set(), timeout=20)
        assert self.error is None, self.error
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.port}"

    @property
    def token(self) -> str:
        line = [x for x in self.server.token_file.read_text().splitlines() if x and not x.startswith("#")][0]
        return line.split()[1]

    def stop(self, timeout: float = 60) -> None:
        if self.thread.is_alive() and self.loop is not None:
            fut = asyncio.run_coroutine_threadsafe(self.server.shutdown("test"), self.loop)
            fut.result(timeout)
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the server did not stop"
