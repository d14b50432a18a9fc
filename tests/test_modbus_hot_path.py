"""The flat Modbus read path (issue 23) keeps every check the driver exists for.

The poll path calls the pymodbus client directly and bounds each request with a per-connection watchdog
instead of a timeout context per request. These tests hold it to what the old path did: a hung request
ends as a DeviceTimeout even when pymodbus' own timeout never fires, a cancellation from outside stays a
cancellation (and the watchdog never hits a task that is not in a request), the guard still works when
the transport is used from a second event loop, and a TCP reply that does not answer its request (wrong
function code, wrong register count), a Modbus exception and implausible values are refused with the
same typed errors as before.

Devices: the project's simulated sensor (``ModbusSensorSim``) and, for replies no correct server sends, the
project's scripted faulty device (``simulators.scripted_modbus``) on 127.0.0.1, port 0.
"""

from __future__ import annotations

import asyncio
import math
import socket

import pytest

from drivers.displacement import ModbusDisplacementSensor
from drivers.errors import BadResponse, DeviceRefused, DeviceTimeout
from simulators.displacement_sim import ModbusSensorSim
from simulators.scripted_modbus import ScriptedModbusTcpDevice
from simulators.scripted_modbus import scripted_value as _value
from tests.polling import finished, wait_until

REGS = {"displacement": {"table": "input", "address": 0, "type": "float32", "unit": "m",
                         "range": [-0.01, 0.01]}}
FAST = {"timeout": 0.1, "retries": 1, "connect_timeout": 1.0, "backoff_initial": 0.02, "backoff_max": 0.1}
TRUE_DISPLACEMENT = 1.25e-3  # m, what the simulated sensor answers


def sensor_cfg(port: int, **kw) -> dict:
    return {"protocol": "modbus_tcp", "host": "127.0.0.1", "port": port, "device_id": 1,
            "range": [-0.005, 0.005], "registers": REGS, **FAST, **kw}


def disable_pymodbus_timeout(sensor: ModbusDisplacementSensor) -> None:
    """Make pymodbus wait an hour for a reply: only the driver's own guard can end a hung request now."""
    client = sensor.transport._client
    assert client is not None
    client.ctx.comm_params.timeout_connect = 3600.0


async def hung_read(sim, sensor: ModbusDisplacementSensor) -> asyncio.Task:
    """A read on the line that only the driver's guard (or a cancellation) can end: one good read first,
    then pymodbus' timeout off and the device holding every request; returns once it is in flight."""
    assert await sensor.read() == pytest.approx(TRUE_DISPLACEMENT)
    disable_pymodbus_timeout(sensor)
    sim.server.stall = math.inf
    task = asyncio.create_task(sensor.read())
    await wait_until(lambda: sensor.transport.request_in_flight, timeout=5.0, period=0.005)
    return task


@pytest.fixture
async def sim_sensor():
    sim = ModbusSensorSim("D1", {"protocol": "modbus_tcp", "host": "127.0.0.1", "port": 0, "device_id": 1,
                                 "registers": REGS}, lambda: TRUE_DISPLACEMENT)
    await sim.start()
    sensor = ModbusDisplacementSensor("D1", sensor_cfg(sim.port))
    await sensor.connect()
    yield sim, sensor
    await sensor.close()
    sim.server.stall = 0.0
    await sim.stop()


# -- the request guard ------------------------------------------------------------------------------------
async def test_a_hung_request_is_bounded_when_pymodbus_never_times_out(sim_sensor):
    sim, sensor = sim_sensor
    for _ in range(20):  # the watchdog is armed by earlier requests and must still catch a later one
        assert await sensor.read() == pytest.approx(TRUE_DISPLACEMENT)
    disable_pymodbus_timeout(sensor)
    sim.server.stall = math.inf  # the device holds the next request for ever

    async def poll() -> int:
        with pytest.raises(DeviceTimeout, match=r"no answer within 0\.1 s \(2 attempts\)"):
            await sensor.read()
        return asyncio.current_task().cancelling()  # the guard's own cancellation was taken back

    assert await finished(asyncio.create_task(poll()), timeout=10.0) == 0
    assert sensor.transport.n_guard_expired == 1
    served = sim.n_reads
    sim.server.stall = 0.0  # the held request is answered late, to a request nobody waits for any more
    await wait_until(lambda: sim.n_reads > served, timeout=5.0)
    assert await sensor.read() == pytest.approx(TRUE_DISPLACEMENT)


