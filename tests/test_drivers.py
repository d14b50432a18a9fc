"""Drivers against the project's simulated devices on 127.0.0.1 (real Modbus / serial servers)."""

from __future__ import annotations

import asyncio
import socket

import numpy as np
import pytest

from drivers.displacement import ModbusDisplacementSensor, SerialDisplacementSensor, open_sensor
from drivers.errors import (
    BadResponse,
    DeviceConnectionError,
    DeviceError,
    DeviceRefused,
    DeviceTimeout,
    LimitError,
    RegisterMapError,
)
from drivers.force_source import ForceSource
from drivers.registers import RegisterMap, RegisterSpec
from simulators.displacement_sim import ModbusSensorSim
from simulators.force_source_sim import ForceSourceSim
from simulators.serial_sensor_sim import SerialSensorSim
from tests.polling import wait_until

FS_MAP = {
    "setpoint": {"table": "holding", "address": 0, "type": "float32", "unit": "N"},
    "enable": {"table": "holding", "address": 2, "type": "uint16"},
    "clear_fault": {"table": "holding", "address": 3, "type": "uint16"},
    "heartbeat": {"table": "holding", "address": 4, "type": "uint16"},
    "force": {"table": "input", "address": 0, "type": "float32", "unit": "N"},
    "pressure": {"table": "input", "address": 2, "type": "float32", "unit": "Pa"},
    "status": {"table": "input", "address": 4, "type": "uint16"},
    "fault_code": {"table": "input", "address": 5, "type": "uint16"},
}
FAST = {"timeout": 0.2, "retries": 0, "connect_timeout": 1.0, "backoff_initial": 0.02, "backoff_max": 0.1}
FS_SIM = {"tau": 0.01, "watchdog_timeout": 5.0, "tick": 0.002}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fs_cfg(port: int, **kw) -> dict:
    cfg = {"protocol": "modbus_tcp", "host": "127.0.0.1", "port": port, "device_id": 1, "f_min": 0.0,
           "f_max": 20000.0, "model": "sim", "registers": FS_MAP, **FAST}
    cfg.update(kw)
    return cfg


@pytest.fixture
async def rig_fs():
    sim = ForceSourceSim(fs_cfg(0), FS_SIM, np.random.default_rng(3))
    await sim.start()
    drv = ForceSource(fs_cfg(sim.port))
    await drv.connect()
    yield sim, drv
    await drv.close()
    await sim.stop()


# -- register codec ------------------------------------------------------------------------------------
def test_register_codec_word_order_and_scaling():
    big = RegisterSpec.from_config("x", {"address": 0, "type": "float32"})
    little = RegisterSpec.from_config("x", {"address": 0, "type": "float32", "word_order": "little"})
    assert big.encode(3.5) == [16480, 0] and little.encode(3.5) == [0, 16480]
    assert little.decode([0, 16480]) == 3.5
    scaled = RegisterSpec.from_config("d", {"address": 4, "type": "int32", "scale": 1e-7,
                                            "word_order": "little"})
    regs = scaled.encode(-1.2345e-4)
    assert regs == [0xFB2E, 0xFFFF]  # -1234.5 -> -1234 (banker's rounding) in 0.1 um, low word first
    assert scaled.decode(regs) == pytest.approx(-1.234e-4)
    u16 = RegisterSpec.from_config("p", {"address": 1, "type": "uint16", "scale": 100.0, "offset": 1e5})
    assert u16.encode(1.5e5) == [500] and u16.decode([500]) == 1.5e5
    with pytest.raises(ValueError):
        u16.encode(-1.0)  # below the representable range


@pytest.mark.parametrize("entry", [
    {"address": 0, "type": "float64"},
    {"address": 0, "word_order": "middle"},
    {"address": 0, "table": "coils"},
    {"type": "uint16"},
    {"address": 0, "scale": 0.0},
    {"address": 0, "adress": 1},
])
def test_bad_register_map_is_rejected(entry):
    with pytest.raises(RegisterMapError):
        RegisterSpec.from_config("bad", entry)


def test_missing_register_is_rejected():
    with pytest.raises(RegisterMapError, match="heartbeat"):
        RegisterMap.from_config({k: v for k, v in FS_MAP.items() if k != "heartbeat"},
                                ("setpoint", "heartbeat"))


