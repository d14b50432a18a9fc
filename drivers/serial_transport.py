"""Line-oriented serial transport (pyserial): one query, one answer line; reconnect with backoff.

pyserial is blocking, so each query runs in a worker thread; an asyncio lock keeps one query in
flight. URLs are anything ``serial.serial_for_url`` accepts: "/dev/ttyUSB0" or "socket://host:port"
(a serial-to-Ethernet gateway, or the simulated sensor on loopback).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Annotated, Any

import serial
from msgspec import Meta

from drivers.errors import BadResponse, DeviceConnectionError, DeviceTimeout
from drivers.serial_urls import install as install_serial_urls
from drivers.settings import Baud, NonEmpty, Settings, Timeout, settings_from

MAX_LINE = 256  # bytes; a longer answer is malformed

install_serial_urls()  # socket:// ports close without blocking the event loop


class SerialSettings(Settings, kw_only=True):
    """One serial line: ``url`` ("/dev/ttyUSB0" or "socket://host:port"), ``baudrate``, ``timeout`` (s per
    answer), ``connect_timeout`` (s), reconnect backoff (s), ``terminator`` sent after each command."""

    url: NonEmpty
    baudrate: Baud = 9600
    timeout: Annotated[float, Meta(gt=0, le=60.0)] = 0.5
    connect_timeout: Timeout = 3.0
    backoff_initial: Annotated[float, Meta(gt=0, le=10.0)] = 0.05
    backoff_max: Annotated[float, Meta(gt=0, le=60.0)] = 1.0
    terminator: NonEmpty = "\r\n"


class SerialLine:
    """Query/response over one serial line.

    Config keys: ``url``, ``baudrate``, ``timeout`` (s per answer), ``connect_timeout`` (s),
    ``backoff_initial`` / ``backoff_max`` (s), ``terminator`` (sent after each command, default CR LF).
    """

    def __init__(self, name: str, settings: SerialSettings | Mapping[str, Any]) -> None:
        cfg = settings_from(settings, SerialSettings)
        self.name = name
        self.settings = cfg
        self.url = cfg.url
        self.address = self.url
        self.baudrate = cfg.baudrate
        self.timeout = cfg.timeout
        self.connect_timeout = cfg.connect_timeout
        self.backoff_initial = cfg.backoff_initial
        self.backoff_max = cfg.backoff_max
        self.terminator = cfg.terminator.encode("ascii")
        self._port: serial.SerialBase | None = None
        self._lock = asyncio.Lock()

    @property
    def connected(self) -> bool:
        return self._port is not None

    def _open(self) -> serial.SerialBase:
        return serial.serial_for_url(self.url, baudrate=self.baudrate, timeout=self.timeout,
                                     write_timeout=self.timeout)

    async def connect(self) -> None:
        """Open the port, retrying with exponential backoff until ``connect_timeout`` has passed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.connect_timeout
        delay = self.backoff_initial
        while True:
            try:
                self._port = await asyncio.to_thread(self._open)
                return
            except (serial.SerialException, OSError, ValueError) as exc:
                if loop.time() + delay > deadline:
                    raise DeviceConnectionError(
                        self.name, self.address, f"cannot open within {self.connect_timeout:g} s: {exc}"
                    ) from exc
            await asyncio.sleep(delay)
            delay = min(2.0 * delay, self.backoff_max)

    def close(self) -> None:
        if self._port is not None:
            port, self._port = self._port, None
            try:
                port.close()  # socket://: drivers.serial_urls's port, which closes without pyserial's sleep
            except (serial.SerialException, OSError):
                pass

    def _exchange(self, port: serial.SerialBase, data: bytes) -> bytes:
        port.reset_input_buffer()  # drop a late answer to an earlier, timed-out query
        port.write(data)
        return port.read_until(b"\n", MAX_LINE + 2)

    async def query(self, command: str) -> str:
        """Send one command line, return the answer line without its terminator."""
        async with self._lock:
            if self._port is None:
                await self.connect()
            port = self._port
            assert port is not None
            try:
                raw = await asyncio.to_thread(self._exchange, port, command.encode("ascii") + self.terminator)
            except (serial.SerialException, OSError) as exc:
                self.close()
                raise DeviceConnectionError(self.name, self.address,
                                            f"{command!r}: connection lost ({exc})") from exc
            if not raw.endswith(b"\n"):
                if len(raw) > MAX_LINE:
                    msg = f"{command!r}: answer longer than {MAX_LINE} bytes"
                    raise BadResponse(self.name, self.address, msg)
                raise DeviceTimeout(self.name, self.address, f"{command!r}: no complete answer within "
                                    f"{self.timeout:g} s (got {raw!r})")
            try:
                return raw.decode("ascii").strip()
            except UnicodeDecodeError as exc:
                raise BadResponse(self.name, self.address, f"{command!r}: non-ASCII answer {raw!r}") from exc
