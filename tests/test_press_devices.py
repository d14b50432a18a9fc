"""Simulated press devices, exercised over the wire with plain pymodbus / pyserial clients."""

from __future__ import annotations

import asyncio
import logging
import math
import time

import numpy as np
import pytest
import serial
from pymodbus.client import AsyncModbusSerialClient, AsyncModbusTcpClient
from pymodbus.exceptions import ModbusIOException

from simulators.displacement_sim import ModbusSensorSim
from simulators.force_source_sim import FAULT_WATCHDOG, STATUS_ENABLED, STATUS_FAULT, ForceSourceSim
from simulators.serial_sensor_sim import SerialSensorSim
from tests.polling import wait_until

FS_MAP = {
    "setpoint": {"table": "holding", "address": 0, "type": "float32"},
    "enable": {"table": "holding", "address": 2, "type": "uint16"},
    "clear_fault": {"table": "holding", "address": 3, "type": "uint16"},
    "heartbeat": {"table": "holding", "address": 4, "type": "uint16"},
    "force": {"table": "input", "address": 0, "type": "float32"},
    "pressure": {"table": "input", "address": 2, "type": "float32"},
    "status": {"table": "input", "address": 4, "type": "uint16"},
    "fault_code": {"table": "input", "address": 5, "type": "uint16"},
}
FS_SIM = {"tau": 0.01, "watchdog_timeout": 0.3, "tick": 0.002, "gain": 0.97, "offset": -15.0}
F32 = AsyncModbusTcpClient.DATATYPE.FLOAT32


async def connected(client) -> None:
    """Connect the client to its simulator, asking again until a deadline: one attempt has the client's
    0.5 s, which a loaded machine can use up before this loop accepts (seen once in CI)."""
    await wait_until(client.connect, timeout=30.0, period=0.05)


@pytest.fixture
async def source():
    sim = ForceSourceSim({"protocol": "modbus_tcp", "host": "127.0.0.1", "port": 0, "registers": FS_MAP},
                         FS_SIM, np.random.default_rng(1))
    await sim.start()
    client = AsyncModbusTcpClient("127.0.0.1", port=sim.port, timeout=0.5, retries=0)
    await connected(client)
    yield sim, client
    client.close()
    await sim.stop()


async def write_f32(client, address: int, value: float):
    return await client.write_registers(address, client.convert_to_registers(value, F32), device_id=1)


async def read_f32(client, address: int) -> float:
    rr = await client.read_input_registers(address, count=2, device_id=1)
    assert not rr.isError()
    return client.convert_from_registers(rr.registers, F32)


async def test_force_follows_setpoint_with_gain_error(source):
    sim, client = source
    assert not (await write_f32(client, 0, 10000.0)).isError()
    assert not (await client.write_register(2, 1, device_id=1)).isError()
    await wait_until(lambda: sim.settled and sim.force > 9000)
    f = await read_f32(client, 0)
    expected = 0.97 * 10000.0 - 15.0
    assert abs(f - 10000.0) > 100.0          # never exactly on the setpoint
    assert abs(f - expected) < 0.02 * expected  # gain, offset, pressure wander and noise
    p = await read_f32(client, 2)
    assert 5.8e5 < p < 6.2e5
    rr = await client.read_input_registers(4, count=2, device_id=1)
    assert rr.registers[0] & STATUS_ENABLED and rr.registers[1] == 0


async def test_disable_drops_force_to_zero(source):
    sim, client = source
    await write_f32(client, 0, 5000.0)
    await client.write_register(2, 1, device_id=1)
    await wait_until(lambda: sim.force > 4000)
    await client.write_register(2, 0, device_id=1)
    await wait_until(lambda: sim.force < 1.0)
    assert sim.target == 0.0