# -- force source --------------------------------------------------------------------------------------
async def test_force_source_reads_and_writes(rig_fs):
    sim, drv = rig_fs
    await drv.set_force(12000.0)
    assert await drv.read_setpoint() == 12000.0 and sim.setpoint == 12000.0
    status = await drv.read_status()
    assert not status.enabled and not status.fault
    await drv.enable()
    await drv.heartbeat()
    await wait_until(lambda: sim.settled and sim.force > 11000)
    force = await drv.read_force()
    assert 11000 < force < 12000 and abs(force - 12000.0) > 100  # gain error: not the setpoint
    assert 5.5e5 < await drv.read_pressure() < 6.5e5
    assert (await drv.read_status()).enabled
    await drv.safe_state()  # raises unless every step succeeded
    assert sim.setpoint == 0.0 and not sim.enabled
    ident = drv.device_identity()
    assert ident["name"] == "force_source" and ident["protocol"] == "modbus_tcp"
    assert str(sim.port) in ident["address"]


async def test_limit_checked_before_anything_is_sent():
    # Nothing listens on this port: a limit violation must be reported without any I/O attempt.
    drv = ForceSource(fs_cfg(free_port()))
    for bad in (20000.5, -0.1, float("nan"), float("inf")):
        with pytest.raises(LimitError) as info:
            await drv.set_force(bad)
        assert info.value.device == "force_source" and "127.0.0.1" in info.value.address
    assert not drv.transport.connected


async def test_limit_error_leaves_device_untouched(rig_fs):
    sim, drv = rig_fs
    await drv.set_force(500.0)
    with pytest.raises(LimitError):
        await drv.set_force(25000.0)
    assert sim.setpoint == 500.0 and sim.n_refused == 0  # the device never saw the bad value


async def test_device_refuses_setpoint_when_driver_check_bypassed(rig_fs):
    sim, _ = rig_fs
    loose = ForceSource(fs_cfg(sim.port, f_max=1e6))  # driver limit wider than the device's rating
    try:
        await loose.set_force(1000.0)
        with pytest.raises(DeviceRefused) as info:
            await loose.set_force(30000.0)
        assert info.value.code == 3 and "illegal data value" in str(info.value)
        with pytest.raises(DeviceRefused):  # raw NaN straight through the transport
            await loose.transport.write(loose.regs["setpoint"], float("nan"))
        assert sim.setpoint == 1000.0 and sim.n_refused == 2
        assert await loose.read_setpoint() == 1000.0  # the connection is still usable
    finally:
        await loose.close()


async def test_watchdog_fault_seen_by_driver():
    sim = ForceSourceSim(fs_cfg(0), {**FS_SIM, "watchdog_timeout": 0.2}, np.random.default_rng(4))
    await sim.start()
    drv = ForceSource(fs_cfg(sim.port))
    try:
        await drv.set_force(5000.0)
        await drv.enable()
        await wait_until(lambda: sim.force > 4000)
        await wait_until(lambda: sim.fault_code != 0)
        status = await drv.read_status()
        assert status.fault and not status.enabled and status.fault_code == 1
        assert "watchdog" in status.fault_text
        await wait_until(lambda: sim.force < 1.0)
        assert abs(await drv.read_force()) < 20.0  # load-cell noise only
        with pytest.raises(DeviceRefused):
            await drv.enable()
        await drv.clear_fault()
        await drv.enable()
        assert (await drv.read_status()).enabled
    finally:
        await drv.close()
        await sim.stop()


async def test_reconnect_after_device_restart(rig_fs):
    sim, drv = rig_fs
    await drv.set_force(2000.0)
    await sim.stop()
    with pytest.raises((DeviceConnectionError, DeviceTimeout)) as info:
        await drv.read_force()
    assert info.value.device == "force_source"
    await sim.start()  # same port, fresh power-on state
    assert await drv.read_setpoint() == 0.0
    await drv.set_force(3000.0)
    assert sim.setpoint == 3000.0


async def test_first_connect_is_retried_until_the_device_appears():
    sim = ForceSourceSim(fs_cfg(free_port()), FS_SIM, np.random.default_rng(5))
    drv = ForceSource(fs_cfg(sim.port, connect_timeout=3.0))
    attempts = 0  # the driver makes a new client for every connection attempt
    new_client = drv.transport._new_client

    def counting_new_client():
        nonlocal attempts
        attempts += 1
        return new_client()

    drv.transport._new_client = counting_new_client

    async def late_start():
        # the device appears only after the driver was refused twice (its first attempt and a retry)
        await wait_until(lambda: attempts >= 3, timeout=3.0)
        await sim.start()

    starter = asyncio.create_task(late_start())
    try:
        await drv.connect()  # first attempts are refused: the driver keeps trying
        await starter
        await drv.set_force(100.0)
        assert sim.setpoint == 100.0
    finally:
        await drv.close()
        await sim.stop()


async def test_connect_gives_up_with_typed_error():
    drv = ForceSource(fs_cfg(free_port(), connect_timeout=0.2))
    with pytest.raises(DeviceConnectionError) as info:
        await drv.read_force()
    assert isinstance(info.value, DeviceError) and info.value.device == "force_source"


