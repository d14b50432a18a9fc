"""Safe actions (drivers/safe_state.py) under devices that hang: every step is tried, the failed one is named.

A drive whose ``Stop`` never answers and a force source whose setpoint-zero write never answers must still
get their disable - the guard (daq/run/safety.py) gives each attempt the action's declared budget and the
action cuts a hung step at its own budget. Devices are the project's simulators on 127.0.0.1 (an OPC UA
drive, a Modbus force source) with their hang fault hooks; each device's own watchdog is set long, so only
the safe action can disable it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
import pytest_asyncio

from daq.rigs.drive import open_devices as open_drive
from daq.rigs.press.rig import RIG as PRESS
from daq.run.safety import SafeStateGuard
from drivers.errors import SafeStateError
from drivers.force_source import ForceSource
from simulators.crane_rig import CraneRig
from simulators.force_source_sim import ForceSourceSim
from simulators.physics.crane import CraneTruth
from tests.test_drivers import FS_SIM, fs_cfg

pytestmark = pytest.mark.asyncio(loop_scope="module")

TRUTH = replace(CraneTruth(), coulomb=0.0, stribeck_torque=0.0).to_dict()
LONG_WATCHDOG = 60.0  # s (the tables' largest): the device's own watchdog never disables it during a test
DRIVE = {"watchdog_timeout": LONG_WATCHDOG, "security": "none", "torque_limit": 20.0,
         "speed_limit": 150.0, "max_samples": 20_000, "live_rate": 40.0}
QUIET_SOURCE = {**FS_SIM, "watchdog_timeout": LONG_WATCHDOG}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def crane():
    rig = CraneRig({"simulator": {"speed": 10.0, "truth": TRUTH, "drive": DRIVE}})
    await rig.start()
    yield rig
    rig.drive.faults.release()
    await rig.stop()


async def _drive_devices(crane: CraneRig, timeout: float = 0.5):
    """The drive rig's devices, opened by the rig's own code (so the guard sees its real safe actions)."""
    table = SimpleNamespace(drive={"url": crane.url, "name": "crane-drive", "timeout": timeout,
                                   "connect_timeout": 2.0, "heartbeat_interval": 0.1})
    devices = await open_drive(None, table)
    await devices.drive.clear_fault()
    await devices.drive.enable()
    assert crane.drive.enabled
    return devices


@contextlib.asynccontextmanager
async def _press_source(**link):
    """A simulated force source, enabled at 3 kN, and the press rig's devices around it (no sensors)."""
    sim = ForceSourceSim(fs_cfg(0), QUIET_SOURCE, np.random.default_rng(21))
    await sim.start()
    tables = SimpleNamespace(force_source=fs_cfg(sim.port, **link), sensors={})
    devices = await PRESS.open_devices(None, tables)
    try:
        await devices.source.set_force(3000.0)
        await devices.source.enable()
        assert sim.enabled and sim.setpoint == 3000.0
        yield sim, devices
    finally:
        sim.release_hangs()
        await devices.close()
        await sim.stop()


@pytest.mark.slow(reason="three attempts, each waiting out a 2 s request and a reconnect")
async def test_a_drive_whose_stop_hangs_is_still_disabled_and_the_stop_is_named(crane):
    # 2 s per request: a request (and a step built on it) longer than any fixed per-attempt limit could allow
    devices = await _drive_devices(crane, timeout=2.0)
    disables = crane.drive.faults.calls.get("Disable", 0)
    crane.drive.faults.hang = {"Stop"}  # the controller takes Stop and never answers it
    try:
        guard = SafeStateGuard(list(devices.safe_actions))
        assert await guard.reach_safe_state() is False
        assert not crane.drive.enabled  # the disable reached the drive on every path
        assert crane.drive.faults.calls["Disable"] > disables and crane.drive.faults.calls["Stop"] >= 1
        assert guard.safe is False
        assert {(s["device"], s["step"]) for s in guard.failed_steps} == {("crane-drive", "stop")}
        assert "stop" in guard.errors[0] and "disable" not in guard.errors[0].split("not reached:")[1]
    finally:
        crane.drive.faults.release()
        await devices.close()


