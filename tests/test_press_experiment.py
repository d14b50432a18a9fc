"""The press experiment end to end against the simulated rig's real Modbus/serial servers on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import copy

import numpy as np
import pytest

from daq.bus.pubsub import BusPublisher, BusSubscriber
from daq.rigs.config import load_config
from daq.rigs.press.acquisition import ForceAcquisition
from daq.rigs.press.session import press_arrays
from daq.rigs.press.setpoint_correction import CorrectionSettings, SetpointCorrector
from daq.run.lifecycle import run
from daq.store.read_write import SessionStore
from drivers.force_source import ForceSource
from simulators.press_rig import PressRig
from tests.in_process_runs import run_in_process
from tests.polling import finished, wait_until

BASE = load_config("configs/press-sim.toml")


def short_config(n_series: int = 2, n_steps_up: int = 3) -> dict:
    cfg = copy.deepcopy(BASE)
    cfg["plan"].update(n_series=n_series, n_steps_up=n_steps_up, n_samples=4, settle_time=0.02,
                       q_max=12000.0)
    cfg["correction"].update(tolerance=60.0, max_iterations=6)
    return cfg


async def test_correction_reaches_tolerance_on_a_source_with_gain_error():
    cfg = short_config()
    gain = cfg["simulator"]["force_source"]["gain"]
    assert gain != 1.0  # the simulated source has a static gain error
    async with PressRig(cfg) as rig:
        dev = rig.device_config()["force_source"]
        pub = BusPublisher("tcp://127.0.0.1:0")
        sub = BusSubscriber(pub.endpoint, topics=("data/press.force",))
        await pub.wait_for_subscribers(1)
        async with ForceSource(dev) as source:
            acq = ForceAcquisition(source, pub, "test", rate=200.0, block=5)
            task = asyncio.ensure_future(acq.run())

            async def command(f: float) -> None:
                await source.set_force(f)
                acq.command = f

            settings = CorrectionSettings(tolerance=40.0, max_iterations=8, settle_time=0.25, window=0.1,
                                          max_command=float(dev["f_max"]))
            corrector = SetpointCorrector(sub, command, settings)
            await source.enable()
            try:
                results = [await corrector.reach(q) for q in (5000.0, 10000.0, 7000.0)]
            finally:
                task.cancel()
                await source.safe_state()
        sub.close()
        pub.close()
    for r in results:
        assert r.reached, r
        assert r.reversals == 0, r  # monotone approach: up to 5 and 10 kN, down to 7 kN, never back
        assert abs(r.q_actual - r.q_desired) <= 40.0
        # the command had to differ from the desired force to compensate the source's gain error
        assert abs(r.command - r.q_desired) > 0.5 * abs(1 / gain - 1) * r.q_desired


@pytest.mark.slow(reason="a whole short simulated press run")
async def test_short_plan_records_a_complete_session(tmp_path):
    cfg = short_config(n_series=3, n_steps_up=2)  # 3 series: the fewest the press analysis accepts
    store_path = tmp_path / "s.sqlite"
    # speed 4: the session is what is tested here; speed 10 is tested (and may be too fast for a busy
    # worker of a slow machine, which stops the run) in tests/test_sim_clock.py
    result = await run_in_process(cfg, str(store_path), show_progress=False, handle_sigint=False,
                                  sim_speed=4.0)
    assert result.status == "complete", result.reason
    assert result.summary["setpoints"] == 3 * 5
    with SessionStore(store_path) as store:
        info = store.get_session(result.session_id)
        assert info.status == "complete" and info.kind == "press"
        arrays = press_arrays(store, result.session_id)
        assert arrays.z.shape == (3, 5, 3) and arrays.q.shape == (3, 5)
        np.testing.assert_allclose(arrays.q_desired, [0, 6000, 12000, 6000, 0])
        # actual forces near the desired ones (within the correction tolerance, plus the 0 N ends)
        assert np.all(np.abs(arrays.q[:, 1:-1] - arrays.q_desired[1:-1]) < 200.0)
        # the ram moves: D goes down under load, and loading/unloading differ (hysteresis)
        assert np.all(np.abs(arrays.z[:, 2, 0]) > 1e-4)
        force = store.read_stream(result.session_id, "press.force")
        assert force.units == ["N", "N", "Pa"]
        sensors = store.read_stream(result.session_id, "press.sensors")
        assert sensors.units == ["m", "m", "m"] and sensors.data.shape[1] == 3
        assert info.stats["gap_count"] == 0 and info.stats["malformed"] == {}
        kinds = [e.kind for e in store.events(result.session_id)]
        assert kinds[0] == "plan_start" and "plan_end" in kinds and kinds[-1] == "plan_outcome"


def _checking_source(rig: PressRig) -> ForceSource:
    """The test's own reader of the source's final state: the rig's address, a patient timeout. It measures,
    it is not under test; with the config's 0.3 s it timed out once on a loaded CI machine after the run
    had ended safely (the run's own timeouts are tested in tests/test_fault_injection.py)."""
    return ForceSource({**rig.device_config()["force_source"], "timeout": 2.0})


async def _wait_for_measurements(store_path, n: int, timeout: float = 120.0) -> None:
    """Poll the store as a second reader until ``n`` measurements of the running session are committed."""
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.2)
        if not store_path.exists():
            continue
        with SessionStore(store_path, recover=False) as reader:
            sessions = reader.list_sessions()
            if sessions and len(reader.events(sessions[0].id, kind="measurement")) >= n:
                return
    raise AssertionError("the plan did not get going")


