"""Modbus devices that answer by a script: replies no correct server sends, for fault injection.

The simulated devices (``simulators.press_devices``) are pymodbus servers and always answer correctly or
with an exception; a field device behind a faulty gateway can also answer with the wrong register count or
the wrong function code, and a half-duplex RTU slave answers late. These devices frame Modbus by hand and
answer each request (unit 1, input and holding registers alike, float32 values) per their ``script``, so
the drivers' reply checks are tested against such replies over a real socket: Modbus TCP
(:class:`ScriptedModbusTcpDevice`) and Modbus RTU behind a ``socket://`` gateway
(:class:`ScriptedModbusRtuDevice`). Loopback only (port 0 by default).

Script entries, one per request in order (then "ok"): "ok", "extra" (two registers too many), "fc" (the
other read function), "exception" (Modbus exception 2), "stall" (RTU: answered late), or a float to answer
for the first value instead of the usual one.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable

from pymodbus.framer import FramerRTU

#: the value a device answers for the float32 at ``address`` in its ``n``-th request (n from 0)
ValueOf = Callable[[int, int], float]


def scripted_value(address: int) -> float:
    """What the scripted device answers for the float32 at ``address``."""
    return 1e-4 * (address // 2 + 1)


def _by_address(n: int, address: int) -> float:
    return scripted_value(address)


def scripted_pdu(mode, pdu: bytes, n: int, value_of: ValueOf = _by_address) -> bytes:
    """The reply PDU to request ``pdu`` (the ``n``-th) in script ``mode``: reads answer float32 values
    ``value_of(n, address)``, writes (functions 6 and 16) are echoed as a correct device does."""
    fc, address, count = pdu[0], *struct.unpack(">HH", pdu[1:5])
    if mode == "exception":
        return bytes([fc | 0x80, 2])
    if fc in (6, 16):
        return pdu[:5]  # the register and value (6), or the address and count (16)
    values = [value_of(n, a) for a in range(address, address + count, 2)]
    if isinstance(mode, float):
        values[0] = mode
    regs = [w for v in values for w in struct.unpack(">HH", struct.pack(">f", v))][:count]
    if mode == "extra":
        regs += [0, 0]
    answer_fc = (3 if fc == 4 else 4) if mode == "fc" else fc
    return bytes([answer_fc, 2 * len(regs)]) + struct.pack(f">{len(regs)}H", *regs)


class _ScriptedDevice:
    """Listening, the script and closing, shared by the TCP and RTU devices."""

    def __init__(self, script: list) -> None:
        self.script = list(script)
        self.n_requests = 0  # requests received so far (the next one gets this number)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task] = set()
        self.port = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._connection, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Stop listening and close every open connection (before the event loop ends)."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            self._server.close()
            for writer in list(self._writers):
                writer.close()
            await self._server.wait_closed()

    def _next_mode(self):
        n = self.n_requests
        self.n_requests += 1
        return n, (self.script.pop(0) if self.script else "ok")

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await self._serve(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError


class ScriptedModbusTcpDevice(_ScriptedDevice):
    """A Modbus TCP device (unit 1) that answers each request at once, per ``script``."""

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = await reader.readexactly(7)
            tid, _, length, unit = struct.unpack(">HHHB", head)
            pdu = await reader.readexactly(length - 1)
            n, mode = self._next_mode()
            body = scripted_pdu(mode, pdu, n)
            writer.write(struct.pack(">HHHB", tid, 0, len(body) + 1, unit) + body)
            await writer.drain()


def _crc(frame: bytes) -> bytes:
    return FramerRTU.compute_CRC(frame).to_bytes(2, "big")


class ScriptedModbusRtuDevice(_ScriptedDevice):
    """A half-duplex Modbus RTU slave (one device id) behind a ``socket://`` gateway: it queues the requests
    and answers each of them in the order received, one after the other (``service`` s each; a "stall"
    request ``stall`` s later). RTU has no transaction id, so a late answer arrives when the master may
    already wait for the next one. Requests for another device id are counted and left unanswered; frames
    with a wrong CRC are dropped. ``value_of(n, address)`` lets the answers name the request they answer."""

    def __init__(self, script: list, *, device_id: int = 1, service: float = 0.01, stall: float = 0.45,
                 value_of: ValueOf = _by_address) -> None:
        super().__init__(script)
        self.device_id = device_id
        self.service = service
        self.stall = stall
        self.value_of = value_of
        self.n_answered = 0
        self.quiet: list[float] = []  # s from each answer sent to the next request received
        self._answered_at: float | None = None

    @property
    def url(self) -> str:
        return f"socket://127.0.0.1:{self.port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        queue: asyncio.Queue[tuple[int, object, bytes]] = asyncio.Queue()
        worker = asyncio.create_task(self._answer(queue, writer))
        self._tasks.add(worker)
        buf = b""
        try:
            while data := await reader.read(256):
                buf += data
                while (frame := _cut(buf)) is not None:
                    buf = buf[len(frame):]
                    if frame and _crc(frame[:-2]) == frame[-2:]:
                        if self._answered_at is not None:
                            self.quiet.append(asyncio.get_running_loop().time() - self._answered_at)
                        await queue.put((*self._next_mode(), frame))
        finally:
            worker.cancel()

    async def _answer(self, queue: asyncio.Queue, writer: asyncio.StreamWriter) -> None:
        while True:
            n, mode, req = await queue.get()
            await asyncio.sleep(self.service + (self.stall if mode == "stall" else 0.0))
            if req[0] != self.device_id:
                continue  # another slave's request: stay silent
            body = bytes([req[0]]) + scripted_pdu(mode, req[1:-2], n, self.value_of)
            self._answered_at = asyncio.get_running_loop().time()
            writer.write(body + _crc(body))
            await writer.drain()
            self.n_answered += 1


def _cut(buf: bytes) -> bytes | None:
    """One complete RTU request frame from the front of ``buf`` (b"" for an unknown function), or None."""
    if len(buf) < 2:
        return None
    fc = buf[1]
    if fc in (3, 4, 6):
        size = 8
    elif fc == 16:
        if len(buf) < 7:
            return None
        size = 9 + buf[6]
    else:
        return b""
    return buf[:size] if len(buf) >= size else None
