"""Templates of real rigs (configs/press.toml, configs/crane.toml) mark every value the site must supply
(``"<site: ...>"``, daq/config/site.py): `hil check`, `hil devices`, `hil run` and `hil serve` name each one
still unsupplied, one line each, and refuse before anything opens; filled in (here: pointed at loopback),
the template checks. The press's linkage constants are a typed table: a typo is refused, naming the key."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from daq.cli.main import main
from daq.config.load import ConfigError, SiteValuesMissing, parse
from daq.config.schema import Positive, Range, Table
from daq.config.site import marker
from daq.rigs.config import load
from daq.rigs.press.online import verdict_options
from identification.models.press_models import PressConstants
from simulators.certs import ensure_pki
from tests.serve_fixtures import ServerThread
from tests.site_values import (
    CONFIGS,
    crane_site_values,
    fill_site_values,
    filled_template,
    press_site_values,
    site_keys,
)

TEMPLATES = ("press.toml", "crane.toml")


def _lines(res) -> list[str]:
    return [ln for ln in res.output.splitlines() if ln.strip()]


def _named_keys(lines: list[str]) -> list[str]:
    """The key paths of a refusal's value lines (``  [devices.drive].url: what``), dotted."""
    keys = []
    for ln in lines[1:]:
        m = re.match(r"^  \[([^\]]+)\]\.(\w+): \S", ln)
        assert m, ln
        keys.append(f"{m.group(1)}.{m.group(2)}")
    return keys


def _invoke(command: str, path: Path, store: Path):
    args = {"check": ["check", str(path)],
            "devices": ["devices", str(path), "--reads", "1"],
            "run": ["--store", str(store), "run", str(path), "--no-progress"]}[command]
    return CliRunner().invoke(main, args)


@contextlib.contextmanager
def listeners(n: int) -> Iterator[list[socket.socket]]:
    """``n`` TCP listeners on loopback that accept nothing themselves: every connection a command made
    waits in their backlog, where :func:`connections` counts it."""
    socks = [socket.create_server(("127.0.0.1", 0)) for _ in range(n)]
    try:
        yield socks
    finally:
        for s in socks:
            s.close()


def connections(sock: socket.socket) -> int:
    """How many connections reached ``sock`` (taken from its backlog now)."""
    sock.setblocking(False)
    n = 0
    while True:
        try:
            conn, _ = sock.accept()
        except BlockingIOError:
            return n
        conn.close()
        n += 1


# ----------------------------------------------------------------------------------- the templates


@pytest.mark.parametrize("command", ["check", "devices", "run"])
@pytest.mark.parametrize("name", TEMPLATES)
def test_each_real_template_is_refused_naming_every_site_value_one_line_each(name, command, tmp_path):
    path = CONFIGS / name
    keys = site_keys(path.read_text())
    assert len(keys) >= 10  # addresses, ids, paths, limits, the analysis' own constants
    store = tmp_path / "s.sqlite"
    res = _invoke(command, path, store)
    lines = _lines(res)
    assert res.exit_code == 1 and "Traceback" not in res.output, res.output
    n = len(keys)
    assert lines[0] == (f"Error: {path}: not runnable: {n} values the site must supply are not filled in "
                        '(replace each "<site: ...>" in the file):'), res.output
    assert _named_keys(lines) == keys  # every value, once, in the file's order
    assert len(lines) == 1 + n
    assert not store.exists()  # `hil run` opened no store: no session


def test_the_press_template_marks_its_addresses_ids_sigmas_limit_and_linkage_constants():
    keys = site_keys((CONFIGS / "press.toml").read_text())
    for key in ("devices.force_source.host", "devices.force_source.port", "devices.force_source.device_id",
                "devices.force_source.f_max", "analysis.constants.k_lever", "analysis.constants.b0_ratio"):
        assert key in keys
    for sensor in ("D_vertical", "F_horizontal", "B0_vertical"):
        for key in ("url", "baudrate", "sigma"):
            assert f"devices.sensors.{sensor}.{key}" in keys
    text = (CONFIGS / "press.toml").read_text()
    assert "192.168." not in text and "/dev/ttyUSB" not in text  # no placeholder that looks like a value


