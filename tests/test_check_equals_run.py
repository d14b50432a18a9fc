"""`hil check` refuses everything `hil run` cannot do (issue 19, part 1).

One case per kind of defect that passed `check` and then failed at start, hung or misread: each is now
one line naming the key path, with no traceback, before anything opens - and `hil run` refuses the same
config the same way. Then a property over the shipped configs: edit one number at a time; `check` either
refuses naming that key, or everything `hil run` builds before the first byte to a device builds.
"""

from __future__ import annotations

import copy
import math
import re
import tomllib
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daq.cli.main import main
from daq.config.load import ConfigError, key_path, read_toml, resolve_paths
from daq.rigs import check_rules, parse_config
from daq.rigs.config import load_config
from tests.site_values import fill_site_values, press_site_values

CONFIGS = Path("configs").resolve()


def _text(name: str) -> str:
    return (CONFIGS / f"{name}.toml").read_text()


def _edit(text: str, pattern: str, repl: str) -> str:
    out, n = re.subn(pattern, repl, text, count=1, flags=re.M)
    assert n == 1, pattern
    return out


def _write(folder: Path, text: str, name: str = "rig.toml") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text)
    return path


def _refused(args: list[str], key: str, *words: str) -> str:
    res = CliRunner().invoke(main, args)
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert res.exit_code == 1, res.output
    assert len(lines) == 1 and "Traceback" not in res.output, res.output
    assert key in lines[0] and all(w in lines[0] for w in words), lines[0]
    return lines[0]


def _check_refuses(path: Path, key: str, *words: str) -> str:
    return _refused(["check", str(path)], key, *words)


# --------------------------------------------------------------------------------- one case per defect


NUMBERS = [  # (config, line pattern, replacement, key path, words in the message)
    ("press-sim", r"^seed = \d+", "seed = -1", "[simulator].seed", ("-1", ">= 0")),
    ("press-sim", r"^n_series = \d+", "n_series = 2", "[plan].n_series", ("at least 3",)),
    ("press-sim", r"^settle_time = [\d.]+", "settle_time = 1e300", "[plan].settle_time", ("1e+300", "<= 60")),
    ("press-sim", r"^settle_time = [\d.]+", "settle_time = nan", "[plan].settle_time", ("nan",)),
    ("press-sim", r"^timeout = [\d.]+", "timeout = inf", "].timeout", ("inf",)),
    ("press-sim", r"scale = 1.0e-7, unit", "scale = 1.0e-12, unit",
     "[devices.sensors.F_horizontal.registers.displacement].scale", ("int32",)),
    ("crane-sim", r"^n_lines = \d+", "n_lines = 90000", "[excitation].n_lines", ("90000 lines",)),
    ("crane-sim", r"^max_sample_time = [\d.]+", "max_sample_time = 1e300",
     "[simulator.drive].max_sample_time", ("1e+300",)),
    ("oscillator-sim", r"^cycle_time = [\d.e-]+", "cycle_time = 0.003", "[adjoint].dt", ("cycle_time",)),
    ("machine-tool-sim", r"^seed = \d+", "seed = -1", "].seed", ("-1",)),
]


@pytest.mark.parametrize("name, pattern, repl, key, words", NUMBERS,
                         ids=[f"{n}-{k}-{r}" for n, _, r, k, _ in NUMBERS])
def test_a_number_outside_what_the_rig_can_do_is_one_line_naming_it(tmp_path, name, pattern, repl, key,
                                                                     words):
    path = _write(tmp_path, _edit(_text(name), pattern, repl))
    _check_refuses(path, key, *words)


def test_run_refuses_what_check_refuses_before_anything_opens(tmp_path):
    path = _write(tmp_path, _edit(_text("press-sim"), r"^seed = \d+", "seed = -1"))
    store = tmp_path / "s.sqlite"
    _refused(["--store", str(store), "run", str(path), "--no-progress"], "[simulator].seed", "-1")
    assert not store.exists()  # no session, no store, no device


def test_application_uri_the_driver_does_not_take_is_refused(tmp_path):
    # the client's URI is the one in its certificate; the schema took the key and the driver refused it
    text = _edit(_text("crane-sim"), r"^\[devices.drive.security\].*$",
                 "[devices.drive.security]\napplication_uri = \"urn:hil-lab:client\"")
    _check_refuses(_write(tmp_path, text), "[devices.drive.security].application_uri", "unknown key")


def test_secure_drive_needs_its_certificate_files(tmp_path):
    text = _edit(_text("crane-sim"), r"^mode = \"none\".*$",
                 "mode = \"Basic256Sha256_SignAndEncrypt\"\ncertificate = \"c.der\"\n"
                 "private_key = \"k.pem\"\nserver_certificate = \"s.der\"")
    path = _write(tmp_path / "cfg", text)
    _check_refuses(path, "[devices.drive.security].certificate", str(tmp_path / "cfg" / "c.der"))
    (tmp_path / "cfg" / "c.der").write_bytes(b"not a certificate")
    _check_refuses(path, "[devices.drive.security].certificate", "no readable certificate")


def test_empty_path_is_refused(tmp_path):
    path = _write(tmp_path, _text("press-sim") + "\n[store]\npath = \"\"\n")
    _check_refuses(path, "[store].path", "non-empty")


def _trajectory(path: Path, dt: float, n: int) -> None:
    t = np.arange(n) * dt
    np.savetxt(path, np.column_stack([t, 0.1 * np.sin(t)]), delimiter=",", header="t [s],force [N]",
               comments="")