@pytest.mark.parametrize("bad", [30000.0, -1.0, float("nan"), float("inf")])
async def test_out_of_range_setpoint_refused_by_device(source, bad):
    sim, client = source
    await write_f32(client, 0, 1000.0)
    rr = await write_f32(client, 0, bad)
    assert rr.isError() and rr.exception_code == 3  # ILLEGAL_DATA_VALUE
    assert sim.setpoint == 1000.0
    rr = await client.read_holding_registers(0, count=2, device_id=1)
    assert client.convert_from_registers(rr.registers, F32) == 1000.0  # not applied to the image either


async def test_watchdog_drops_force_and_latches_fault(source):
    sim, client = source
    await write_f32(client, 0, 8000.0)
    await client.write_register(2, 1, device_id=1)
    # Heartbeats keep it alive well past the watchdog time ...
    for i in range(8):
        await asyncio.sleep(0.1)
        await client.write_register(4, i, device_id=1)
    assert sim.enabled and sim.fault_code == 0 and sim.force > 7000
    # ... silence trips it.
    await wait_until(lambda: sim.fault_code == FAULT_WATCHDOG)
    await wait_until(lambda: sim.force < 1.0)
    rr = await client.read_input_registers(4, count=2, device_id=1)
    assert rr.registers[0] & STATUS_FAULT and not rr.registers[0] & STATUS_ENABLED
    assert rr.registers[1] == FAULT_WATCHDOG
    rr = await client.write_register(2, 1, device_id=1)  # enabling a faulted device is refused
    assert rr.isError()
    assert not (await client.write_register(3, 1, device_id=1)).isError()
    assert not (await client.write_register(2, 1, device_id=1)).isError()
    assert sim.enabled and sim.fault_code == 0


async def test_restart_keeps_port_and_resets_state(source):
    sim, client = source
    port = sim.port
    await write_f32(client, 0, 3000.0)
    await sim.stop()
    await sim.start()
    assert sim.port == port and sim.setpoint == 0.0 and not sim.enabled


async def test_rtu_sensor_noise_matches_sigma(caplog):
    sigma, true = 4.0e-6, 1.25e-4
    sim = ModbusSensorSim("S", {"protocol": "modbus_rtu", "url": "socket://127.0.0.1:0", "device_id": 3,
                                "registers": {"displacement": {"table": "input", "address": 0}}},
                          source=lambda: true, sigma=sigma, resolution=0.0, rng=np.random.default_rng(7))
    await sim.start()
    client = AsyncModbusSerialClient(sim.url, timeout=0.5, retries=0)
    try:
        await connected(client)
        vals = []
        for _ in range(300):
            rr = await client.read_input_registers(0, count=2, device_id=3)
            vals.append(client.convert_from_registers(rr.registers, F32))
        vals = np.array(vals)
        assert abs(vals.mean() - true) < 4 * sigma / math.sqrt(len(vals))
        assert 0.85 * sigma < vals.std(ddof=1) < 1.15 * sigma
        with pytest.raises(ModbusIOException):  # another unit id on a shared line: the slave stays silent
            await client.read_input_registers(0, count=2, device_id=9)
        assert sim.server.n_foreign == 1
        rr = await client.read_input_registers(0, count=2, device_id=3)  # and keeps serving its own id
        assert not rr.isError()
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR
                    and ("Traceback" in r.getMessage() or "Datastore" in r.getMessage())]
    finally:
        client.close()
        await sim.stop()


async def test_tcp_device_refuses_other_unit_ids_quietly(source, caplog):
    sim, client = source
    caplog.set_level(logging.WARNING)
    rr = await client.read_input_registers(0, count=2, device_id=7)
    assert rr.isError() and rr.exception_code == 11  # gateway target device failed to respond
    rr = await client.write_register(2, 1, device_id=7)
    assert rr.isError() and rr.exception_code == 11 and not sim.enabled  # nothing written
    assert sim.server.n_foreign == 2
    assert not (await client.read_input_registers(0, count=2, device_id=1)).isError()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]  # no traceback, no dump


async def test_stalled_device_answers_late_and_recovers(source):
    sim, client = source
    sim.server.stall = math.inf  # frozen
    with pytest.raises(ModbusIOException):
        await client.read_input_registers(0, count=2, device_id=1)
    sim.server.stall = 0.0  # thawed: held requests and new ones are answered
    rr = await client.read_input_registers(4, count=2, device_id=1)
    assert not rr.isError()


