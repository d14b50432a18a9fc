"""One clock for a run (issue 43): a simulated rig run at ``--sim-speed X`` records simulated seconds and says
the speed it ran at; a real rig refuses a speed before anything opens; a speed the machine cannot hold stops
the run safe. No assertion here is about wall-clock time: only about what the session records."""

from __future__ import annotations

import asyncio
import copy
import socket
import time

import msgspec
import pytest
from click.testing import CliRunner

from daq.cli.main import main
from daq.config.load import ConfigError
from daq.rigs.analysis import analyze_session
from daq.rigs.config import load, load_config, with_sim_speed
from daq.run.lifecycle import run
from daq.store.read_write import SessionStore
from drivers.clock import Clock, Schedule
from simulators.press_rig import PressRig
from tests.in_process_runs import run_in_process
from tests.site_values import crane_site_values, filled_template, press_site_values, toml_value
from tests.test_machine_tool_rig import small_config as small_machine_tool
from tests.test_press_experiment import short_config as short_press


def _events(store_path, session_id: str, kind: str | None = None):
    with SessionStore(store_path) as store:
        return store.events(session_id, kind=kind) if kind else store.events(session_id)


def _snapshot(store_path, session_id: str) -> dict:
    with SessionStore(store_path) as store:
        return store.get_session(session_id).config


# ----------------------------------------------------------------------------------------- the clock


async def test_a_clock_runs_fast_while_the_plan_waits_and_at_the_real_pace_otherwise():
    clock = Clock(50.0)
    t0, m0 = clock.time(), clock.monotonic()
    await clock.sleep(0.5)  # a wait of the plan: half a clock second
    assert clock.monotonic() - m0 >= 0.5 and clock.time() - t0 >= 0.5
    assert clock.pace == 1.0  # no wait in progress: the clock goes at the real pace
    real1 = time.monotonic()  # the real span read around the clock's, so it holds the clock's span whole
    m1 = clock.monotonic()  # (read inside it, a clock span was up to ~100 ns longer than the real one)
    await asyncio.sleep(0.02)  # talking to a device: real time, one clock second per real second
    m2 = clock.monotonic()
    assert m2 - m1 <= (time.monotonic() - real1) * 1.0 + 1e-9
    with clock.waiting():
        assert clock.pace == 50.0
        ticks = Schedule(clock, 0.1)
        assert await ticks.wait() >= 0.0
        await asyncio.sleep(0.01)  # a stall of 10 ms is half a clock second while the plan waits
        assert await ticks.wait() >= 0.3
    with pytest.raises(ValueError, match="clock speed"):
        Clock(0.0)


async def test_one_stall_does_not_overrun_but_lateness_tick_after_tick_does():
    clock = Clock(10.0)
    clock.armed = True
    await clock.sleep(0.5)  # the recording has run for half a clock second
    clock.note_lag("physics", 100.0, bound=0.1)  # one huge stall counts as 4 bounds at most
    assert clock.overrun_reason is None
    for _ in range(40):
        clock.note_lag("physics", 0.2, bound=0.1)  # every tick late by two bounds: the machine cannot keep up
    assert clock.overrun_reason is not None and "physics" in clock.overrun_reason
    assert "speed 10" in clock.overrun_reason


def test_sim_speed_is_refused_for_a_real_rig_and_out_of_range():
    _, cfg = load("configs/press-sim.toml")
    fast = with_sim_speed(cfg, 10.0)
    assert fast.simulator.speed == 10.0 and cfg.simulator.speed == 1.0
    with pytest.raises(ConfigError, match="out of range"):
        with_sim_speed(cfg, 5000.0)
    real = msgspec.structs.replace(cfg, rig=msgspec.structs.replace(cfg.rig, simulated=False))
    with pytest.raises(ConfigError, match="not a simulated rig"):
        with_sim_speed(real, 10.0)


@pytest.mark.parametrize("template", ["press.toml", "crane.toml"])
def test_a_real_template_refuses_sim_speed_in_one_line_before_anything_opens(template, tmp_path):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    port = listener.getsockname()[1]
    try:
        values = (press_site_values(port) if template == "press.toml"
                  else crane_site_values(f"opc.tcp://127.0.0.1:{port}/hil/crane"))
        path = filled_template(template, values, tmp_path)
        res = CliRunner().invoke(main, ["--store", str(tmp_path / "s.sqlite"), "run", str(path),
                                        "--no-progress", "--sim-speed", "10"])
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody connected: the device was never probed
    finally:
        listener.close()
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert res.exit_code != 0
    assert len(lines) == 1 and "sim speed 10 refused: not a simulated rig" in lines[0], res.output
    assert "Traceback" not in res.output
    assert not (tmp_path / "s.sqlite").exists()  # no store opened either


# ----------------------------------------------------------------------------------------- each rig kind


