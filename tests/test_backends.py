"""The device backend seam (drivers/backends.py): the real protocols by default, the recording backend of
the dry run, the in-process backend of the simulators - with the drivers' semantics above all three.

Every device here is a real simulated one: the press and the machine tool of the shipped configs, started
on loopback. The in-process backends reach the same simulated devices without a socket.
"""

from __future__ import annotations

import copy
from pathlib import Path

import msgspec
import pytest

from daq.rigs import parse_config
from daq.rigs.config import load_config
from daq.run.lifecycle import run
from daq.store.read_write import SessionStore
from drivers.backends import OpcUaCalls
from drivers.displacement import open_sensor
from drivers.errors import BadResponse, DeviceUnreachable, LimitError
from drivers.force_source import ForceSource
from drivers.modal_frontend import ModalFrontEnd
from drivers.modbus_transport import ModbusTransport
from drivers.outputs import OutputHold
from drivers.recording import RecordingBackends
from drivers.scpi_link import ScpiLink
from drivers.serial_transport import SerialLine
from drivers.servo_drive import ServoDrive
from simulators.in_process import InProcessDrive, InProcessModbus, InProcessScpi, InProcessSerial, in_process
from simulators.physics.press import SENSOR_NAMES
from tests.polling import wait_until

CONFIGS = Path("configs").resolve()


def _config(name: str, shorten) -> tuple:
    raw = load_config(CONFIGS / f"{name}.toml")
    raw.pop("store", None)
    shorten(raw)
    return parse_config(copy.deepcopy(raw), name)


def _short_press(raw: dict) -> None:
    raw["plan"].update(n_series=3, n_steps_up=1, n_samples=5, precondition=False)


def _short_machine_tool(raw: dict) -> None:
    raw["plan"].update(positions=[0.05], validation=[0.3], inputs=["T1x"])
    raw["excitation"].update(period=256, periods=1, settle=1)


@pytest.fixture
async def press():
    """The shipped simulated press, started on loopback: (rig, config, simulator, [devices] tables)."""
    rig, cfg = _config("press-sim", _short_press)
    sim = rig.simulator(cfg)
    await sim.start()
    try:
        yield rig, cfg, sim, rig.simulated_devices(sim, cfg)
    finally:
        await sim.stop()


def _modbus_writes(sim) -> int:
    return sum(d.server.n_writes for d in sim.devices.values() if hasattr(d, "server"))


async def test_a_driver_built_without_backends_talks_its_protocol(press):
    _, _, sim, tables = press
    source = ForceSource(tables.force_source)
    sensors = {n: open_sensor(n, t) for n, t in tables.sensors.items()}
    assert isinstance(source.transport, ModbusTransport)
    kinds = {n: type(s.line if hasattr(s, "line") else s.transport) for n, s in sensors.items()}
    assert kinds == {"D_vertical": ModbusTransport, "F_horizontal": ModbusTransport,
                     "B0_vertical": SerialLine}
    assert isinstance(ModalFrontEnd({"port": 1}).link, ScpiLink)
    drive = ServoDrive(load_config(CONFIGS / "crane-sim.toml")["devices"]["drive"])
    assert isinstance(drive.calls, OpcUaCalls)
    async with source:
        await source.set_force(1000.0)  # over Modbus TCP: the simulated device counts the request it received
        assert sim.force_source.writes == {"setpoint": 1}
        assert sim.force_source.setpoint == pytest.approx(1000.0)
    assert _modbus_writes(sim) == 1


