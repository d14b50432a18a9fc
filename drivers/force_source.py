"""Driver of the pneumatic force source (Modbus): setpoint, enable, heartbeat, load cell, pressure.

Limits are checked before anything is sent; every read value is checked against its plausibility range
(from the register map, else a default derived from the limits). ``safe_action()`` is the way to the safe
state (:mod:`drivers.safe_state`): every step is tried and a SafeStateError names each one that failed, so a
guard never reports "safe" for a rig that is not.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from msgspec import Meta

from drivers.backends import REAL, Backends
from drivers.errors import DeviceFault, LimitError
from drivers.modbus_identity import check_identity
from drivers.modbus_transport import ModbusSettings
from drivers.registers import Register, RegisterMap, overlapping
from drivers.safe_state import SafeAction, SafeStep
from drivers.settings import Interval, InvalidSetting, settings_from

log = logging.getLogger(__name__)

REQUIRED_REGISTERS = ("setpoint", "enable", "clear_fault", "heartbeat", "force", "pressure", "status",
                      "fault_code")

# Status word bits (same on the simulated device and the real controller's map).
STATUS_ENABLED = 0x1
STATUS_FAULT = 0x2
STATUS_SETTLED = 0x4

FAULT_TEXT = {0: "none", 1: "watchdog: no command or heartbeat in time", 2: "supply pressure low"}


Newton = Annotated[float, Meta(gt=0, le=1e7)]          # a force, N (a press: up to 10 MN)


class ForceSourceSettings(ModbusSettings, kw_only=True):
    """``[devices.force_source]``: the link, the setpoint limits (N, checked before anything is sent), the
    watchdog's heartbeat and the register map. The safe action's budget follows from the link's timeouts."""

    f_min: Annotated[float, Meta(ge=0, le=1e7)] = 0.0   # N, setpoints below are refused before sending
    f_max: Newton                                      # N, setpoints above are refused before sending
    heartbeat_interval: Interval = 0.2                 # s between heartbeats (the device's watchdog)
    registers: dict[str, Register]

    def check(self) -> None:
        super().check()
        if not self.f_min < self.f_max:
            raise InvalidSetting("f_max", f"must be above f_min ({self.f_min} N)")
        missing = [r for r in REQUIRED_REGISTERS if r not in self.registers]
        if missing:
            raise InvalidSetting("registers", f"missing register(s) {', '.join(missing)}")
        clash = overlapping(self.registers)
        if clash:
            a, b = clash
            ra, rb = self.registers[a], self.registers[b]
            raise InvalidSetting(f"registers.{b}.address",
                                 f"{rb.table} register {rb.address} overlaps {a!r} ({ra.table} {ra.address}, "
                                 f"{ra.count} words): two values of one device cannot share a register")
        setpoint = self.registers["setpoint"]
        for force in (self.f_min, self.f_max):
            if not setpoint.encodable(force):
                raise InvalidSetting("registers.setpoint.scale",
                                     f"{setpoint.scale!r} cannot write a setpoint of {force:g} N into a "
                                     f"{setpoint.type} register; choose scale/offset so f_min..f_max fit")


@dataclass(frozen=True)
class ForceSourceStatus:
    """Decoded status word and fault code."""

    enabled: bool
    fault: bool
    settled: bool
    fault_code: int
    word: int

    @property
    def faulted(self) -> bool:
        """A fault by either sign: the status fault bit (even with fault code 0) or a fault code."""
        return self.fault or self.fault_code != 0

    @property
    def fault_text(self) -> str:
        if self.fault and self.fault_code == 0:
            return "fault bit set in the status word (fault code 0)"
        return FAULT_TEXT.get(self.fault_code, f"fault code {self.fault_code}")


