"""One identity on every rig and the lab's list of rigs, on a real `hil lab serve` and real `hil serve`s
(127.0.0.1, port 0): people's lab keys on a rig (an operator runs and is recorded, a viewer reads and is
refused a change, a revoked key stops working), and rigs listed with their states, one killed shown
offline."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest

from daq.rigs import register, unregister
from daq.serve.rig_status import Heartbeat, RigLab
from daq.store.reader import SessionReader
from tests.polling import poll_until
from tests.serve_fixtures import ServedBeacon, ServerThread, beacon_config, bearer
from tests.test_lab import hil, shared_lab
from tests.test_lab_people import add_key

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def lab(request, tmp_path_factory):
    yield from shared_lab(request, tmp_path_factory)


@pytest.fixture(scope="module")
def people(lab, tmp_path_factory):
    """Keys of their own for an operator, a viewer and two rigs (operators), as `hil lab key add` makes."""
    folder = tmp_path_factory.mktemp("rig-keys")
    return {name: (add_key(lab, name, role, folder)[0], folder / f"{name}.key")
            for name, role in (("olga", "operator"), ("vic", "viewer"), ("rig-a", "operator"),
                               ("rig-b", "operator"), ("quinn", "operator"))}


@pytest.fixture(scope="module", autouse=True)
def beacon_kind():
    register(ServedBeacon("beacon-lab"))
    yield
    unregister("beacon-lab")


def rig_folder(tmp_path: Path) -> tuple[Path, Path, Path]:
    configs = tmp_path / "configs"
    configs.mkdir(exist_ok=True)
    beacon_config(configs, "short.toml", "beacon-lab", frames=5)
    return configs, tmp_path / "store" / "s.sqlite", tmp_path / "tokens"


def test_an_operators_lab_key_runs_under_their_name_a_viewers_reads_only(lab, people, tmp_path):
    configs, store, tokens = rig_folder(tmp_path)
    srv = ServerThread(configs, store, tokens)
    srv.server.lab = RigLab(lab.url, "rig-id", people["rig-a"][0], cache_s=60)
    srv.start()
    try:
        olga = httpx.Client(base_url=srv.url, headers=bearer(people["olga"][0]), timeout=30)
        vic = httpx.Client(base_url=srv.url, headers=bearer(people["vic"][0]), timeout=30)
        assert olga.get("/api/me").json() == {"name": "olga", "role": "operator"}
        assert vic.get("/api/me").json() == {"name": "vic", "role": "viewer"}
        queued = olga.post("/api/runs", json={"config": "short.toml"})
        assert queued.status_code == 202 and queued.json()["by"] == "olga"
        run_id = queued.json()["id"]
        poll_until(lambda: olga.get(f"/api/runs/{run_id}").json()["status"] == "complete", timeout=30,
                   period=0.1)
        session = olga.get(f"/api/runs/{run_id}").json()["session"]
        with SessionReader(store, create=False) as reader:
            started = [e for e in reader.events(session) if e.kind == "started"]
        assert started and started[0].body["by"] == "olga"  # the session records the person
        assert vic.get("/api/runs").status_code == 200
        refused = vic.post("/api/runs", json={"config": "short.toml"})
        assert refused.status_code == 403 and "vic" in refused.json()["error"]
        assert vic.post("/api/lock", json={"note": "x"}).status_code == 403
        wrong = httpx.post(f"{srv.url}/api/runs", json={"config": "short.toml"}, headers=bearer("f" * 72))
        assert wrong.status_code == 401
        own = httpx.get(f"{srv.url}/api/me", headers=bearer(srv.token)).json()  # the rig's own token still
        assert own["role"] == "operator"
        # the page's sign-in takes a lab key too (the cookie holds it; never a URL)
        signed = httpx.post(f"{srv.url}/api/login", json={"token": people["vic"][0]})
        assert signed.status_code == 200 and signed.json()["name"] == "vic"
    finally:
        srv.stop()


def test_a_revoked_lab_key_stops_working_after_the_cache_time(lab, people, tmp_path):
    configs, store, tokens = rig_folder(tmp_path)
    srv = ServerThread(configs, store, tokens)
    srv.server.lab = RigLab(lab.url, "rig-rev", people["rig-a"][0], cache_s=1.0)
    srv.start()
    try:
        quinn = httpx.Client(base_url=srv.url, headers=bearer(people["quinn"][0]), timeout=30)
        assert quinn.post("/api/lock", json={"note": "mine"}).status_code == 200
        assert quinn.delete("/api/lock").status_code == 200
        res = hil("lab", "key", "revoke", "quinn", "--to", lab.url, key=lab.key)
        assert res.exit_code == 0, res.output
        # reads are open here
        poll_until(lambda: quinn.get("/api/me").json()["name"] is None, timeout=30, period=0.1)
        refused = quinn.post("/api/lock", json={"note": "again"})
        assert refused.status_code == 401
        assert quinn.get("/api/lock").json()["locked"] is False
    finally:
        srv.stop()


def start_rig(tmp_path: Path, lab_url: str, name: str, key_file: Path) -> tuple[subprocess.Popen, Path]:
    """`hil serve --lab URL --rig NAME` in a process of its own (port 0); its stderr in a file."""
    folder = tmp_path / name
    (folder / "configs").mkdir(parents=True)
    log = folder / "serve.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "daq.cli.main", "serve", "--configs", str(folder / "configs"),
             "--store", str(folder / "s.sqlite"), "--token-file", str(folder / "tokens"), "--port", "0",
             "--lab", lab_url, "--rig", name, "--lab-key-file", str(key_file)],
            stdout=subprocess.DEVNULL, stderr=err, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return proc, log


def page_of(log: Path) -> str | None:
    found = re.search(r"http://127\.0\.0\.1:\d+/", log.read_text()) if log.exists() else None
    return found.group(0) if found else None


def listed(lab, key_file: Path, offline_after: float = 30) -> dict[str, dict]:
    res = hil("--store", lab.url, "--key-file", str(key_file), "rigs", "--json",
              "--offline-after", str(offline_after))
    assert res.exit_code == 0, res.output
    return {row["name"]: row for row in json.loads(res.output)}


def test_two_rigs_are_listed_with_their_states_and_a_killed_one_shows_offline(lab, people, tmp_path):
    rigs = {name: start_rig(tmp_path, lab.url, name, people[name][1]) for name in ("rig-a", "rig-b")}
    try:
        poll_until(lambda: all(page_of(log) for _, log in rigs.values()), timeout=60)
        pages = {name: page_of(log) for name, (_, log) in rigs.items()}
        viewer_key = people["vic"][1]
        poll_until(lambda: {n: r["state"] for n, r in listed(lab, viewer_key).items()
                            if n in rigs} == {"rig-a": "idle", "rig-b": "idle"}, timeout=20, period=0.25)
        rows = listed(lab, viewer_key)
        for name in rigs:
            assert rows[name]["page"] == pages[name] and rows[name]["queue"] == 0
            assert rows[name]["lock"]["locked"] is False
        # rig-b's operator locks it: the lab shows the lock with its note
        operator = httpx.Client(base_url=pages["rig-b"].rstrip("/"), headers=bearer(people["olga"][0]))
        assert operator.post("/api/lock", json={"note": "seal change"}).status_code == 200
        poll_until(lambda: (listed(lab, viewer_key)["rig-b"]["lock"] or {}).get("note") == "seal change",
                   timeout=20, period=0.25)
        rigs["rig-a"][0].send_signal(signal.SIGKILL)
        rigs["rig-a"][0].wait(timeout=30)
        # one listing shows the killed rig offline and the one that still beats idle (polled for: on a
        # loaded machine one of b's beats may reach the lab late, and b looks offline until the next one)
        poll_until(lambda: {n: r["state"] for n, r in listed(lab, viewer_key, offline_after=5).items()
                            if n in rigs} == {"rig-a": "offline", "rig-b": "idle"}, timeout=60, period=0.5)
        rows = listed(lab, viewer_key, offline_after=5)
        assert rows["rig-a"]["state"] == "offline" and rows["rig-a"]["age"] >= 5

        def table_shows_both() -> bool:
            text = hil("--store", lab.url, "--key-file", str(viewer_key), "rigs",
                       "--offline-after", "5").output
            assert "locked by olga: seal change" in text
            return bool(re.search(r"rig-a\s+offline", text) and re.search(r"rig-b\s+idle", text))
        poll_until(table_shows_both, timeout=60, period=0.5)
    finally:
        for proc, _ in rigs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=60)


def test_the_lab_settings_come_from_a_configs_lab_table_and_half_settings_are_one_line(tmp_path):
    from daq.cli.common import CliState
    from daq.cli.serve import _rig_lab

    key_file = tmp_path / "rig.key"
    key_file.write_text("k" * 40 + "\n")
    key_file.chmod(0o600)
    config = tmp_path / "press.toml"
    table = '\n[lab]\nurl = "http://127.0.0.1:9"\nkey_file = "rig.key"\nrig = "press-7"\npush = false\n'
    config.write_text((ROOT / "configs" / "press-sim.toml").read_text() + table)
    lab = _rig_lab(CliState(None, str(config)), None, None, None, 5.0)
    assert lab is not None
    assert (lab.url, lab.rig, lab.key, lab.cache_s) == ("http://127.0.0.1:9", "press-7", "k" * 40, 5.0)
    assert _rig_lab(CliState(None, None), None, None, None, 60.0) is None  # a rig on its own
    for args, said in ((["--rig", "x"], "--rig names this rig in a lab: give --lab URL too"),
                       (["--lab", "http://127.0.0.1:9"], "--lab needs --rig NAME"),
                       (["--lab", "http://127.0.0.1:9", "--rig", "a/b"], "a rig's name is 1 to 64")):
        res = hil("serve", "--port", "0", "--configs", str(tmp_path), "--token-file", str(tmp_path / "t"),
                  *args, key="k" * 40)
        assert res.exit_code == 1 and said in res.output, res.output
        assert len(res.output.strip().splitlines()) == 1


def test_a_running_rig_shows_its_session_config_person_and_progress_in_the_lab(lab, people, tmp_path):
    configs, store, tokens = rig_folder(tmp_path)
    beacon_config(configs, "endless.toml", "beacon-lab")
    srv = ServerThread(configs, store, tokens)
    srv.server.lab = RigLab(lab.url, "rig-run", people["rig-b"][0], every_s=0.5)
    srv.start()
    try:
        olga = httpx.Client(base_url=srv.url, headers=bearer(people["olga"][0]), timeout=30)
        run_id = olga.post("/api/runs", json={"config": "endless.toml"}).json()["id"]
        viewer_key = people["vic"][1]

        def running() -> dict | None:
            row = listed(lab, viewer_key).get("rig-run") or {}
            run = row.get("run") or {}
            done = (run.get("progress") or {}).get("done") or 0
            return row if row.get("state") == "running" and run.get("session") and done > 0 else None

        poll_until(running, timeout=60, period=0.25)
        row = running() or listed(lab, viewer_key)["rig-run"]
        assert row["run"]["by"] == "olga" and row["run"]["config"] == "endless.toml"
        assert row["run"]["session"] == olga.get(f"/api/runs/{run_id}").json()["session"]
        assert olga.post(f"/api/runs/{run_id}/stop").status_code == 200
        poll_until(lambda: listed(lab, viewer_key)["rig-run"]["state"] == "idle", timeout=60, period=0.25)
    finally:
        srv.stop()
    assert listed(lab, people["vic"][1])["rig-run"]["state"] == "offline"  # a stopped server says so


class SlowFirstWrite:
    """The lab's side of a rig's heartbeat, in process: the states in the order they land; the first write
    takes 0.5 s (a busy lab), the others none."""

    def __init__(self) -> None:
        self.landed: list[str] = []
        self.asked = 0
        self.first_done = threading.Event()

    def publish(self, state: dict) -> None:
        self.asked += 1
        first = self.asked == 1
        if first:
            time.sleep(0.5)
        self.landed.append(state["state"])
        if first:
            self.first_done.set()


def test_a_beat_on_its_way_when_the_server_stops_lands_before_the_offline_state():
    """A stopped `hil serve` leaves its rig offline in the lab even when a heartbeat's write was still on its
    way: that write was cancelled in the event loop but not in its thread, and landed after the offline
    state (the lab showed the stopped rig idle, test above, under load)."""
    service = SimpleNamespace(queue=SimpleNamespace(snapshot=lambda: {"current": None, "queued": []}),
                              locks=SimpleNamespace(state=lambda: None))
    lab = SlowFirstWrite()

    async def start_then_stop_mid_write() -> None:
        beat = Heartbeat(RigLab("http://127.0.0.1:9", "rig-a", "unused", every_s=60.0), service, "page")
        beat.publisher = lab  # type: ignore[assignment] - nothing is opened: the lab is the stand-in
        beat.start()
        deadline = time.monotonic() + 10
        while lab.asked == 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert lab.asked == 1 and not lab.landed  # the first beat is on its way
        await beat.stop()

    asyncio.run(start_then_stop_mid_write())
    assert lab.first_done.wait(timeout=10)
    assert lab.landed == ["idle", "offline"]


def test_the_lab_page_checks_host_origin_and_key_and_takes_no_key_in_a_url(lab, people):
    page = f"{lab.url}/lab"
    assert httpx.get(f"{page}/", headers={"Host": "rebound.example"}).status_code == 403
    assert httpx.get(f"{page}/api/rigs").status_code == 401  # no key: nothing read
    assert httpx.get(f"{page}/api/rigs", params={"key": people["vic"][0]}).status_code == 401
    foreign = httpx.post(f"{page}/api/login", json={"key": people["vic"][0]},
                         headers={"Origin": "http://evil.example"})
    assert foreign.status_code == 403 and "hil_lab_key" not in foreign.headers.get("set-cookie", "")
    assert httpx.post(f"{page}/api/login", json={"key": "0" * 72}).status_code == 401
    with httpx.Client(base_url=page) as http:
        signed = http.post("/api/login", json={"key": people["vic"][0]})
        assert signed.status_code == 200 and signed.json() == {"name": "vic", "role": "viewer"}
        cookie = signed.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie and "path=/lab" in cookie
        assert isinstance(http.get("/api/rigs").json(), list)
        assert http.get("/api/sessions/../../api/v1/metadata/").status_code == 404
        assert http.get("/api/sessions/zzzzzzzzzzzz").status_code == 404
        assert http.delete("/api/login").status_code == 200