def test_trajectory_is_read_against_the_config_folder_and_its_sample_time_checked(tmp_path, monkeypatch):
    """[plan].trajectory is the file next to the config, from any working directory; its sample time
    must be [adjoint].dt (0.005 s in the shipped oscillator): a file at 0.01 s is refused by check."""
    text = _edit(_text("oscillator-sim"), r"^trajectory = .*$", "trajectory = \"design/trajectory.csv\"")
    text = _edit(text, r"^design_if_missing = .*$", "design_if_missing = false")
    path = _write(tmp_path / "cfg", text)
    (tmp_path / "cfg" / "design").mkdir()
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "design").mkdir(parents=True)
    _trajectory(elsewhere / "design" / "trajectory.csv", 0.005, 200)  # right, but in the wrong folder
    monkeypatch.chdir(elsewhere)
    _check_refuses(path, "[plan].trajectory", "not found", str(tmp_path / "cfg" / "design"))
    _trajectory(tmp_path / "cfg" / "design" / "trajectory.csv", 0.01, 100)
    _check_refuses(path, "[plan].trajectory", "sample time 0.01 s", "[adjoint].dt = 0.005")
    _trajectory(tmp_path / "cfg" / "design" / "trajectory.csv", 0.005, 200)
    res = CliRunner().invoke(main, ["check", str(path)])
    assert res.exit_code == 0, res.output


def test_every_relative_path_resolves_against_the_config_folder(tmp_path, monkeypatch):
    text = _edit(_text("crane-sim"), r"^export_dir = .*$", "export_dir = \"out/excitation\"")
    text = _edit(text, r"^pki_dir = .*$", "pki_dir = \"pki\"")
    text += "\n[store]\npath = \"store/hil.sqlite\"\n"
    path = _write(tmp_path / "cfg", text)
    monkeypatch.chdir(tmp_path)
    raw = load_config("cfg/rig.toml")
    folder = tmp_path / "cfg"
    assert raw["excitation"]["export_dir"] == str(folder / "out" / "excitation")
    assert raw["simulator"]["drive"]["pki_dir"] == str(folder / "pki")
    assert raw["store"]["path"] == str(folder / "store" / "hil.sqlite")
    # check sees the same files: an export folder that is a file next to the config is refused
    (folder / "out").mkdir()
    (folder / "out" / "excitation").write_text("a file")
    _check_refuses(path, "[excitation].export_dir", "is a file")


def test_simulated_press_has_only_the_plants_sensors(tmp_path):
    text = _text("press-sim").replace("D_vertical", "D_vert")
    _check_refuses(_write(tmp_path, text), "[devices.sensors.D_vert]", "no sensor")


# --------------------------------------------------------------------------------- property


#: the shipped configs that run here: the simulated rigs, and the real press's template filled in as a site
#: would, on loopback (the real crane's also needs its site's certificates: see
#: tests/test_site_values.py::test_the_crane_template_filled_in_checks_once_its_pki_and_password_exist)
SHIPPED = ["press-sim", "press", "crane-sim", "machine-tool-sim", "oscillator-sim", "pendulum-sim",
           "crane-adjoint-sim"]
RAW = {name: read_toml(CONFIGS / f"{name}.toml") for name in SHIPPED if name != "press"}
RAW["press"] = tomllib.loads(fill_site_values((CONFIGS / "press.toml").read_text(), press_site_values(15020)))


def _numbers(node, path=()):
    """Every numeric leaf of a config tree (list items included) as (path, value)."""
    items = node.items() if isinstance(node, dict) else enumerate(node)
    for key, value in items:
        if isinstance(value, dict | list):
            yield from _numbers(value, (*path, key))
        elif isinstance(value, int | float) and not isinstance(value, bool):
            yield (*path, key), value


LEAVES = {name: list(_numbers(raw)) for name, raw in RAW.items()}


def _pre_device(raw: dict, file: Path) -> None:
    """What `hil run` does before the first byte to a device: the schema, the paths, the rig's rules
    (models, files, drivers built), and the simulated devices built (not started)."""
    rig, _ = parse_config(raw, file)
    resolve_paths(raw, rig.schema, file.parent)
    rig, cfg = parse_config(raw, file)
    check_rules(rig, cfg, file)
    if cfg.rig.simulated:
        rig.simulator(cfg)


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(SHIPPED), pick=st.integers(0, 10_000), data=st.data())
def test_one_edited_number_is_refused_naming_it_or_builds_everything_before_the_first_byte(name, pick, data):
    raw = copy.deepcopy(RAW[name])
    path, old = LEAVES[name][pick % len(LEAVES[name])]
    if isinstance(old, int):
        new = data.draw(st.one_of(st.sampled_from([-1, 0, 1, 2, old + 1, old - 1, 10 * old, 2**40]),
                                  st.integers(-10**6, 10**6)))
    else:
        new = data.draw(st.one_of(
            st.sampled_from([-1.0, 0.0, 1e300, math.inf, -math.inf, math.nan, 1e-300, -old, 0.5 * old,
                             2 * old, 1e3 * old, 1e-3 * old]),
            st.floats(-1e9, 1e9)))
    node = raw
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = new
    file = CONFIGS / f"{name}.toml"
    try:
        _pre_device(raw, file)
    except ConfigError as exc:
        text = str(exc)
        assert "\n" not in text and text.startswith(f"{file}: ")
        table = [str(p) for p in path[:-1] if isinstance(p, str)]
        leaf = path[-1] if isinstance(path[-1], str) else path[-2]
        # the edited key, or a relation that names it
        named = exc.key in (key_path([*table, str(leaf)], False), key_path(table, True)) or str(leaf) in text
        assert named, f"{'.'.join(map(str, path))} = {new!r}: {text}"