async def test_the_recording_backend_holds_writes_in_si_and_sends_nothing(press):
    _, _, sim, tables = press
    hold = OutputHold()
    source = ForceSource(tables.force_source, backends=RecordingBackends(hold))
    async with source:
        assert isinstance(source.transport.inner, ModbusTransport)  # reads still go over the wire
        await source.enable()
        await source.set_force(12345.5)
        with pytest.raises(LimitError):
            await source.set_force(source.f_max + 1.0)  # refused above the backend: never held
        await source.heartbeat()
        await source.safe_state()  # setpoint 0 and disable held; the status read back for real
        status = await source.read_status()
    assert [(c.command, c.value) for c in hold.commands] == [
        ("enable", 1), ("setpoint", 12345.5), ("setpoint", 0.0), ("enable", 0)]
    assert hold.commands[1].limits == (f"force setpoint within [0, {source.f_max:g}] N",)
    assert hold.keepalives == 1
    assert _modbus_writes(sim) == 0 and sim.force_source.writes == {}
    assert not status.enabled and sim.force_source.setpoint == 0.0


async def test_the_recording_backend_refuses_what_the_register_cannot_carry(press):
    """A value the register's codec cannot encode is refused before it is held, as the wire refuses it."""
    _, _, sim, tables = press
    hold = OutputHold()
    source = ForceSource(tables.force_source, backends=RecordingBackends(hold))
    with pytest.raises(ValueError, match="cannot be encoded|does not fit"):
        await source.transport.write(source.regs["enable"], 1e9)
    with pytest.raises(ValueError, match="cannot be written"):
        await source.transport.write(source.regs["force"], 1.0)
    assert hold.commands == [] and _modbus_writes(sim) == 0


async def test_in_process_backends_reach_the_simulated_devices_without_a_socket(press):
    _, _, sim, tables = press
    backends = in_process(sim)
    source = ForceSource(tables.force_source, backends=backends)
    sensors = {n: open_sensor(n, t, backends) for n, t in tables.sensors.items()}
    assert isinstance(source.transport, InProcessModbus)
    assert isinstance(sensors["B0_vertical"].line, InProcessSerial)  # type: ignore[attr-defined]
    async with source:
        await source.clear_fault()
        await source.enable()
        await source.set_force(10000.0)
        for s in sensors.values():
            await s.connect()
        await wait_until(lambda: sim.force_source.settled and sim.force_source.force > 9000.0, timeout=10.0)
        force = await source.read_force()
        simulated = sim.force_source.force  # at the read: the simulated force goes on moving after it
        z = {n: await s.read() for n, s in sensors.items()}
        simulated_z = sim.z.copy()  # (and the plant with it; compared within the sensors' noise below)
        await source.safe_state()
        assert not (await source.read_status()).enabled
    assert sim.force_source.writes["setpoint"] == 2 and sim.force_source.enabled is False
    assert force == pytest.approx(simulated, abs=50.0)
    # each reading decoded by the driver's codec from the device's own encoding (F_horizontal: int32, the
    # words swapped, scale 1e-7): the plant's displacement under 10 kN, within the sensor's noise
    for name, value in z.items():
        truth = float(simulated_z[SENSOR_NAMES.index(name)])
        assert abs(truth) > 1e-5 and value == pytest.approx(truth, abs=10 * tables.sensors[name].sigma), name


async def test_a_wrong_word_order_reads_wrong_in_process_as_on_the_wire(press):
    """The codec is above the seam: a config with F_horizontal's words in the wrong order misreads the
    simulated sensor in-process exactly as it does over Modbus."""
    _, _, sim, tables = press
    table = tables.sensors["F_horizontal"]
    reg = table.registers["displacement"]
    wrong = type(table)(**{**{f: getattr(table, f) for f in table.__struct_fields__},
                           "registers": {"displacement": type(reg)(**{
                               **{f: getattr(reg, f) for f in reg.__struct_fields__}, "word_order": "big"})}})
    sim.force_source.enabled, sim.force_source.force = True, 10000.0  # a steady plant to read
    sim.force_source.p = msgspec.structs.replace(sim.force_source.p, tau=1e9)
    sim.plant_step()
    truth = float(sim.z[SENSOR_NAMES.index("F_horizontal")])
    assert abs(truth) > 1e-5
    for backends in (None, in_process(sim)):
        right = open_sensor("F_horizontal", table, backends)
        mixed = open_sensor("F_horizontal", wrong, backends)
        async with right, mixed:
            good = await right.read()
            assert good == pytest.approx(truth, abs=10 * table.sigma)
            try:
                bad = await mixed.read()
            except BadResponse:
                continue  # the swapped words decode to a value outside the plausible range
            assert abs(bad - good) > 1e-3 * abs(good)


