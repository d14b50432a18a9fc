"""Modbus RTU has no transaction id: a late reply must never be taken as the answer to a later request.

The slave is the project's scripted RTU device behind a ``socket://`` gateway
(:class:`simulators.scripted_modbus.ScriptedModbusRtuDevice`): it answers every request, in the order
received, one after the other, and stalls one request longer than the driver's timeout. Every value it
answers encodes the number of the request it answers, so each reading can be traced to the request it
came from.
"""

from __future__ import annotations

import asyncio

import pytest

from drivers.displacement import open_sensor
from drivers.force_source import ForceSource
from simulators.scripted_modbus import ScriptedModbusRtuDevice
from tests.polling import wait_until

STALL = 0.45  # s, one request answered this late
DRIVER = {"timeout": 0.3, "retries": 1, "connect_timeout": 2.0, "backoff_initial": 0.02, "backoff_max": 0.1}


def _value(n: int, address: int) -> float:
    """What the slave answers for a float32 at ``address`` in its ``n``-th request (n from 0)."""
    return 10.0 * n + address // 2


async def _started(script: list, stall: float = STALL) -> ScriptedModbusRtuDevice:
    device = ScriptedModbusRtuDevice(script, stall=stall, value_of=_value)
    await device.start()
    return device


@pytest.fixture
async def slave():
    s = await _started(["ok", "ok", "stall"])  # the third request answered after the driver's timeout
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
            lo = slave.n_requests
            try:
                value = await drv.read()
            except Exception:  # noqa: BLE001 - a refused reading is allowed, a wrong one is not
                continue
            readings += 1
            n, slot = _request_of(value / 1e-6)
            if not (lo <= n < slave.n_requests and slot == 0):
                stale += 1
    finally:
        await drv.close()
    assert slave.n_requests > 8 and drv.transport.n_late >= 1  # a retry; the late reply was seen and dropped
    assert readings >= 7 and stale == 0


async def test_reply_with_the_wrong_register_count_is_discarded():
    slave = await _started(["ok", "extra"])  # the second request answered with two registers too many
    rmap = {"displacement": {"table": "input", "address": 0, "type": "float32", "scale": 1e-6}}
    drv = open_sensor("D_vertical", {"protocol": "modbus_rtu", "url": slave.url, "registers": rmap, **DRIVER})
    try:
        values = []
        for _ in range(3):
            lo = slave.n_requests
            value = await drv.read()  # the malformed reply is dropped and the request retried
            n, _ = _request_of(value / 1e-6)
            assert lo <= n < slave.n_requests
            values.append(n)
        assert 1 not in values and drv.transport.n_mismatched == 1
    finally:
        await drv.close()
        await slave.stop()


async def test_read_cancelled_in_flight_does_not_answer_the_next_one():
    slave = await _started(["stall"], stall=0.2)  # slow, but within the timeout
    rmap = {"displacement": {"table": "input", "address": 0, "type": "float32", "scale": 1e-6}}
    drv = open_sensor("D_vertical", {"protocol": "modbus_rtu", "url": slave.url, "registers": rmap, **DRIVER})
    try:
        await drv.connect()
        first = asyncio.create_task(drv.read())
        await wait_until(lambda: slave.n_requests > 0, timeout=5.0, period=0.005)
        first.cancel()  # e.g. the plan ends while a poll is on the line
        await asyncio.gather(first, return_exceptions=True)
        for _ in range(3):
            lo = slave.n_requests
            n, _ = _request_of(await drv.read() / 1e-6)
            assert lo <= n < slave.n_requests  # never the late answer to the cancelled request
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
                lo = slave.n_requests
                try:
                    value = await read()
                except Exception:  # noqa: BLE001
                    continue
                polls += 1
                n, got = _request_of(value)
                if not (lo <= n < slave.n_requests and got == slot):
                    wrong += 1
    finally:
        await drv.close()
    assert polls >= 7 and wrong == 0


@pytest.mark.parametrize("silence", [None, 0.05])
async def test_the_line_rests_its_inter_frame_silence_before_every_request(silence):
    """The Modbus RTU rule by default (3.5 characters at 19200 baud: 2.0 ms), or the link's ``silence``: no
    request reaches the slave sooner than that after its last answer went out."""
    slave = await _started(["ok"] * 12, stall=0.0)
    rmap = {"displacement": {"table": "input", "address": 0, "type": "float32", "scale": 1e-6}}
    link = {} if silence is None else {"silence": silence}
    drv = open_sensor("D_vertical", {"protocol": "modbus_rtu", "url": slave.url, "registers": rmap,
                                     "range": [-0.005, 0.005], **DRIVER, **link})
    try:
        await drv.read_many(12)
    finally:
        await drv.close()
        await slave.stop()
    expected = 0.05 if silence is not None else 3.5 * 11 / 19200
    assert len(slave.quiet) == 11 and min(slave.quiet) >= expected


def test_silence_is_a_serial_line_setting():
    """A TCP device has no line to rest: ``silence`` there is refused in one line, before anything opens."""
    from drivers.settings import InvalidSetting

    rmap = {"displacement": {"table": "input", "address": 0, "type": "float32"}}
    with pytest.raises(InvalidSetting, match="silence.*only for protocol .modbus_rtu."):
        open_sensor("D_vertical", {"protocol": "modbus_tcp", "port": 1502, "registers": rmap, "silence": 0.0})
