"""One typed config from the edge to the drivers (issue 30 part 1, issue 33 item 4's TOML part).

Nothing in a config is coerced: a string, a bool or a fraction where a number or a count belongs is one line
from `hil check` and `hil run`; a TOML nested thousands of tables deep is one line too. The drivers own
their settings tables and receive them typed, as the rig schema parsed them.
"""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import pytest
from click.testing import CliRunner

from daq.cli.main import main
from daq.config.load import ConfigError
from daq.rigs.config import load
from daq.rigs.drive import DriveDevice
from daq.rigs.press.config import ForceSourceDevice, SensorDevice
from drivers.displacement import SensorSettings
from drivers.force_source import ForceSource, ForceSourceSettings
from drivers.servo_drive import ServoDrive, ServoDriveConfig

CONFIGS = Path("configs").resolve()


def _one_line(args: list[str], *words: str) -> str:
    res = CliRunner().invoke(main, args)
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert res.exit_code == 1, res.output
    assert len(lines) == 1 and "Traceback" not in res.output, res.output[:2000]
    assert all(w in lines[0] for w in words), lines[0]
    return lines[0]


def _press(tmp_path: Path, pattern: str, repl: str) -> Path:
    text, n = re.subn(pattern, repl, (CONFIGS / "press-sim.toml").read_text(), count=1, flags=re.M)
    assert n == 1
    path = tmp_path / "rig.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("repl, words", [
    ('rate = "200"', ("[acquisition].rate", "must be a number", "'200'")),
    ("rate = true", ("[acquisition].rate", "must be a number", "True")),
    ("rate = 200", ()),  # an integer is a number
])
def test_a_string_or_bool_for_a_number_is_refused_by_check(tmp_path, repl, words):
    path = _press(tmp_path, r"^rate = 200.0", repl)
    if not words:
        res = CliRunner().invoke(main, ["check", str(path)])
        assert res.exit_code == 0, res.output
        return
    _one_line(["check", str(path)], *words)
    store = tmp_path / "s.sqlite"
    _one_line(["--store", str(store), "run", str(path), "--no-progress"], *words)
    assert not store.exists()


@pytest.mark.parametrize("pattern, repl, words", [
    (r"^n_series = 10", "n_series = 6.0", ("[plan].n_series", "must be an integer")),
    (r"^precondition = true", 'precondition = "yes"', ("[plan].precondition", "must be a boolean")),
    (r"^device_id = 1", 'device_id = "1"', ("[devices.force_source].device_id", "must be an integer")),
    (r"^friction_n = 40", "friction_n = 40.5", ("[simulator].truth", "friction_n", "whole number")),
])
def test_nothing_else_is_coerced_either(tmp_path, pattern, repl, words):
    _one_line(["check", str(_press(tmp_path, pattern, repl))], *words)


def test_a_toml_nested_thousands_deep_is_one_line(tmp_path):
    path = tmp_path / "deep.toml"
    path.write_text("[rig]\nkind = 'press'\n[x]\nv = " + "[" * 5000 + "]" * 5000 + "\n")
    _one_line(["check", str(path)], "deep.toml", "nested")
    _one_line(["--store", str(tmp_path / "s.sqlite"), "run", str(path)], "deep.toml", "nested")
    inline = tmp_path / "inline.toml"
    inline.write_text("a = " + "{b = " * 3000 + "1" + "}" * 3000 + "\n")
    _one_line(["check", str(inline)], "inline.toml", "nested")


def test_the_drivers_own_their_tables_and_get_them_typed():
    """The rig schema's device tables are the drivers' own structs (defaults and rules written once)."""
    assert DriveDevice is ServoDriveConfig
    assert ForceSourceDevice is ForceSourceSettings and SensorDevice is SensorSettings
    rig, cfg = load(CONFIGS / "press-sim.toml")
    src = ForceSource(cfg.devices.force_source)
    assert src.settings is cfg.devices.force_source  # handed over as it is, no dict in between
    _, crane = load(CONFIGS / "crane-sim.toml")
    drive = ServoDrive(crane.devices.drive)
    assert drive.cfg is crane.devices.drive and drive.cfg.security.mode == "none"


def test_programmatic_dicts_are_checked_by_the_same_struct():
    """A program (or a test) may still give a driver a dict: the struct converts and checks it."""
    with pytest.raises(ValueError, match="heartbeat_interval"):
        ServoDrive({"url": "opc.tcp://127.0.0.1:4840", "timeout": 0.1, "heartbeat_interval": 0.2})
    with pytest.raises(msgspec.ValidationError):
        ServoDrive({"url": "opc.tcp://127.0.0.1:4840", "timeout": "4"})


def test_load_parses_once_into_the_kinds_struct(tmp_path):
    rig, cfg = load(CONFIGS / "press-sim.toml")
    assert rig.kind == "press" and type(cfg).__name__ == "PressConfig"
    with pytest.raises(ConfigError, match=r"\[acquisition\]\.rate"):
        load(_press(tmp_path, r"^rate = 200.0", 'rate = "200"'))
