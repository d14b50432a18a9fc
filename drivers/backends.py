"""The device backend seam: how a driver's requests reach its device.

A driver holds the semantics of its device - SI units, register scaling and word order, limits checked
before anything is sent, the safe action's steps - and hands each request to a *backend* below them (in
the manner of ophyd-async's signal backends). Which backends a driver gets is one object,
:class:`Backends`, given to its constructor (``ForceSource(settings, backends=...)``); without one a driver
talks its real protocol. The kinds:

- :class:`Backends` (the default): the real transports - Modbus TCP/RTU (:class:`ModbusTransport`), an
  ASCII serial line (:class:`SerialLine`), SCPI over TCP (:class:`ScpiLink`), OPC UA (the servo drive's own
  session, :class:`OpcUaCalls`).
- :class:`drivers.recording.RecordingBackends`: reads go to another set of backends, every write is held
  in an :class:`~drivers.outputs.OutputHold` with its SI value and the limit checks it passed (the dry
  run: `hil run --dry-run`, docs/dry-run.md).
- ``simulators.in_process.InProcessBackends``: the simulated devices' own state and physics, without a
  socket (tests of plans and of the run lifecycle).

The protocols below are what a driver uses of each backend; every kind implements them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from drivers.scpi_link import ScpiLink

if TYPE_CHECKING:  # annotations only: the protocol stacks load with the transports that use them
    import numpy as np

    from drivers.modbus_transport import ModbusSettings
    from drivers.registers import RegisterSpec
    from drivers.serial_transport import SerialSettings


class ModbusLink(Protocol):
    """A Modbus device as the force source and the Modbus sensors use it: mapped values in SI units."""

    name: str
    address: str
    n_late: int
    n_mismatched: int

    @property
    def protocol(self) -> str: ...

    @property
    def connected(self) -> bool: ...

    @property
    def request_bound(self) -> float: ...

    async def connect(self) -> None: ...

    def close(self) -> None: ...

    async def read(self, spec: RegisterSpec, finite: bool = True) -> float: ...

    async def read_registers(self, table: str, address: int, count: int) -> list[int]: ...

    async def read_device_information(self, read_code: int, object_id: int) -> Any: ...

    async def write(self, spec: RegisterSpec, value: float, limits: Sequence[str] = ()) -> None: ...


class SerialLink(Protocol):
    """A query/response line: one command, one answer line."""

    address: str

    @property
    def connected(self) -> bool: ...

    async def connect(self) -> None: ...

    def close(self) -> None: ...

    async def query(self, command: str) -> str: ...


class Scpi(Protocol):
    """An SCPI instrument: queries, commands confirmed through its error queue, float64 blocks."""

    address: str
    opened: bool
    holds_writes: bool  # True: commands are held, not sent (the instrument does not act on them)

    @property
    def connected(self) -> bool: ...

    async def connect(self) -> None: ...

    async def close(self) -> None: ...

    async def query(self, text: str, timeout: float | None = None) -> str: ...

    async def command(self, text: str, value: object = None, timeout: float | None = None) -> None: ...

    async def query_block(self, text: str) -> np.ndarray: ...


class DriveCalls(Protocol):
    """A servo drive's session: open and drop it, read nodes (by the driver's keys: "state", ...), call
    methods (trajectory upload, enable, start, stop, ...) and write the heartbeat. ``value``/``limits``: a
    call's argument in SI and the checks it passed (for a recording backend)."""

    holds_writes: bool  # True: the calls are held, not made (the drive does not act on them)

    async def open(self) -> None: ...

    async def drop(self) -> None: ...

    async def read(self, keys: tuple[str, ...], retry: bool = True) -> list: ...

    async def call(self, key: str, args: tuple[Any, ...], retry: bool = False, value: Any = None,
                   limits: tuple[str, ...] = ()) -> list: ...

    async def beat(self, count: int) -> None: ...


class OpcUaDrive(Protocol):
    """The part of :class:`drivers.servo_drive.ServoDrive` its backends use: its node names, and the OPC UA
    session its real backend works on."""

    nodes: dict[str, str]

    async def open_session(self) -> None: ...

    async def drop_session(self) -> None: ...

    async def read_nodes(self, keys: tuple[str, ...], retry: bool = True) -> list: ...

    async def call_method(self, key: str, args: tuple[Any, ...], retry: bool) -> list: ...

    async def write_heartbeat(self, count: int) -> None: ...


class OpcUaCalls:
    """The servo drive's real writes: OPC UA method calls and the heartbeat variable, on its own session."""

    holds_writes = False

    def __init__(self, drive: OpcUaDrive) -> None:
        self.drive = drive

    async def open(self) -> None:
        await self.drive.open_session()

    async def drop(self) -> None:
        await self.drive.drop_session()

    async def read(self, keys: tuple[str, ...], retry: bool = True) -> list:
        return await self.drive.read_nodes(keys, retry)

    async def call(self, key: str, args: tuple[Any, ...], retry: bool = False, value: Any = None,
                   limits: tuple[str, ...] = ()) -> list:
        return await self.drive.call_method(key, args, retry)

    async def beat(self, count: int) -> None:
        await self.drive.write_heartbeat(count)


class Backends:
    """The real protocol transports: what a driver talks when it is given no other backends."""

    kind = "protocol"

    def modbus(self, name: str, settings: ModbusSettings) -> ModbusLink:
        from drivers.modbus_transport import ModbusTransport  # lazy: pymodbus, for a Modbus device only

        return ModbusTransport(name, settings)

    def serial(self, name: str, settings: SerialSettings) -> SerialLink:
        from drivers.serial_transport import SerialLine  # lazy: pyserial, for a serial line only

        return SerialLine(name, settings)

    def scpi(self, name: str, host: str, port: int, timeout: float) -> Scpi:
        return ScpiLink(name, host, port, timeout)

    def drive(self, name: str, url: str, drive: OpcUaDrive) -> DriveCalls:
        return OpcUaCalls(drive)


#: the default of every driver
REAL = Backends()
