"""SCPI over raw TCP: the real transport of the modal front end (:mod:`drivers.modal_frontend`).

Text commands one per line, queries answered with one line or an IEEE 488.2 definite-length block
(``#<n><length><float64 little-endian bytes>``). A command is confirmed through the error queue
(``SYST:ERR?``), so a refused command is an error here, not a silent no-op. One request and its answer are
alone on the stream; a request that ends without its answer drops the stream, and the next request opens
a fresh one (a late answer must never be taken as the next request's).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import numpy as np

from drivers.errors import BadResponse, DeviceConnectionError, DeviceRefused, DeviceTimeout, DeviceUnreachable


class ScpiLink:
    """One SCPI instrument at ``host:port``; ``timeout`` s per request unless a request gives its own."""

    holds_writes = False  # commands reach the instrument (a recording backend holds them instead)

    def __init__(self, name: str, host: str, port: int, timeout: float) -> None:
        self.name, self.host, self.port, self.timeout = name, host, port, timeout
        self.address = f"{host}:{port}"
        self._r: asyncio.StreamReader | None = None
        self._w: asyncio.StreamWriter | None = None
        self._lock = asyncio.Lock()
        self.opened = False  # connect() succeeded and close() was not called since

    async def connect(self) -> None:
        try:
            self._r, self._w = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port), self.timeout
            )
        except (OSError, TimeoutError) as exc:
            raise DeviceUnreachable(self.name, self.address, f"cannot connect: {exc}") from None
        self.opened = True

    async def close(self) -> None:
        self.opened = False
        self._drop()

    def _drop(self) -> None:
        """Close the stream (the next request connects again if :meth:`connect` had opened it)."""
        if self._w is not None:
            self._w.close()
            self._w = None

    @property
    def connected(self) -> bool:
        return self._w is not None

    async def _send(self, text: str) -> None:
        if self._w is None and self.opened:  # dropped after a request without an answer: a fresh stream
            try:
                self._r, self._w = await asyncio.wait_for(
                    asyncio.open_connection(self.host, self.port), self.timeout)
            except (OSError, TimeoutError) as exc:
                raise DeviceUnreachable(self.name, self.address, f"cannot reconnect: {exc}") from None
        if self._w is None:
            raise DeviceConnectionError(self.name, self.address, "not connected")
        try:
            self._w.write((text + "\n").encode("ascii"))
            await self._w.drain()
        except (ConnectionError, OSError) as exc:
            raise DeviceConnectionError(self.name, self.address, f"connection lost: {exc}") from None

    async def _line(self, timeout: float) -> bytes:
        assert self._r is not None  # set with _w, which _send found connected
        try:
            line = await asyncio.wait_for(self._r.readline(), timeout)
        except TimeoutError:
            raise DeviceTimeout(self.name, self.address, f"no answer within {timeout:g} s") from None
        if not line:
            raise DeviceConnectionError(self.name, self.address, "connection closed by the device")
        if line.startswith(b"ERR "):
            raise DeviceRefused(self.name, self.address, line[4:].decode(errors="replace").strip())
        return line

    @contextlib.asynccontextmanager
    async def _exchange(self) -> AsyncIterator[None]:
        """One request and its answer, alone on the stream; dropped when it ends without its answer."""
        async with self._lock:
            try:
                yield
            except (DeviceTimeout, asyncio.CancelledError):
                self._drop()
                raise

    async def query(self, text: str, timeout: float | None = None) -> str:
        async with self._exchange():
            await self._send(text)
            return (await self._line(timeout or self.timeout)).decode("ascii", "replace").strip()

    async def command(self, text: str, value: object = None, timeout: float | None = None) -> None:
        """Send a command and confirm it through the error queue (DeviceRefused unless it answers ``0,``).
        ``value``: the command's argument in SI as a recording backend logs it (unused on the wire)."""
        async with self._exchange():
            await self._send(text)
            await self._send("SYST:ERR?")
            answer = (await self._line(timeout or self.timeout)).decode("ascii", "replace").strip()
        if not answer.startswith("0,"):
            raise DeviceRefused(self.name, self.address, f"{text!r} refused: {answer}")

    async def query_block(self, text: str) -> np.ndarray:
        """A definite-length block of float64 samples; non-finite samples are a BadResponse."""
        async with self._exchange():
            await self._send(text)
            assert self._r is not None  # set with _w, which _send found connected
            try:
                head = await asyncio.wait_for(self._r.readexactly(2), self.timeout)
                if head == b"ER":
                    rest = await self._r.readline()
                    raise DeviceRefused(
                        self.name, self.address, (head + rest).decode(errors="replace")[4:].strip()
                    )
                if head[:1] != b"#" or not head[1:].isdigit():
                    raise BadResponse(self.name, self.address, f"not a definite-length block: {head!r}")
                n = int(await self._r.readexactly(int(head[1:])))
                payload = await asyncio.wait_for(self._r.readexactly(n + 1), self.timeout)
            except asyncio.IncompleteReadError:
                raise DeviceConnectionError(self.name, self.address, "connection closed mid-block") from None
            except TimeoutError:
                raise DeviceTimeout(
                    self.name, self.address, f"block not complete within {self.timeout:g} s"
                ) from None
        data = np.frombuffer(payload[:-1], dtype="<f8")
        if not np.all(np.isfinite(data)):
            raise BadResponse(self.name, self.address, f"{text}: non-finite samples")
        return data