def test_the_crane_template_marks_its_endpoint_pki_user_limits_and_search_box():
    keys = site_keys((CONFIGS / "crane.toml").read_text())
    for key in ("devices.drive.url", "devices.drive.namespace", "devices.drive.torque_limit",
                "devices.drive.speed_limit", "devices.drive.security.certificate",
                "devices.drive.security.private_key", "devices.drive.security.server_certificate",
                "devices.drive.security.user", "model_selection.bounds.J1", "model_selection.bounds.k23"):
        assert key in keys
    assert "192.168." not in (CONFIGS / "crane.toml").read_text()


#: what a refusal of a template must not have loaded: its rig kind, the run machinery, the protocol stacks,
#: the math
PROBE = """
import json, sys
from click.testing import CliRunner
from daq.cli.main import main
res = CliRunner().invoke(main, sys.argv[1:])
heavy = ("daq.rigs.press", "daq.rigs.crane", "daq.run", "daq.commission", "simulators", "identification",
         "scipy", "pymodbus", "asyncua", "serial")
print(json.dumps([res.exit_code, sorted(m for m in sys.modules if any(m == h or m.startswith(h + ".")
                                                                      for h in heavy))]))
"""


@pytest.mark.parametrize("command", ["check", "devices", "run"])
@pytest.mark.parametrize("name", TEMPLATES)
def test_a_template_is_refused_before_its_rig_kind_or_any_driver_is_imported(name, command, tmp_path):
    """What makes the refusal immediate on any machine (measured on sys.modules, not on a clock): the
    markers are read off the TOML before the rig kind's code (drivers, simulators, scipy) is imported."""
    args = {"check": ["check"], "devices": ["devices"],
            "run": ["--store", str(tmp_path / "s.sqlite"), "run"]}[command] + [str(CONFIGS / name)]
    out = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True,
                         cwd=CONFIGS.parent, timeout=120, check=True).stdout
    code, heavy = json.loads(out.splitlines()[-1])
    assert code == 1 and heavy == []


def test_the_loopback_listener_counts_a_connection():
    """The counter the refusal tests rely on sees a connection when one is made."""
    with listeners(1) as (sock,):
        socket.create_connection(sock.getsockname(), timeout=5).close()
        assert connections(sock) == 1 and connections(sock) == 0


@pytest.mark.parametrize("left", ["devices.sensors.B0_vertical.sigma", "analysis.constants.b0_ratio"])
def test_one_value_left_unsupplied_refuses_devices_and_run_before_any_device_is_reached(left, tmp_path):
    """Every address filled in and pointed at a loopback listener, one value left: `hil devices` and `hil run`
    name that one value and no listener sees a connection; no session is made."""
    with listeners(4) as socks:
        ports = [s.getsockname()[1] for s in socks]
        values = press_site_values(ports[0], {n: f"socket://127.0.0.1:{p}" for n, p in
                                              zip(("D_vertical", "F_horizontal", "B0_vertical"), ports[1:],
                                                  strict=True)})
        del values[left]
        path = filled_template("press.toml", values, tmp_path)
        store = tmp_path / "s.sqlite"
        for command in ("check", "devices", "run"):
            res = _invoke(command, path, store)
            lines = _lines(res)
            assert res.exit_code == 1 and len(lines) == 2, res.output
            assert "1 value the site must supply is not filled in" in lines[0]
            assert _named_keys(lines) == [left]
            assert [connections(s) for s in socks] == [0, 0, 0, 0], command
        assert not store.exists()


def test_the_crane_with_its_search_box_left_open_reaches_no_drive(tmp_path):
    with listeners(1) as (sock,):
        values = crane_site_values(f"opc.tcp://127.0.0.1:{sock.getsockname()[1]}/hil/crane")
        del values["model_selection.bounds.k23"]
        path = filled_template("crane.toml", values, tmp_path)
        store = tmp_path / "s.sqlite"
        for command in ("devices", "run"):
            res = _invoke(command, path, store)
            assert res.exit_code == 1, res.output
            assert _named_keys(_lines(res)) == ["model_selection.bounds.k23"], res.output
            assert connections(sock) == 0
        assert not store.exists()


