"""Simulated pneumatic force source served over Modbus TCP.

Physics (ticked in an asyncio task on the run's clock, dt-exact: ``speed`` times faster than real time on a
fast simulated rig; a tick running more than ``max_lag`` clock seconds late tells the clock, which stops the
run as too fast for this machine): the force follows
``target = max(0, gain * setpoint + offset) * p / p_nominal`` through a first-order lag ``tau``; the supply
pressure ``p`` wanders (Ornstein-Uhlenbeck, relative std ``pressure_rel_sigma``), so the force never sits
exactly on the setpoint. The pressure changes at fixed clock times (:data:`PRESSURE_STEPS` per correlation
time, held in between) from a random stream of its own, so the force's course depends on the seed and the
commands, not on when a tick or a request happened to bring the state up to date: the same run gives the
same plant at any speed and on a busy machine. ``on_command`` (the press rig's plant) is told before a write
changes the target: the force's turning points are where the commands change, and the plant sees each one.
The load cell reads the force plus Gaussian noise. Disabled or faulted: target 0.

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
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from pymodbus.constants import ExcCodes

from drivers.clock import WALL, Clock, Schedule
from simulators.device_watchdog import DeviceWatchdog
from simulators.press_devices import ModbusSimServer, SimValueError, parse_map, put, written
from simulators.settings import ForceSourceParams, settings_from

MIN_REAL_TICK = 0.002  #: s, the shortest real period of the physics task on a fast clock
PRESSURE_STEPS = 100  #: changes of the supply pressure per correlation time (at most one per ``tick``)
STATUS_ENABLED, STATUS_FAULT, STATUS_SETTLED = 0x1, 0x2, 0x4
FAULT_NONE, FAULT_WATCHDOG = 0, 1

class ForceSourceSim:
    """The device: a physics task plus a Modbus server answering from its state."""

    def __init__(self, device_cfg: Mapping[str, Any],
                 sim_cfg: ForceSourceParams | Mapping[str, Any] | None = None,
                 rng: np.random.Generator | None = None, name: str = "force_source",
                 registers: Mapping[str, Mapping[str, Any]] | None = None, clock: Clock = WALL,
                 max_lag: float = math.inf) -> None:
        self.p = settings_from(sim_cfg or {}, ForceSourceParams)
        self.clock, self.max_lag = clock, max_lag
        self.name = name
        self.rng = rng if rng is not None else np.random.default_rng(0)
        self._pressure_seed = int(self.rng.integers(2**63))  # the pressure's own stream (see the docstring)
        self._pressure_step = max(self.p.tick, self.p.pressure_corr_time / PRESSURE_STEPS)  # s of the clock
        self.on_command: Callable[[], None] | None = None  # told before a write changes the target
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
        self.watchdog = DeviceWatchdog(self.p.watchdog_timeout)  # fed by every accepted write
        self.n_refused = 0
        self._t_prev = self.clock.monotonic()  # clock time the state was last advanced to
        self._pressure_rng = np.random.default_rng(self._pressure_seed)
        self._pressure_next = self._t_prev + self._pressure_step  # clock time of the pressure's next change

    # -- physics -----------------------------------------------------------------------------------
    @property
    def pressure(self) -> float:
        return self.p.pressure_nominal * (1.0 + self.pressure_dev)

    @property
    def target(self) -> float:
        """Force the cylinder is heading to (N)."""
        if not self.enabled or self.fault_code:
            return 0.0
        return max(0.0, self.p.gain * self.setpoint + self.p.offset) * (1.0 + self.pressure_dev)

    @property
    def settled(self) -> bool:
        return abs(self.force - self.target) < self.p.settled_band * self.p.f_max

    def step(self, dt: float, now: float) -> None:
        """Advance the state by ``dt`` clock seconds (exact: the force relaxes over every piece in which the
        pressure is held); ``now`` is the event loop's time, which the watchdog counts in."""
        if dt <= 0:
            return
        if self.watchdog.expired(now) and self.enabled:
            self.enabled = False
            self.fault_code = FAULT_WATCHDOG
        t, end = self._t_prev, self._t_prev + dt
        a = math.exp(-self._pressure_step / self.p.pressure_corr_time)
        kick = self.p.pressure_rel_sigma * math.sqrt(1 - a * a)
        while self._pressure_next <= end:
            self._relax(self._pressure_next - t)
            t = self._pressure_next
            self.pressure_dev = a * self.pressure_dev + kick * float(self._pressure_rng.standard_normal())
            self._pressure_next += self._pressure_step
        self._relax(end - t)
        self._t_prev = end

    def _relax(self, dt: float) -> None:
        """The force's first-order lag toward a target held for ``dt`` seconds."""
        if dt > 0:
            self.force += (self.target - self.force) * (1.0 - math.exp(-dt / self.p.tau))

    def advance(self) -> None:
        """Bring the state up to the clock's now (the ticks do it, and so does every request before it is
        answered or applied: a reply never shows a state older than the request)."""
        self.step(self.clock.monotonic() - self._t_prev, asyncio.get_running_loop().time())

    async def _run(self) -> None:
        ticks = Schedule(self.clock, self.p.tick, min_real=MIN_REAL_TICK)  # exact for any step: see advance()
        self._t_prev = self.clock.monotonic()  # powered on now: the state (and the pressure's grid) from here
        self._pressure_next = self._t_prev + self._pressure_step
        while True:
            self.clock.note_lag(f"the {self.name}'s physics tick", await ticks.wait(), self.max_lag)
            self.advance()

    # -- Modbus ------------------------------------------------------------------------------------
    def status_word(self) -> int:
        return ((STATUS_ENABLED if self.enabled else 0) | (STATUS_FAULT if self.fault_code else 0)
                | (STATUS_SETTLED if self.settled else 0))

    async def _on_access(self, fc, start, address, count, regs, values):
        if self._task is not None:  # powered: the physics runs up to now first
            self.advance()
        if values is None:
            self._fill(fc, start, address, count, regs)
            return None
        new = written(regs, start, address, list(values), self.rmap)
        if self.hang_writes.intersection(new):  # a hung write: no answer, nothing applied, until released
            await self._released.wait()
            return ExcCodes.DEVICE_BUSY
        for name in new:
            self.writes[name] = self.writes.get(name, 0) + 1
        sp = new.get("setpoint")
        if sp is not None and not (math.isfinite(sp) and 0.0 <= sp <= self.p.f_max):
            self.n_refused += 1
            raise SimValueError(f"setpoint {sp!r} N outside [0, {self.p.f_max:g}] N")
        en = new.get("enable")
        if en is not None and en not in (0.0, 1.0):
            raise SimValueError(f"enable must be 0 or 1, got {en!r}")
        if en == 1.0 and self.fault_code and "clear_fault" not in new:
            return ExcCodes.ILLEGAL_VALUE  # a faulted device refuses to enable until the fault is cleared
        self.watchdog.fed(asyncio.get_running_loop().time())
        if self.on_command is not None and {"setpoint", "enable", "clear_fault"}.intersection(new):
            self.on_command()  # the force turns here: the plant sees it at the turn, not at its next tick
        if new.get("clear_fault"):
            self.fault_code = FAULT_NONE
        if sp is not None:
            self.setpoint = sp
        if en is not None:
            self.enabled = en == 1.0
        return None

    def _fill(self, fc: int, start: int, address: int, count: int, regs: list[int]) -> None:
        """Refresh the registers a read asks for (``count`` words from ``address``) from the state before it
        is answered; the others keep their last words, as no reply carries them. Every read draws the load
        cell's and the pressure sensor's noise all the same, so the noise a run sees depends on its reads,
        not on which registers they asked for. The read-back pymodbus does to echo a write (function 6/16)
        is left alone: a write is answered with what was written."""
        if fc not in (3, 4):
            return
        if fc == 4:
            values = {"force": self.force + self.p.loadcell_sigma * float(self.rng.standard_normal()),
                      "pressure": self.pressure + self.p.pressure_sensor_sigma * float(
                          self.rng.standard_normal()),
                      "status": self.status_word(), "fault_code": self.fault_code}
            table = "input"
        else:
            values = {"setpoint": self.setpoint, "enable": int(self.enabled), "clear_fault": 0}
            table = "holding"
        values.update({k: v for k, v in self.inject.items() if k in values})
        end = address + count
        for name, v in values.items():
            reg = self.rmap.get(name)
            if reg is None or reg.table != table:
                continue
            if reg.address < end and address < reg.address + reg.count:  # the read asks for it
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
