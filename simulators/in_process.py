"""In-process device backends: the drivers talk to a simulated rig's devices without a socket.

:class:`InProcessBackends` implements the backend seam of :mod:`drivers.backends` over a started
simulated rig: a Modbus request runs the simulated device's own action on its register image
(:meth:`simulators.press_devices.ModbusSimServer.access`: its physics, checks, counters, injected faults and
stalls), a serial sensor's query its own answer, a SCPI line the front end's own command handler. The
drivers above keep everything that is theirs - SI scaling, word order and plausibility of registers
(the driver's codec encodes, the device decodes with its own), limits checked before a write, the safe
actions - so a plan or a run lifecycle tested on these backends goes through the same driver code as on
the wire; only the protocol round trip is left out. The end-to-end tests over the real protocols on
loopback stay for the protocols themselves (stale RTU replies, swapped registers, stalls, reconnects).

A device the simulator has no in-process face for gets the real transport of ``fallback``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from pymodbus.constants import ExcCodes

from drivers.backends import REAL, Backends, DriveCalls, ModbusLink, OpcUaDrive, Scpi, SerialLink
from drivers.errors import BadResponse, DeviceConnectionError, DeviceRefused, DeviceTimeout, DeviceUnreachable
from drivers.modbus_transport import MODBUS_EXCEPTIONS, ModbusSettings, checked_value, words_to_write
from drivers.registers import RegisterSpec
from drivers.serial_transport import SerialSettings
from simulators.press_devices import ModbusSimServer


class _Identification:
    """An FC43 reply as the drivers read it (``information``, ``more_follows``, ``next_object_id``)."""

    def __init__(self, information: dict[int, bytes]) -> None:
        self.information, self.more_follows, self.next_object_id = information, False, 0


class InProcessModbus:
    """A simulated Modbus device reached through its register image: the driver's codec on one side, the
    device's own on the other."""

    protocol = "in-process"
    n_late = 0
    n_mismatched = 0

    def __init__(self, name: str, settings: ModbusSettings, server: ModbusSimServer) -> None:
        self.name, self.server = name, server
        self.address = f"in-process:{server.name}/{settings.device_id}"
        self.timeout = settings.timeout * (settings.retries + 1)  # s a request may take (a stalled device)
        self._connected = False

    @property
    def connected(self) -> bool:
        return self._connected and self.server.running

    @property
    def request_bound(self) -> float:
        return self.timeout + 0.5

    async def connect(self) -> None:
        if not self.server.running:  # powered off
            raise DeviceUnreachable(self.name, self.address, "the simulated device is not running")
        self._connected = True

    def close(self) -> None:
        self._connected = False

    async def _access(self, what: str, table: str, address: int, count: int,
                      values: list[int] | None = None) -> list[int]:
        if not self.connected:
            await self.connect()
        try:
            async with asyncio.timeout(self.timeout):
                out = await self.server.access(table, address, count, values)
        except TimeoutError:
            raise DeviceTimeout(self.name, self.address,
                                f"{what}: no answer within {self.timeout:g} s") from None
        if isinstance(out, ExcCodes):
            code = int(out)
            raise DeviceRefused(self.name, self.address, f"{what}: Modbus exception {code} "
                                f"({MODBUS_EXCEPTIONS.get(code, 'exception')})", code)
        return out

    async def read_registers(self, table: str, address: int, count: int) -> list[int]:
        return await self._access(f"read {table}[{address}:{address + count}]", table, address, count)

    async def read(self, spec: RegisterSpec, finite: bool = True) -> float:
        regs = await self.read_registers(spec.table, spec.address, spec.count)
        return checked_value(self.name, self.address, spec, spec.decode(regs), finite)

    async def write(self, spec: RegisterSpec, value: float, limits: Sequence[str] = ()) -> None:
        regs = words_to_write(self.name, spec, value)
        await self._access(f"write {spec.name}={value!r} @ holding[{spec.address}]", "holding", spec.address,
                           len(regs), regs)

    async def read_device_information(self, read_code: int, object_id: int) -> Any:
        objects = self.server.identity_objects(read_code, object_id)
        if objects is None:
            raise DeviceRefused(self.name, self.address, "read device identification: Modbus exception 1 "
                                "(illegal function)", 1)
        return _Identification({oid: text.encode() for oid, text in objects.items()})


class InProcessSerial:
    """A simulated line sensor answering each query itself."""

    def __init__(self, name: str, device: Any) -> None:
        self.name, self.device = name, device
        self.address = f"in-process:{name}"
        self._open = False

    @property
    def connected(self) -> bool:
        return self._open

    async def connect(self) -> None:
        if not self.device.running:
            raise DeviceConnectionError(self.name, self.address, "the simulated sensor is not running")
        self._open = True

    def close(self) -> None:
        self._open = False

    async def query(self, command: str) -> str:
        if not self._open:
            await self.connect()
        await asyncio.sleep(0)  # a query is a suspension point on the wire too
        return str(self.device._reply(command.encode("ascii"))).strip()