def test_the_press_template_filled_in_on_loopback_checks(tmp_path):
    path = filled_template("press.toml", press_site_values(15020), tmp_path)
    res = CliRunner().invoke(main, ["check", str(path)])
    assert res.exit_code == 0 and res.output.strip() == f"{path}: ok (press)", res.output
    _, cfg = load(path)
    assert cfg.devices.force_source.host == "127.0.0.1" and cfg.devices.force_source.port == 15020
    assert cfg.devices.sensors["D_vertical"].url == "socket://127.0.0.1:15021"
    assert cfg.analysis.linkage() == PressConstants(k_lever=1.0e9, k_guide=5.0e8, k_joint=1.2e9,
                                                    joint_beta=2.0e8, b0_ratio=0.2)


def test_the_crane_template_filled_in_checks_once_its_pki_and_password_exist(tmp_path, monkeypatch):
    """Filled in, the crane's template still needs what a run needs beside the file: the PKI files it
    names (read by `hil check`) and the password's variable."""
    monkeypatch.delenv("HIL_CRANE_PASSWORD", raising=False)
    path = filled_template("crane.toml", crane_site_values("opc.tcp://127.0.0.1:4840/hil/crane"), tmp_path)
    res = CliRunner().invoke(main, ["check", str(path)])
    assert res.exit_code == 1 and len(_lines(res)) == 1, res.output
    assert "[devices.drive.security].certificate" in res.output and "client_cert.der" in res.output
    asyncio.run(ensure_pki(tmp_path / "pki" / "crane"))
    res = CliRunner().invoke(main, ["check", str(path)])
    assert res.exit_code == 1 and "[devices.drive.security].password_env" in res.output, res.output
    monkeypatch.setenv("HIL_CRANE_PASSWORD", "secret")
    res = CliRunner().invoke(main, ["check", str(path)])
    assert res.exit_code == 0 and res.output.strip() == f"{path}: ok (crane)", res.output


def test_fill_site_values_refuses_a_key_that_holds_no_marker():
    text = (CONFIGS / "press.toml").read_text()
    with pytest.raises(KeyError, match="plan.q_max"):
        fill_site_values(text, {"plan.q_max": 1.0})
    partly = fill_site_values(text, {"[devices.force_source].host": "127.0.0.1"})
    assert 'host = "127.0.0.1"' in partly
    assert "devices.force_source.host" not in site_keys(partly) and len(site_keys(partly)) == len(
        site_keys(text)) - 1


# ----------------------------------------------------------------------------------- hil serve


def test_serve_lists_the_templates_as_not_runnable_with_the_words_of_hil_check(tmp_path):
    configs = tmp_path / "configs"
    configs.mkdir()
    for name in TEMPLATES:
        (configs / name).write_text((CONFIGS / name).read_text())
    srv = ServerThread(configs, tmp_path / "store" / "s.sqlite", tmp_path / "tokens").start()
    try:
        headers = {"Authorization": f"Bearer {srv.token}"}
        with httpx.Client(base_url=srv.url, headers=headers, timeout=30) as http:
            listed = {c["name"]: c for c in http.get("/api/configs").json()}
            for name in TEMPLATES:
                entry = listed[name]
                res = CliRunner().invoke(main, ["check", str(configs / name)])
                lines = _lines(res)
                assert entry["ok"] is False and entry["kind"] is None
                assert f"Error: {entry['error']}:" == lines[0]  # the same words as `hil check`
                assert [f"  {ln}" for ln in entry["unsupplied"]] == lines[1:]
                reply = http.post("/api/runs", json={"config": name})
                assert reply.status_code == 422
                assert reply.json() == {"error": entry["error"], "unsupplied": entry["unsupplied"]}
            snap = http.get("/api/runs").json()
            assert snap["queued"] == [] and snap["current"] is None and snap["finished"] == []
    finally:
        srv.stop()


# ----------------------------------------------------------------------------------- the config walk


class _Link(Table, kw_only=True):
    host: str
    port: int = 502


class _Box(Table, kw_only=True):
    link: _Link
    gain: Positive = 1.0
    span: Range | None = None