@pytest.mark.slow(reason="a simulated press run until a device is killed")
@pytest.mark.parametrize("victim", ["F_horizontal", "force_source"])
async def test_device_killed_mid_plan_leaves_rig_safe_and_loses_nothing(tmp_path, victim):
    cfg = short_config(n_series=3, n_steps_up=3)
    store_path = tmp_path / "s.sqlite"
    async with PressRig(cfg) as rig:
        task = asyncio.ensure_future(run(cfg, str(store_path), show_progress=False, handle_sigint=False,
                                        simulated_rig=rig))
        await _wait_for_measurements(store_path, 4)
        await rig.stop_device(victim)
        result = await finished(task, 120.0)
        if victim == "force_source":
            await rig.start_device(victim)
        # the source is off: setpoint zero and output disabled (by the guard, or by the device watchdog
        # when the guard could not reach it), so the actual force decays to zero
        watchdog = cfg["simulator"]["force_source"]["watchdog_timeout"]
        async with _checking_source(rig) as source:

            async def off() -> bool:  # reads only: they do not feed the watchdog
                return not (await source.read_status()).enabled and abs(await source.read_force()) < 50.0

            with contextlib.suppress(AssertionError):  # not in time: the assertions below say what is wrong
                await wait_until(off, timeout=watchdog + 10.0, period=0.05)
            status = await source.read_status()
            force = await source.read_force()
            setpoint = await source.read_setpoint()
    assert result.status == "aborted"
    assert victim.split("_")[0].lower() in (result.reason or "").lower() or "lost" in (result.reason or "")
    assert not status.enabled
    assert abs(force) < 50.0
    if victim != "force_source":
        assert result.safe and setpoint == 0.0
    else:  # the guard could not reach the source: the run must not claim a safe state it never confirmed
        assert not result.safe and "SAFE STATE NOT CONFIRMED" in result.reason
    with SessionStore(store_path) as store:
        info = store.get_session(result.session_id)
        assert info.status == "aborted" and info.reason == result.reason
        frames = list(store.messages(result.session_id, streams=["press.force"]))
        seqs = [f.seq for f in frames]
        assert seqs == list(range(len(seqs)))  # nothing lost before the fault
        assert info.stats["gap_count"] == 0
        n_meas = len(store.events(result.session_id, kind="measurement"))
        n_steps = len(store.events(result.session_id, kind="step"))
        assert n_meas >= 4 and n_steps - n_meas <= 1  # only the step in progress lacks its measurement


@pytest.mark.parametrize("presses", [1, 2])
async def test_ctrl_c_once_finishes_the_step_twice_stops_now(tmp_path, presses):
    import os
    import signal

    cfg = short_config(n_series=3, n_steps_up=3)
    store_path = tmp_path / "s.sqlite"
    async with PressRig(cfg) as rig:
        task = asyncio.ensure_future(run_in_process(cfg, str(store_path), show_progress=False,
                                                   handle_sigint=True, simulated_rig=rig))
        await _wait_for_measurements(store_path, 3)
        # back to back, without yielding to the loop: the signals go to this (main) thread, so both are on the
        # loop's signal pipe before it runs again and are handled in one turn - the second finds the step
        # still running whatever the machine's pace (an order, not a timing)
        for _ in range(presses):
            os.kill(os.getpid(), signal.SIGINT)
        result = await finished(task, 120.0)
        async with _checking_source(rig) as source:
            status = await source.read_status()
            setpoint = await source.read_setpoint()
    assert result.status == "aborted" and result.safe
    assert not status.enabled and setpoint == 0.0
    with SessionStore(store_path) as store:
        n_meas = len(store.events(result.session_id, kind="measurement"))
        n_steps = len(store.events(result.session_id, kind="step"))
    if presses == 1:
        assert "operator" in result.reason
        assert n_meas == n_steps  # the step in progress was finished and measured
    else:
        assert "cancel" in result.reason
    assert n_meas < 3 * 7


