"""`hil run --dry-run` (issue 34 part 2): the plan walks with the devices connected and read, every command
is held and recorded, nothing is written to a device, and the safe state is still walked.

Each shipped simulated config runs twice on one started simulator (plans shortened through the config):
a dry run, after which the simulated devices have received 0 writes, then a normal run of the same config,
which must write (the negative control: the counters do count).
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from daq.cli.main import main
from daq.rigs import parse_config
from daq.rigs.config import load_config
from daq.run.lifecycle import run
from daq.store.read_write import SessionStore
from drivers.backends import OpcUaCalls
from drivers.errors import HilError, LimitError
from drivers.force_source import ForceSource
from drivers.modbus_transport import ModbusTransport
from drivers.outputs import OutputHold
from drivers.recording import RecordingBackends
from drivers.servo_drive import ServoDrive
from tests.held_devices import SENSORS, HeldDevices, press_template_on

sys.path.insert(0, str(Path(__file__).parent))
from test_rig_kit import _to_toml  # noqa: E402

CONFIGS = Path("configs").resolve()


def _press(cfg: dict) -> None:
    cfg["plan"].update(n_series=3, n_steps_up=1, n_samples=5, precondition=False)
    cfg["simulator"]["speed"] = 10.0  # the plan's settle waits: a tenth of the waiting, the same commands


def _short_multisines(cfg: dict) -> None:
    cfg["excitation"].pop("export_dir", None)
    cfg["excitation"].update(duration=0.5, n_lines=20, max_iter=5)
    cfg["excitation"]["validation"]["n_lines"] = 20


def _crane(cfg: dict) -> None:
    cfg["simulator"]["speed"] = 20.0
    _short_multisines(cfg)


def _adjoint(design: str):
    def edit(cfg: dict) -> None:
        cfg["plan"].update(design=design)
        cfg["simulator"]["speed"] = 10.0
        if "excitation" in cfg:  # the crane's multisines: as long as [adjoint].t_f, designed quicker
            cfg["excitation"].pop("export_dir", None)
            cfg["excitation"]["max_iter"] = 5
    return edit


def _machine_tool(cfg: dict) -> None:
    cfg["plan"].update(positions=[0.05], validation=[0.3], inputs=["T1x"])
    cfg["excitation"].update(period=256, periods=1, settle=1)


SHIPPED = {  # config -> (shorten, the commands the dry run must hold first, in order)
    "press-sim": (_press, ["enable", "setpoint"]),
    "crane-sim": (_crane, ["load_trajectory", "enable", "start", "disable"]),
    "oscillator-sim": (_adjoint("sine"), ["load_trajectory", "enable", "start", "disable"]),
    "pendulum-sim": (_adjoint("sine"), ["load_trajectory", "enable", "start", "disable"]),
    "crane-adjoint-sim": (_adjoint("multisine"), ["load_trajectory", "enable", "start", "disable"]),
    "machine-tool-sim": (_machine_tool, ["AXIS:POS", "SOUR:DOF", "SOUR:AMPL"]),
}


def test_every_shipped_simulated_config_is_covered():
    assert {p.stem for p in CONFIGS.glob("*-sim.toml")} == set(SHIPPED)


def _writes(sim) -> int:
    """Every write the simulated devices of ``sim`` received (they count them themselves)."""
    if hasattr(sim, "devices"):         # the press: Modbus devices (serial sensors are only queried)
        return sum(d.server.n_writes for d in sim.devices.values() if hasattr(d, "server"))
    return sim.n_writes                 # the simulated drive (crane, adjoint kinds), the SCPI front end


async def _run_twice(name: str, tmp_path: Path):
    raw = load_config(CONFIGS / f"{name}.toml")
    raw.pop("store", None)
    SHIPPED[name][0](raw)
    rig, cfg = parse_config(copy.deepcopy(raw), name)
    sim = rig.simulator(cfg)
    await sim.start()
    try:
        store = tmp_path / "s.sqlite"
        dry = await run(cfg, store, simulated_rig=sim, show_progress=False, handle_sigint=False, dry_run=True)
        dry_writes = _writes(sim)
        real = await run(cfg, store, simulated_rig=sim, show_progress=False, handle_sigint=False)
        real_writes = _writes(sim) - dry_writes
    finally:
        await sim.stop()
    return rig, store, dry, dry_writes, real, real_writes


@pytest.mark.slow(reason="a dry run and a real run of each shipped simulated config (about 5-20 s each)")
@pytest.mark.parametrize("name", sorted(SHIPPED))
async def test_a_dry_run_writes_nothing_and_records_every_command(name, tmp_path):
    rig, store, dry, dry_writes, real, real_writes = await _run_twice(name, tmp_path)
    assert dry.status == "complete" and dry.safe, dry.reason
    assert dry_writes == 0
    assert real.status == "complete" and real.safe, real.reason
    assert real_writes > 0  # the negative control: the same plan, run for real, writes
    with SessionStore(store) as st:
        info = st.get_session(dry.session_id)
        assert info.config["rig"]["dry_run"] is True
        assert st.get_session(real.session_id).config["rig"]["dry_run"] is False
        held = st.events(dry.session_id, kind="command_held")
        safe = st.events(dry.session_id, kind="safe_state")
        outcome = st.events(dry.session_id, kind="plan_outcome")[-1].body
    assert [e.body["n"] for e in held] == list(range(len(held)))  # every command, in the order held
    assert [e.body["command"] for e in held[:len(SHIPPED[name][1])]] == SHIPPED[name][1]
    assert all(e.stream == f"{rig.kind}.dry_run" for e in held)
    assert outcome["summary"]["dry_run"]["commands_held"] == len(held)
    assert outcome["summary"]["dry_run"]["sent"] == 0
    plan = [e.body for e in held if e.body["phase"] == "plan"]
    at_safe = [e.body for e in held if e.body["phase"].startswith("safe state: ")]
    assert plan and at_safe and held[-1].body in at_safe  # the safe state came last and was walked
    assert len(safe) == 1 and safe[0].body["safe"] is True
    assert [c["n"] for a in safe[0].body["actions"] for c in a["commands"]] == [c["n"] for c in at_safe]
    if name == "press-sim":  # values and the limits checked before a setpoint was held
        setpoints = [c for c in plan if c["command"] == "setpoint"]
        assert all(c["limits"] == ["force setpoint within [0, 22000] N"] for c in setpoints)
        assert max(c["value"] for c in setpoints) > 10000.0  # the staircase's top, held, not sent
    if name == "machine-tool-sim":  # the axis move and the source's output, held with their values
        assert held[0].body["value"] == 0.05
        runs = outcome["summary"]["runs"]  # 2 positions, then the [distortion] realisations
        assert runs >= 2 and [c["value"] for c in plan if c["command"] == "OUTP"] == ["ON", "OFF"] * runs
    if name in ("crane-sim", "oscillator-sim"):  # a trajectory is held as its summary, after its checks
        upload = held[0].body
        assert upload["value"]["n"] > 0 and upload["value"]["peak"] > 0
        assert any(lim.startswith("peak |torque| <=") for lim in upload["limits"])


async def test_a_signal_beyond_the_drive_limit_is_refused_in_a_dry_run_as_in_a_real_one(tmp_path):
    """The simulated drive is weaker than the config says (its own torque limit, read at connect, below the
    signal's peak): the dry run refuses the signal before a session exists, as a real run does, having held
    only the safe state's commands and written nothing."""
    raw = load_config(CONFIGS / "oscillator-sim.toml")
    raw.pop("store", None)
    _adjoint("sine")(raw)
    raw["simulator"]["drive"].update(torque_limit=4.0)
    rig, cfg = parse_config(raw, "oscillator-sim")
    sim = rig.simulator(cfg)
    await sim.start()
    try:
        with pytest.raises(HilError, match="exceeds the drive's limit 4 N"):
            await run(cfg, tmp_path / "s.sqlite", simulated_rig=sim, show_progress=False, handle_sigint=False,
                      dry_run=True)
        assert _writes(sim) == 0
    finally:
        await sim.stop()


async def test_the_drivers_check_limits_before_they_hold_a_command():
    """No device needed: a held command never reaches the transport, a refused one never reaches the hold."""
    press = load_config(CONFIGS / "press-sim.toml")["devices"]["force_source"]
    hold = OutputHold()
    recording = RecordingBackends(hold)  # over the real transports, which are never reached here
    source = ForceSource(press, backends=recording)
    drive_table = load_config(CONFIGS / "oscillator-sim.toml")["devices"]["drive"]
    drive = ServoDrive(drive_table, backends=recording)
    await source.set_force(1000.0)
    with pytest.raises(LimitError, match="outside"):
        await source.set_force(source.f_max * 1.01)
    await drive.load_trajectory(0.01, np.full(10, 0.5 * drive.cfg.torque_limit))
    with pytest.raises(LimitError, match="exceeds the limit"):
        await drive.load_trajectory(0.01, np.full(10, 1.01 * drive.cfg.torque_limit))
    await source.heartbeat()
    # the hold is these drivers' alone: drivers built without backends talk their protocols
    assert isinstance(ForceSource(press).transport, ModbusTransport)
    assert isinstance(ServoDrive(drive_table).calls, OpcUaCalls)
    assert [(c.command, c.value) for c in hold.commands][0] == ("setpoint", 1000.0)
    assert hold.commands[0].limits == (f"force setpoint within [0, {source.f_max:g}] N",)
    assert hold.commands[1].command == "load_trajectory" and hold.commands[1].value["n"] == 10
    assert len(hold.commands) == 2 and hold.keepalives == 1


def test_the_cli_says_dry_run_and_sessions_show_it(tmp_path):
    raw = load_config(CONFIGS / "press-sim.toml")
    raw.pop("store", None)
    _press(raw)
    path = tmp_path / "press.toml"
    path.write_text(_to_toml(raw))
    store = tmp_path / "s.sqlite"
    res = CliRunner().invoke(main, ["--store", str(store), "run", str(path), "--dry-run", "--no-progress"])
    assert res.exit_code == 0, res.output
    assert "complete (dry run: " in res.output and "commands held, none sent)" in res.output, res.output
    res = CliRunner().invoke(main, ["--store", str(store), "sessions"])
    assert "complete (dry run)" in res.output, res.output
    sid = res.output.splitlines()[1].split()[0]
    res = CliRunner().invoke(main, ["--store", str(store), "show", sid])
    assert "dry run" in res.output and "none sent" in res.output, res.output
    held = [ln for ln in res.output.splitlines() if ln.startswith("held ")]
    assert "force_source enable = 1" in held[0], res.output  # the log: in order, with values and checks
    assert "setpoint = " in held[1] and "checked: force setpoint within [0, 22000] N" in held[1]
    assert "safe state: force to zero and disable force_source enable = 0" in held[-1]
    shown = json.loads(CliRunner().invoke(main, ["--store", str(store), "show", sid, "--json"]).output)
    assert shown["dry_run"] is True and [h["n"] for h in shown["held_commands"]] == list(range(len(held)))
    res = CliRunner().invoke(main, ["--store", str(store), "analyze", sid])
    assert res.exit_code != 0 and "is a dry run" in res.output and "Traceback" not in res.output, res.output
    res = CliRunner().invoke(main, ["--store", str(store), "run", str(path), "--dry-run", "--analyze"])
    assert res.exit_code != 0 and "a dry run moves nothing to analyse" in res.output, res.output


def test_a_dry_run_of_the_real_press_template_without_its_devices_fails_in_one_line(tmp_path):
    """The template with every device at a loopback port of this test that refuses connections (an absent
    device; tests/held_devices.py - the template's own addresses are never opened)."""
    names = ("force_source", *SENSORS)
    absent = HeldDevices(names, release_at=0)
    try:
        path = press_template_on(absent, tmp_path / "press.toml", timeout=0.3, connect_timeout=1.0)
        res = CliRunner().invoke(main, ["--store", str(tmp_path / "s.sqlite"), "run", str(path), "--dry-run",
                                        "--no-progress"])
    finally:
        absent.close()
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert res.exit_code != 0 and "Traceback" not in res.output
    assert len(lines) == 1, res.output
    named = [n for n in names if n in lines[0] and f"127.0.0.1:{absent.ports[n]}" in lines[0]]
    assert len(named) == 1, res.output  # the device that failed first, with its address
    assert "cannot connect within 1 s" in lines[0], res.output