def test_a_marker_stands_for_any_value_or_table_and_every_one_is_named_in_the_files_order():
    raw = {"span": marker("[lo, hi] m"), "link": {"port": marker("port"), "host": marker("host name")},
           "gain": marker("gain, 1")}
    with pytest.raises(SiteValuesMissing) as err:
        parse(raw, _Box, "x.toml")
    assert err.value.lines == ["span: [lo, hi] m", "[link].port: port", "[link].host: host name",
                               "gain: gain, 1"]
    with pytest.raises(SiteValuesMissing) as err:
        parse({"link": marker("the whole link table")}, _Box, "x.toml")
    assert err.value.lines == ["link: the whole link table"]


def test_a_marker_does_not_hide_a_mistake_elsewhere():
    with pytest.raises(ConfigError) as err:
        parse({"link": {"host": marker("host"), "prot": 1}}, _Box, "x.toml")
    assert not isinstance(err.value, SiteValuesMissing)
    assert "[link].prot: unknown key (did you mean port?)" in str(err.value)
    with pytest.raises(ConfigError) as err:
        parse({"link": {"host": "h"}, "gain": -1.0, "span": marker("span")}, _Box, "x.toml")
    assert "gain" in str(err.value) and not isinstance(err.value, SiteValuesMissing)


def test_text_that_only_looks_like_a_marker_is_a_value():
    cfg = parse({"link": {"host": "site: <local>"}}, _Box, "x.toml")
    assert cfg.link.host == "site: <local>"


# ----------------------------------------------------------------------------------- press constants


def _press_sim_with(tmp_path: Path, constants: str) -> Path:
    path = tmp_path / "press.toml"
    path.write_text((CONFIGS / "press-sim.toml").read_text() + "\n[analysis.constants]\n" + constants)
    return path


FULL = "k_lever = 1.1e9\nk_guide = 5.5e8\nk_joint = 1.3e9\njoint_beta = 1.0e8\nb0_ratio = 0.25\n"


def test_a_typo_in_a_press_constant_is_refused_naming_the_key(tmp_path):
    path = _press_sim_with(tmp_path, FULL.replace("k_lever", "k_levr"))
    res = CliRunner().invoke(main, ["check", str(path)])
    assert res.exit_code == 1 and len(_lines(res)) == 1, res.output
    assert "[analysis.constants].k_levr: unknown key (did you mean k_lever?)" in res.output


def test_a_press_constants_table_gives_every_constant_or_is_refused(tmp_path):
    path = _press_sim_with(tmp_path, FULL.replace("b0_ratio = 0.25\n", ""))
    res = CliRunner().invoke(main, ["check", str(path)])
    assert res.exit_code == 1 and "[analysis.constants].b0_ratio: missing required key" in res.output
    path = _press_sim_with(tmp_path, FULL.replace("k_joint = 1.3e9", 'k_joint = "1.3e9"'))
    res = CliRunner().invoke(main, ["check", str(path)])
    assert res.exit_code == 1 and "[analysis.constants].k_joint: must be a number" in res.output


def test_the_press_constants_given_are_the_ones_the_analysis_and_the_online_verdict_use(tmp_path):
    _, cfg = load(_press_sim_with(tmp_path, FULL))
    given = PressConstants(k_lever=1.1e9, k_guide=5.5e8, k_joint=1.3e9, joint_beta=1.0e8, b0_ratio=0.25)
    assert cfg.analysis.linkage() == given and verdict_options(cfg.analysis)["constants"] == given
    _, sim = load(CONFIGS / "press-sim.toml")  # the simulated press keeps the simulator's values
    assert sim.analysis.constants is None and verdict_options(sim.analysis)["constants"] is None


def test_a_real_press_without_its_linkage_constants_is_refused(tmp_path):
    values = {k: v for k, v in press_site_values(15020).items() if not k.startswith("analysis.constants")}
    text = fill_site_values((CONFIGS / "press.toml").read_text(), values)
    text = text[:text.index("[analysis.constants]")]
    path = tmp_path / "press.toml"
    path.write_text(text)
    res = CliRunner().invoke(main, ["check", str(path)])
    assert res.exit_code == 1 and len(_lines(res)) == 1, res.output
    assert "[analysis.constants]: missing required table: a real press needs its linkage's own" in res.output


def test_press_constants_from_a_mapping_refuse_an_unknown_name():
    with pytest.raises(ValueError, match="k_levr"):
        PressConstants.from_dict({"k_levr": 1.0e9})
    assert PressConstants.from_dict({"k_lever": 2.0e9}).k_lever == 2.0e9
