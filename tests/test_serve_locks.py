"""A rig's lock on the real `hil serve` (127.0.0.1, port 0): who holds it and why, others' runs refused with
423, the lock kept across a restart, an admin's break recorded, `hil ctl lock|unlock`."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from daq.cli.main import main
from daq.rigs import register, unregister
from daq.serve.locks import AUDIT_FILE, LOCK_FILE
from tests.polling import poll_until
from tests.serve_fixtures import ServedBeacon, ServerThread, beacon_config, bearer

TOKENS = {"alice": "a" * 24, "carol": "c" * 24, "root": "r" * 24, "vera": "v" * 24}


@pytest.fixture(scope="module", autouse=True)
def beacon_kind():
    register(ServedBeacon("beacon-lock"))
    yield
    unregister("beacon-lock")


@pytest.fixture
def rig(tmp_path):
    configs = tmp_path / "configs"
    configs.mkdir()
    beacon_config(configs, "short.toml", "beacon-lock", frames=5)
    beacon_config(configs, "endless.toml", "beacon-lock")
    tokens = tmp_path / "tokens"
    fd = os.open(tokens, os.O_WRONLY | os.O_CREAT, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f"alice {TOKENS['alice']}\ncarol {TOKENS['carol']}\nroot {TOKENS['root']} admin\n"
                f"vera {TOKENS['vera']} viewer\n")
    return configs, tmp_path / "store" / "s.sqlite", tokens


def as_(srv: ServerThread, who: str) -> httpx.Client:
    return httpx.Client(base_url=srv.url, headers=bearer(TOKENS[who]), timeout=30)


def status_of(http: httpx.Client, run_id: str) -> str:
    return http.get(f"/api/runs/{run_id}").json()["status"]


def test_a_lock_refuses_others_runs_naming_who_when_and_why_and_survives_a_restart(rig):
    configs, store, tokens = rig
    srv = ServerThread(configs, store, tokens).start()
    try:
        with as_(srv, "alice") as alice, as_(srv, "carol") as carol:
            assert alice.get("/api/lock").json()["locked"] is False
            held = alice.post("/api/lock", json={"note": "in the cell, changing the seal"})
            assert held.status_code == 200, held.text
            lock = held.json()
            assert lock["locked"] and lock["by"] == "alice"
            assert lock["note"] == "in the cell, changing the seal"
            refused = carol.post("/api/runs", json={"config": "short.toml"})
            assert refused.status_code == 423
            text = refused.json()["error"]
            assert "alice" in text and "in the cell, changing the seal" in text and lock["at_iso"] in text
            assert carol.get("/api/runs").json()["queued"] == []  # nothing queued
            own = alice.post("/api/runs", json={"config": "short.toml"})  # the holder's runs go
            assert own.status_code == 202
            poll_until(lambda: status_of(alice, own.json()["id"]) == "complete", timeout=30, period=0.05)
        lock_file = store.parent / LOCK_FILE
        assert stat.S_IMODE(lock_file.stat().st_mode) == 0o600
    finally:
        srv.stop()
    srv = ServerThread(configs, store, tokens).start()  # a restart keeps the lock
    try:
        with as_(srv, "alice") as alice, as_(srv, "carol") as carol:
            kept = carol.get("/api/lock").json()
            assert kept["by"] == "alice" and kept["note"] == "in the cell, changing the seal"
            assert carol.post("/api/runs", json={"config": "short.toml"}).status_code == 423
            assert carol.delete("/api/lock").status_code == 423  # not carol's to release
            released = alice.delete("/api/lock")
            assert released.status_code == 200 and released.json()["locked"] is False
            accepted = carol.post("/api/runs", json={"config": "short.toml"})
            assert accepted.status_code == 202
            assert accepted.json()["by"] == "carol"
            poll_until(lambda: status_of(carol, accepted.json()["id"]) == "complete", timeout=30, period=0.05)
        assert not (store.parent / LOCK_FILE).exists()
    finally:
        srv.stop()


def test_runs_others_queued_before_the_lock_wait_until_it_is_released(rig):
    configs, store, tokens = rig
    srv = ServerThread(configs, store, tokens).start()
    try:
        with as_(srv, "alice") as alice, as_(srv, "carol") as carol:
            endless = alice.post("/api/runs", json={"config": "endless.toml"}).json()["id"]
            poll_until(lambda: status_of(alice, endless) == "running", timeout=30, period=0.05)
            waiting = carol.post("/api/runs", json={"config": "short.toml"}).json()["id"]
            assert alice.post("/api/lock", json={"note": "hands in the press"}).status_code == 200
            assert alice.post(f"/api/runs/{endless}/stop").status_code == 200
            poll_until(lambda: status_of(alice, endless) in ("complete", "aborted"), timeout=30, period=0.05)
            # the runner is free, but carol's run must not start on a rig alice holds
            seen = [status_of(carol, waiting) for _ in range(20) if not time.sleep(0.05)]
            assert set(seen) == {"queued"}, seen
            assert alice.delete("/api/lock").status_code == 200
            poll_until(lambda: status_of(carol, waiting) == "complete", timeout=30, period=0.05)
    finally:
        srv.stop()


def test_only_the_holder_or_an_admin_unlocks_a_viewer_may_not_lock_and_a_break_is_recorded(rig):
    configs, store, tokens = rig
    srv = ServerThread(configs, store, tokens).start()
    try:
        with as_(srv, "alice") as alice, as_(srv, "root") as root, as_(srv, "vera") as vera:
            assert vera.post("/api/lock", json={"note": "mine"}).status_code == 403
            assert vera.get("/api/lock").status_code == 200
            assert alice.post("/api/lock", json={"note": "calibrating"}).status_code == 200
            assert root.post("/api/lock", json={"note": "me too"}).status_code == 423  # a lock is not taken
            me = root.get("/api/me").json()
            assert me == {"name": "root", "role": "operator", "admin": True}
            broken = root.delete("/api/lock")
            assert broken.status_code == 200 and broken.json()["broken"] is True
            assert broken.json()["released"]["by"] == "alice"
        audit = [json.loads(x) for x in (store.parent / AUDIT_FILE).read_text().splitlines()]
        assert [(a["action"], a["by"]) for a in audit] == [("lock", "alice"), ("break", "root")]
        assert audit[1]["lock"]["note"] == "calibrating"
    finally:
        srv.stop()


def test_hil_ctl_locks_and_unlocks_through_the_server(rig, tmp_path):
    configs, store, tokens = rig
    srv = ServerThread(configs, store, tokens).start()
    try:
        mine = tmp_path / "alice.token"
        mine.write_text(TOKENS["alice"] + "\n")
        runner = CliRunner()
        res = runner.invoke(main, ["ctl", "lock", "--note", "swapping the sensor", "--serve", srv.url,
                                   "--token-file", str(mine)], env={"HIL_SERVE_TOKEN": ""})
        assert res.exit_code == 0, res.output
        assert "locked by alice" in res.output and "swapping the sensor" in res.output
        res = runner.invoke(main, ["ctl", "unlock", "--serve", srv.url],
                            env={"HIL_SERVE_TOKEN": TOKENS["carol"]})
        assert res.exit_code == 1
        assert "locked by alice" in res.output and "Traceback" not in res.output
        assert len(res.output.strip().splitlines()) == 1
        res = runner.invoke(main, ["ctl", "unlock", "--serve", srv.url, "--token-file", str(mine)],
                            env={"HIL_SERVE_TOKEN": ""})
        assert res.exit_code == 0 and "unlocked" in res.output
        assert httpx.get(f"{srv.url}/api/lock").json()["locked"] is False
    finally:
        srv.stop()


def test_a_token_file_line_marked_admin_is_read_and_a_bad_third_word_refused(tmp_path: Path):
    from daq.errors import ConfigError
    from daq.serve.auth import Tokens

    path = tmp_path / "t"
    path.write_text(f"root {'r' * 20} admin\nann {'n' * 20}\n")
    path.chmod(0o600)
    tokens = Tokens.load(path)
    assert tokens.role_of("r" * 20) == "admin" and tokens.role_of("n" * 20) == "operator"
    path.write_text(f"root {'r' * 20} boss\n")
    with pytest.raises(ConfigError, match="viewer|admin"):
        Tokens.load(path)
