"""Simulated pneumatic force source served over Modbus TCP.

Physics (ticked in an asyncio task with the loop clock, dt-exact): the force follows
``target = max(0, gain * setpoint + offset) * p / p_nominal`` through a first-order lag ``tau``; the supply
pressure ``p`` wanders (Ornstein-Uhlenbeck, relative std ``pressure_rel_sigma``), so the force never sits
exactly on the setpoint. The load cell reads the force plus Gaussian noise. Disabled or faulted: target 0.

Safety like a real controller: setpoints outside [0, f_max] or NaN are refused with ILLEGAL_DATA_VALUE and
not applied; a watchdog disables the output and sets fault code 1 when no write arrives for
``watchdog_timeout`` seconds while enabled; ``clear_fault`` resets the fault (enable must be written again).

Fault injection: ``inject`` maps read registers (force, pressure, status, fault_code) to values answered
instead of the simulated ones; ``server.stall`` holds every request (a slow or frozen device);
``hang_writes`` names registers whose writes are never answered nor applied (a hung write: other requests
are still served) until ``release_hangs()``. ``writes`` counts the applied writes per register.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from pymodbus.constants import ExcCodes

from simulators.press_devices import ModbusSimServer, SimValueError, parse_map, put, written

STATUS_ENABLED, STATUS_FAULT, STATUS_SETTLED = 0x1, 0x2, 0x4
FAULT_NONE, FAULT_WATCHDOG = 0, 1

DEFAULT_SIM: dict[str, float] = {
    "f_max": 25000.0,            # N, rated range; setpoints beyond are refused
    "tau": 0.05,                 # s, lag time constant
    "gain": 0.97,                # static gain error
    "offset": -15.0,             # N, static offset (negative: seal breakaway; output clipped at 0)
    "pressure_nominal": 6.0e5,   # Pa
    "pressure_rel_sigma": 0.003,  # relative std of the supply pressure variation
    "pressure_corr_time": 0.5,   # s, correlation time of the pressure variation
    "loadcell_sigma": 2.0,       # N, load-cell noise std
    "pressure_sensor_sigma": 50.0,  # Pa
    "watchdog_timeout": 1.0,     # s without a write while enabled -> fault
    "tick": 0.002,               # s, physics period
    "settled_band": 0.002,       # settled when |force - target| < band * f_max
}


class ForceSourceSim:
    """The device: a physics task plus a Modbus server answering from its state."""

    def __init__(self, device_cfg: Mapping[str, Any], sim_cfg: Mapping[str, Any] | None = None,
                 rng: np.random.Generator | None = None, name: str = "force_source",
                 registers: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        p = dict(DEFAULT_SIM)
        p.update({k: float(v) for k, v in (sim_cfg or {}).items()})
        self.p = p
        self.name = name
        self.rng = rng if rng is not None else np.random.default_rng(0)
        self.rmap = parse_map(registers if registers is not None else device_cfg["registers"])
        self.server = ModbusSimServer(name, str(device_cfg.get("protocol", "modbus_tcp")),
                                      str(device_cfg.get("host", "127.0.0.1")),
                                      int(device_cfg.get("port", 0)),
                                      int(device_cfg.get("device_id", 1)), self.rmap, self._on_access)
        self._task: asyncio.Task | None = None
        self.inject: dict[str, float] = {}  # register name -> value answered instead of the simulated one
        self.hang_writes: set[str] = set()  # register names whose writes are never answered nor applied
        self._released = asyncio.Event()
        self.writes: dict[str, int] = {}  # register name -> writes applied
        self._reset()

    def _reset(self) -> None:
        """Power-on state."""
        self.setpoint = 0.0
        self.enabled = False
        self.fault_code = FAULT_NONE
        self.force = 0.0
        self.pressure_dev = 0.0  # relative deviation of the supply pressure
        self.last_write = -math.inf
        self.n_refused = 0

    # -- physics -----------------------------------------------------------------------------------
    @property
    def pressure(self) -> float:
        return self.p["pressure_nominal"] * (1.0 + self.pressure_dev)

    @property
    def target(self) -> float:
        """Force the cylinder is heading to (N)."""
        if not self.enabled or self.fault_code:
            return 0.0
        return max(0.0, self.p["gain"] * self.setpoint + self.p["offset"]) * (1.0 + self.pressure_dev)

    @property
    def settled(self) -> bool:
        return abs(self.force - self.target) < self.p["settled_band"] * self.p["f_max"]

    def step(self, dt: float, now: float) -> None:
        """Advance the state by ``dt`` seconds (exact for inputs held over dt)."""
        if dt <= 0:
            return
        tc = self.p["pressure_corr_time"]
        a = math.exp(-dt / tc)
        kick = self.p["pressure_rel_sigma"] * math.sqrt(1 - a * a) * float(self.rng.standard_normal())
        self.pressure_dev = a * self.pressure_dev + kick
        if self.enabled and now - self.last_write > self.p["watchdog_timeout"]:
            self.enabled = False
            self.fault_code = FAULT_WATCHDOG
        self.force += (self.target - self.force) * (1.0 - math.exp(-dt / self.p["tau"]))

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        t_prev = loop.time()
        while True:
            await asyncio.sleep(self.p["tick"])
            now = loop.time()
            self.step(now - t_prev, now)
            t_prev = now

    # -- Modbus ------------------------------------------------------------------------------------
    def status_word(self) -> int:
        return ((STATUS_ENABLED if self.enabled else 0) | (STATUS_FAULT if self.fault_code else 0)
                | (STATUS_SETTLED if self.settled else 0))

    async def _on_access(self, fc, start, address, count, regs, values):
        if values is None:
            self._fill(fc, start, regs)
            return None
        new = written(regs, start, address, list(values), self.rmap)
        if self.hang_writes.intersection(new):  # a hung write: no answer, nothing applied, until released
            await self._released.wait()
            return ExcCodes.DEVICE_BUSY
        for name in new:
            self.writes[name] = self.writes.get(name, 0) + 1
        sp = new.get("setpoint")
        if sp is not None and not (math.isfinite(sp) and 0.0 <= sp <= self.p["f_max"]):
            self.n_refused += 1
            raise SimValueError(f"setpoint {sp!r} N outside [0, {self.p['f_max']:g}] N")
        en = new.get("enable")
        if en is not None and en not in (0.0, 1.0):
            raise SimValueError(f"enable must be 0 or 1, got {en!r}")
        if en == 1.0 and self.fault_code and "clear_fault" not in new:
            return ExcCodes.ILLEGAL_VALUE  # a faulted device refuses to enable until the fault is cleared
        self.last_write = asyncio.get_running_loop().time()
        if new.get("clear_fault"):
            self.fault_code = FAULT_NONE
        if sp is not None:
            self.setpoint = sp
        if en is not None:
            self.enabled = en == 1.0
        return None

    def _fill(self, fc: int, start: int, regs: list[int]) -> None:
        """Refresh the register image from the state before a read is answered. The read-back pymodbus
        does to echo a write (function 6/16) is left alone: a write is answered with what was written."""
        if fc not in (3, 4):
            return
        if fc == 4:
            values = {"force": self.force + self.p["loadcell_sigma"] * float(self.rng.standard_normal()),
                      "pressure": self.pressure + self.p["pressure_sensor_sigma"] * float(
                          self.rng.standard_normal()),
                      "status": self.status_word(), "fault_code": self.fault_code}
            table = "input"
        else:
            values = {"setpoint": self.setpoint, "enable": int(self.enabled), "clear_fault": 0}
            table = "holding"
        values.update({k: v for k, v in self.inject.items() if k in values})
        for name, v in values.items():
            reg = self.rmap.get(name)
            if reg is not None and reg.table == table:
                put(regs, start, reg, v)

    def release_hangs(self) -> None:
        """End the hung-write fault: held writes are answered "busy" (not applied), new ones act again."""
        self.hang_writes.clear()
        self._released.set()
        self._released = asyncio.Event()

    # -- lifecycle ---------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return self.server.url

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def running(self) -> bool:
        return self.server.running

    async def start(self) -> None:
        """Power on: fresh state, physics task, server (on the same port after a restart)."""
        if self.running:
            return
        self._reset()
        await self.server.start()
        self._task = asyncio.create_task(self._run(), name=f"{self.name} physics")

    async def stop(self) -> None:
        """Power off: the server goes away and the force collapses to zero."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        await self.server.stop()
        self.enabled = False
        self.force = 0.0