# -- displacement sensors ------------------------------------------------------------------------------
SCALED_MAP = {"displacement": {"table": "input", "address": 10, "type": "int32", "word_order": "little",
                               "scale": 1e-7, "unit": "m"}}


async def test_modbus_sensor_with_scaled_little_endian_map():
    sim = ModbusSensorSim("F_horizontal", {"protocol": "modbus_rtu", "url": "socket://127.0.0.1:0",
                                           "device_id": 2, "registers": SCALED_MAP},
                          source=lambda: -1.99876e-4, sigma=0.0)
    await sim.start()
    drv = open_sensor("F_horizontal", {"protocol": "modbus_rtu", "url": sim.url, "device_id": 2,
                                       "registers": SCALED_MAP, **FAST})
    assert isinstance(drv, ModbusDisplacementSensor)
    try:
        # -1998.76 counts of 0.1 um on the wire, low word first
        assert await drv.read() == pytest.approx(-1.999e-4, abs=1e-12)
        sim.inject = "nan"
        with pytest.raises(DeviceRefused) as info:  # NaN does not fit an int32: the device reports a failure
            await drv.read()
        assert info.value.code == 4 and info.value.device == "F_horizontal"
        sim.inject = None
        assert await drv.read() == pytest.approx(-1.999e-4, abs=1e-12)  # and keeps serving
    finally:
        await drv.close()
        await sim.stop()


async def test_modbus_sensor_bad_value_and_reconnect():
    rmap = {"displacement": {"table": "input", "address": 0, "type": "float32"}}
    sim = ModbusSensorSim("D_vertical", {"protocol": "modbus_rtu", "url": "socket://127.0.0.1:0",
                                         "registers": rmap}, source=lambda: 2.0e-4, sigma=0.0)
    await sim.start()
    drv = open_sensor("D_vertical", {"protocol": "modbus_rtu", "url": sim.url, "registers": rmap,
                                     "range": [-0.01, 0.01], **FAST})
    try:
        assert await drv.read() == pytest.approx(2.0e-4)
        sim.inject = "nan"
        with pytest.raises(BadResponse) as info:
            await drv.read()
        assert info.value.device == "D_vertical" and sim.url in info.value.address
        sim.inject = None
        await sim.stop()
        with pytest.raises((DeviceConnectionError, DeviceTimeout)):
            await drv.read()
        await sim.start()
        values = await drv.read_many(5)
        assert values.shape == (5,) and np.allclose(values, 2.0e-4)
    finally:
        await drv.close()
        await sim.stop()


async def test_serial_sensor_driver():
    sigma = 3.904e-6
    sim = SerialSensorSim("B0_vertical", {"url": "socket://127.0.0.1:0"}, source=lambda: 4.5e-5,
                          sigma=sigma, resolution=0.0, rng=np.random.default_rng(11))
    await sim.start()
    drv = open_sensor("B0_vertical", {"protocol": "serial", "url": sim.url, "sigma": sigma, **FAST})
    assert isinstance(drv, SerialDisplacementSensor)
    try:
        assert (await drv.identify()).startswith("ID ")
        values = await drv.read_many(400)
        assert abs(values.mean() - 4.5e-5) < 4 * sigma / np.sqrt(400)
        assert 0.85 * sigma < values.std(ddof=1) < 1.15 * sigma
        with pytest.raises(DeviceRefused) as info:
            await drv.command("BOGUS")
        assert info.value.code == 1
        sim.inject = "garbage"
        with pytest.raises(BadResponse) as info:
            await drv.read()
        assert info.value.device == "B0_vertical" and info.value.address == sim.url
        sim.inject = None
        await sim.stop()
        with pytest.raises(DeviceConnectionError):
            await drv.read()
        await sim.start()
        assert abs(await drv.read() - 4.5e-5) < 10 * sigma
        assert drv.device_identity()["protocol"] == "serial"
    finally:
        await drv.close()
        await sim.stop()


async def test_serial_sensor_timeout_is_typed():
    # A listener that accepts but never answers.
    done = asyncio.Event()
    handlers: set[asyncio.Task] = set()  # connection handlers still running

    async def silent(reader, writer):
        handlers.add(asyncio.current_task())
        try:
            await done.wait()
            writer.close()
            await writer.wait_closed()
        finally:
            handlers.discard(asyncio.current_task())

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    drv = open_sensor("B0_vertical", {"protocol": "serial", "url": f"socket://127.0.0.1:{port}", **FAST})
    try:
        with pytest.raises(DeviceTimeout) as info:
            await drv.read()
        assert info.value.device == "B0_vertical"
    finally:
        await drv.close()
        done.set()
        server.close()
        await server.wait_closed()
        await wait_until(lambda: not handlers)  # every connection handler has closed its end
