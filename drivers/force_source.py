"""Driver of the pneumatic force source (Modbus): setpoint, enable, heartbeat, load cell, pressure.

Limits are checked before anything is sent; ``safe_state()`` is best effort and never raises, so a
guard can call it on any exit path.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from drivers.errors import LimitError
from drivers.modbus_transport import ModbusTransport
from drivers.registers import RegisterMap

log = logging.getLogger(__name__)

REQUIRED_REGISTERS = ("setpoint", "enable", "clear_fault", "heartbeat", "force", "pressure", "status",
                      "fault_code")

# Status word bits (same on the simulated device and the real controller's map).
STATUS_ENABLED = 0x1
STATUS_FAULT = 0x2
STATUS_SETTLED = 0x4

FAULT_TEXT = {0: "none", 1: "watchdog: no command or heartbeat in time", 2: "supply pressure low"}


@dataclass(frozen=True)
class ForceSourceStatus:
    """Decoded status word and fault code."""

    enabled: bool
    fault: bool
    settled: bool
    fault_code: int
    word: int

    @property
    def fault_text(self) -> str:
        return FAULT_TEXT.get(self.fault_code, f"fault code {self.fault_code}")


class ForceSource:
    """Pneumatic force source on Modbus TCP (or RTU).

    Config (``[devices.force_source]``): transport keys (see ModbusTransport), ``f_min`` / ``f_max`` (N,
    limits enforced client-side), ``model``, and ``registers`` (setpoint, enable, clear_fault, heartbeat,
    force, pressure, status, fault_code).
    """

    def __init__(self, cfg: Mapping[str, Any], name: str = "force_source") -> None:
        self.name = name
        self.cfg = dict(cfg)
        self.regs = RegisterMap.from_config(cfg.get("registers", {}), REQUIRED_REGISTERS)
        self.f_min = float(cfg.get("f_min", 0.0))
        self.f_max = float(cfg["f_max"])
        if not self.f_min < self.f_max:
            raise ValueError(f"{name}: f_min must be < f_max")
        self.model = str(cfg.get("model", "unknown"))
        self.transport = ModbusTransport(name, cfg)
        self._beat = 0

    @property
    def address(self) -> str:
        return self.transport.address

    async def connect(self) -> None:
        await self.transport.connect()

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
        await self.transport.write(self.regs["setpoint"], self.check_force(force_N))

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

    async def safe_state(self) -> bool:
        """Setpoint 0 and disable, best effort: never raises, returns True if both writes went through."""
        ok = True
        for what, step in (("setpoint 0", lambda: self.transport.write(self.regs["setpoint"], 0.0)),
                           ("disable", self.disable)):
            try:
                await step()
            except Exception as exc:  # noqa: BLE001 - best effort by design, the guard must go on
                ok = False
                log.warning("safe_state: %s failed: %s", what, exc)
        return ok

    def device_identity(self) -> dict[str, str]:
        """Name, protocol, address and model for the session metadata."""
        return {"name": self.name, "protocol": self.transport.protocol, "address": self.address,
                "model": self.model, "kind": "force_source"}
