"""`hil devices`: commissioning without moving anything (issue 34).

The simulated devices answer with their own register maps and identities (simulators/press_devices.py,
the simulated drive's nodes), so a wrong config reads wrong values as it would on the real rig. Each case
changes one thing in the config and leaves the simulator as it is.
"""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import pytest
from click.testing import CliRunner

from daq.cli.main import main
from daq.commission.probe import probe_devices
from daq.rigs.config import load
from tests.held_devices import SENSORS, HeldDevices, press_template_on

CONFIGS = Path("configs").resolve()
replace = msgspec.structs.replace


def _lines(res) -> list[str]:
    return [ln for ln in res.output.splitlines() if ln.strip()]


async def _probe_press(edit=None, reads: int = 10):
    """Start the shipped simulated press, probe its devices with ``edit(devices)`` applied to the config's
    tables (the simulator unchanged); returns (reports by name, writes the devices received)."""
    rig, cfg = load(CONFIGS / "press-sim.toml")
    sim = rig.simulator(cfg)
    await sim.start()
    try:
        devices = rig.simulated_devices(sim, cfg)
        reports = await probe_devices(edit(devices) if edit else devices, reads)
        writes = sum(d.server.n_writes for name, d in sim.devices.items() if hasattr(d, "server"))
    finally:
        await sim.stop()
    return {r.name: r for r in reports}, writes


async def test_the_shipped_press_answers_plausibly_and_nothing_is_written():
    reports, writes = await _probe_press()
    assert writes == 0
    assert all(r.ok for r in reports.values()), [r.to_dict() for r in reports.values() if not r.ok]
    assert set(reports) == {"force_source", "D_vertical", "F_horizontal", "B0_vertical"}
    assert "LDS-3303" in reports["B0_vertical"].identity["id"]  # the simulated sensor's own serial number
    assert all(len(c.values) == 10 for r in reports.values() for c in r.channels)


def _sensor_register(devices, sensor: str, **changes):
    s = devices.sensors[sensor]
    regs = dict(s.registers)
    regs["displacement"] = replace(regs["displacement"], **changes)
    return replace(devices, sensors={**devices.sensors, sensor: replace(s, registers=regs)})


def _swap_force_and_pressure(devices):
    src = devices.force_source
    regs = dict(src.registers)
    regs["force"], regs["pressure"] = (replace(regs["force"], address=regs["pressure"].address),
                                       replace(regs["pressure"], address=regs["force"].address))
    return replace(devices, force_source=replace(src, registers=regs))


WRONG = [  # (what is wrong in the config, edit, device, channel, words the report must say)
    ("swapped word order", lambda d: _sensor_register(d, "D_vertical", word_order="little"),
     "D_vertical", "displacement", ("word order", "word_order = 'big'")),
    ("scale off by 1000 (mm for m)", lambda d: _sensor_register(d, "F_horizontal", scale=1.0e-4),
     "F_horizontal", "displacement", ("scale factor", "1000")),
    ("load cell pointed at the pressure sensor's register", _swap_force_and_pressure,
     "force_source", "force", ("reads like 'pressure'", "register address")),
]


@pytest.mark.parametrize("what, edit, device, channel, words", WRONG, ids=[w[0] for w in WRONG])
async def test_a_wrong_config_is_reported_in_words(what, edit, device, channel, words):
    reports, writes = await _probe_press(edit)
    assert writes == 0
    rep = reports[device]
    assert not rep.ok
    problem = next(c.problem for c in rep.channels if c.name == channel)
    assert problem and all(w in problem for w in words), problem
    others = [r for n, r in reports.items() if n != device]
    assert all(r.ok for r in others), [r.to_dict() for r in others if not r.ok]  # only the wrong one blamed


def _crane_expecting(tmp_path: Path, serial: str) -> Path:
    text = (CONFIGS / "crane-sim.toml").read_text()
    expect = f"[devices.drive.expect]\nserial_number = \"{serial}\"\n\n[devices.drive.security]"
    text, n = re.subn(r"(?m)^\[devices.drive.security\]", expect, text, count=1)
    assert n == 1
    path = tmp_path / "crane.toml"
    path.write_text(text)
    return path


def test_a_drive_with_another_serial_number_is_named_and_run_refuses_it(tmp_path):
    path = _crane_expecting(tmp_path, "SN-4711")
    res = CliRunner().invoke(main, ["devices", str(path), "--reads", "2"])
    assert res.exit_code == 1, res.output
    assert "serial_number 'SIM-crane-drive-sim' where 'SN-4711' is expected" in res.output, res.output
    store = tmp_path / "s.sqlite"
    res = CliRunner().invoke(main, ["--store", str(store), "run", str(path), "--no-progress"])
    assert res.exit_code != 0 and "Traceback" not in res.output
    assert len(_lines(res)) == 1 and "SN-4711" in res.output, res.output
    res = CliRunner().invoke(main, ["--store", str(store), "sessions", "--json"])
    assert "crane" not in res.output  # refused before a session was created: nothing moved
    ok = _crane_expecting(tmp_path, "SIM-crane-drive-sim")
    res = CliRunner().invoke(main, ["devices", str(ok), "--reads", "2", "--json"])
    assert res.exit_code == 0, res.output


def test_check_refuses_two_values_of_one_device_on_overlapping_registers(tmp_path):
    text = (CONFIGS / "press-sim.toml").read_text()
    text, n = re.subn(r'(?m)^(force\s+= \{ table = "input", address = )0', r"\g<1>2", text, count=1)
    assert n == 1
    path = tmp_path / "rig.toml"
    path.write_text(text)
    res = CliRunner().invoke(main, ["check", str(path)])
    assert res.exit_code == 1 and len(_lines(res)) == 1, res.output
    assert "[devices.force_source.registers.pressure].address" in res.output
    assert "overlaps 'force'" in res.output


def test_the_real_press_template_on_loopback_probes_every_device_at_once_one_line_each(tmp_path):
    """The template's devices as silent servers of this test (tests/held_devices.py; nothing of the template's
    own addresses is opened). They let go of their connections only once all four hold one, so each device
    ends with a lost connection only if the four were tried at once; tried in turn, the first would wait out
    its 5 s timeout while the others were never reached (``held.released`` stays False).

    A device whose connection went while a request was in flight may report that request's timeout (pymodbus
    over TCP does not always notice the close of a held connection before its timeout): which words the
    failure has is not what this test is about; that each device fails on its own line naming its address
    is."""
    names = ("force_source", *SENSORS)
    held = HeldDevices(names, release_at=len(names))
    try:
        path = press_template_on(held, tmp_path / "press.toml", timeout=5.0, connect_timeout=1.0)
        res = CliRunner().invoke(main, ["devices", str(path), "--reads", "1"])
    finally:
        held.close()
    assert res.exit_code == 1 and "Traceback" not in res.output
    assert held.released, res.output  # all four held a connection at the same time
    for name in names:
        port = held.ports[name]
        mine = [ln for ln in _lines(res) if name in ln and f"127.0.0.1:{port}" in ln]
        assert mine, res.output
        assert any(w in ln for ln in mine for w in ("connection lost", "disconnected", "cannot connect",
                                                     "no answer within")), res.output
