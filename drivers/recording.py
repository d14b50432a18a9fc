"""The recording backend: reads reach the device, every write is held (the dry run, docs/dry-run.md).

:class:`RecordingBackends` wraps another set of backends (the real transports, or in-process ones): each
link it makes passes reads and connects through and hands every write to one
:class:`~drivers.outputs.OutputHold` - with its value in SI units and the limit checks the driver made
before it - instead of sending it. A write is still encoded by the register's codec first, so a value the
wire could not carry is refused as in a real run. Nothing of this is in the drivers: they write as
always, to whatever backend they were given.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from drivers.backends import REAL, Backends, DriveCalls, ModbusLink, OpcUaDrive, Scpi, SerialLink
from drivers.modbus_transport import ModbusSettings, words_to_write
from drivers.outputs import OutputHold
from drivers.registers import RegisterSpec
from drivers.serial_transport import SerialSettings

#: drive methods that only read (passed through, never held)
READ_METHODS = frozenset({"read_trace"})


class _Passing:
    """Everything but the writes goes to the wrapped link."""

    def __init__(self, inner: Any, hold: OutputHold) -> None:
        self.inner, self.hold = inner, hold

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class RecordingModbus(_Passing):
    """A Modbus link whose register writes are held."""

    async def write(self, spec: RegisterSpec, value: float, limits: Sequence[str] = ()) -> None:
        words_to_write(self.inner.name, spec, value)  # refused as the wire would refuse it
        await self.hold.hold(self.inner.name, self.inner.address, spec.name, value, limits)


class RecordingScpi(_Passing):
    """An SCPI link whose commands are held; queries reach the instrument."""

    holds_writes = True

    async def command(self, text: str, value: object = None, timeout: float | None = None) -> None:
        head, _, arg = text.partition(" ")
        await self.hold.hold(self.inner.name, self.inner.address, head, value if value is not None
                             else _value(arg.strip()))


class RecordingDriveCalls(_Passing):
    """A servo drive's method calls held (but its read-only ones), its heartbeat counted; its session
    opened and read as ever."""

    holds_writes = True

    def __init__(self, inner: DriveCalls, hold: OutputHold, name: str, url: str) -> None:
        super().__init__(inner, hold)
        self.name, self.url = name, url

    async def call(self, key: str, args: tuple[Any, ...], retry: bool = False, value: Any = None,
                   limits: tuple[str, ...] = ()) -> list:
        if key in READ_METHODS:
            return await self.inner.call(key, args, retry)
        await self.hold.hold(self.name, self.url, key, value, limits)
        return [0, "held (dry run)"]

    async def beat(self, count: int) -> None:
        await self.hold.hold(self.name, self.url, "heartbeat", count)


class RecordingBackends(Backends):
    """Backends that read through ``inner`` (the real transports by default) and hold every write in
    ``hold``."""

    kind = "recording"

    def __init__(self, hold: OutputHold, inner: Backends = REAL) -> None:
        self.hold, self.inner = hold, inner

    def modbus(self, name: str, settings: ModbusSettings) -> ModbusLink:
        return RecordingModbus(self.inner.modbus(name, settings), self.hold)

    def serial(self, name: str, settings: SerialSettings) -> SerialLink:
        return self.inner.serial(name, settings)  # a line sensor is only queried: nothing to hold

    def scpi(self, name: str, host: str, port: int, timeout: float) -> Scpi:
        return RecordingScpi(self.inner.scpi(name, host, port, timeout), self.hold)

    def drive(self, name: str, url: str, drive: OpcUaDrive) -> DriveCalls:
        return RecordingDriveCalls(self.inner.drive(name, url, drive), self.hold, name, url)


def _value(arg: str) -> float | str | None:
    """A command's argument as it is logged: a number where it is one (SI), else the word."""
    try:
        return float(arg)
    except ValueError:
        return arg or None
