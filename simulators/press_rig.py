"""The simulated press rig: force source -> press linkage -> three displacement sensors, on loopback.

``PressRig(config)`` builds the devices of a press config, ``start()`` serves them and returns their
endpoints, ``device_config()`` gives the ``[devices]`` table with the real ports for the drivers, and
``stop_device`` / ``start_device`` power-cycle one device (same port) to test lost connections.
"""

from __future__ import annotations

import asyncio
import copy
import math
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from drivers.clock import Clock, Schedule
from simulators.displacement_sim import ModbusSensorSim
from simulators.force_source_sim import MIN_REAL_TICK, ForceSourceSim
from simulators.physics.press import SENSOR_NAMES, PressLinkage, PressTruth
from simulators.press_devices import FORCE_SOURCE_MAP, IDENTITIES, SENSOR_MAPS
from simulators.serial_sensor_sim import SerialSensorSim
from simulators.settings import PressSimulator, SensorNoise, simulator_table

Device = ForceSourceSim | ModbusSensorSim | SerialSensorSim


class _SensorSource(TypedDict):
    """What a simulated displacement sensor reads and how it degrades it (either protocol)."""

    source: Callable[[], float]  # the true displacement, m
    sigma: float  # noise std, m
    resolution: float  # quantisation step, m
    rng: np.random.Generator


