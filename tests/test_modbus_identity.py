"""Modbus device identification (function 43 / MEI 14) in `hil devices` and `hil run` (issue 34).

The simulated press devices answer it with their own identity (simulators/press_devices.py), not the
config's; a config may say what it expects (``[devices.<name>.expect]``, as the drive has).
"""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
from click.testing import CliRunner

from daq.cli.main import main
from daq.commission.probe import probe_devices
from daq.rigs.config import load
from drivers.modbus_identity import NO_IDENTITY

CONFIGS = Path("configs").resolve()


def _lines(res) -> list[str]:
    return [ln for ln in res.output.splitlines() if ln.strip()]


async def _probe(without_identity: str | None = None, expect: dict[str, dict[str, str]] | None = None):
    """Probe the shipped simulated press (``without_identity``: that device does not offer FC43;
    ``expect``: device -> expected identity); returns (reports by name, writes the devices received)."""
    rig, cfg = load(CONFIGS / "press-sim.toml")
    sim = rig.simulator(cfg)
    await sim.start()
    try:
        if without_identity:
            sim.devices[without_identity].server.identity = None
        devices = rig.simulated_devices(sim, cfg)
        for name, want in (expect or {}).items():
            if name == "force_source":
                devices = msgspec.structs.replace(devices, force_source=msgspec.structs.replace(
                    devices.force_source, expect=want))
            else:
                s = msgspec.structs.replace(devices.sensors[name], expect=want)
                devices = msgspec.structs.replace(devices, sensors={**devices.sensors, name: s})
        reports = await probe_devices(devices, 2)
        writes = sum(d.server.n_writes for d in sim.devices.values() if hasattr(d, "server"))
    finally:
        await sim.stop()
    return {r.name: r for r in reports}, writes


async def test_each_simulated_modbus_device_answers_with_its_own_identity():
    reports, writes = await _probe()
    assert writes == 0
    assert reports["force_source"].identity["serial_number"] == "PFS-0425"
    assert reports["force_source"].identity["revision"] == "2.3.1"
    assert reports["force_source"].identity["vendor_name"] == "SIMLAB"
    assert reports["D_vertical"].identity["serial_number"] == "LV-1101"  # RTU, unit id 1
    assert reports["F_horizontal"].identity["serial_number"] == "EC-2202"  # RTU, unit id 2
    assert reports["F_horizontal"].identity["model_name"] == "SIMLAB EC-10 eddy-current transmitter"
    assert all(r.ok for r in reports.values())


async def test_a_device_without_identification_is_noted_not_failed():
    reports, _ = await _probe(without_identity="D_vertical")
    rep = reports["D_vertical"]
    assert rep.identity == {"identity": NO_IDENTITY} and rep.ok, rep.to_dict()
    assert reports["F_horizontal"].identity["serial_number"] == "EC-2202"  # the others still answer


async def test_an_expected_identity_is_checked_in_words():
    reports, writes = await _probe(expect={"force_source": {"serial_number": "PFS-0425"},
                                           "F_horizontal": {"serial_number": "EC-9999"}})
    assert writes == 0
    assert reports["force_source"].ok
    rep = reports["F_horizontal"]
    assert not rep.ok
    assert "serial_number 'EC-2202' where 'EC-9999' is expected" in rep.error, rep.error
    assert "not the configured one" in rep.error
    reports, _ = await _probe(without_identity="D_vertical", expect={"D_vertical": {"model_name": "x"}})
    assert not reports["D_vertical"].ok
    assert "does not answer device identification (FC43)" in reports["D_vertical"].error


def _press_expecting(tmp_path: Path, serial: str) -> Path:
    text = (CONFIGS / "press-sim.toml").read_text()
    expect = f'[devices.force_source.expect]\nserial_number = "{serial}"\n\n[devices.force_source.registers]'
    text, n = re.subn(r"(?m)^\[devices.force_source.registers\]", expect, text, count=1)
    assert n == 1
    text = re.sub(r"(?m)^n_series = \d+", "n_series = 3", text)
    text = re.sub(r"(?m)^n_steps_up = \d+", "n_steps_up = 1", text)
    path = tmp_path / "press.toml"
    path.write_text(text)
    return path


def test_hil_devices_and_hil_run_refuse_a_force_source_with_another_serial_number(tmp_path):
    path = _press_expecting(tmp_path, "PFS-0001")
    res = CliRunner().invoke(main, ["devices", str(path), "--reads", "2"])
    assert res.exit_code == 1, res.output
    assert "serial_number 'PFS-0425' where 'PFS-0001' is expected" in res.output, res.output
    store = tmp_path / "s.sqlite"
    res = CliRunner().invoke(main, ["--store", str(store), "run", str(path), "--dry-run", "--no-progress"])
    assert res.exit_code != 0 and "Traceback" not in res.output
    assert len(_lines(res)) == 1 and "PFS-0001" in res.output, res.output
    res = CliRunner().invoke(main, ["--store", str(store), "sessions", "--json"])
    assert "press" not in res.output  # refused before a session was created
    ok = _press_expecting(tmp_path, "PFS-0425")
    res = CliRunner().invoke(main, ["devices", str(ok), "--reads", "2"])
    assert res.exit_code == 0, res.output


def test_check_refuses_an_expect_key_that_is_no_identification_object(tmp_path):
    path = _press_expecting(tmp_path, "PFS-0425")
    path.write_text(path.read_text().replace('serial_number = "PFS-0425"', 'serial = "PFS-0425"'))
    res = CliRunner().invoke(main, ["check", str(path)])
    assert res.exit_code == 1 and len(_lines(res)) == 1, res.output
    assert "[devices.force_source.expect].serial" in res.output and "serial_number" in res.output
