"""Shared pieces of the simulated press devices: register images and a restartable Modbus server.

The simulators parse the same TOML register maps as the drivers but keep a codec apart from the drivers':
they decode with pymodbus' own converters and encode with the struct layouts pymodbus' converter uses, fixed
once per type (tests/test_sim_registers.py: equal to pymodbus' ``convert_to_registers`` for every type, word
order and edge value; the converter itself parses its arguments on every call, several microseconds that a
simulated device answering thousands of reads a second spends again and again), so a codec bug on one side
is not mirrored on the other.

A simulated device answers only its own unit id, as hardware does: a request for another id gets no
answer on RTU (a slave on a shared line stays silent) and exception 11 "gateway target device failed to
respond" on TCP - quietly, without a server traceback. ``stall`` holds every request before it is
answered (a slow or frozen device, for fault injection).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import struct
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pymodbus import FramerType
from pymodbus.client import ModbusTcpClient
from pymodbus.constants import ExcCodes
from pymodbus.exceptions import NoSuchIdException
from pymodbus.pdu import ExceptionResponse, ModbusPDU
from pymodbus.pdu.mei_message import ReadDeviceInformationResponse
from pymodbus.server import ModbusSerialServer, ModbusTcpServer
from pymodbus.simulator import DataType, SimData, SimDevice

log = logging.getLogger(__name__)

_DT = ModbusTcpClient.DATATYPE
_TYPES = {"float32": _DT.FLOAT32, "int16": _DT.INT16, "uint16": _DT.UINT16, "int32": _DT.INT32,
          "uint32": _DT.UINT32}
#: per type: the value packed big-endian as pymodbus packs it, and the same bytes read as 16-bit words
_PACKING = {name: (struct.Struct(f">{dt.value[0]}"), struct.Struct(f">{dt.value[1]}H"))
            for name, dt in _TYPES.items()}
HOLDING_FC = (6, 16, 3)
INPUT_FC = (4,)


class SimValueError(ValueError):
    """A write carried a value the simulated device refuses."""


@dataclass(frozen=True)
class SimRegister:
    """One mapped value as the device sees it."""

    name: str
    table: str
    address: int
    type: str
    word_order: str
    scale: float
    offset: float

    @property
    def count(self) -> int:
        return _TYPES[self.type].value[1]

    def to_regs(self, value: float) -> list[int]:
        raw = (value - self.offset) / self.scale
        if self.type != "float32":
            raw = int(round(raw))
        value_format, words_format = _PACKING[self.type]
        words = list(words_format.unpack(value_format.pack(raw)))
        if self._order == "little":  # pymodbus reverses the words of a 32-bit value (a 16-bit one has one)
            words.reverse()
        return words

    def from_regs(self, regs: list[int]) -> float:
        raw = ModbusTcpClient.convert_from_registers(regs, _TYPES[self.type], word_order=self._order)
        assert isinstance(raw, int | float)  # every type in _TYPES is one number
        return float(raw) * self.scale + self.offset

    @property
    def _order(self) -> Literal["big", "little"]:
        """The word order as pymodbus takes it (which reads anything but "little" as big-endian)."""
        return "little" if self.word_order == "little" else "big"


def parse_map(table: Mapping[str, Mapping[str, Any]]) -> dict[str, SimRegister]:
    """Register entries of a ``[devices.*.registers]`` table."""
    out = {}
    for name, d in table.items():
        out[name] = SimRegister(name, str(d.get("table", "holding")), int(d["address"]),
                                str(d.get("type", "float32")), str(d.get("word_order", "big")),
                                float(d.get("scale", 1.0)), float(d.get("offset", 0.0)))
    return out


#: The simulated press devices' own register maps - their "firmware", as a real device's map is its maker's
#: and not the config's (issue 34): a wrong map in a config reads wrong values here, as it would on the rig.
#: The shipped configs describe these maps correctly.
FORCE_SOURCE_MAP: dict[str, dict[str, Any]] = {
    "setpoint": {"table": "holding", "address": 0, "type": "float32"},
    "enable": {"table": "holding", "address": 2, "type": "uint16"},
    "clear_fault": {"table": "holding", "address": 3, "type": "uint16"},
    "heartbeat": {"table": "holding", "address": 4, "type": "uint16"},
    "force": {"table": "input", "address": 0, "type": "float32"},
    "pressure": {"table": "input", "address": 2, "type": "float32"},
    "status": {"table": "input", "address": 4, "type": "uint16"},
    "fault_code": {"table": "input", "address": 5, "type": "uint16"},
}
SENSOR_MAPS: dict[str, dict[str, dict[str, Any]]] = {
    "D_vertical": {"displacement": {"table": "input", "address": 0, "type": "float32"}},
    "F_horizontal": {"displacement": {"table": "input", "address": 10, "type": "int32",
                                      "word_order": "little", "scale": 1.0e-7}},
    "B0_vertical": {"displacement": {"table": "input", "address": 0, "type": "float32"}},
}
#: what each simulated device says about itself (model, serial number, firmware)
IDENTITIES: dict[str, dict[str, str]] = {
    "force_source": {"model": "SIMLAB PFS-25 pneumatic force source", "serial_number": "PFS-0425",
                     "firmware": "2.3.1"},
    "D_vertical": {"model": "SIMLAB LVDT-5 transmitter", "serial_number": "LV-1101", "firmware": "1.4"},
    "F_horizontal": {"model": "SIMLAB EC-10 eddy-current transmitter", "serial_number": "EC-2202",
                     "firmware": "3.0"},
    "B0_vertical": {"model": "SIMLAB LDS-10 laser sensor", "serial_number": "LDS-3303", "firmware": "1.0"},
}


def identity_objects(identity: Mapping[str, str]) -> dict[int, str]:
    """A simulated device's identity as FC43 objects: vendor, product code, revision, model name, and the
    serial number in the private object 0x80."""
    return {0x00: "SIMLAB", 0x01: identity["model"].split()[1], 0x02: identity["firmware"],
            0x05: identity["model"], 0x80: identity["serial_number"]}


def _answers(read_code: int, object_id: int, asked: set[int]) -> bool:
    """Whether a reply to ``read_code`` carries ``object_id`` (basic 0-2, regular 0-0x7F, extended all,
    specific: the one asked for, which pymodbus' own reply holds)."""
    if read_code == 0x04:
        return object_id in asked
    return object_id <= {0x01: 0x02, 0x02: 0x7F}.get(read_code, 0xFF)


def _block(regs: list[SimRegister]) -> list[SimData]:
    """One contiguous block of plain registers covering ``regs`` (a dummy register if none)."""
    if not regs:
        return [SimData(0, count=1, values=0, datatype=DataType.REGISTERS)]
    lo = min(r.address for r in regs)
    hi = max(r.address + r.count for r in regs)
    return [SimData(lo, count=hi - lo, values=0, datatype=DataType.REGISTERS)]


def _image(regs) -> tuple[int, list[int]]:
    """A zeroed register image covering ``regs``: (first address, words)."""
    regs = list(regs)
    if not regs:
        return 0, [0]
    lo = min(r.address for r in regs)
    return lo, [0] * (max(r.address + r.count for r in regs) - lo)


def put(regs: list[int], start: int, reg: SimRegister, value: float) -> None:
    """Write ``value`` into a pymodbus register list that starts at address ``start``."""
    i = reg.address - start
    regs[i:i + reg.count] = reg.to_regs(value)


def written(regs: list[int], start: int, address: int, values: list[int],
            rmap: Mapping[str, SimRegister]) -> dict[str, float]:
    """Values of the mapped holding registers touched by a write, decoded from the would-be image."""
    image = list(regs)
    image[address - start:address - start + len(values)] = [int(v) for v in values]
    end = address + len(values)
    out = {}
    for reg in rmap.values():
        if reg.table == "holding" and reg.address < end and address < reg.address + reg.count:
            i = reg.address - start
            out[reg.name] = reg.from_regs(image[i:i + reg.count])
    return out


class _OwnUnitOnly:
    """The server's datastore restricted to one unit id (pymodbus' simulator falls back to device 0 and
    fails with a KeyError traceback for any other id)."""

    def __init__(self, core: Any, device_id: int, silent: bool, owner: ModbusSimServer) -> None:
        self.core, self.device_id, self.silent, self.owner = core, device_id, silent, owner

    def device_ids(self) -> list[int]:
        return [self.device_id]

    def _foreign(self, device_id: int) -> ExcCodes:
        self.owner.n_foreign += 1
        log.debug("%s: request for unit id %d ignored (this is %d)", self.owner.name, device_id,
                  self.device_id)
        if self.silent:  # the server is built with ignore_missing_devices: no answer at all
            raise NoSuchIdException(f"unit id {device_id} is not this device ({self.device_id})")
        return ExcCodes.GATEWAY_NO_RESPONSE

    async def async_getValues(self, device_id: int, func_code: int, address: int, count: int = 1):
        if device_id != self.device_id:
            return self._foreign(device_id)
        return await self.core.async_getValues(device_id, func_code, address, count)

    async def async_setValues(self, device_id: int, func_code: int, address: int, values):
        if device_id != self.device_id:
            self.owner.n_writes += 1  # it reached this device all the same (a config's wrong unit id)
            return self._foreign(device_id)
        return await self.core.async_setValues(device_id, func_code, address, values)


Action = Callable[[int, int, int, int, list[int], list[int] | None], Awaitable[ExcCodes | None]]


class ModbusSimServer:
    """A pymodbus server (TCP, or RTU on a ``socket://host:port`` listener) that can stop and restart on
    the same port, as a device that is power-cycled."""

    def __init__(self, name: str, protocol: str, host: str, port: int, device_id: int,
                 rmap: Mapping[str, SimRegister], action: Action) -> None:
        if protocol not in ("modbus_tcp", "modbus_rtu"):
            raise ValueError(f"{name}: unknown protocol {protocol!r}")
        self.name, self.protocol, self.host, self.port = name, protocol, host, int(port)
        self.device_id = int(device_id)
        self.rmap = dict(rmap)
        self._action = action
        self._server: ModbusTcpServer | ModbusSerialServer | None = None
        self._stall = 0.0
        self._stall_changed = asyncio.Event()
        self.n_foreign = 0  # requests for other unit ids (not answered / refused)
        self.n_writes = 0  # write requests received, for any unit id (commissioning writes none)
        self.identity: Mapping[str, str] | None = None  # answered to FC43; None: the function is not offered
        # the register image the in-process backend reads and writes (table -> (first address, words))
        self._image = {table: _image(r for r in self.rmap.values() if r.table == table)
                       for table in ("holding", "input")}

    @property
    def stall(self) -> float:
        """Seconds every request is held before it is answered (0: none; math.inf: frozen until reset)."""
        return self._stall

    @stall.setter
    def stall(self, seconds: float) -> None:
        if not seconds >= 0:
            raise ValueError("stall must be >= 0")
        self._stall = float(seconds)
        self._stall_changed.set()  # held requests re-check the new value
        self._stall_changed = asyncio.Event()

    async def _hold(self) -> None:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        while (left := t0 + self._stall - loop.time()) > 0:
            changed = self._stall_changed
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(None if math.isinf(left) else left):
                    await changed.wait()

    def _device(self) -> SimDevice:
        hold = [r for r in self.rmap.values() if r.table == "holding"]
        inp = [r for r in self.rmap.values() if r.table == "input"]
        bits = [SimData(0, count=16, values=False, datatype=DataType.BITS)]
        return SimDevice(id=self.device_id, simdata=(bits, list(bits), _block(hold), _block(inp)),
                         action=self._guarded_action)

    async def _guarded_action(self, fc, start, address, count, regs, values):
        """Never let a simulation bug kill the request handler: answer DEVICE_FAILURE instead."""
        if values is not None:
            self.n_writes += 1
        if self._stall > 0:
            await self._hold()
        try:
            return await self._action(fc, start, address, count, regs, values)
        except SimValueError as exc:
            log.info("%s: refused write at %d: %s", self.name, address, exc)
            return ExcCodes.ILLEGAL_VALUE
        except Exception:  # the device must keep serving
            log.exception("%s: simulation error at address %d", self.name, address)
            return ExcCodes.DEVICE_FAILURE

    async def access(self, table: str, address: int, count: int, values: list[int] | None = None
                     ) -> list[int] | ExcCodes:
        """One request without a socket (the in-process backend): read ``count`` words of ``table`` from
        ``address``, or write ``values`` there, through the device's own action - its physics, checks,
        counters and injected faults (a stall included) - on the register image of this server.
        Returns the words read (the words written, for a write) or the Modbus exception code."""
        start, image = self._image[table]
        lo, hi = address - start, address - start + (count if values is None else len(values))
        if lo < 0 or hi > len(image):
            return ExcCodes.ILLEGAL_ADDRESS
        fc = (4 if table == "input" else 3) if values is None else (6 if len(values) == 1 else 16)
        regs = list(image)
        code = await self._guarded_action(fc, start, address, count, regs, values)
        if code is not None:
            return code
        if values is None:
            image[:] = regs
            return regs[lo:hi]
        image[lo:hi] = [int(v) for v in values]
        return list(values)

    def identity_objects(self, read_code: int, object_id: int) -> dict[int, str] | None:
        """What an FC43 request (``read_code``, from ``object_id``) is answered with; None: not offered."""
        if self.identity is None:
            return None
        asked = {object_id}
        return {oid: text for oid, text in identity_objects(self.identity).items()
                if oid >= object_id and _answers(read_code, oid, asked)}

    def _identify(self, sending: bool, pdu: ModbusPDU) -> ModbusPDU:
        """Answer Read Device Identification with this device's own identity. pymodbus answers it from one
        control block per process (every simulated device would share the last identity), so the reply is
        filled in here, on its way out; a device without an identity answers "illegal function"."""
        if not (sending and isinstance(pdu, ReadDeviceInformationResponse)):
            return pdu
        if self.identity is None:
            return ExceptionResponse(pdu.function_code, ExcCodes.ILLEGAL_FUNCTION, device_id=pdu.dev_id,
                                     transaction=pdu.transaction_id)
        asked = set(pdu.information)
        pdu.information = {oid: text.encode() for oid, text in identity_objects(self.identity).items()
                           if _answers(pdu.read_code, oid, asked)}
        return pdu

    @property
    def running(self) -> bool:
        return self._server is not None

    @property
    def url(self) -> str:
        """Where a client connects: "tcp://host:port" (Modbus TCP) or "socket://host:port" (RTU gateway)."""
        scheme = "tcp" if self.protocol == "modbus_tcp" else "socket"
        return f"{scheme}://{self.host}:{self.port}"

    async def start(self) -> None:
        if self._server is not None:
            return
        server: ModbusTcpServer | ModbusSerialServer
        if self.protocol == "modbus_tcp":
            server = ModbusTcpServer(self._device(), address=(self.host, self.port), trace_pdu=self._identify)
        else:
            server = ModbusSerialServer(self._device(), framer=FramerType.RTU, trace_pdu=self._identify,
                                        port=f"socket://{self.host}:{self.port}", ignore_missing_devices=True)
        server.context = _OwnUnitOnly(  # type: ignore[assignment]  # duck-typed: pymodbus declares its own classes
            server.context, self.device_id, silent=self.protocol == "modbus_rtu", owner=self)
        await server.serve_forever(background=True)
        sockets = getattr(server.transport, "sockets", None)
        if not sockets:
            await server.shutdown()
            raise OSError(f"{self.name}: could not listen on {self.host}:{self.port}")
        self.port = int(sockets[0].getsockname()[1])
        self._server = server

    async def stop(self) -> None:
        if self._server is None:
            return
        server, self._server = self._server, None
        await server.shutdown()
        await asyncio.sleep(0)
