"""Driver faults: implausible values, the status fault bit, error texts, safe state that fails loudly.

Devices are the project's simulated Modbus devices and OPC UA drive on 127.0.0.1 with faults injected.
"""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest

from drivers.errors import (
    BadResponse,
    DeviceConnectionError,
    DeviceError,
    DeviceFault,
    DeviceTimeout,
    SafeStateError,
)
from drivers.force_source import STATUS_FAULT, ForceSource
from simulators.force_source_sim import ForceSourceSim
from tests.test_drivers import FS_SIM, fs_cfg


@pytest.fixture
async def rig_fs():
    sim = ForceSourceSim(fs_cfg(0), FS_SIM, np.random.default_rng(8))
    await sim.start()
    drv = ForceSource(fs_cfg(sim.port))
    await drv.connect()
    yield sim, drv
    sim.server.stall = 0.0
    await drv.close()
    await sim.stop()


@pytest.mark.parametrize(("register", "value"), [("force", 1e30), ("force", -1e9), ("pressure", -5.0),
                                                  ("force", math.nan), ("pressure", math.inf)])
async def test_implausible_values_are_refused(rig_fs, register, value):
    sim, drv = rig_fs
    read = drv.read_force if register == "force" else drv.read_pressure
    assert math.isfinite(await read())
    sim.inject[register] = value
    with pytest.raises(BadResponse) as info:
        await read()
    text = str(info.value)
    assert info.value.device == "force_source" and str(sim.port) in info.value.address
    assert register in text and f"input[{drv.regs[register].address}]" in text
    assert (f"{value:.6g}" if math.isfinite(value) else str(value)) in text
    del sim.inject[register]
    assert math.isfinite(await read())  # the next good value passes


async def test_range_from_the_register_map_wins_over_the_default():
    regs = {**fs_cfg(0)["registers"], "force": {"table": "input", "address": 0, "type": "float32",
                                                "range": [-10.0, 100.0]}}
    sim = ForceSourceSim(fs_cfg(0, registers=regs), FS_SIM, np.random.default_rng(9))
    await sim.start()
    drv = ForceSource(fs_cfg(sim.port, registers=regs))
    try:
        assert drv.regs["force"].range == (-10.0, 100.0)
        assert drv.regs["pressure"].range == (0.0, 1.0e7)  # default where the map gives none
        sim.inject["force"] = 150.0  # plausible for a 20 kN source, not for this map
        with pytest.raises(BadResponse, match=r"= 150 1 \(plausible -10\.\.100 1\)"):
            await drv.read_force()
    finally:
        await drv.close()
        await sim.stop()


async def test_fault_bit_counts_even_with_fault_code_zero(rig_fs):
    sim, drv = rig_fs
    assert not (await drv.check_fault()).faulted
    sim.inject.update(status=STATUS_FAULT, fault_code=0)
    status = await drv.read_status()
    assert status.fault and status.fault_code == 0 and status.faulted
    with pytest.raises(DeviceFault) as info:
        await drv.check_fault()
    assert "fault bit" in str(info.value) and info.value.device == "force_source"
    sim.inject.update(status=0, fault_code=2)  # a code without the bit is a fault too
    with pytest.raises(DeviceFault, match="supply pressure low"):
        await drv.check_fault()


async def test_safe_state_raises_naming_what_failed_on_a_frozen_device(rig_fs):
    sim, drv = rig_fs
    await drv.set_force(3000.0)
    await drv.enable()
    await drv.safe_state()  # raises unless every step succeeded
    assert not sim.enabled and sim.setpoint == 0.0
    await drv.enable()
    await drv.set_force(3000.0)
    sim.server.stall = math.inf  # the device stops answering
    with pytest.raises(SafeStateError) as info:
        await drv.safe_state()
    text = str(info.value)
    assert isinstance(info.value, DeviceError) and info.value.device == "force_source"
    assert "setpoint 0" in text and "no answer within" in text
    sim.server.stall = 0.0
    assert sim.enabled  # it really was not safe


async def test_safe_state_checks_the_read_back(rig_fs):
    sim, drv = rig_fs
    await drv.enable()
    sim.inject["status"] = 1  # the device claims its output is still on after the disable
    with pytest.raises(SafeStateError, match="still enabled"):
        await drv.safe_state()


async def test_never_answering_device_gives_a_timeout_with_text():
    done = asyncio.Event()

    async def silent(reader, writer):
        await done.wait()
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    drv = ForceSource(fs_cfg(port, timeout=0.1, connect_timeout=0.5))
    try:
        with pytest.raises(DeviceTimeout, match=r"no answer within 0\.1 s"):
            await drv.read_force()
        with pytest.raises(SafeStateError) as info:
            await drv.safe_state()
        assert "no answer within" in info.value.message
    finally:
        await drv.close()
        done.set()
        server.close()
        await server.wait_closed()


def test_device_error_text_is_never_empty():
    err = DeviceTimeout("dev", "addr", "")
    assert err.message and str(err) == f"dev (addr): {err.message}"
    assert issubclass(SafeStateError, DeviceError) and issubclass(DeviceFault, DeviceError)
    assert issubclass(DeviceConnectionError, DeviceError)


# -- servo drive (OPC UA): the same error family ---------------------------------------------------------
def test_servo_errors_are_device_errors():
    from drivers import errors
    from drivers import servo_drive as sd

    pairs = ((sd.DriveConnectionError, errors.DeviceConnectionError), (sd.LimitError, errors.LimitError),
             (sd.DriveRefused, errors.DeviceRefused), (sd.DriveFault, errors.DeviceFault),
             (sd.DriveTimeout, errors.DeviceTimeout), (sd.DriveSafeStateError, errors.SafeStateError))
    for cls, base in pairs:
        assert issubclass(cls, base) and issubclass(cls, errors.DeviceError)
    err = sd.DriveRefused("drive", "opc.tcp://x", "Start refused", 6)
    assert err.code == 6 and err.url == err.address == "opc.tcp://x"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("listener", ["none", "silent"])
async def test_unreachable_drive_is_a_connection_error_within_connect_timeout(listener):
    from drivers.servo_drive import ServoDrive

    done = asyncio.Event()
    server = None
    port = _free_port()
    if listener == "silent":  # accepts TCP but never speaks OPC UA

        async def silent(reader, writer):
            await done.wait()
            writer.close()

        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
    drive = ServoDrive({"url": f"opc.tcp://127.0.0.1:{port}/hil/crane", "name": "crane-drive",
                        "timeout": 0.2, "connect_timeout": 0.6, "heartbeat_interval": 0.05})
    try:
        with pytest.raises(DeviceConnectionError) as info:
            await drive.connect()
        assert info.value.device == "crane-drive" and str(port) in info.value.address
        assert "cannot connect within 0.6 s" in info.value.message
        with pytest.raises(SafeStateError) as info:  # and the safe state says so, naming the step
            await drive.safe_state()
        assert "stop" in info.value.message and info.value.device == "crane-drive"
    finally:
        await drive.close()
        done.set()
        if server is not None:
            server.close()
            await server.wait_closed()