class ForceSource:
    """Pneumatic force source on Modbus TCP (or RTU).

    Settings: :class:`ForceSourceSettings` (a plain mapping is converted and checked by it); ``backends``:
    where the requests go (:mod:`drivers.backends`; default the Modbus protocol). Read registers
    without a ``range`` get a default:
    force [-0.5, 1.5] x f_max, pressure [0, 1e7] Pa, setpoint read-back [min(0, f_min), f_max].
    """

    def __init__(self, settings: ForceSourceSettings | Mapping[str, Any], name: str = "force_source",
                 backends: Backends | None = None) -> None:
        self.name = name
        self.settings = cfg = settings_from(settings, ForceSourceSettings)
        self.regs = RegisterMap.from_config(cfg.registers, REQUIRED_REGISTERS)
        self.f_min, self.f_max = cfg.f_min, cfg.f_max
        defaults = {"force": (-0.5 * self.f_max, 1.5 * self.f_max), "pressure": (0.0, 1.0e7),
                    "setpoint": (min(0.0, self.f_min), self.f_max)}
        for reg, span in defaults.items():
            if self.regs[reg].range is None:
                self.regs[reg] = dataclasses.replace(self.regs[reg], range=span)
        self.model = cfg.model
        self.transport = (backends or REAL).modbus(name, cfg)  # the Modbus backend (drivers/backends.py)
        self._beat = 0

    @property
    def address(self) -> str:
        return self.transport.address

    async def connect(self) -> None:
        """Connect; with an ``expect`` table, refuse a device whose identification (FC43) differs."""
        await self.transport.connect()
        await check_identity(self.transport, self.settings.expect)

    async def close(self) -> None:
        self.transport.close()

    async def __aenter__(self) -> ForceSource:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def check_force(self, force_N: float) -> float:
        """Raise LimitError unless ``force_N`` is a finite number within [f_min, f_max]."""
        f = float(force_N)
        if not math.isfinite(f) or not self.f_min <= f <= self.f_max:
            raise LimitError(self.name, self.address,
                             f"force setpoint {force_N!r} N outside [{self.f_min:g}, {self.f_max:g}] N")
        return f

    async def set_force(self, force_N: float) -> None:
        """Write the force setpoint (N) after the limit check."""
        await self.transport.write(self.regs["setpoint"], self.check_force(force_N),
                                   limits=(f"force setpoint within [{self.f_min:g}, {self.f_max:g}] N",))

    async def enable(self) -> None:
        await self.transport.write(self.regs["enable"], 1)

    async def disable(self) -> None:
        await self.transport.write(self.regs["enable"], 0)

    async def heartbeat(self) -> None:
        """Feed the device watchdog (a counter, so a stuck writer is visible on the wire)."""
        self._beat = (self._beat + 1) % 65536
        await self.transport.write(self.regs["heartbeat"], self._beat)

    async def clear_fault(self) -> None:
        await self.transport.write(self.regs["clear_fault"], 1)

    async def read_setpoint(self) -> float:
        """The setpoint the device holds (N)."""
        return await self.transport.read(self.regs["setpoint"])

    async def read_force(self) -> float:
        """Load-cell force (N)."""
        return await self.transport.read(self.regs["force"])

    async def read_pressure(self) -> float:
        """Supply pressure (Pa)."""
        return await self.transport.read(self.regs["pressure"])

    async def read_status(self) -> ForceSourceStatus:
        word = int(await self.transport.read(self.regs["status"]))
        code = int(await self.transport.read(self.regs["fault_code"]))
        return ForceSourceStatus(bool(word & STATUS_ENABLED), bool(word & STATUS_FAULT),
                                 bool(word & STATUS_SETTLED), code, word)

    async def check_fault(self) -> ForceSourceStatus:
        """Read the status; DeviceFault if the device reports a fault (fault bit or fault code)."""
        status = await self.read_status()
        if status.faulted:
            msg = f"device fault: {status.fault_text}"
            raise DeviceFault(self.name, self.address, msg, status.fault_code)
        return status

    def safe_action(self) -> SafeAction:
        """Setpoint 0, output off, then the status read back (output off, confirmed). Each step is one or two
        requests and gets what the transport itself may take for them (:attr:`ModbusTransport.request_bound`),
        so a step ends by the transport's own timeout before its budget cuts it; either way the next step
        is still sent (a reconnect included)."""
        one = self.transport.request_bound
        return SafeAction(self.name, self.address, (
            SafeStep("setpoint 0", one, lambda: self.transport.write(self.regs["setpoint"], 0.0)),
            SafeStep("disable", one, self.disable),
            SafeStep("status read-back", 2 * one, self.read_status, check=_still_enabled, needs_link=True),
        ), linked=lambda: self.transport.connected)

    async def safe_state(self) -> None:
        """Run :meth:`safe_action`: every step is tried; SafeStateError names each step that failed."""
        await self.safe_action()()

    def device_identity(self) -> dict[str, str]:
        """Name, protocol, address and model for the session metadata."""
        return {"name": self.name, "protocol": self.transport.protocol, "address": self.address,
                "model": self.model, "kind": "force_source"}


def _still_enabled(status: object) -> str | None:
    """The read-back's verdict: the output must be off."""
    assert isinstance(status, ForceSourceStatus)
    return "output still enabled" if status.enabled else None
