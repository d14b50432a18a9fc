"""A Modbus TCP device that answers by a script: replies no correct server sends, for fault injection.

The simulated devices (``simulators.press_devices``) are pymodbus servers and always answer correctly or
with an exception; a field device behind a faulty gateway can also answer with the wrong register count or
the wrong function code. This device frames Modbus TCP by hand and answers each read (unit 1, input and
holding registers alike, float32 values) per its ``script``, so the drivers' reply checks are tested against
such replies over a real socket. Loopback only (port 0 by default).
"""

from __future__ import annotations

import asyncio
import struct


def scripted_value(address: int) -> float:
    """What the scripted device answers for the float32 at ``address``."""
    return 1e-4 * (address // 2 + 1)


class ScriptedModbusTcpDevice:
    """A Modbus TCP device (unit 1, input and holding registers alike) that answers each read per
    ``script``: "ok", "extra" (two registers too many), "fc" (the other read function), "exception"
    (Modbus exception 2), or a float to answer for the first value instead of the usual one."""

    def __init__(self, script: list) -> None:
        self.script = list(script)
        self.n_requests = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.port = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Stop listening and close every open connection (before the event loop ends)."""
        if self._server is not None:
            self._server.close()
            for writer in list(self._writers):
                writer.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                head = await reader.readexactly(7)
                tid, _, length, unit = struct.unpack(">HHHB", head)
                pdu = await reader.readexactly(length - 1)
                writer.write(self._answer(tid, unit, pdu))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()

    def _answer(self, tid: int, unit: int, pdu: bytes) -> bytes:
        self.n_requests += 1
        mode = self.script.pop(0) if self.script else "ok"
        fc, address, count = pdu[0], *struct.unpack(">HH", pdu[1:5])
        if mode == "exception":
            body = bytes([fc | 0x80, 2])
        else:
            values = [scripted_value(a) for a in range(address, address + count, 2)]
            if isinstance(mode, float):
                values[0] = mode
            regs = [w for v in values for w in struct.unpack(">HH", struct.pack(">f", v))][:count]
            if mode == "extra":
                regs += [0, 0]
            answer_fc = (3 if fc == 4 else 4) if mode == "fc" else fc
            body = bytes([answer_fc, 2 * len(regs)]) + struct.pack(f">{len(regs)}H", *regs)
        return struct.pack(">HHHB", tid, 0, len(body) + 1, unit) + body
