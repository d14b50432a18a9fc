"""Simulated OPC UA crane drive + servo-drive driver, over real loopback servers (security: see
tests/test_opcua_security.py)."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import numpy as np
import pytest
import pytest_asyncio
from asyncua import Client, ua

from drivers.servo_drive import (
    DriveFault,
    DriveRefused,
    LimitError,
    ServoDrive,
)
from simulators.crane_rig import CraneRig
from simulators.physics.crane import CraneTruth, simulate_axis

pytestmark = pytest.mark.asyncio(loop_scope="module")

# linear truth keeps the long watchdog trajectory cheap to simulate
TRUTH = replace(CraneTruth(), coulomb=0.0, stribeck_torque=0.0).to_dict()
DRIVE = {"watchdog_timeout": 0.4, "security": "none", "torque_limit": 20.0,
         "speed_limit": 150.0, "max_samples": 20_000, "live_rate": 40.0}
NS = "urn:hil-lab:crane-drive"


def _dev(url: str, **kw) -> dict:
    return {"url": url, "name": "crane-drive", "heartbeat_interval": 0.1, "connect_timeout": 3.0,
            "max_samples": 20_000, **kw}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def rig(tmp_path_factory):
    pki = tmp_path_factory.mktemp("pki")
    r = CraneRig({"simulator": {"speed": 10.0, "truth": TRUTH, "drive": DRIVE}}, pki_dir=pki)
    await r.start()
    yield r
    await r.stop()


@pytest_asyncio.fixture(loop_scope="module")
async def drive(rig):
    d = ServoDrive(_dev(rig.endpoints["plain"]))
    await d.connect()
    await d.clear_fault()
    await d.disable()
    yield d
    await d.safe_state()
    await d.close()


def _excitation(n: int, seed: int, amp: float = 8.0) -> np.ndarray:
    t = np.arange(n) * 1e-4
    rng = np.random.default_rng(seed)
    freqs = np.linspace(2.0, 120.0, 40)
    u = sum(np.sin(2 * np.pi * f * t + p) for f, p in zip(freqs, rng.uniform(0, 2 * np.pi, freqs.size),
                                                          strict=True))
    return amp * u / np.abs(u).max()


async def test_upload_start_trace(drive, rig):
    u = _excitation(5000, seed=1)
    msg = await drive.load_trajectory(1e-4, u)
    assert "5000 samples" in msg
    await drive.enable()
    await drive.start()
    st = await drive.wait_done(timeout=10)
    assert st["state"] == "Done" and st["enabled"]
    tr = await drive.read_trace()
    assert tr["dt"] == pytest.approx(1e-4)
    assert tr["speed"].shape == tr["torque"].shape == tr["torque_cmd"].shape == (5000,)
    np.testing.assert_allclose(tr["t"][-1], 4999e-4)
    np.testing.assert_allclose(tr["torque_cmd"], u)
    lag = round(rig.truth.dead_time / 1e-4)
    np.testing.assert_allclose(tr["torque"][lag:], u[:-lag], atol=1e-9)
    # the speed is the plant's answer to this torque: close to the noise-free truth, far above noise
    truth = simulate_axis(rig.truth, u, 1e-4, 0)["speed_true"]
    assert np.std(tr["speed"]) > 20 * rig.truth.speed_noise
    assert np.sqrt(np.mean((tr["speed"][1:] - truth[1:]) ** 2)) < 0.2 * np.std(truth)
    ident = await drive.device_identity()
    assert ident["model"] and ident["torque_limit"] == 20.0


async def test_live_values_by_throttled_subscription(drive):
    seen: dict[str, list] = {}
    loop = asyncio.get_running_loop()
    t_sub = loop.time()
    sub = await drive.subscribe_live(lambda key, value: seen.setdefault(key, []).append(value), interval=0.05)
    try:
        # 3 s of drive time = 30000 cycles, played out in 0.3 s (speed 10) with live values at 40 Hz
        await drive.load_trajectory(1e-2, 2.0 * np.sin(2 * np.pi * np.arange(300) * 1e-2))
        await drive.enable()
        await drive.start()
        await drive.wait_done(timeout=10)
        for _ in range(250):
            if seen.get("state", [None])[-1] == "Done":
                break
            await asyncio.sleep(0.02)
        tr = await drive.read_trace()
    finally:
        await sub.close()
        subscribed = loop.time() - t_sub
    assert seen["state"][-1] == "Done" and "Running" in seen["state"]
    assert tr["speed"].size == 30000
    speeds = seen["actual_speed"]
    # throttled: at most one notification per 50 ms publishing interval (plus the initial value), a handful
    # for 30000 drive cycles; the bound follows the time actually subscribed, so a slow machine is no failure
    assert 2 <= len(speeds) <= subscribed / 0.05 + 2
    # each live value after the initial one is a sample of the recorded trace
    assert all(np.any(tr["speed"] == v) for v in speeds[1:])
    assert np.max(np.abs(speeds[1:])) > 0.5


async def test_coarse_sample_time_is_held_at_the_drive_cycle(drive):
    u = np.repeat([0.0, 2.0, -2.0, 0.0], 50)  # 200 samples at 1 ms
    await drive.load_trajectory(1e-3, u)
    await drive.enable()
    await drive.start()
    await drive.wait_done(timeout=10)
    tr = await drive.read_trace()
    assert tr["dt"] == pytest.approx(1e-4) and tr["speed"].size == 2000
    np.testing.assert_allclose(tr["torque_cmd"], np.repeat(u, 10))


async def test_driver_refuses_limit_violations_before_upload(drive):
    await drive.load_trajectory(1e-4, np.zeros(100))
    for bad in (np.full(10, 25.0), np.array([0.0, np.nan]), np.zeros(20_001)):
        with pytest.raises(LimitError) as err:
            await drive.load_trajectory(1e-4, bad)
        assert err.value.device == "crane-drive" and err.value.url == drive.url
    with pytest.raises(LimitError):
        await drive.load_trajectory(-1.0, np.zeros(10))
    # nothing reached the drive: the valid trajectory is still the loaded one
    st = await drive.status()
    assert st["state"] == "Loaded" and "100 samples" in st["status"]


async def test_drive_refuses_bad_trajectories_itself(rig):
    async with Client(rig.endpoints["plain"]) as c:
        idx = await c.get_namespace_index(NS)
        axis = c.get_node(ua.NodeId("Axis1", idx))
        load = ua.NodeId("Axis1.LoadTrajectory", idx)

        async def call(dt, u):
            return await axis.call_method(load, ua.Variant(dt, ua.VariantType.Double),
                                          ua.Variant(list(u), ua.VariantType.Double))

        code, msg = await call(1e-4, [0.0, 25.0])
        assert code == 4 and "exceeds the limit" in msg
        code, msg = await call(1.5e-4, [0.0, 1.0])
        assert code == 2 and "multiple of the cycle time" in msg
        code, msg = await call(1e-4, np.zeros(20_001))
        assert code == 3 and "maximum" in msg
        code, _ = await call(1e-4, [])
        assert code == 5
        code, msg = await axis.call_method(ua.NodeId("Axis1.Start", idx))
        assert code in (6, 7)


async def test_start_requires_enable(drive):
    await drive.load_trajectory(1e-4, np.zeros(100))
    with pytest.raises(DriveRefused) as err:
        await drive.start()
    assert err.value.code == 6


async def test_speed_limit_faults_and_disables(drive):
    await drive.load_trajectory(1e-3, np.full(1500, 20.0))  # accelerates past 150 rad/s
    await drive.enable()
    await drive.start()
    with pytest.raises(DriveFault) as err:
        await drive.wait_done(timeout=10)
    assert err.value.fault_code == 1
    st = await drive.status()
    assert not st["enabled"] and st["state"] == "Fault"
    tr = await drive.read_trace()
    assert 5000 < tr["speed"].size < 15000
    assert np.abs(tr["speed"][-1]) > 140
    with pytest.raises(DriveRefused):
        await drive.enable()
    await drive.clear_fault()
    await drive.enable()


async def test_drive_disables_itself_when_the_client_is_lost(rig, drive):
    # a 10 s trajectory (1 s at speed 10) that is cut short by the lost client
    await drive.load_trajectory(1e-2, np.full(1000, 1.0))
    await drive.enable()
    await drive.start()
    # wait until the drive plays the trajectory out (the simulation before it can take a while on
    # a loaded machine; a client lost then leaves no trace at all)
    for _ in range(200):
        if rig.drive._values["Progress"] > 0:
            break
        await asyncio.sleep(0.02)
    assert (await drive.status())["state"] == "Running" and rig.drive._values["Progress"] > 0
    # the client dies: heartbeat stops and the socket goes away without closing the session
    drive._hb_task.cancel()
    drive._client.disconnect_socket()
    async with Client(rig.endpoints["plain"]) as c:
        idx = await c.get_namespace_index(NS)
        state = c.get_node(ua.NodeId("Axis1.State", idx))
        for _ in range(40):
            if await state.read_value() == "Fault":
                break
            await asyncio.sleep(0.05)
        assert await state.read_value() == "Fault"
        assert await c.get_node(ua.NodeId("Axis1.FaultCode", idx)).read_value() == 2
        assert await c.get_node(ua.NodeId("Axis1.Enabled", idx)).read_value() is False
    drive._connected = False  # the driver reconnects on the next request
    tr = await drive.read_trace()
    assert 0 < tr["speed"].size < 100_000


async def test_variables_carry_engineering_units(rig):
    # what any third-party OPC UA client sees: the standard EngineeringUnits / EURange properties
    async with Client(rig.endpoints["plain"]) as c:
        idx = await c.get_namespace_index(NS)
        speed = c.get_node(ua.NodeId("Axis1.ActualSpeed", idx))
        eu = await (await speed.get_child("0:EngineeringUnits")).read_value()
        assert isinstance(eu, ua.EUInformation) and eu.DisplayName.Text == "rad/s"
        assert eu.NamespaceUri == "http://www.opcfoundation.org/UA/units/un/cefact"
        assert eu.UnitId == (ord("2") << 8) + ord("A")  # UNECE "2A", radian per second
        rng = await (await speed.get_child("0:EURange")).read_value()
        assert (rng.Low, rng.High) == (-150.0, 150.0)
        torque = c.get_node(ua.NodeId("Axis1.ActualTorque", idx))
        eu = await (await torque.get_child("0:EngineeringUnits")).read_value()
        assert eu.DisplayName.Text == "N*m" and eu.UnitId == (ord("N") << 8) + ord("U")
        cycle = c.get_node(ua.NodeId("Axis1.CycleTime", idx))
        assert (await (await cycle.get_child("0:EngineeringUnits")).read_value()).DisplayName.Text == "s"


@pytest.mark.slow(reason="waits for the driver's reconnect back-off")
async def test_driver_reconnects_after_server_restart(tmp_path):
    cfg = {"simulator": {"speed": 10.0, "truth": TRUTH, "drive": {}}}
    first = CraneRig(cfg)
    await first.start()
    port = int(first.url.rsplit(":", 1)[1].split("/")[0])
    d = ServoDrive(_dev(first.url))
    await d.connect()
    await d.load_trajectory(1e-4, np.zeros(10))
    await first.stop()
    cfg["simulator"]["drive"]["port"] = port
    second = CraneRig(cfg)
    await second.start()
    try:
        st = await d.status()  # lost connection detected, reconnected, retried
        assert st["state"] == "Idle"  # a fresh drive: nothing loaded
        assert d.connected
    finally:
        await d.safe_state()
        await d.close()
        await second.stop()
