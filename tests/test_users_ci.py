"""Users' CI (issue 43): ``daq.testing`` runs a lab's config on its simulated rig from a test -
through the run lifecycle of ``hil run``, on loopback port 0, into a temporary store that is removed - and
returns the session and the analysis; a real rig's config is refused in one line; docs/examples/ runs as a
lab would run it."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from daq.config.load import ConfigError
from daq.testing import loopback_config, run_simulated, run_simulated_async

ROOT = Path(__file__).resolve().parent.parent
PRESS = ROOT / "configs" / "press-sim.toml"
OSCILLATOR = ROOT / "configs" / "oscillator-sim.toml"
SHORT_PRESS = {  # the example's short plan: 3 series of 5 setpoints, 4 readings each
    "plan": {"n_series": 3, "n_steps_up": 2, "n_samples": 4, "settle_time": 0.02, "q_max": 12000.0},
    "correction": {"tolerance": 60.0, "max_iterations": 6},
}


@pytest.fixture
def own_tempdir(tmp_path, monkeypatch):
    """Temporary files of this test go to its own folder, so what is left there afterwards is this test's."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


@pytest.fixture
def taken_port():
    """A loopback port that stays taken for the test (a config that names it must not collide)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]


def test_a_run_returns_the_session_with_its_streams_units_counts_and_a_confirmed_safe_state(own_tempdir,
                                                                                          taken_port):
    # the lab's config names fixed ports, one of them taken: the test run moves every device and the bus to
    # loopback port 0 and still completes
    fixed = {"devices": {"force_source": {"port": taken_port}},
             "bus": {"data": f"tcp://127.0.0.1:{taken_port}", "tap": f"tcp://127.0.0.1:{taken_port}"}}
    # speed 5, as docs/examples/test_my_press.py: at 10 a press run in a busy worker of a slow 2-core machine
    # can fall behind its clock and stop (safe, as it should: tests/test_sim_clock.py); what is tested here is
    # the session the API returns
    run = run_simulated(PRESS, speed=5, overrides={**SHORT_PRESS, **fixed}, read=["press.sensors"])
    session = run.session
    assert session.ok, session.describe()
    assert session.kind == "press" and session.status == "complete" and session.reason is None
    assert session.safe and session.safe_errors == []
    assert session.sim_speed == 5.0 and session.config["simulator"]["speed"] == 5.0
    assert session.config["devices"]["force_source"]["port"] not in (0, taken_port)
    assert set(session.streams) >= {"press.force", "press.sensors", "press.plan", "press.run"}
    force, sensors = session.streams["press.force"], session.streams["press.sensors"]
    assert force.type == "frame" and force.units == ["N", "N", "Pa"]
    assert force.unit("pressure") == "Pa"
    with pytest.raises(KeyError, match="no channel 'torque'"):
        force.unit("torque")
    assert sensors.channels == ["D_vertical", "F_horizontal", "B0_vertical"] and sensors.units == ["m"] * 3
    assert session.summary["setpoints"] == 15 and sensors.samples == 15 * 4
    assert run.data["press.sensors"].data.shape == (60, 3)  # the samples asked for, copied out
    assert session.plan_outcome == {"status": "complete", "reason": None, "safe": True, "safe_errors": [],
                                    "safe_failed_steps": [], "summary": session.summary}
    assert run.analysis is not None and run.report is not None
    assert set(run.analysis["verdicts"]) == {"M1", "M2", "M3"}
    assert run.analysis["verdicts"]["M3"] == "keep" and "Model-uncertainty test" in run.report
    m3 = run.analysis["models"]["M3"]
    assert len(m3["p"]) == len(m3["std_errors"]) == 2 and all(se > 0 for se in m3["std_errors"])
    # the temporary store (and the folder the run announced itself in) is gone
    store = Path(session.config["store"]["path"])
    assert store.name == "sessions.sqlite" and store.parent.parent == own_tempdir
    assert list(own_tempdir.iterdir()) == []


def test_a_plan_that_faults_ends_safe_and_the_result_says_so(own_tempdir):
    # s: shorter than any gap between the driver's writes
    fault = {"simulator": {"force_source": {"watchdog_timeout": 0.001}}}
    run = run_simulated(PRESS, speed=10, overrides={**SHORT_PRESS, **fault})
    session = run.session
    assert session.status == "aborted" and not session.ok
    assert "force source fault code 1" in session.reason and "watchdog" in session.reason
    assert session.safe and session.safe_errors == []
    assert session.plan_outcome is not None
    assert session.plan_outcome["status"] == "aborted" and session.plan_outcome["safe"] is True
    assert session.plan_outcome["reason"] == session.reason
    assert "safe state confirmed" in session.describe() and "aborted" in session.describe()
    assert run.analysis is None and run.report is None
    assert list(own_tempdir.iterdir()) == []


@pytest.mark.parametrize("template", ["press.toml", "crane.toml"])
def test_a_real_template_is_refused_in_one_line_before_anything_opens(template, own_tempdir):
    with pytest.raises(ConfigError) as refused:
        run_simulated(ROOT / "configs" / template)
    text = str(refused.value)
    assert "\n" not in text and "sim speed 10 refused: not a simulated rig" in text
    assert list(own_tempdir.iterdir()) == []  # no temporary store was even made


def test_a_simulated_rig_without_its_simulator_table_or_at_a_speed_out_of_range_is_refused(tmp_path):
    no_simulator = tmp_path / "no-simulator.toml"
    no_simulator.write_text('[rig]\nkind = "press"\nsimulated = true\n')
    with pytest.raises(ConfigError, match="not a simulated rig"):
        run_simulated(no_simulator)
    with pytest.raises(ConfigError, match="out of range"):
        run_simulated(OSCILLATOR, speed=1e6)


def test_a_broken_override_is_one_config_error_and_leaves_no_temporary_store(own_tempdir):
    with pytest.raises(ConfigError) as refused:
        run_simulated(PRESS, overrides={"plan": {"n_series": "three"}})
    assert "n_series" in str(refused.value) and "\n" not in str(refused.value)
    assert list(own_tempdir.iterdir()) == []


async def test_the_sync_call_inside_an_event_loop_names_the_async_one():
    with pytest.raises(RuntimeError, match="await run_simulated_async"):
        run_simulated(OSCILLATOR)


def test_loopback_config_moves_every_device_and_the_bus_to_loopback_port_0(tmp_path):
    raw = {"rig": {"kind": "crane", "simulated": True},
           "bus": {"data": "tcp://127.0.0.1:5555", "tap": "tcp://127.0.0.1:5557"},
           "store": {"path": "/var/lib/hil/lab.sqlite"}, "lab": {"url": "http://lab.invalid"},
           "simulator": {"drive": {"host": "0.0.0.0", "port": 4840, "secure_port": 4843,
                                   "pki_dir": "sessions/pki/crane"}},
           "devices": {"force_source": {"host": "10.0.0.5", "port": 502},
                       "sensors": {"D": {"url": "socket://127.0.0.1:5021"}}}}
    out = loopback_config(raw, tmp_path)
    assert out["bus"] == {"data": "tcp://127.0.0.1:0", "command": "tcp://127.0.0.1:0"}
    assert out["store"] == {"path": str(tmp_path / "sessions.sqlite")} and "lab" not in out
    assert out["simulator"]["drive"] == {"host": "127.0.0.1", "port": 0, "secure_port": 0,
                                         "pki_dir": str(tmp_path / "pki")}
    assert out["devices"]["force_source"] == {"host": "127.0.0.1", "port": 0}
    assert out["devices"]["sensors"]["D"]["url"] == "socket://127.0.0.1:0"
    assert raw["bus"]["data"] == "tcp://127.0.0.1:5555"  # the caller's data are left as they were


async def test_two_runs_of_one_config_at_once_do_not_collide(own_tempdir):
    sine = {"plan": {"design": "sine"}}
    first, second = await asyncio.gather(
        run_simulated_async(OSCILLATOR, speed=20, overrides=sine, analyze=False),
        run_simulated_async(OSCILLATOR, speed=20, overrides=sine, analyze=False))
    for run in (first, second):
        assert run.session.ok, run.session.describe()
        trace = run.session.streams["oscillator.trace"]
        assert trace.units == ["N", "N", "m"] and trace.samples == 1000  # t_f 1 s at the 1 ms drive cycle
    urls = [run.session.config["devices"]["drive"]["url"] for run in (first, second)]
    assert urls[0] != urls[1]
    assert first.session.id != second.session.id
    assert list(own_tempdir.iterdir()) == []


@pytest.mark.slow(reason="the example of docs/testing-your-rig.md: two short simulated press runs")
def test_the_documented_example_passes_as_a_lab_runs_it():
    env = {k: v for k, v in os.environ.items() if k != "HIL_TEST_GUARD_LOG"}  # the inner run has its own log
    # the suite's loopback fence around the example too (tests/loopback_fence.py)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "tests"), env.get("PYTHONPATH")) if p)
    res = subprocess.run([sys.executable, "-m", "pytest", "-p", "loopback_fence", "-p", "no:cacheprovider",
                          "-q", "-rA", "docs/examples/test_my_press.py"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=280)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "2 passed" in out, out


INNER_CONFTEST = 'pytest_plugins = ["daq.testing.plugin"]\n'
INNER_TEST = '''
import pytest

from daq.config.load import ConfigError


def test_the_fixture_runs_at_the_speed_the_command_line_gives(hil_sim):
    assert hil_sim.speed == 20.0


def test_the_fixture_refuses_a_real_template_in_one_line(hil_sim):
    with pytest.raises(ConfigError) as refused:
        hil_sim(TEMPLATE)
    text = str(refused.value)
    assert "\\n" not in text and "sim speed 20 refused: not a simulated rig" in text
'''


def test_a_conftest_line_gives_a_labs_tests_the_fixture_and_its_speed_option(tmp_path):
    (tmp_path / "conftest.py").write_text(INNER_CONFTEST)
    template = ROOT / "configs" / "press.toml"
    (tmp_path / "test_lab.py").write_text(f"TEMPLATE = {str(template)!r}\n" + INNER_TEST)
    res = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-q",
                          "--hil-sim-speed", "20", "test_lab.py"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    out = res.stdout + res.stderr
    assert res.returncode == 0 and "2 passed" in out, out
