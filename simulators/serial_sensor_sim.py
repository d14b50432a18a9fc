"""Simulated ASCII serial displacement sensor, served by an asyncio TCP server (a serial gateway).

Line protocol (commands end with CR LF or LF, answers end with CR LF):

* ``MEAS?``   -> ``+0.000123456 m``  (one noisy, quantised reading, metres)
* ``ID?``     -> ``ID <vendor>,<model>,<serial>,<firmware>``
* ``UNIT?``   -> ``m``
* anything else -> ``ERR 1 unknown command '<cmd>'``; a line over 128 bytes -> ``ERR 2 line too long``;
  non-ASCII bytes -> ``ERR 3 bad characters``. Bad input never closes the connection or the server.

``inject = "garbage"`` makes MEAS? answer a malformed line, to test drivers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from simulators.displacement_sim import noisy, parse_socket_url

log = logging.getLogger(__name__)
MAX_LINE = 128


class SerialSensorSim:
    """One sensor on one listening socket; several clients may connect (each gets its own session)."""

    def __init__(self, name: str, device_cfg: Mapping[str, Any], source: Callable[[], float],
                 sigma: float = 0.0, resolution: float = 0.0, rng: np.random.Generator | None = None,
                 ident: str = "SIMLAB,LDS-10,0001,1.0") -> None:
        self.name = name
        self.source = source
        self.sigma = float(sigma)
        self.resolution = float(resolution)
        self.rng = rng if rng is not None else np.random.default_rng(0)
        self.host, self.port = parse_socket_url(str(device_cfg.get("url", "socket://127.0.0.1:0")))
        self.ident = ident
        self.inject: str | None = None  # None or "garbage"
        self.n_errors = 0
        self._server: asyncio.Server | None = None
        self._sessions: dict[asyncio.Task, asyncio.StreamWriter] = {}

    def measure(self) -> float:
        """One noisy, quantised reading (m)."""
        return noisy(float(self.source()), self.sigma, self.resolution, self.rng)

    def _reply(self, line: bytes) -> str:
        if len(line) > MAX_LINE:
            self.n_errors += 1
            return "ERR 2 line too long"
        return self.answer(line)

    def answer(self, line: bytes) -> str:
        """Answer one command line (without its terminator)."""
        try:
            cmd = line.decode("ascii").strip()
        except UnicodeDecodeError:
            self.n_errors += 1
            return "ERR 3 bad characters"
        key = cmd.upper()
        if key == "MEAS?":
            if self.inject == "garbage":
                return "#?!~ 12..3 furlong"
            return f"{self.measure():+.9f} m"
        if key == "ID?":
            return f"ID {self.ident}"
        if key == "UNIT?":
            return "m"
        self.n_errors += 1
        return f"ERR 1 unknown command {cmd[:32]!r}"

    async def _session(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._sessions[task] = writer
        buf = b""
        skipping = False  # inside an over-long line: drop bytes up to its newline
        try:
            while True:
                chunk = await reader.read(512)
                if not chunk:
                    break
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if skipping:
                        skipping = False
                        continue
                    writer.write((self._reply(line) + "\r\n").encode("ascii"))
                if len(buf) > MAX_LINE and not skipping:
                    skipping = True
                    self.n_errors += 1
                    writer.write(b"ERR 2 line too long\r\n")
                if skipping:
                    buf = b""
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        except Exception:  # one bad session must not take the device down
            log.exception("%s: session error", self.name)
        finally:
            self._sessions.pop(task, None)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    @property
    def url(self) -> str:
        return f"socket://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._server is not None

    async def start(self) -> None:
        if self._server is not None:
            return
        self._server = await asyncio.start_server(self._session, self.host, self.port, reuse_address=True)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self._server is None:
            return
        server, self._server = self._server, None
        server.close()
        sessions = list(self._sessions)
        for writer in self._sessions.values():
            writer.transport.abort()  # the session sees EOF and ends (cancelling would log errors)
        if sessions:
            await asyncio.wait(sessions, timeout=1.0)
        with contextlib.suppress(Exception):
            async with asyncio.timeout(1.0):
                await server.wait_closed()