@pytest.mark.slow(reason="a short simulated press run")
async def test_press_at_speed_records_simulated_seconds(tmp_path):
    cfg = short_press(n_series=3, n_steps_up=2)
    store_path = tmp_path / "s.sqlite"
    result = await run(cfg, store_path, show_progress=False, handle_sigint=False, sim_speed=10.0)
    assert result.status == "complete", result.reason
    assert result.summary["sim_speed"] == 10.0
    assert _snapshot(store_path, result.session_id)["simulator"]["speed"] == 10.0
    events = _events(store_path, result.session_id)
    start = next(e.t for e in events if e.kind == "plan_start")
    end = next(e.t for e in events if e.kind == "plan_end")
    # every setpoint waits at least one correction settle and the plan's settle, in the clock's seconds: the
    # recorded span holds them all (on the wall clock a tenth of that would have passed)
    n = result.summary["setpoints"]
    assert n == 15
    waits = n * (cfg["correction"]["settle_time"] + cfg["plan"]["settle_time"])
    assert end - start >= waits
    with SessionStore(store_path) as store:
        force = store.read_range(result.session_id, "press.force", 0, 10**9)
    assert force.t[-1] - force.t[0] >= 0.9 * waits  # the samples carry the same clock


@pytest.mark.slow(reason="a short simulated crane run")
async def test_crane_at_speed_records_simulated_seconds(tmp_path):
    cfg = copy.deepcopy(load_config("configs/crane-sim.toml"))
    cfg["excitation"].pop("export_dir", None)  # the shipped export folder is in the checkout
    store_path = tmp_path / "s.sqlite"
    result = await run(cfg, store_path, show_progress=False, handle_sigint=False, sim_speed=20.0)
    assert result.status == "complete", result.reason
    assert result.summary["sim_speed"] == 20.0
    _trajectories_played_on_the_clock(store_path, result.session_id, "crane.plan")


def _trajectories_played_on_the_clock(store_path, session_id: str, plan_stream: str) -> None:
    """Each trajectory is played out on the run's clock: the next event comes no earlier than its recorded
    end (on the wall clock, at speed 20, it would come a twentieth of the way)."""
    events = [e for e in _events(store_path, session_id) if e.stream == plan_stream]
    starts = [e for e in events if e.kind == "trajectory_start"]
    assert starts
    for ev in starts:
        end = ev.body["t0"] + ev.body["n"] * ev.body["dt"]
        later = [e.t for e in events if e.t > ev.t and e.kind != "trajectory_start"]
        assert later and max(later) >= end - 1e-6


@pytest.mark.slow(reason="short simulated oscillator and pendulum runs")
@pytest.mark.parametrize("kind", ["oscillator", "pendulum"])
async def test_adjoint_rigs_at_speed_record_simulated_seconds(kind, tmp_path):
    cfg = copy.deepcopy(load_config(f"configs/{kind}-sim.toml"))
    cfg["plan"].update(design="sine")  # no design needed: a sine at the configured amplitude
    cfg.pop("online", None)
    store_path = tmp_path / "s.sqlite"
    result = await run(cfg, store_path, show_progress=False, handle_sigint=False, sim_speed=20.0)
    assert result.status == "complete", result.reason
    assert result.summary["sim_speed"] == 20.0
    assert _snapshot(store_path, result.session_id)["simulator"]["speed"] == 20.0
    _trajectories_played_on_the_clock(store_path, result.session_id, f"{kind}.plan")


@pytest.mark.slow(reason="a short simulated machine-tool run")
async def test_machine_tool_at_speed_records_simulated_seconds(tmp_path):
    cfg = small_machine_tool()
    store_path = tmp_path / "s.sqlite"
    result = await run(cfg, store_path, show_progress=False, handle_sigint=False, sim_speed=20.0)
    assert result.status == "complete", result.reason
    assert result.summary["sim_speed"] == 20.0
    starts = [e for e in _events(store_path, result.session_id) if e.kind == "position_start"]
    positions = [e.body["position"] for e in starts]
    assert positions == [0.05, 0.3]
    axis_speed = 0.5  # m/s, the simulated axis (machine-tool-sim.toml's default)
    # the move between the two positions takes its distance / axis speed on the clock, between the events
    assert starts[1].t - starts[0].t >= (positions[1] - positions[0]) / axis_speed


# ----------------------------------------------------------------------------------------- too fast


@pytest.mark.slow(reason="a simulated press run stopped as too fast")
async def test_a_speed_the_machine_cannot_hold_stops_the_run_safe(tmp_path):
    cfg = short_press(n_series=3, n_steps_up=2)
    cfg["simulator"]["max_lag"] = 1e-4  # s: far less than any tick of a 1000x clock can keep
    store_path = tmp_path / "s.sqlite"
    async with PressRig(with_speed(cfg, 1000.0)) as rig:
        result = await run(cfg, store_path, show_progress=False, handle_sigint=False, simulated_rig=rig)
        assert result.status == "aborted"
        assert "simulation too slow for speed 1000" in result.reason and "--sim-speed" in result.reason
        assert result.safe, result.safe_errors
        assert not rig.force_source.enabled and rig.force_source.setpoint == 0.0  # the rig is safe
    assert result.summary["sim_speed"] == 1000.0
    outcome = _events(store_path, result.session_id, "plan_outcome")[-1]
    assert outcome.body["status"] == "aborted" and outcome.body["safe"]