def test_quantisation_rounds_to_resolution():
    sim = ModbusSensorSim("S", {"registers": {"displacement": {"address": 0, "table": "input"}}},
                          source=lambda: 3.3333e-5, sigma=0.0, resolution=1e-6)
    assert sim.measure() == pytest.approx(33e-6, abs=1e-15)


def _query_lines(url: str, lines: list[bytes]) -> list[str]:
    with serial.serial_for_url(url, timeout=1.0) as port:
        out = []
        for line in lines:
            port.write(line)
            out.append(port.read_until(b"\n").decode("ascii"))
        return out


async def test_serial_sensor_protocol_and_bad_commands():
    sim = SerialSensorSim("B0", {"url": "socket://127.0.0.1:0"}, source=lambda: -2.5e-5, sigma=0.0)
    await sim.start()
    try:
        answers = await asyncio.to_thread(_query_lines, sim.url, [
            b"MEAS?\r\n", b"ID?\r\n", b"FOO?\r\n", b"\xff\xfe\r\n", b"X" * 300 + b"\n", b"Y" * 700 + b"\n",
            b"meas?\n"])
        assert answers[0] == "-0.000025000 m\r\n"
        assert answers[1].startswith("ID ")
        assert answers[2].startswith("ERR 1")
        assert answers[3].startswith("ERR 3")
        assert answers[4].startswith("ERR 2")
        assert answers[5].startswith("ERR 2")  # longer than one read chunk: one error, tail dropped
        assert answers[6] == "-0.000025000 m\r\n"  # the session survived all of it
        assert sim.n_errors == 4
        # a fresh client still gets served
        assert (await asyncio.to_thread(_query_lines, sim.url, [b"UNIT?\r\n"])) == ["m\r\n"]
    finally:
        await sim.stop()


async def test_a_simulator_held_up_longer_than_its_watchdog_does_not_trip_it():
    """The simulated source shares the process with its client: when that process gets no turn for longer
    than the watchdog (held here by a blocking call), the client's next heartbeat still finds the device
    enabled. The old wall-clock watchdog tripped on waking (a fault CI saw on a healthy simulated press);
    silence while the loop runs still trips it (test_watchdog_drops_force_and_latches_fault)."""
    sim = ForceSourceSim({"protocol": "modbus_tcp", "host": "127.0.0.1", "port": 0, "registers": FS_MAP},
                         {**FS_SIM, "watchdog_timeout": 1.0}, np.random.default_rng(2))
    await sim.start()
    client = AsyncModbusTcpClient("127.0.0.1", port=sim.port, timeout=5.0, retries=0)
    try:
        await connected(client)
        await write_f32(client, 0, 8000.0)
        await client.write_register(2, 1, device_id=1)
        await asyncio.sleep(0.05)
        time.sleep(2.5)  # noqa: ASYNC251 - the point: nobody in this process gets a turn
        await client.write_register(4, 7, device_id=1)  # the heartbeat, first thing after waking
        assert sim.enabled and sim.fault_code == 0
        await wait_until(lambda: sim.fault_code == FAULT_WATCHDOG, timeout=30.0)  # silence still trips it
    finally:
        client.close()
        await sim.stop()


def test_the_device_watchdog_counts_a_held_up_interval_as_held_up_seconds():
    from simulators.device_watchdog import DeviceWatchdog

    dog = DeviceWatchdog(1.0, held_up=0.25)
    dog.fed(100.0)
    assert not dog.expired(105.0) and dog.silent == 0.25  # five seconds without a turn
    assert not dog.expired(105.5) and dog.silent == 0.5
    assert not dog.expired(105.7) and not dog.expired(105.9)
    assert dog.expired(106.1)  # 0.25 + 0.25 + 0.2 + 0.2 + 0.2 s of looks
    dog.fed(106.2)
    assert not dog.expired(106.3) and dog.silent == pytest.approx(0.1)
