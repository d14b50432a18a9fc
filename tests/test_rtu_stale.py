"""Modbus RTU has no transaction id: a late reply must never be taken as the answer to a later request.

The slave here is a FIFO RTU device behind a ``socket://`` gateway, framed by hand (CRC from pymodbus'
RTU framer): it answers every request, in the order received, one after the other, and stalls one
request longer than the driver's timeout. Every value it answers encodes the number of the request it
answers, so each reading can be traced to the request it came from.
"""

from __future__ import annotations

import asyncio
import struct

import pytest
from pymodbus.framer import FramerRTU

from drivers.displacement import open_sensor
from drivers.force_source import ForceSource
from tests.polling import wait_until

SERVICE = 0.01  # s a (half-duplex) slave needs per answer
STALL = 0.45  # s, one request answered this late
DRIVER = {"timeout": 0.3, "retries": 1, "connect_timeout": 2.0, "backoff_initial": 0.02, "backoff_max": 0.1}


def _crc(frame: bytes) -> bytes:
    return FramerRTU.compute_CRC(frame).to_bytes(2, "big")


def _value(n: int, address: int) -> float:
    """What the slave answers for a float32 at ``address`` in its ``n``-th request (n from 0)."""
    return 10.0 * n + address // 2


class FifoRtuSlave:
    """A Modbus RTU slave (one device id) that queues requests and answers each of them in order."""

    def __init__(self, device_id: int = 1, stall_request: int = 2, wrong_count_request: int = -1,
                 stall: float = STALL) -> None:
        self.device_id = device_id
        self.stall_request = stall_request
        self.stall = stall
        self.wrong_count_request = wrong_count_request  # this request is answered with two extra registers
        self.n_received = 0  # requests received so far (the next one gets this number)
        self.n_answered = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task] = set()
        self.port = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    @property
    def url(self) -> str:
        return f"socket://127.0.0.1:{self.port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        queue: asyncio.Queue[tuple[int, bytes]] = asyncio.Queue()
        worker = asyncio.create_task(self._answer(queue, writer))
        self._tasks.add(asyncio.current_task())
        self._tasks.add(worker)
        buf = b""
        try:
            while data := await reader.read(256):
                buf += data
                while (frame := self._cut(buf)) is not None:
                    buf = buf[len(frame):]
                    if frame and _crc(frame[:-2]) == frame[-2:]:
                        await queue.put((self.n_received, frame))
                        self.n_received += 1
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            worker.cancel()
            writer.close()

    @staticmethod
    def _cut(buf: bytes) -> bytes | None:
        """One complete request frame from the front of ``buf`` (b"" for an unknown function), or None."""
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

    async def _answer(self, queue: asyncio.Queue, writer: asyncio.StreamWriter) -> None:
        while True:
            n, req = await queue.get()
            await asyncio.sleep(SERVICE + (self.stall if n == self.stall_request else 0.0))
            dev, fc = req[0], req[1]
            if dev != self.device_id:
                continue  # another slave's request: stay silent
            address, count = struct.unpack(">HH", req[2:6])
            if n == self.wrong_count_request:
                count += 2
            if fc in (3, 4):
                regs: list[int] = []
                for a in range(address, address + count, 2):
                    regs += struct.unpack(">HH", struct.pack(">f", _value(n, a)))
                body = bytes([dev, fc, 2 * count]) + struct.pack(f">{count}H", *regs[:count])
            elif fc == 6:
                body = req[:6]
            else:
                body = req[:6]  # fc 16: address and count echoed
            writer.write(body + _crc(body))
            await writer.drain()
            self.n_answered += 1


@pytest.fixture
async def slave():
    s = FifoRtuSlave()
    await s.start()
    yield s
    await s.stop()


def _request_of(value: float) -> tuple[int, int]:
    """(request number, address // 2) encoded in a value the slave answered."""
    raw = round(value)
    return raw // 10, raw % 10