@pytest.mark.slow(reason="three attempts, each waiting out the link's own 3 s of timeouts")
async def test_a_force_source_whose_setpoint_zero_hangs_still_ends_disabled():
    # a link whose own timeouts (1.5 s x 2 attempts) are longer than any fixed per-attempt limit could allow
    async with _press_source(timeout=1.5, retries=1) as (sim, devices):
        sim.hang_writes = {"setpoint"}  # the setpoint write is taken and never answered
        enables = sim.writes.get("enable", 0)
        guard = SafeStateGuard(list(devices.safe_actions))
        assert await guard.reach_safe_state() is False
        assert not sim.enabled and sim.writes["enable"] > enables  # the disable went out and acted
        assert guard.safe is False
        assert {(s["device"], s["step"]) for s in guard.failed_steps} == {("force_source", "setpoint 0")}


async def test_a_step_cut_at_its_budget_frees_the_transport_for_the_next_step():
    """A write hanging inside the Modbus client (both its lock and ours held) is cut by the step's budget,
    long before the transport's own 5 s timeout; the disable behind it still goes out on the same link."""
    async with _press_source(timeout=5.0, retries=0) as (sim, devices):
        source: ForceSource = devices.source
        action = source.safe_action()
        setpoint, *rest = action.steps
        assert setpoint.budget >= source.transport.request_bound  # as shipped, never cut before the link
        short = dataclasses.replace(action, steps=(dataclasses.replace(setpoint, budget=0.3), *rest))
        sim.hang_writes = {"setpoint"}
        with pytest.raises(SafeStateError) as info:
            await short()
        assert [f.step for f in info.value.failures] == ["setpoint 0"]
        assert "cut" in info.value.failures[0].cause
        assert not sim.enabled and not (await source.read_status()).enabled


async def test_devices_whose_steps_all_succeed_are_safe(crane):
    devices = await _drive_devices(crane)
    try:
        async with _press_source() as (sim, press):
            guard = SafeStateGuard([*devices.safe_actions, *press.safe_actions])
            assert await guard.reach_safe_state() is True
            assert guard.safe and guard.errors == [] and guard.failed_steps == []
            assert not crane.drive.enabled and not sim.enabled and sim.setpoint == 0.0
    finally:
        await devices.close()


async def test_a_step_that_is_skipped_or_fails_is_named_by_the_guard_not_hidden():
    """An action that keeps failing is retried, then recorded once with each failed step; the guard's own
    limit for an attempt is the action's budget (the steps' sum) plus its slack, never a constant."""
    calls: list[str] = []

    async def fail() -> None:
        calls.append("fail")
        raise OSError("line down")

    async def ok() -> None:
        calls.append("ok")

    from drivers.safe_state import SafeAction, SafeStep

    action = SafeAction("lamp", "in-process", (SafeStep("switch", 40.0, fail), SafeStep("confirm", 50.0, ok)))
    guard = SafeStateGuard([("lamp off", action)], attempts=2, retry_delay=0.0)
    assert guard.attempt_time(action) == 90.0 + guard.slack
    assert await guard.reach_safe_state() is False
    assert calls == ["fail", "ok", "fail", "ok"]  # every step tried in every attempt
    assert guard.failed_steps == [{"action": "lamp off", "device": "lamp", "step": "switch",
                                   "cause": "OSError('line down')"}]
    assert len(guard.errors) == 1 and "attempt 2/2" in guard.errors[0]
    with pytest.raises(TypeError, match="not a drivers.safe_state.SafeAction"):
        SafeStateGuard([("old style", ok)])  # type: ignore[list-item]