async def test_a_cancelled_read_stays_cancelled_and_the_watchdog_spares_idle_tasks(sim_sensor):
    sim, sensor = sim_sensor
    task = await hung_read(sim, sensor)
    task.cancel()  # e.g. the plan ends while a poll is on the line
    done, _ = await asyncio.wait({task}, timeout=5.0)
    assert task in done and task.cancelled()  # not turned into a DeviceTimeout
    assert sensor.transport.n_guard_expired == 0 and not sensor.transport.request_in_flight

    served = sim.n_reads
    sim.server.stall = 0.0
    await wait_until(lambda: sim.n_reads > served, timeout=5.0)

    async def read_then_idle() -> float:
        value = await sensor.read()
        # past the deadline of both requests: a watchdog that still took this task for a request in
        # flight would cancel it here
        await asyncio.sleep(sensor.transport.guard + 0.2)
        return value

    assert await finished(asyncio.create_task(read_then_idle()), timeout=10.0) == pytest.approx(
        TRUE_DISPLACEMENT)
    assert sensor.transport.n_guard_expired == 0


async def test_a_cancellation_at_the_moment_the_guard_expires_is_not_lost(sim_sensor):
    sim, sensor = sim_sensor
    task = await hung_read(sim, sensor)
    # due in the same loop iteration as the watchdog: the outside cancellation must win over the timeout
    asyncio.get_running_loop().call_at(sensor.transport._guard_deadline, task.cancel)
    done, _ = await asyncio.wait({task}, timeout=10.0)
    assert task in done and task.cancelled()
    assert sensor.transport.n_guard_expired == 1  # the guard did fire too


def test_the_guard_works_from_a_second_event_loop():
    """A transport first used in one loop (its watchdog still pending there) is bounded in the next."""
    silent = socket.socket()  # accepts connections in the kernel's backlog and never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    sensor = ModbusDisplacementSensor("D1", sensor_cfg(silent.getsockname()[1]))

    async def first_loop() -> None:
        await sensor.connect()
        with pytest.raises(DeviceTimeout):  # ended by pymodbus' own timeout; the watchdog stays pending
            await sensor.read()
        assert sensor.transport._watchdog is not None
        sensor.transport._client.close()  # the connection goes with its loop; the transport object stays

    async def second_loop() -> None:
        await sensor.connect()
        disable_pymodbus_timeout(sensor)
        try:
            with pytest.raises(DeviceTimeout, match="no answer within"):
                await sensor.read()
        finally:
            await sensor.close()

    async def bounded(step) -> None:
        await finished(asyncio.create_task(step()), timeout=10.0)

    try:
        asyncio.run(bounded(first_loop))
        asyncio.run(bounded(second_loop))
        assert sensor.transport.n_guard_expired == 1
    finally:
        silent.close()


# -- replies that do not answer the request, over TCP -------------------------------------------------------
async def scripted(script: list, **kw):
    device = ScriptedModbusTcpDevice(script)
    await device.start()
    sensor = ModbusDisplacementSensor("D1", sensor_cfg(device.port, **kw))
    await sensor.connect()
    return device, sensor


@pytest.mark.parametrize(("mode", "error", "text"), [
    ("extra", BadResponse, r"read input\[0:2\]: reply does not match the request \(4 registers instead of 2"),
    ("fc", BadResponse, r"reply does not match the request \(function 3 instead of 4\)"),
    ("exception", DeviceRefused, r"read input\[0:2\]: Modbus exception 2 \(illegal data address\)"),
])
async def test_a_tcp_reply_that_does_not_answer_the_read_is_refused(mode, error, text):
    device, sensor = await scripted([mode])
    try:
        with pytest.raises(error, match=text):
            await sensor.read()
        assert sensor.transport.n_mismatched == (0 if mode == "exception" else 1)
        assert await sensor.read() == pytest.approx(_value(0))  # the line is in step again
        assert device.n_requests == 2
    finally:
        await sensor.close()
        await device.stop()


@pytest.mark.parametrize(("answer", "text"), [
    (math.nan, r"implausible displacement @ input\[0\] = nan"),  # finite: checked by the transport
    (math.inf, r"implausible displacement @ input\[0\] = inf"),
    (0.02, r"implausible displacement @ input\[0\] = 0\.02 m \(plausible -0\.01\.\.0\.01 m\)"),  # register
    (-0.007, r"implausible displacement -0\.007\d* m \(range -0\.005\.\.0\.005 m\)"),  # the sensor's range
])
async def test_implausible_values_are_refused_by_the_check_that_owns_them(answer, text):
    device, sensor = await scripted([answer])
    try:
        with pytest.raises(BadResponse, match=text):
            await sensor.read()
        assert await sensor.read() == pytest.approx(_value(0))
    finally:
        await sensor.close()
        await device.stop()


async def test_concurrent_reads_of_different_registers_each_get_their_own_value():
    regs = {"displacement": REGS["displacement"],
            "other": {"table": "holding", "address": 6, "type": "float32", "unit": "m"}}
    device, sensor = await scripted([], registers=regs)
    try:
        transport, specs = sensor.transport, [sensor.regs["displacement"], sensor.regs["other"]]
        values = await asyncio.gather(*(transport.read(specs[i % 2]) for i in range(40)))
        assert values == [pytest.approx(_value(specs[i % 2].address)) for i in range(40)]
        assert device.n_requests == 40 and transport.n_mismatched == 0
    finally:
        await sensor.close()
        await device.stop()
