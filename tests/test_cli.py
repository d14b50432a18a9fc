"""The `hil` CLI through click's CliRunner: listing, show, export, tap, demo and clean errors."""

from __future__ import annotations

import asyncio
import json
import threading

import numpy as np
import pytest
from click.testing import CliRunner

from daq.bus.frames import Frame
from daq.bus.pubsub import BusPublisher
from daq.cli.main import main
from daq.store.read_write import SessionStore


@pytest.fixture
def store_path(tmp_path, rng):
    path = tmp_path / "hil.sqlite"
    store = SessionStore(path)
    sid = store.create_session("press", {"rig": {"kind": "press"}}, session_id="a1b2c3d4e5f6")
    store.append(sid, Frame("press.force", 0, 1.0, 1e-3, ["force"], ["N"], rng.standard_normal((10, 1))))
    store.finish(sid, "complete")
    store.close()
    return path


def run(*args, env=None):
    return CliRunner().invoke(main, list(args), env=env or {"HIL_STORE": ""})


def assert_one_line_error(result, *fragments):
    assert result.exit_code != 0
    assert "Traceback" not in result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error:"), result.output
    for frag in fragments:
        assert frag in lines[0]


def test_help_of_every_command():
    for cmd in [
        "--help",
        "sessions --help",
        "show --help",
        "export --help",
        "replay --help",
        "tap --help",
        "demo --help",
        "sim --help",
    ]:
        r = run(*cmd.split())
        assert r.exit_code == 0 and "Usage:" in r.output


def test_sessions_and_show(store_path):
    r = run("--store", str(store_path), "sessions")
    assert r.exit_code == 0 and "a1b2c3d4e5f6" in r.output and "complete" in r.output
    r = run("--store", str(store_path), "sessions", "--json")
    assert json.loads(r.output)[0]["id"] == "a1b2c3d4e5f6"
    r = run("--store", str(store_path), "show", "a1b2")
    assert r.exit_code == 0 and "force [N]" in r.output
    r = run("--store", str(store_path), "show", "a1b2", "--json")
    assert json.loads(r.output)["streams"]["press.force"]["units"] == ["N"]


def test_store_from_env(store_path):
    r = run("sessions", env={"HIL_STORE": str(store_path)})
    assert r.exit_code == 0 and "a1b2c3d4e5f6" in r.output


def test_unknown_session_is_one_line_without_traceback(store_path):
    assert_one_line_error(run("--store", str(store_path), "show", "zzz"), "unknown session 'zzz'")
    assert_one_line_error(
        run("--store", str(store_path), "export", "zzz", "--format", "csv"), "unknown session"
    )


def test_missing_store_is_a_clear_error(tmp_path):
    assert_one_line_error(run("--store", str(tmp_path / "nope.sqlite"), "sessions"), "no session store")


@pytest.mark.parametrize(
    "text, fragments",
    [
        ("[rig\nkind = 'press'", ["invalid TOML"]),
        ("[bus]\ndata = 'tcp://127.0.0.1:0'", ["[rig]", "missing required table"]),
        ("[rig]\nkind = 'boat'", ["[rig].kind", "unknown rig kind 'boat'"]),
        ("[rig]\nkind = 'press'\n[bus]\ndata = 5", ["[bus].data", "must be a string"]),
        ("[rig]\nkind = 'press'\n[bus]\ndata = 'http://x'", ["[bus].data", "must start with"]),
        ("[rig]\nkind = 'press'\n[store]\npath = 3", ["[store].path", "must be a string"]),
        ("[rig]\nkind = 'press'\n[bus]\ndat = 'tcp://127.0.0.1:0'", ["[bus].dat", "did you mean data?"]),
    ],
)
def test_malformed_config_is_a_clear_error(tmp_path, text, fragments):
    cfg = tmp_path / "rig.toml"
    cfg.write_text(text)
    assert_one_line_error(run("--config", str(cfg), "sessions"), str(cfg), *fragments)


def test_missing_config_file(tmp_path):
    assert_one_line_error(run("--config", str(tmp_path / "none.toml"), "sessions"), "file not found")


def test_config_selects_the_store(tmp_path, store_path):
    cfg = tmp_path / "rig.toml"
    cfg.write_text(f"[rig]\nkind = 'press'\n[store]\npath = '{store_path}'\n")
    r = run("--config", str(cfg), "sessions")
    assert r.exit_code == 0 and "a1b2c3d4e5f6" in r.output


def test_export_via_cli(store_path, tmp_path):
    out = tmp_path / "x.h5"
    r = run("--store", str(store_path), "export", "a1b2", "--format", "hdf5", "-o", str(out))
    assert r.exit_code == 0 and out.is_file()
    r = run("--store", str(store_path), "export", "a1b2", "--format", "parquet")
    assert r.exit_code != 0 and "Traceback" not in r.output


def test_replay_bad_speed(store_path):
    r = run("--store", str(store_path), "replay", "a1b2", "--speed", "-1")
    assert r.exit_code != 0 and "--speed" in r.output and "Traceback" not in r.output


def test_tap_prints_live_frames():
    ready = threading.Event()
    stop = threading.Event()
    endpoint: list[str] = []

    def publisher():
        async def go():
            pub = BusPublisher(lossless=False)
            endpoint.append(pub.endpoint)
            ready.set()
            seq = 0
            while not stop.is_set():
                await pub.publish(
                    Frame(
                        "press.force",
                        seq,
                        float(seq),
                        1e-3,
                        ["force", "pressure"],
                        ["N", "Pa"],
                        np.full((4, 2), 2.5),
                    )
                )
                seq += 1
                await asyncio.sleep(0.01)
            pub.close()

        asyncio.run(go())

    t = threading.Thread(target=publisher)
    t.start()
    try:
        assert ready.wait(10)
        r = run("tap", "data/press.", "--endpoint", endpoint[0], "--count", "3", "--timeout", "10", "--json")
    finally:
        stop.set()
        t.join(10)
    assert r.exit_code == 0, r.output
    lines = [json.loads(ln) for ln in r.output.splitlines()]
    assert len(lines) == 3 and lines[0]["units"] == ["N", "Pa"] and lines[0]["mean"] == [2.5, 2.5]


def test_tap_without_endpoint_is_a_usage_error():
    r = run("tap")
    assert r.exit_code != 0 and "--endpoint" in r.output and "Traceback" not in r.output


def test_demo_runs_from_scratch(tmp_path):
    path = tmp_path / "demo.sqlite"
    r = run("--store", str(path), "demo", "--duration", "0.3", "--json")
    assert r.exit_code == 0, r.output
    s = json.loads(r.output)
    assert s["replay_identical"] and s["gaps"] == 0 and s["recorded_frames"] == s["published_frames"] == 3
    assert SessionStore(path).get_session(s["session"]).status == "complete"