class PressRig:
    """All simulated press devices plus the plant task that couples them."""

    def __init__(self, config: Mapping[str, Any], clock: Clock | None = None) -> None:
        self.config = copy.deepcopy(dict(config))
        self.settings = sim = simulator_table(self.config, PressSimulator)
        self.clock = clock if clock is not None else sim.clock()  # the run's one clock (plan and physics)
        devices = self.config["devices"]
        seq = np.random.SeedSequence(sim.seed)
        seeds = iter(seq.spawn(2 + len(SENSOR_NAMES)))
        self.plant_period = sim.plant_period
        self.linkage = PressLinkage(PressTruth.from_config(dict(sim.truth)))
        self.z = np.zeros(len(SENSOR_NAMES))  # current true displacements, m
        # each device answers with its own register map (press_devices.FORCE_SOURCE_MAP, SENSOR_MAPS), not
        # the config's: the config only says where it is plugged in (protocol, port, unit id)
        self.force_source = ForceSourceSim(devices["force_source"], sim.force_source,
                                           np.random.default_rng(next(seeds)), registers=FORCE_SOURCE_MAP,
                                           clock=self.clock, max_lag=self._max_lag)
        next(seeds)  # reserved for the plant
        self.force_source.on_command = self.plant_step  # a command turns the force: the linkage sees the turn
        self.force_source.server.identity = IDENTITIES["force_source"]
        self.devices: dict[str, Device] = {"force_source": self.force_source}
        for name, dcfg in devices.get("sensors", {}).items():
            if name not in SENSOR_NAMES:
                raise ValueError(f"unknown press sensor {name!r}; the plant has {SENSOR_NAMES}")
            idx = SENSOR_NAMES.index(name)
            noise = sim.sensors.get(name) or SensorNoise()

            def true_z(i: int = idx) -> float:  # a def, not a lambda: mypy cannot type a lambda's default
                return float(self.fresh_z()[i])

            kw = _SensorSource(source=true_z, sigma=noise.sigma, resolution=noise.resolution,
                               rng=np.random.default_rng(next(seeds)))
            proto = dcfg.get("protocol")
            if proto in ("modbus_rtu", "modbus_tcp"):
                self.devices[name] = sensor = ModbusSensorSim(name, dcfg, registers=SENSOR_MAPS[name], **kw)
                sensor.server.identity = IDENTITIES[name]
            elif proto == "serial":
                ident = IDENTITIES[name]
                self.devices[name] = SerialSensorSim(name, dcfg, ident=f"SIMLAB,{ident['model']},"
                                                     f"{ident['serial_number']},{ident['firmware']}", **kw)
            else:
                raise ValueError(f"sensor {name}: unknown protocol {proto!r}")
        self._plant_task: asyncio.Task | None = None
        self._solved_at = -math.inf  # clock time of the last solve of the linkage

    def plant_step(self) -> None:
        """Apply the source's actual force to the linkage and refresh the true displacements."""
        self.z = self.linkage.respond(self.force_source.force)
        self._solved_at = self.clock.monotonic()

    def fresh_z(self) -> np.ndarray:
        """The true displacements now: re-solved first when the last solve is older than a plant period, so
        that a reading never shows the plant of a stalled tick (the force source is brought up to now too)."""
        if self._plant_task is not None and self.clock.monotonic() - self._solved_at >= self.plant_period:
            if self.force_source.running:
                self.force_source.advance()
            self.plant_step()
        return self.z

    @property
    def _max_lag(self) -> float:
        """Clock seconds the physics may run late: ``[simulator].max_lag`` when faster than real time (only
        then can a speed be too high for the machine; at speed 1 a late tick is the machine's load)."""
        return self.settings.max_lag if self.clock.speed > 1 else math.inf

    async def _plant_loop(self) -> None:
        # coarser in clock time on a fast clock: the friction is rate-independent (only the force's turning
        # points matter) and a reading re-solves the plant first (fresh_z)
        ticks = Schedule(self.clock, self.plant_period, min_real=MIN_REAL_TICK)
        while True:
            self.plant_step()
            self.clock.note_lag("the press linkage's physics tick", await ticks.wait(), self._max_lag)

    async def start(self) -> dict[str, str]:
        """Serve every device; returns name -> endpoint ("tcp://host:port" or "socket://host:port")."""
        try:
            for dev in self.devices.values():
                await dev.start()
        except BaseException:
            await self.stop()
            raise
        self._plant_task = asyncio.create_task(self._plant_loop(), name="press plant")
        return self.endpoints()

    async def stop(self) -> None:
        if self._plant_task is not None:
            self._plant_task.cancel()
            try:
                await self._plant_task
            except asyncio.CancelledError:
                pass
            self._plant_task = None
        for dev in self.devices.values():
            await dev.stop()

    def endpoints(self) -> dict[str, str]:
        return {name: dev.url for name, dev in self.devices.items()}

    async def stop_device(self, name: str) -> None:
        """Power a device off (its port is kept for the restart)."""
        await self.devices[name].stop()

    async def start_device(self, name: str) -> None:
        """Power a device on again, on the same port."""
        await self.devices[name].start()

    def device_config(self) -> dict[str, Any]:
        """The ``[devices]`` table with the real ports filled in, ready for the drivers."""
        out = copy.deepcopy(self.config["devices"])
        out["force_source"]["port"] = self.force_source.port
        out["force_source"]["host"] = self.force_source.server.host
        for name, dev in self.devices.items():
            if name != "force_source":
                dcfg = out["sensors"][name]
                if dcfg.get("protocol") == "modbus_tcp":
                    dcfg["host"], dcfg["port"] = dev.server.host, dev.port  # type: ignore[union-attr]
                else:
                    dcfg["url"] = dev.url
                if dcfg.get("protocol") == "modbus_rtu":  # RTU framing on a loopback socket, no serial line:
                    dcfg.setdefault("silence", 0.0)       # no characters on a wire to keep apart
        return out

    async def __aenter__(self) -> PressRig:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


def load_toml(path: str | Path) -> dict[str, Any]:
    with open(path, "rb") as fh:
        return tomllib.load(fh)


async def serve_press(config_path: str | Path | Mapping[str, Any],
                      ready: asyncio.Event | None = None) -> None:
    """Serve the whole rig until cancelled, printing the endpoints (``hil sim press [CONFIG]``)."""
    config = config_path if isinstance(config_path, Mapping) else load_toml(config_path)
    rig = PressRig(config)
    endpoints = await rig.start()
    try:
        for name, url in endpoints.items():
            print(f"{name:14s} {url}", flush=True)
        if ready is not None:
            ready.set()
        await asyncio.Event().wait()
    finally:
        await rig.stop()