async def test_sensor_reads_are_never_answered_by_an_earlier_request(slave):
    rmap = {"displacement": {"table": "input", "address": 0, "type": "float32", "scale": 1e-6}}
    drv = open_sensor("D_vertical", {"protocol": "modbus_rtu", "url": slave.url, "device_id": 1,
                                     "registers": rmap, "range": [-0.005, 0.005], **DRIVER})
    stale = readings = 0
    try:
        for _ in range(8):
            lo = slave.n_received
            try:
                value = await drv.read()
            except Exception:  # noqa: BLE001 - a refused reading is allowed, a wrong one is not
                continue
            readings += 1
            n, slot = _request_of(value / 1e-6)
            if not (lo <= n < slave.n_received and slot == 0):
                stale += 1
    finally:
        await drv.close()
    assert slave.n_received > 8 and drv.transport.n_late >= 1  # a retry; the late reply was seen and dropped
    assert readings >= 7 and stale == 0


async def test_reply_with_the_wrong_register_count_is_discarded():
    slave = FifoRtuSlave(stall_request=-1, wrong_count_request=1)
    await slave.start()
    rmap = {"displacement": {"table": "input", "address": 0, "type": "float32", "scale": 1e-6}}
    drv = open_sensor("D_vertical", {"protocol": "modbus_rtu", "url": slave.url, "registers": rmap, **DRIVER})
    try:
        values = []
        for _ in range(3):
            lo = slave.n_received
            value = await drv.read()  # the malformed reply is dropped and the request retried
            n, _ = _request_of(value / 1e-6)
            assert lo <= n < slave.n_received
            values.append(n)
        assert 1 not in values and drv.transport.n_mismatched == 1
    finally:
        await drv.close()
        await slave.stop()


async def test_read_cancelled_in_flight_does_not_answer_the_next_one():
    slave = FifoRtuSlave(stall_request=0, stall=0.2)  # slow, but within the timeout
    await slave.start()
    rmap = {"displacement": {"table": "input", "address": 0, "type": "float32", "scale": 1e-6}}
    drv = open_sensor("D_vertical", {"protocol": "modbus_rtu", "url": slave.url, "registers": rmap, **DRIVER})
    try:
        await drv.connect()
        first = asyncio.create_task(drv.read())
        await wait_until(lambda: slave.n_received > 0, timeout=5.0, period=0.005)
        first.cancel()  # e.g. the plan ends while a poll is on the line
        await asyncio.gather(first, return_exceptions=True)
        for _ in range(3):
            lo = slave.n_received
            n, _ = _request_of(await drv.read() / 1e-6)
            assert lo <= n < slave.n_received  # never the late answer to the cancelled request
    finally:
        await drv.close()
        await slave.stop()


async def test_force_and_pressure_are_never_swapped_on_rtu(slave):
    regs = {
        "setpoint": {"table": "holding", "address": 0, "type": "float32"},
        "enable": {"table": "holding", "address": 2, "type": "uint16"},
        "clear_fault": {"table": "holding", "address": 3, "type": "uint16"},
        "heartbeat": {"table": "holding", "address": 4, "type": "uint16"},
        "force": {"table": "input", "address": 0, "type": "float32", "range": [-1000.0, 30000.0]},
        "pressure": {"table": "input", "address": 2, "type": "float32", "range": [0.0, 1.0e6]},
        "status": {"table": "input", "address": 4, "type": "uint16"},
        "fault_code": {"table": "input", "address": 5, "type": "uint16"},
    }
    drv = ForceSource({"protocol": "modbus_rtu", "url": slave.url, "device_id": 1, "f_max": 20000.0,
                       "registers": regs, **DRIVER})
    wrong = polls = 0
    try:
        for _ in range(4):
            for read, slot in ((drv.read_force, 0), (drv.read_pressure, 1)):
                lo = slave.n_received
                try:
                    value = await read()
                except Exception:  # noqa: BLE001
                    continue
                polls += 1
                n, got = _request_of(value)
                if not (lo <= n < slave.n_received and got == slot):
                    wrong += 1
    finally:
        await drv.close()
    assert polls >= 7 and wrong == 0
