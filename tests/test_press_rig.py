"""The whole simulated press rig from configs/press-sim.toml, driven by the real drivers."""

from __future__ import annotations

import asyncio
import copy
import tomllib
from pathlib import Path

import numpy as np
import pytest

from drivers.displacement import open_sensor
from drivers.errors import DeviceConnectionError, DeviceTimeout
from drivers.force_source import ForceSource
from simulators.physics.press import SENSOR_NAMES
from simulators.press_rig import PressRig, serve_press

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "press-sim.toml"
FAST = {"timeout": 0.2, "retries": 0, "connect_timeout": 1.0, "backoff_initial": 0.02, "backoff_max": 0.1}


def load_config() -> dict:
    with open(CONFIG, "rb") as fh:
        cfg = tomllib.load(fh)
    cfg["simulator"]["force_source"].update(tau=0.01, watchdog_timeout=5.0)
    return cfg


def fast(dcfg: dict) -> dict:
    return {**dcfg, **FAST}


async def wait_until(cond, timeout: float = 3.0, period: float = 0.01) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        if loop.time() > end:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(period)


@pytest.fixture
async def rig():
    r = PressRig(load_config())
    await r.start()
    yield r
    await r.stop()


def test_config_has_the_tables_the_rig_and_drivers_need():
    cfg = load_config()
    assert cfg["rig"]["kind"] == "press" and cfg["rig"]["simulated"] is True
    assert set(cfg["devices"]["sensors"]) == set(SENSOR_NAMES)
    sigmas = [cfg["devices"]["sensors"][n]["sigma"] for n in SENSOR_NAMES]
    assert sigmas == [1.518e-5, 4.895e-6, 3.904e-6]
    assert cfg["plan"]["n_steps_up"] == 14 and cfg["plan"]["n_series"] == 10
    real = tomllib.loads((CONFIG.parent / "press.toml").read_text())
    assert real["rig"]["simulated"] is False
    fs_keys = cfg["devices"]["force_source"]["registers"].keys()
    assert real["devices"]["force_source"]["registers"].keys() == fs_keys


async def test_rig_endpoints_and_device_config(rig):
    endpoints = rig.endpoints()
    assert set(endpoints) == {"force_source", *SENSOR_NAMES}
    dc = rig.device_config()
    assert dc["force_source"]["port"] == rig.force_source.port != 0
    for name in SENSOR_NAMES:
        assert dc["sensors"][name]["url"] == endpoints[name] and not endpoints[name].endswith(":0")
    assert rig.config["devices"]["force_source"]["port"] == 0  # the input config is not modified
    # the simulated RTU sensors answer on a loopback socket, with no serial line to rest between frames; the
    # real template keeps the Modbus RTU rule (no silence key: 3.5 characters at its baudrate)
    rtu = [n for n in SENSOR_NAMES if dc["sensors"][n]["protocol"] == "modbus_rtu"]
    assert rtu and all(open_sensor(n, dc["sensors"][n]).transport.silence == 0.0 for n in rtu)
    real = tomllib.loads((CONFIG.parent / "press.toml").read_text())["devices"]["sensors"]
    assert all("silence" not in real[n] and real[n]["protocol"] == "modbus_rtu" for n in rtu)


async def test_force_drives_the_plant_seen_by_the_sensors(rig):
    dc = rig.device_config()
    fs = ForceSource(fast(dc["force_source"]))
    sensors = {n: open_sensor(n, fast(c)) for n, c in dc["sensors"].items()}
    try:
        means = []
        for q in (4000.0, 12000.0):
            await fs.set_force(q)
            await fs.enable()
            await wait_until(lambda q=q: rig.force_source.settled and rig.force_source.force > 0.9 * q)
            z_settled = rig.z  # each plant step makes a new array: wait for one step after the settling
            await wait_until(lambda z=z_settled: rig.z is not z, period=rig.plant_period / 2)
            force = await fs.read_force()
            assert abs(force - q) > 0.01 * q  # the source misses the setpoint (gain error)
            z_true = rig.z.copy()
            z = np.array([(await sensors[n].read_many(40)).mean() for n in SENSOR_NAMES])
            sig = np.array([sensors[n].sigma for n in SENSOR_NAMES])
            # The plant keeps moving slightly with the pressure wander; compare within noise + a margin.
            assert np.all(np.abs(z - z_true) < 5 * sig / np.sqrt(40) + 2e-6)
            means.append(z)
        d_lo, d_hi = means[0][0], means[1][0]
        assert 0 < d_lo < d_hi  # upward force lifts D
        assert means[1][2] == pytest.approx(0.2 * means[1][0], rel=0.1)  # feeler lever ratio
        await fs.safe_state()  # raises unless every step succeeded
        await wait_until(lambda: rig.force_source.force < 1.0)
    finally:
        await fs.close()
        for s in sensors.values():
            await s.close()


