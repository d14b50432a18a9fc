"""Displacement sensor drivers with one interface: ``read() -> float`` (m) and ``read_many(n)``.

Two back ends: a Modbus register (RTU via a serial gateway, or TCP) and an ASCII query/response serial
line. ``open_sensor(name, cfg)`` picks the back end from ``cfg["protocol"]``.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from drivers.errors import BadResponse, DeviceRefused
from drivers.modbus_transport import ModbusTransport
from drivers.registers import RegisterMap
from drivers.serial_transport import SerialLine

# Units a serial sensor may answer in, to metres.
UNIT_TO_M = {"m": 1.0, "mm": 1e-3, "um": 1e-6, "nm": 1e-9}
_ANSWER = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)\s*([a-z]+)$")


class DisplacementSensor:
    """Common part: name, nominal sigma (m), plausibility range, read_many and identity."""

    protocol = "?"

    def __init__(self, name: str, cfg: Mapping[str, Any]) -> None:
        self.name = name
        self.cfg = dict(cfg)
        self.sigma = float(cfg.get("sigma", float("nan")))  # nominal noise std, m (for the analysis)
        lo, hi = cfg.get("range", (-1.0, 1.0))  # plausible measuring range, m
        self.range = (float(lo), float(hi))
        self.model = str(cfg.get("model", "unknown"))

    @property
    def address(self) -> str:
        raise NotImplementedError

    async def connect(self) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    async def _read_raw(self) -> float:
        raise NotImplementedError

    async def __aenter__(self) -> DisplacementSensor:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def read(self) -> float:
        """One displacement reading in metres; implausible values raise BadResponse."""
        return self.check_value(await self._read_raw())

    def check_value(self, value: float) -> float:
        """``value`` if it is finite and inside the sensor's range, else BadResponse naming it."""
        if not math.isfinite(value) or not self.range[0] <= value <= self.range[1]:
            raise BadResponse(self.name, self.address, f"implausible displacement {value!r} m "
                              f"(range {self.range[0]:g}..{self.range[1]:g} m)")
        return value

    async def read_many(self, n: int, interval: float = 0.0) -> np.ndarray:
        """``n`` consecutive readings (m), ``interval`` seconds apart (0: as fast as the device answers)."""
        out = np.empty(int(n))
        for i in range(int(n)):
            if i and interval > 0:
                await asyncio.sleep(interval)
            out[i] = await self.read()
        return out

    def device_identity(self) -> dict[str, str]:
        return {"name": self.name, "protocol": self.protocol, "address": self.address, "model": self.model,
                "kind": "displacement_sensor"}


class ModbusDisplacementSensor(DisplacementSensor):
    """A displacement value in one mapped register (``registers.displacement``)."""

    def __init__(self, name: str, cfg: Mapping[str, Any]) -> None:
        super().__init__(name, cfg)
        self.regs = RegisterMap.from_config(cfg.get("registers", {}), ("displacement",))
        self.transport = ModbusTransport(name, cfg)
        self.protocol = self.transport.protocol
        self._spec = self.regs["displacement"]
        self._lo, self._hi = self.range

    @property
    def address(self) -> str:
        return self.transport.address

    async def connect(self) -> None:
        await self.transport.connect()

    async def close(self) -> None:
        self.transport.close()

    async def _read_raw(self) -> float:
        return await self.transport.read(self.regs["displacement"])

    async def read(self) -> float:
        """One displacement reading in metres, as :meth:`DisplacementSensor.read`, flattened for the poll's
        hot path: the transport's read (finite, register range) and one comparison for the sensor range."""
        value = await self.transport.read(self._spec)
        if self._lo <= value <= self._hi:
            return value
        return self.check_value(value)


class SerialDisplacementSensor(DisplacementSensor):
    """ASCII line sensor: ``query`` (default "MEAS?") answers e.g. "+0.000123456 m"; "ERR ..." refuses."""

    protocol = "serial"

    def __init__(self, name: str, cfg: Mapping[str, Any]) -> None:
        super().__init__(name, cfg)
        self.line = SerialLine(name, cfg)
        self.query_cmd = str(cfg.get("query", "MEAS?"))
        self.id_cmd = str(cfg.get("id_query", "ID?"))

    @property
    def address(self) -> str:
        return self.line.address

    async def connect(self) -> None:
        await self.line.connect()

    async def close(self) -> None:
        self.line.close()

    async def command(self, cmd: str) -> str:
        """Send any command; an ``ERR`` answer raises DeviceRefused."""
        answer = await self.line.query(cmd)
        if answer.startswith("ERR"):
            parts = answer.split(maxsplit=2)
            code = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None
            raise DeviceRefused(self.name, self.address, f"{cmd!r} refused: {answer!r}", code)
        return answer

    async def identify(self) -> str:
        return await self.command(self.id_cmd)

    async def _read_raw(self) -> float:
        answer = await self.command(self.query_cmd)
        m = _ANSWER.match(answer)
        if not m or m.group(2) not in UNIT_TO_M:
            raise BadResponse(self.name, self.address, f"malformed answer to {self.query_cmd!r}: {answer!r}")
        return float(m.group(1)) * UNIT_TO_M[m.group(2)]


def open_sensor(name: str, cfg: Mapping[str, Any]) -> DisplacementSensor:
    """Sensor driver for a ``[devices.sensors.<name>]`` table (not yet connected)."""
    protocol = cfg.get("protocol")
    if protocol in ("modbus_rtu", "modbus_tcp"):
        return ModbusDisplacementSensor(name, cfg)
    if protocol == "serial":
        return SerialDisplacementSensor(name, cfg)
    raise ValueError(f"sensor {name}: unknown protocol {protocol!r} (modbus_rtu, modbus_tcp, serial)")