class HeldBus:
    """A bus whose publish waits until released: a recorder that fell behind on a loaded rig PC."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.held = 0  # frames waiting

    def next_seq(self, stream: str) -> int:
        return 0

    async def publish(self, frame) -> None:
        self.held += 1
        await self.release.wait()


async def test_a_frame_held_up_on_the_bus_does_not_starve_the_source_of_its_heartbeat():
    """The heartbeat has a task of its own (every heartbeat_interval, 0.1 s here): while the acquisition's
    first frame waits on the bus for three watchdog periods, the simulated source keeps its output on. It
    used to be written after each published frame only, so the device's 0.4 s watchdog cut the output."""
    cfg = short_config()
    cfg["simulator"]["force_source"]["watchdog_timeout"] = 0.4
    async with PressRig(cfg) as rig:
        bus = HeldBus()
        async with ForceSource({**rig.device_config()["force_source"], "heartbeat_interval": 0.1}) as source:
            await source.enable()
            acq = ForceAcquisition(source, bus, "test", rate=200.0, block=10)
            task = asyncio.ensure_future(acq.run())
            try:
                await wait_until(lambda: bus.held == 1, timeout=30.0)
                beats = rig.force_source.writes.get("heartbeat", 0)
                # three watchdog periods of heartbeats while the frame is held (none came on the old code)
                await wait_until(lambda: rig.force_source.writes.get("heartbeat", 0) >= beats + 12
                                 or rig.force_source.fault_code != 0, timeout=60.0)
                fault, enabled = rig.force_source.fault_code, rig.force_source.enabled
                assert not task.done(), task
            finally:
                bus.release.set()
                await acq.finish(timeout=10.0)
                await source.safe_state()
    assert fault == 0 and enabled


async def test_slow_polls_keep_frames_and_heartbeats_at_the_pace_of_a_block():
    """Every request to the force source held 60 ms (its server's stall hook: a busy device, a loaded rig
    PC), so a poll of force and pressure takes >= 0.12 s instead of 5 ms. A frame used to wait for 10 such
    polls (>= 1.2 s, longer than the correction's max_stall) and the heartbeat after it came as late, so the
    device's 1 s watchdog cut the output of a healthy source. A frame now goes out once it spans what a
    full block spans at the rate; the heartbeat keeps the source enabled."""
    cfg = short_config()
    async with PressRig(cfg) as rig:
        dev = rig.device_config()["force_source"]
        assert rig.force_source.p.watchdog_timeout <= 1.0
        pub = BusPublisher("tcp://127.0.0.1:0")
        sub = BusSubscriber(pub.endpoint, topics=("data/press.force",))
        await pub.wait_for_subscribers(1)
        try:
            async with ForceSource(dev) as source:
                await source.enable()
                rig.force_source.server.stall = 0.06
                acq = ForceAcquisition(source, pub, "test", rate=200.0, block=10)
                task = asyncio.ensure_future(acq.run())
                try:
                    frames = [await sub.recv(timeout=60.0) for _ in range(12)]
                    assert not task.done(), task  # no DeviceFault from a tripped watchdog
                    fault, enabled = rig.force_source.fault_code, rig.force_source.enabled
                finally:
                    await acq.finish(timeout=10.0)
                    rig.force_source.server.stall = 0.0
                    await source.safe_state()
        finally:
            sub.close()
            pub.close()
    spans = [float(f.time()[-1] - f.time()[0]) for f in frames]
    assert all(f.n_samples < 10 for f in frames), [f.n_samples for f in frames]
    assert max(spans) < 0.6, spans  # 10 polls of >= 0.12 s span >= 1.08 s; a full block at 200 Hz 45 ms
    assert fault == 0 and enabled
