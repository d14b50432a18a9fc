"""Modbus TCP / RTU transport for the drivers: connect with backoff, small timeouts, typed errors.

pymodbus does not retry a failed first connect and its own background reconnect races with ours, so
its automatic reconnect is switched off (``reconnect_delay=0``) and this class reconnects on demand,
with exponential backoff bounded by ``connect_timeout``.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Mapping
from typing import Any

from pymodbus import FramerType
from pymodbus.client import AsyncModbusSerialClient, AsyncModbusTcpClient
from pymodbus.exceptions import ConnectionException, ModbusException, ModbusIOException

from drivers.cancellation import checked
from drivers.errors import BadResponse, DeviceConnectionError, DeviceRefused, DeviceTimeout
from drivers.registers import RegisterSpec

log = logging.getLogger(__name__)

MODBUS_EXCEPTIONS = {
    1: "illegal function",
    2: "illegal data address",
    3: "illegal data value",
    4: "device failure",
    6: "device busy",
    11: "gateway target did not respond",
}


class ModbusTransport:
    """One Modbus device (TCP or RTU over a serial line / ``socket://`` gateway).

    Config keys (the device's ``[devices.*]`` table): ``protocol`` ("modbus_tcp" | "modbus_rtu"),
    ``host``/``port`` (TCP) or ``url`` (RTU, e.g. "/dev/ttyUSB0" or "socket://10.0.0.5:4001"),
    ``baudrate``, ``device_id``, ``timeout`` (s per attempt), ``retries``, ``connect_timeout`` (s, total
    time spent reconnecting before giving up), ``backoff_initial`` / ``backoff_max`` (s).
    """

    def __init__(self, name: str, cfg: Mapping[str, Any]) -> None:
        self.name = name
        self.protocol = str(cfg.get("protocol", "modbus_tcp"))
        self.device_id = int(cfg.get("device_id", 1))
        self.timeout = float(cfg.get("timeout", 0.5))
        self.retries = int(cfg.get("retries", 1))
        self.connect_timeout = float(cfg.get("connect_timeout", 3.0))
        self.backoff_initial = float(cfg.get("backoff_initial", 0.05))
        self.backoff_max = float(cfg.get("backoff_max", 1.0))
        if self.protocol == "modbus_tcp":
            self.host = str(cfg.get("host", "127.0.0.1"))
            self.port = int(cfg.get("port", 502))
            self.address = f"modbus-tcp://{self.host}:{self.port}/{self.device_id}"
        elif self.protocol == "modbus_rtu":
            self.url = str(cfg["url"])
            self.baudrate = int(cfg.get("baudrate", 19200))
            self.address = f"modbus-rtu:{self.url}/{self.device_id}"
        else:
            raise ValueError(f"{name}: unknown Modbus protocol {self.protocol!r}")
        self._client: AsyncModbusTcpClient | AsyncModbusSerialClient | None = None
        self._lock = asyncio.Lock()

    def _new_client(self) -> AsyncModbusTcpClient | AsyncModbusSerialClient:
        common = dict(timeout=self.timeout, retries=self.retries, reconnect_delay=0, name=self.name)
        if self.protocol == "modbus_tcp":
            return AsyncModbusTcpClient(self.host, port=self.port, **common)
        return AsyncModbusSerialClient(self.url, framer=FramerType.RTU, baudrate=self.baudrate, **common)

    @property
    def connected(self) -> bool:
        return self._client is not None and self._client.connected

    async def connect(self) -> None:
        """Connect, retrying with exponential backoff until ``connect_timeout`` has passed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.connect_timeout
        delay = self.backoff_initial
        while True:
            if self._client is not None:
                self._client.close()
            self._client = self._new_client()
            try:
                async with asyncio.timeout(max(self.timeout, 0.1)):
                    ok = await checked(self._client.connect())
            except (TimeoutError, OSError, ModbusException):
                ok = False
            if ok and self._client.connected:
                return
            if loop.time() + delay > deadline:
                self._client.close()
                self._client = None
                raise DeviceConnectionError(
                    self.name, self.address, f"cannot connect within {self.connect_timeout:g} s"
                )
            await asyncio.sleep(delay)
            delay = min(2.0 * delay, self.backoff_max)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    async def _execute(self, what: str, call):
        """Run one request: reconnect if needed, map pymodbus failures to typed errors."""
        async with self._lock:
            if not self.connected:
                await self.connect()
            assert self._client is not None
            guard = self.timeout * (self.retries + 1) + 0.5
            try:
                async with asyncio.timeout(guard):
                    rr = await checked(call(self._client))
            except (TimeoutError, ModbusIOException) as exc:
                if not self._client.connected:
                    self.close()
                    raise DeviceConnectionError(self.name, self.address, f"{what}: connection lost") from exc
                msg = f"{what}: no answer within {self.timeout:g} s"
                raise DeviceTimeout(self.name, self.address, msg) from exc
            except (ConnectionException, OSError) as exc:
                self.close()
                raise DeviceConnectionError(self.name, self.address, f"{what}: {exc}") from exc
            except ModbusException as exc:
                raise BadResponse(self.name, self.address, f"{what}: {exc}") from exc
            if rr.isError():
                code = int(getattr(rr, "exception_code", 0) or 0)
                text = MODBUS_EXCEPTIONS.get(code, "exception")
                msg = f"{what}: Modbus exception {code} ({text})"
                raise DeviceRefused(self.name, self.address, msg, code)
            return rr

    async def read_registers(self, table: str, address: int, count: int) -> list[int]:
        """Raw registers from the holding or input table."""
        what = f"read {table}[{address}:{address + count}]"

        async def call(c):
            if table == "input":
                return await c.read_input_registers(address, count=count, device_id=self.device_id)
            return await c.read_holding_registers(address, count=count, device_id=self.device_id)

        rr = await self._execute(what, call)
        regs = list(rr.registers)
        if len(regs) != count:
            raise BadResponse(self.name, self.address, f"{what}: got {len(regs)} registers")
        return regs

    async def read(self, spec: RegisterSpec, finite: bool = True) -> float:
        """Read one mapped value in SI units; NaN/inf is a BadResponse when ``finite``."""
        value = spec.decode(await self.read_registers(spec.table, spec.address, spec.count))
        if finite and not math.isfinite(value):
            msg = f"{spec.name} @ {spec.table}[{spec.address}] = {value}"
            raise BadResponse(self.name, self.address, msg)
        return value

    async def write(self, spec: RegisterSpec, value: float) -> None:
        """Write one mapped value (SI units) to a holding register."""
        if spec.table != "holding":
            raise ValueError(f"{self.name}: {spec.name} is in the {spec.table} table and cannot be written")
        regs = spec.encode(value)
        what = f"write {spec.name}={value!r} @ holding[{spec.address}]"

        async def call(c):
            if len(regs) == 1:
                return await c.write_register(spec.address, regs[0], device_id=self.device_id)
            return await c.write_registers(spec.address, regs, device_id=self.device_id)

        await self._execute(what, call)