def with_speed(cfg: dict, speed: float) -> dict:
    out = copy.deepcopy(cfg)
    out["simulator"]["speed"] = speed
    return out


# ----------------------------------------------------------------------------------------- the same answers


#: another press: other bar stiffnesses, more friction, noisier sensors (the config's nominal sigmas say so
#: too: a lab knows its sensors' noise, never the plant's truth)
OTHER_PRESS = {"k5": 2.2e8, "k7": 1.35e8, "friction_max": 1150.0}
NOISE = 1.1


@pytest.mark.slow(reason="the whole press plan (10 series) at speed 10 and its analysis")
async def test_another_press_at_speed_10_rejects_m1_m2_and_finds_its_truth_with_m3(tmp_path):
    """At speed 10 M1 and M2 are rejected and M3 fits (RSS/dof near 1) with k5, k7 within 3 standard errors of
    this press's truth. (M3's own verdict on this press is not asserted: on "unloading halves" it is rejected
    at speed 1 as well - alpha_min 0.074 % at speed 1, 1.1 % at speed 10 on this machine - a matter of the
    analysis, not of the clock; the estimates at the two speeds agree within 0.05 standard errors.)"""
    cfg = copy.deepcopy(load_config("configs/press-sim.toml"))
    cfg["simulator"]["truth"].update(OTHER_PRESS)
    cfg["simulator"]["seed"] = 7
    for name, noise in cfg["simulator"]["sensors"].items():
        noise["sigma"] *= NOISE
        cfg["devices"]["sensors"][name]["sigma"] *= NOISE
    store_path = tmp_path / "s.sqlite"
    # the devices reached in-process (the same plan, drivers, clock and physics; no Modbus round trips, which
    # run at the real pace and made this run ~2 min): the protocol runs at speed are the tests above
    result = await run_in_process(cfg, store_path, show_progress=False, handle_sigint=False, sim_speed=10.0)
    assert result.status == "complete", result.reason
    assert _snapshot(store_path, result.session_id)["simulator"]["speed"] == 10.0
    with SessionStore(store_path) as store:
        _, analysis, rig, _ = await asyncio.to_thread(analyze_session, store, result.session_id)
    report = rig.report_dict(analysis)
    assert report["verdicts"]["M1"] == "reject" and report["verdicts"]["M2"] == "reject"
    m3 = report["models"]["M3"]
    assert m3["s2"] < 2.0  # RSS/dof: M3 describes the data to their noise (M1, M2: hundreds and more)
    for name, value, se in zip(report["parameters"], m3["p"], m3["std_errors"], strict=True):
        assert abs(value - OTHER_PRESS[name]) <= 3 * se, (name, value, se)


# ----------------------------------------------------------------------------------------- hil serve


@pytest.mark.slow(reason="hil serve runs a short simulated press")
def test_serve_takes_a_sim_speed_for_a_simulated_rig_and_refuses_it_for_a_real_one(tmp_path):
    import httpx

    from tests.polling import poll_until
    from tests.serve_fixtures import ServerThread

    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "short-press.toml").write_text(_toml(short_press(n_series=3, n_steps_up=2)))
    filled_template("press.toml", press_site_values(9), configs)  # a real press: nothing listens on port 9
    srv = ServerThread(configs, tmp_path / "store" / "s.sqlite", tmp_path / "tokens").start()
    try:
        auth = {"Authorization": f"Bearer {srv.token}"}
        with httpx.Client(base_url=srv.url, headers=auth, timeout=30) as http:
            refused = http.post("/api/runs", json={"config": "press.toml", "sim_speed": 10})
            assert refused.status_code == 422
            assert "not a simulated rig" in refused.json()["error"]
            assert http.get("/api/runs").json()["queued"] == []  # nothing queued
            run_id = http.post("/api/runs", json={"config": "short-press.toml", "sim_speed": 10}).json()["id"]

            def done() -> dict | None:
                entry = http.get(f"/api/runs/{run_id}").json()
                return entry if entry["status"] not in ("queued", "running") else None

            poll_until(lambda: done() is not None, timeout=240)
            entry = done()
    finally:
        srv.stop()
    assert entry is not None and entry["status"] == "complete", entry
    assert entry["sim_speed"] == 10 and entry["result"]["summary"]["sim_speed"] == 10.0


def _toml(table: dict, path: tuple[str, ...] = ()) -> str:
    """A config as TOML text: its values, then its tables (every table written as a [section])."""
    values = [f"{k} = {toml_value(v)}" for k, v in table.items() if not isinstance(v, dict)]
    head = [f"[{'.'.join(path)}]"] if path and values else []
    tables = [_toml(v, (*path, k)) for k, v in table.items() if isinstance(v, dict)]
    return "\n".join([*head, *values, "", *tables])