async def test_the_run_records_which_step_failed(tmp_path):
    """Through the whole run lifecycle: the session's outcome and the run's result name the failed step."""
    from daq import rigs
    from daq.run.lifecycle import run
    from daq.store.read_write import SessionStore
    from tests.beacon_rig import BeaconRig, NoSimulator

    sim = ForceSourceSim(fs_cfg(0), QUIET_SOURCE, np.random.default_rng(22))
    await sim.start()

    class Devices:
        def __init__(self, source: ForceSource):
            self.source = source
            self.safe_actions = [("force to zero and disable", source.safe_action())]

        async def identities(self) -> dict:
            return {"force_source": self.source.device_identity()}

        async def close(self) -> None:
            await self.source.close()

    class SourceBeacon(BeaconRig):
        async def open_devices(self, cfg, tables, backends=None):
            source = ForceSource(fs_cfg(sim.port))
            await source.connect()
            await source.set_force(3000.0)
            await source.enable()
            return Devices(source)

    rigs.register(SourceBeacon())
    seen: list = []
    try:
        task = asyncio.ensure_future(run({"rig": {"kind": "beacon"}}, tmp_path / "s.sqlite",
                                         show_progress=False, handle_sigint=False,
                                         simulated_rig=NoSimulator(), on_context=seen.append))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while not (seen and seen[0].steps_done >= 2):
            assert loop.time() < deadline and not task.done(), "the plan did not get going"
            await asyncio.sleep(0.05)
        assert sim.enabled
        sim.hang_writes = {"setpoint"}
        seen[0].abort("stopped by the test")
        result = await asyncio.wait_for(task, 60)
    finally:
        sim.release_hangs()
        rigs.unregister("beacon")
        await sim.stop()
    assert not sim.enabled  # the disable went out after the hung setpoint
    assert result.safe is False and "SAFE STATE NOT CONFIRMED" in result.reason
    assert [(s["device"], s["step"]) for s in result.safe_failed_steps] == [("force_source", "setpoint 0")]
    with SessionStore(tmp_path / "s.sqlite") as store:
        (outcome,) = [e.body for e in store.events(result.session_id, kind="plan_outcome")]
    assert outcome["safe"] is False
    assert [s["step"] for s in outcome["safe_failed_steps"]] == ["setpoint 0"]


async def test_a_front_end_answer_that_comes_late_is_never_taken_for_the_read_back():
    """The error-queue answer after ``OUTP OFF`` comes after the timeout: the step fails, its stream is
    dropped, and the read-back asks on a fresh stream (not reading the late answer as its own)."""
    from drivers.modal_frontend import ModalFrontEnd
    from simulators.machine_tool_sim import MachineToolFrontEndSim

    sim = MachineToolFrontEndSim({})
    await sim.start()
    fe = ModalFrontEnd({"port": sim.port, "timeout": 0.3})
    try:
        await fe.connect()
        await fe.write("OUTP ON")
        assert sim.dev.output
        sim.answer_delay["SYST:ERR?"] = 1.0
        with pytest.raises(SafeStateError) as info:
            await fe.safe_state()
        assert [f.step for f in info.value.failures] == ["output off"]  # the read-back confirmed "0"
        assert not sim.dev.output
    finally:
        sim.answer_delay.clear()
        await fe.close()
        await sim.stop()


async def test_a_device_that_cannot_be_reached_costs_one_connect_per_attempt_not_one_per_step():
    """Nothing listens: the first step spends the link's connect timeout, the later steps are named as not
    tried (they would wait for the same), and the action still fails loudly, naming all three."""
    from tests.test_drivers import free_port

    source = ForceSource(fs_cfg(free_port()))
    with pytest.raises(SafeStateError) as info:
        await source.safe_state()
    failures = {f.step: f.cause for f in info.value.failures}
    assert list(failures) == ["setpoint 0", "disable", "status read-back"]
    assert "cannot connect within" in failures["setpoint 0"]
    assert failures["disable"] == failures["status read-back"] == (
        "not tried: no connection could be made in 'setpoint 0'")