class InProcessScpi:
    """The simulated front end's command handler, one line at a time, without the TCP stream."""

    holds_writes = False

    def __init__(self, name: str, device: Any, timeout: float) -> None:
        self.name, self.device, self.timeout = name, device, timeout
        self.address = f"in-process:{name}"
        self.opened = False
        self._lock = asyncio.Lock()

    @property
    def connected(self) -> bool:
        return self.opened

    async def connect(self) -> None:
        self.opened = True

    async def close(self) -> None:
        self.opened = False

    async def _answer(self, text: str, timeout: float | None) -> bytes | None:
        if not self.opened:
            raise DeviceConnectionError(self.name, self.address, "not connected")
        limit = timeout or self.timeout
        async with self._lock:
            try:
                async with asyncio.timeout(limit):
                    return await self.device.answer(text)
            except TimeoutError:
                raise DeviceTimeout(self.name, self.address, f"no answer within {limit:g} s") from None

    async def query(self, text: str, timeout: float | None = None) -> str:
        line = await self._answer(text, timeout) or b""
        if line.startswith(b"ERR "):
            raise DeviceRefused(self.name, self.address, line[4:].decode(errors="replace").strip())
        return line.decode("ascii", "replace").strip()

    async def command(self, text: str, value: object = None, timeout: float | None = None) -> None:
        await self._answer(text, timeout)
        answer = await self.query("SYST:ERR?", timeout)
        if not answer.startswith("0,"):
            raise DeviceRefused(self.name, self.address, f"{text!r} refused: {answer}")

    async def query_block(self, text: str) -> np.ndarray:
        raw = await self._answer(text, None) or b""
        if raw.startswith(b"ER"):
            raise DeviceRefused(self.name, self.address, raw.decode(errors="replace")[4:].strip())
        if raw[:1] != b"#" or not raw[1:2].isdigit():
            raise BadResponse(self.name, self.address, f"not a definite-length block: {raw[:2]!r}")
        digits = int(raw[1:2])
        n = int(raw[2:2 + digits])
        data = np.frombuffer(raw[2 + digits:2 + digits + n], dtype="<f8")
        if not np.all(np.isfinite(data)):
            raise BadResponse(self.name, self.address, f"{text}: non-finite samples")
        return data


#: the simulated drive's methods by their node name (what :class:`simulators.crane_drive.CraneDrive` serves)
DRIVE_METHODS = {"LoadTrajectory": "_m_load", "Start": "_m_start", "Stop": "_m_stop", "Enable": "_m_enable",
                 "Disable": "_m_disable", "ClearFault": "_m_clear", "ReadTrace": "_m_trace"}


class InProcessDrive:
    """The simulated servo drive's state and methods, reached without an OPC UA session: reads of its
    variables, calls of its methods (counted and hung by its fault injection as on the wire), the
    heartbeat written into its variable (its watchdog reads it there)."""

    holds_writes = False

    def __init__(self, name: str, rig: Any, nodes: Mapping[str, str]) -> None:
        self.name, self.rig, self.nodes = name, rig, nodes
        self.drive = rig.drive
        self.address = f"in-process:{name}"

    def _var(self, key: str) -> str:
        """The simulated drive's name of node ``key`` ("Axis1.State" -> "State")."""
        return self.nodes[key].split(".", 1)[-1]

    async def open(self) -> None:
        if not self.rig.endpoints:  # not started, or stopped
            raise DeviceUnreachable(self.name, self.address, "the simulated drive is not running")

    async def drop(self) -> None:
        return None

    async def read(self, keys: tuple[str, ...], retry: bool = True) -> list:
        await asyncio.sleep(0)  # a read is a suspension point on the wire too
        return [self.drive._values[self._var(k)] for k in keys]

    async def call(self, key: str, args: tuple[Any, ...], retry: bool = False, value: Any = None,
                   limits: tuple[str, ...] = ()) -> list:
        method = self._var(key)
        func = self.drive.faults.wrap(method, getattr(self.drive, DRIVE_METHODS[method]))
        out = await func(None, *args)
        return [v.Value if hasattr(v, "Value") else v for v in out]  # the result code first, as on the wire

    async def beat(self, count: int) -> None:
        await self.drive._set(Heartbeat=count)


class InProcessBackends(Backends):
    """The backends of a started simulated rig's devices (``devices``: driver name -> simulated device,
    :func:`devices_of` finds them); a device it does not hold goes to ``fallback``'s transport."""

    kind = "in-process"

    def __init__(self, devices: Mapping[str, Any], fallback: Backends = REAL) -> None:
        self.devices, self.fallback = dict(devices), fallback

    def modbus(self, name: str, settings: ModbusSettings) -> ModbusLink:
        device = self.devices.get(name)
        if device is None:
            return self.fallback.modbus(name, settings)
        return InProcessModbus(name, settings, device.server)

    def serial(self, name: str, settings: SerialSettings) -> SerialLink:
        device = self.devices.get(name)
        if device is None:
            return self.fallback.serial(name, settings)
        return InProcessSerial(name, device)

    def scpi(self, name: str, host: str, port: int, timeout: float) -> Scpi:
        device = self.devices.get(name)
        if device is None:
            return self.fallback.scpi(name, host, port, timeout)
        return InProcessScpi(name, device, timeout)

    def drive(self, name: str, url: str, drive: OpcUaDrive) -> DriveCalls:
        rig = self.devices.get("drive")
        if rig is None:
            return self.fallback.drive(name, url, drive)
        return InProcessDrive(name, rig, drive.nodes)


def devices_of(sim: Any) -> dict[str, Any]:
    """The simulated devices of a started simulated rig by the names its drivers use: a press's
    force source and sensors, a machine tool's front end."""
    if hasattr(sim, "devices"):       # simulators.press_rig.PressRig
        return dict(sim.devices)
    if hasattr(sim, "answer"):        # simulators.machine_tool_sim.MachineToolFrontEndSim
        return {"frontend": sim}
    if hasattr(sim, "drive"):         # simulators.crane_rig.CraneRig (crane, oscillator, pendulum)
        return {"drive": sim}
    return {}


def in_process(sim: Any) -> InProcessBackends:
    """The in-process backends of a started simulated rig (the real transports for what it cannot reach)."""
    return InProcessBackends(devices_of(sim))