async def test_an_in_process_device_that_is_powered_off_is_unreachable(press):
    _, _, sim, tables = press
    await sim.stop_device("force_source")
    source = ForceSource(tables.force_source, backends=in_process(sim))
    with pytest.raises(DeviceUnreachable, match="not running"):
        await source.connect()


async def test_a_plan_runs_to_its_safe_end_on_the_in_process_backend(press, tmp_path):
    rig, cfg, sim, _ = press
    seen = {}
    result = await run(cfg, tmp_path / "s.sqlite", simulated_rig=sim, show_progress=False,
                       handle_sigint=False, backends=in_process(sim),
                       on_context=lambda ctx: seen.setdefault("ctx", ctx))
    assert result.status == "complete" and result.safe, result.reason
    assert isinstance(seen["ctx"].devices.source.transport, InProcessModbus)
    assert sim.force_source.writes["setpoint"] > 2  # the staircase reached the device, in-process
    assert sim.force_source.enabled is False and sim.force_source.setpoint == 0.0  # the safe end
    with SessionStore(tmp_path / "s.sqlite") as st:
        z = st.read_stream(result.session_id, "press.sensors")
    assert z.data.shape[0] > 0 and (z.data > 0).any()  # the sensors were read through the same backends


async def test_a_dry_run_on_the_in_process_backend_writes_nothing(press, tmp_path):
    _, cfg, sim, _ = press
    result = await run(cfg, tmp_path / "s.sqlite", simulated_rig=sim, show_progress=False,
                       handle_sigint=False, backends=in_process(sim), dry_run=True)
    assert result.status == "complete" and result.safe, result.reason
    assert result.summary["dry_run"]["commands_held"] > 0 and _modbus_writes(sim) == 0


async def test_the_machine_tool_plan_runs_to_its_safe_end_in_process(tmp_path):
    rig, cfg = _config("machine-tool-sim", _short_machine_tool)
    sim = rig.simulator(cfg)
    await sim.start()
    try:
        seen = {}
        result = await run(cfg, tmp_path / "s.sqlite", simulated_rig=sim, show_progress=False,
                           handle_sigint=False, backends=in_process(sim),
                           on_context=lambda ctx: seen.setdefault("ctx", ctx))
        assert result.status == "complete" and result.safe, result.reason
        assert isinstance(seen["ctx"].devices.frontend.link, InProcessScpi)
        assert sim.n_writes > 0 and sim.dev.output is False  # it measured, then the output went off
        assert not sim._clients  # no connection was ever opened to the TCP server
    finally:
        await sim.stop()


async def test_a_drive_plan_runs_to_its_safe_end_in_process(tmp_path):
    """The oscillator's plan through the servo-drive driver on the simulated drive's own methods and
    variables: trajectory uploaded and run, the trace read back, the drive disabled at the end."""
    def short(raw: dict) -> None:
        raw["plan"].update(design="sine")
        raw["simulator"]["speed"] = 10.0

    rig, cfg = _config("oscillator-sim", short)
    sim = rig.simulator(cfg)
    await sim.start()
    try:
        seen = {}
        result = await run(cfg, tmp_path / "s.sqlite", simulated_rig=sim, show_progress=False,
                           handle_sigint=False, backends=in_process(sim),
                           on_context=lambda ctx: seen.setdefault("ctx", ctx))
        assert result.status == "complete" and result.safe, result.reason
        assert isinstance(seen["ctx"].devices.drive.calls, InProcessDrive)
        calls = sim.drive.faults.calls
        assert calls["LoadTrajectory"] >= 1 and calls["Start"] >= 1 and calls["ReadTrace"] >= 1
        assert sim.drive.enabled is False and sim.drive.state in ("Done", "Stopped")
    finally:
        await sim.stop()
