"""Displacement sensor drivers with one interface: ``read() -> float`` (m) and ``read_many(n)``.

Two kinds: a Modbus register (RTU via a serial gateway, or TCP) and an ASCII query/response serial line.
``open_sensor(name, cfg)`` picks the kind from ``cfg["protocol"]``; the requests go to the backend of that
kind (:mod:`drivers.backends`: the protocol by default).
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

import msgspec
import numpy as np
from msgspec import Meta

from drivers.backends import REAL, Backends
from drivers.errors import BadResponse, DeviceRefused
from drivers.modbus_identity import check_identity
from drivers.modbus_transport import ModbusSettings
from drivers.registers import Register, RegisterMap, overlapping
from drivers.serial_transport import SerialSettings
from drivers.settings import InvalidSetting, NonEmpty, settings_from

# Units a serial sensor may answer in, to metres.
UNIT_TO_M = {"m": 1.0, "mm": 1e-3, "um": 1e-6, "nm": 1e-9}
_ANSWER = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)\s*([a-z]+)$")


Metres = Annotated[float, Meta(ge=-1e3, le=1e3)]


class SensorSettings(ModbusSettings, kw_only=True):
    """``[devices.sensors.<name>]``: a displacement sensor on Modbus (RTU or TCP; the link keys of
    :class:`ModbusSettings` and a ``displacement`` register) or on an ASCII serial line (``url``,
    ``baudrate``, ``timeout``, ``query``, ``id_query``, ``terminator``); ``sigma`` its nominal noise std (m,
    the analysis weights) and ``range`` its plausible readings (m)."""

    protocol: Literal["modbus_rtu", "modbus_tcp", "serial"]  # type: ignore[assignment]
    sigma: Annotated[float, Meta(gt=0, le=0.1)] | None = None  # the press rig requires it (its analysis)
    range: Annotated[list[Metres], Meta(min_length=2, max_length=2)] = msgspec.field(
        default_factory=lambda: [-1.0, 1.0])
    registers: dict[str, Register] | None = None
    query: NonEmpty = "MEAS?"
    id_query: NonEmpty = "ID?"
    terminator: NonEmpty = "\r\n"

    def check(self) -> None:
        super().check()
        if self.protocol == "serial" and self.expect:
            raise InvalidSetting("expect", "a serial sensor has no device identification (FC43); its "
                                           "identity is its answer to id_query")
        if not self.range[0] < self.range[1]:
            raise InvalidSetting("range", f"needs lo < hi, got {self.range}")
        if self.protocol != "modbus_tcp" and not self.url:
            raise InvalidSetting("url", f"required for protocol {self.protocol!r}")
        if self.protocol != "serial" and "displacement" not in (self.registers or {}):
            raise InvalidSetting("registers", "a Modbus sensor needs a 'displacement' register")
        clash = overlapping(self.registers or {})
        if clash:
            raise InvalidSetting(f"registers.{clash[1]}.address", f"overlaps {clash[0]!r}: two values of one "
                                                                  "device cannot share a register")
        reg = (self.registers or {}).get("displacement")
        for value in self.range if reg is not None else ():
            assert reg is not None  # the loop runs only then
            if not reg.encodable(value):
                raise InvalidSetting("registers.displacement.scale",
                                     f"{reg.scale!r} puts the plausible reading {value:g} m outside the "
                                     f"{reg.type} register {reg.raw_limits()}; choose scale so [range] fits "
                                     "the register")

    def serial(self) -> SerialSettings:
        """The line settings of a serial sensor (9600 baud unless given)."""
        assert self.url is not None  # check()
        return SerialSettings(url=self.url, baudrate=self.baudrate or 9600, timeout=self.timeout,
                              connect_timeout=self.connect_timeout, backoff_initial=self.backoff_initial,
                              backoff_max=self.backoff_max, terminator=self.terminator)


class DisplacementSensor:
    """Common part: name, nominal sigma (m), plausibility range, read_many and identity."""

    protocol = "?"

    def __init__(self, name: str, settings: SensorSettings | Mapping[str, Any]) -> None:
        self.name = name
        self.settings = cfg = settings_from(settings, SensorSettings)
        self.sigma = cfg.sigma if cfg.sigma is not None else math.nan  # nominal noise std, m (the analysis)
        self.range = (cfg.range[0], cfg.range[1])  # plausible measuring range, m
        self.model = cfg.model

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

    def __init__(self, name: str, settings: SensorSettings | Mapping[str, Any],
                 backends: Backends | None = None) -> None:
        super().__init__(name, settings)
        self.regs = RegisterMap.from_config(self.settings.registers or {}, ("displacement",))
        self.transport = (backends or REAL).modbus(name, self.settings)
        self.protocol = self.transport.protocol
        self._spec = self.regs["displacement"]
        self._lo, self._hi = self.range

    @property
    def address(self) -> str:
        return self.transport.address

    async def connect(self) -> None:
        """Connect; with an ``expect`` table, refuse a device whose identification (FC43) differs."""
        await self.transport.connect()
        await check_identity(self.transport, self.settings.expect)

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

    def __init__(self, name: str, settings: SensorSettings | Mapping[str, Any],
                 backends: Backends | None = None) -> None:
        super().__init__(name, settings)
        self.line = (backends or REAL).serial(name, self.settings.serial())
        self.query_cmd = self.settings.query
        self.id_cmd = self.settings.id_query

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


def open_sensor(name: str, settings: SensorSettings | Mapping[str, Any],
                backends: Backends | None = None) -> DisplacementSensor:
    """Sensor driver for a ``[devices.sensors.<name>]`` table (not yet connected); ``backends``: where its
    requests go (:mod:`drivers.backends`; default its protocol)."""
    cfg = settings_from(settings, SensorSettings)
    if cfg.protocol == "serial":
        return SerialDisplacementSensor(name, cfg, backends)
    return ModbusDisplacementSensor(name, cfg, backends)