@pytest.mark.parametrize("name", ["F_horizontal", "B0_vertical"])
async def test_stop_and_restart_a_sensor(rig, name):
    drv = open_sensor(name, fast(rig.device_config()["sensors"][name]))
    try:
        await drv.read()
        url = rig.devices[name].url
        await rig.stop_device(name)
        with pytest.raises((DeviceConnectionError, DeviceTimeout)):
            await drv.read()
        await rig.start_device(name)
        assert rig.devices[name].url == url
        assert np.isfinite(await drv.read())
    finally:
        await drv.close()


def test_sensor_noise_is_reproducible_from_the_seed():
    a, b = PressRig(load_config()), PressRig(load_config())
    for name in SENSOR_NAMES:
        ra = [a.devices[name].measure() for _ in range(5)]
        rb = [b.devices[name].measure() for _ in range(5)]
        assert ra == rb
    other = copy.deepcopy(load_config())
    other["simulator"]["seed"] += 1
    c = PressRig(other)
    assert [c.devices["D_vertical"].measure() for _ in range(5)] != [
        PressRig(load_config()).devices["D_vertical"].measure() for _ in range(5)]


async def test_serve_press_prints_endpoints_until_cancelled(capsys):
    ready = asyncio.Event()
    task = asyncio.create_task(serve_press(load_config(), ready=ready))
    await asyncio.wait_for(ready.wait(), timeout=5)
    out = capsys.readouterr().out
    assert "force_source" in out and "tcp://127.0.0.1:" in out and "socket://127.0.0.1:" in out
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def _z_after_a_turn(plant_period: float) -> np.ndarray:
    """The true displacements after the force rose to ~15.5 kN, turned at once and fell to ~1.9 kN, on a
    rig whose linkage is re-solved every ``plant_period`` s (the supply pressure held still)."""
    cfg = load_config()
    cfg["simulator"]["plant_period"] = plant_period
    cfg["simulator"]["force_source"].update(tau=0.05, pressure_rel_sigma=0.0)
    async with PressRig(cfg) as rig:
        fs = ForceSource(fast(rig.device_config()["force_source"]))
        try:
            await fs.enable()
            await fs.set_force(16000.0)
            await asyncio.sleep(0.3)  # six time constants: the force stands within 0.3 % of its target
            peak = rig.force_source.force
            await fs.set_force(2000.0)  # the turn: well before a 1 s plant tick would come
            await asyncio.sleep(1.2)  # then at least one tick of either rig
            assert peak > 15000.0 and rig.force_source.force < 2000.0
            return rig.fresh_z().copy()
        finally:
            await fs.safe_state()
            await fs.close()


async def test_the_linkage_sees_every_turn_of_the_force_however_rarely_it_ticks():
    """The guide's friction remembers the force's turning points. A linkage re-solved only on its tick missed
    a turn that fell between two ticks - on a fast clock on a busy machine, the ticks are far apart in
    simulated time - and then answered with the friction of another load history (the same rig gave k7
    3 standard errors off its truth at speed 10 in a loaded CI). The force turns where the commands change,
    and the linkage is solved at every command: a rig that ticks once a second reads what a rig that ticks
    every 2 ms reads."""
    fine, coarse = await _z_after_a_turn(0.002), await _z_after_a_turn(1.0)
    # a missed turn (the linkage coming up from 0 N to 1.9 kN: the friction's other branch) put D 51 um
    # off; the two rigs' turns differ by a few newtons of timing (0.3 nm at D)
    assert np.all(np.abs(coarse - fine) < 2e-7), (coarse - fine)
