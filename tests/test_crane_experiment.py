"""Crane experiment end to end: simulated drive on loopback, bus, recorder, session store."""

from __future__ import annotations

import asyncio
import copy

import numpy as np
import pytest
import pytest_asyncio

from daq.rigs.config import load_config
from daq.rigs.crane.rig import crane_arrays
from daq.run.lifecycle import run
from daq.store.read_write import SessionStore
from simulators.crane_rig import CraneRig
from simulators.in_process import in_process
from tests.polling import wait_until

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def run_crane(config, store_path, *, rig=None, on_session=None) -> str:
    """One recorded crane run through the rig lifecycle; returns the session id. On the module's ``rig`` the
    drive is reached in-process (plan and lifecycle tests); without one the run starts its own simulator and
    talks OPC UA to it (the end-to-end run over the protocol)."""
    backends = {"backends": in_process(rig)} if rig is not None else {}
    result = await run(config, store_path, simulated_rig=rig, show_progress=False, handle_sigint=False,
                       on_session=on_session, **backends)
    return result.session_id


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    cfg = load_config("configs/crane-sim.toml")
    cfg["simulator"]["speed"] = 20.0
    cfg["simulator"]["drive"].update(watchdog_timeout=1.0)
    cfg["excitation"]["max_iter"] = 10
    cfg["excitation"]["export_dir"] = str(tmp_path_factory.mktemp("excitation"))
    cfg["distortion"]["enabled"] = False  # its runs: tests/test_distortion_crane.py
    return cfg


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def rig(config):
    r = CraneRig(config)
    await r.start()
    yield r
    await r.stop()


async def test_complete_run_records_training_and_validation(config, rig, tmp_path):
    store_path = tmp_path / "s.sqlite"
    sid = await run_crane(config, store_path, rig=rig)
    assert not rig.drive.enabled
    with SessionStore(store_path) as store:
        info = store.get_session(sid)
        assert info.kind == "crane" and info.status == "complete", info.reason
        assert info.devices["drive"]["model"]
        trace = store.read_stream(sid, "crane.trace")
        assert trace.channels == ["torque_cmd", "torque", "speed"]
        assert trace.units == ["N*m", "N*m", "rad/s"]
        starts = store.events(sid, kind="trajectory_start")
        assert [e.body["role"] for e in starts] == ["training", "validation"]
        assert all(e.body["n"] == 20000 and e.body["dt"] == pytest.approx(1e-4) for e in starts)
        arrays = crane_arrays(store, sid)
    assert set(arrays) == {"training", "validation"}
    for t, torque, speed, dt in arrays.values():
        assert t.size == torque.size == speed.size == 20000 and dt == pytest.approx(1e-4)
        assert np.abs(torque).max() == pytest.approx(0.5 * 20.0, rel=1e-9)
        assert np.std(speed) > 50 * rig.truth.speed_noise
    assert not np.allclose(arrays["training"][1], arrays["validation"][1])
    # each multisine was also exported as a trajectory file and a plot, matching what was run
    for e in starts:
        csv, png = e.body["files"]
        assert csv.endswith(f"{e.body['role']}.csv") and png.endswith(f"{e.body['role']}.png")
        table = np.loadtxt(csv, delimiter=",", skiprows=1)
        assert table.shape == (20000, 2)
        np.testing.assert_allclose(table[:, 1], arrays[e.body["role"]][1], rtol=1e-8, atol=1e-7)
        peak = np.abs(table[:, 1]).max()
        assert e.body["crest_factor"] == pytest.approx(peak / np.sqrt(np.mean(table[:, 1] ** 2)), rel=1e-6)
        with open(png, "rb") as fh:
            assert fh.read(8) == b"\x89PNG\r\n\x1a\n"
    # the recorded applied torque is the command delayed by the plant's dead time
    lag = round(rig.truth.dead_time / 1e-4)
    n = 20000
    np.testing.assert_allclose(trace.column("torque")[lag:n], trace.column("torque_cmd")[:n - lag], atol=1e-9)


async def test_drive_fault_aborts_the_session_in_safe_state(config, rig, tmp_path):
    rig.drive.s.speed_limit = 0.5  # the multisine drives the axis faster than this
    try:
        sid = await run_crane(config, tmp_path / "s.sqlite", rig=rig)
    finally:
        rig.drive.s.speed_limit = 150.0
    assert not rig.drive.enabled
    with SessionStore(tmp_path / "s.sqlite") as store:
        info = store.get_session(sid)
        assert info.status == "aborted"
        assert "DriveFault" in info.reason and "speed" in info.reason
        assert crane_arrays(store, sid) == {}
    async_drive = rig.drive
    assert async_drive.state == "Fault"


async def test_cancel_mid_trajectory_disables_and_marks_aborted(config, rig, tmp_path):
    # clear the fault left by the previous test through a fresh run's driver: ClearFault via the rig
    await rig.drive._m_clear(None)
    sids: list[str] = []
    task = asyncio.create_task(run_crane(config, tmp_path / "s.sqlite", rig=rig, on_session=sids.append))
    # the run checks every device first (issue 39), then designs and uploads: a deadline with room for a
    # loaded machine, polled often enough to catch the trajectory while it runs
    await wait_until(lambda: rig.drive.state == "Running", timeout=120.0, period=0.005)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not rig.drive.enabled and rig.drive.state == "Stopped"
    with SessionStore(tmp_path / "s.sqlite") as store:
        info = store.get_session(sids[0])
        assert info.status == "aborted" and "cancel" in info.reason


async def test_simulated_config_starts_its_own_rig(config, tmp_path):
    cfg = copy.deepcopy(config)
    cfg["excitation"]["duration"] = 0.5
    cfg["excitation"]["f_min"] = 4.0
    cfg["excitation"]["validation"]["f_min"] = 4.0
    cfg["excitation"]["n_lines"] = 30
    cfg["excitation"]["validation"]["n_lines"] = 25
    sid = await run_crane(cfg, tmp_path / "own.sqlite")
    with SessionStore(tmp_path / "own.sqlite") as store:
        assert store.get_session(sid).status == "complete"
        assert {k: v[1].size for k, v in crane_arrays(store, sid).items()} == {"training": 5000,
                                                                            "validation": 5000}
