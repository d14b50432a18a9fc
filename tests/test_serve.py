"""`hil serve` over real HTTP and WebSocket on loopback (httpx, websockets): a real uvicorn server, real
runs of a beacon rig through the run lifecycle, the real store and bus; no mocks."""

from __future__ import annotations

import base64
import contextlib
import getpass
import io
import json
import os
import re
import signal
import socket
import ssl
import stat
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import httpx
import pytest
import websockets
from click.testing import CliRunner

from daq.cli.main import main
from daq.rigs import register, unregister
from daq.serve.run_queue import QUEUE_FILE
from daq.store.reader import SessionReader
from tests.polling import poll_until
from tests.serve_fixtures import ServedBeacon, ServerThread, beacon_config, self_signed
from tests.serve_fixtures import ws_connect as connect
from tests.test_secured_bus import lan_address

KINDS = {"beacon-serve": ServedBeacon("beacon-serve"),
         "beacon-est": ServedBeacon("beacon-est", estimate_every=3),
         "beacon-heavy": ServedBeacon("beacon-heavy", samples=100, channels=4, period=0.005,
                                      note_bytes=20_000)}


@pytest.fixture(scope="module", autouse=True)
def beacon_kinds():
    for rig in KINDS.values():
        register(rig)
    yield
    for kind in KINDS:
        unregister(kind)


@pytest.fixture
def lab(tmp_path):
    configs = tmp_path / "configs"
    configs.mkdir()
    beacon_config(configs, "endless.toml", "beacon-serve")
    beacon_config(configs, "short.toml", "beacon-serve", frames=10)
    beacon_config(configs, "heavy.toml", "beacon-heavy")
    beacon_config(configs, "estimating.toml", "beacon-est", frames=12)
    beacon_config(configs, "unreachable.toml", "beacon-serve", unreachable=True)
    (configs / "broken.toml").write_text('[rig]\nkind = "beacon-serve"\nsimulated = true\nbogus = 1\n')
    return configs, tmp_path / "store" / "s.sqlite", tmp_path / "tokens"


@pytest.fixture
def served(lab):
    configs, store, tokens = lab
    srv = ServerThread(configs, store, tokens).start()
    yield srv
    srv.stop()


def client(srv: ServerThread, token: str | None = "ok") -> httpx.Client:
    headers = {"Authorization": f"Bearer {srv.token if token == 'ok' else token}"} if token else {}
    return httpx.Client(base_url=srv.url, headers=headers, timeout=30)


def wait_run(http: httpx.Client, run_id: str, statuses: tuple[str, ...], timeout: float = 30) -> dict:
    """The run's entry once its status is one of ``statuses`` (polled)."""
    seen: dict = {}

    def check() -> bool:
        snap = http.get("/api/runs").json()
        entries = [*snap["queued"], *([snap["current"]] if snap["current"] else []), *snap["finished"]]
        for e in entries:
            if e["id"] == run_id:
                seen.update(e)
                return e["status"] in statuses and (e["status"] != "running" or e["session"] is not None)
        return False

    poll_until(check, timeout=timeout, period=0.05)
    return seen


def test_token_file_is_created_user_only_and_the_url_with_the_token_said_once(lab):
    configs, store, tokens = lab
    srv = ServerThread(configs, store, tokens).start()
    try:
        assert stat.S_IMODE(tokens.stat().st_mode) == 0o600
        said = "\n".join(srv.said)
        assert f"/?token={srv.token}" in said
    finally:
        srv.stop()
    again = ServerThread(configs, store, tokens).start()  # the file exists: the token is not said again
    try:
        assert srv.token not in "\n".join(again.said)
    finally:
        again.stop()


def test_every_mutating_route_needs_the_token_reads_on_loopback_do_not(served):
    routes = [("POST", "/api/runs", {"config": "short.toml"}), ("DELETE", "/api/runs/abc", None),
              *[("POST", f"/api/runs/abc/{a}", None) for a in ("pause", "resume", "stop", "abort")]]
    for token in (None, "not-the-token-at-all-0123456789"):
        with client(served, token) as http:
            for method, path, body in routes:
                r = http.request(method, path, json=body)
                assert r.status_code == 401, (method, path, token, r.text)
                assert r.headers["www-authenticate"] == "Bearer"
            assert http.get("/api/sessions").status_code == 200  # reads are open on loopback
    with client(served) as http:
        assert http.get("/api/runs").json()["queued"] == []  # nothing got queued
        assert http.delete("/api/runs/abc").status_code == 404
    # a token in the query string does not authorise a change (only the header does)
    with client(served, None) as http:
        assert http.post(f"/api/runs?token={served.token}", json={"config": "short.toml"}).status_code == 401


def test_binding_beyond_loopback_without_tls_is_refused_in_one_line(tmp_path):
    res = CliRunner().invoke(main, ["--store", str(tmp_path / "s.sqlite"), "serve", "--host", "0.0.0.0",
                                    "--configs", str(tmp_path), "--token-file", str(tmp_path / "t")])
    assert res.exit_code == 1
    assert res.output.strip().splitlines() == [
        "Error: --host 0.0.0.0 is reachable from other machines: give --certfile and --keyfile (TLS), "
        "or bind 127.0.0.1"]
    assert not (tmp_path / "t").exists()


def test_beyond_loopback_over_tls_reads_need_the_token_too(lab, tmp_path):
    address = lan_address()
    if address is None:
        pytest.skip("this host has no non-loopback IPv4 address")
    configs, store, tokens = lab
    certfile, keyfile = self_signed(tmp_path, address)
    srv = ServerThread(configs, store, tokens, host=address, certfile=certfile, keyfile=keyfile).start()
    try:
        assert srv.url.startswith(f"https://{address}:")
        trust = ssl.create_default_context(cafile=certfile)
        with httpx.Client(base_url=srv.url, verify=trust, timeout=30) as http:
            for path in ("/api/sessions", "/api/runs", "/api/configs", "/api/live"):
                assert http.get(path).status_code == 401, path
                assert http.get(path, params={"token": "wrong-token-0123456789"}).status_code == 401
                assert http.get(path, params={"token": srv.token}).status_code == 401, path  # never in URLs
                assert http.get(path, headers={"Authorization": f"Bearer {srv.token}"}).status_code == 200
                assert http.get(path, headers={"Cookie": f"hil_token={srv.token}"}).status_code == 200
            assert http.get("/").status_code == 200  # the page itself holds no data; it asks for the token
            assert http.post("/api/runs", params={"token": srv.token}, json={"config": "short.toml"}) \
                .status_code == 401  # a change needs the header
        with pytest.raises(websockets.exceptions.InvalidStatus):
            connect(f"wss://{address}:{srv.server.port}/ws/live", ssl=trust)
        with pytest.raises(websockets.exceptions.InvalidStatus):  # a token in the URL is no token
            connect(f"wss://{address}:{srv.server.port}/ws/live?token={srv.token}", ssl=trust)
        with connect(f"wss://{address}:{srv.server.port}/ws/live", ssl=trust,  # the page's cookie
                     additional_headers={"Cookie": f"hil_token={srv.token}"}) as ws:
            assert json.loads(ws.recv(timeout=10))["type"] == "hello"
    finally:
        srv.stop()


def test_configs_are_checked_as_hil_check_does(served):
    with client(served, None) as http:
        listed = {c["name"]: c for c in http.get("/api/configs").json()}
    assert listed["short.toml"] == {"name": "short.toml", "ok": True, "kind": "beacon-serve",
                                    "simulated": True}
    assert not listed["broken.toml"]["ok"]
    assert "bogus" in listed["broken.toml"]["error"] and "\n" not in listed["broken.toml"]["error"]
    with client(served) as http:
        r = http.post("/api/runs", json={"config": "broken.toml"})
        assert r.status_code == 422 and "bogus" in r.json()["error"]
        assert http.post("/api/runs", json={"config": "../etc/passwd"}).status_code == 404


def test_two_queued_runs_complete_in_order_recorded_as_the_tokens_name(served):
    with client(served) as http:
        first = http.post("/api/runs", json={"config": "short.toml"})
        second = http.post("/api/runs", json={"config": "short.toml"})
        assert first.status_code == 202 and second.status_code == 202
        a = wait_run(http, first.json()["id"], ("complete",))
        b = wait_run(http, second.json()["id"], ("complete",))
        assert b["started_at"] >= a["ended_at"]
        assert a["safe"] is True and a["result"]["status"] == "complete"
        assert a["result"]["session_id"] == a["session"]
        listed = {s["id"]: s for s in http.get("/api/sessions").json()}
        assert listed[a["session"]]["status"] == "complete" and listed[b["session"]]["status"] == "complete"
        detail = http.get(f"/api/sessions/{a['session']}").json()
    name = served.server.token_file.read_text().split("\n")[1].split()[0]
    assert a["by"] == name and detail["started_by"] == name
    assert {"stream": "beacon-serve.run", "kind": "started", "n": 1} in detail["event_counts"]
    res = CliRunner().invoke(main, ["--store", str(served.server.store_path), "show", a["session"], "--json"])
    assert json.loads(res.output) == detail  # `hil show --json` shows who started it too


def test_stop_ends_the_running_run_aborted_and_safe_then_the_next_starts(served):
    with client(served) as http:
        run = http.post("/api/runs", json={"config": "endless.toml"}).json()
        nxt = http.post("/api/runs", json={"config": "endless.toml"}).json()
        cur = wait_run(http, run["id"], ("running",))
        poll_until(lambda: (http.get("/api/runs").json()["current"] or {}).get("live") is not None,
                   timeout=10)
        assert http.post(f"/api/runs/{run['id']}/pause").json()["state"] == "paused"
        assert http.post(f"/api/runs/{run['id']}/resume").json()["state"] == "running"
        assert http.post(f"/api/runs/{nxt['id']}/stop").status_code == 409  # queued, not running
        reply = http.post(f"/api/runs/{cur['session']}/stop")  # the session id names the run as well
        assert reply.status_code == 200 and reply.json()["state"] == "stopping"
        done = wait_run(http, run["id"], ("aborted",))
        assert done["safe"] is True and "stopped by the operator" in done["reason"]
        assert http.get(f"/api/sessions/{done['session']}").json()["status"] == "aborted"
        wait_run(http, nxt["id"], ("running",))  # the second starts after the first
        assert http.post(f"/api/runs/{nxt['id']}/abort").status_code == 200
        assert wait_run(http, nxt["id"], ("aborted",))["safe"] is True


def test_a_run_refused_before_its_session_exists_fails_with_the_reason_and_the_queue_goes_on(served):
    with client(served) as http:
        bad = http.post("/api/runs", json={"config": "unreachable.toml"}).json()
        good = http.post("/api/runs", json={"config": "short.toml"}).json()
        failed = wait_run(http, bad["id"], ("failed",))
        assert failed["session"] is None and failed["reason"] == "lamp at 127.0.0.1:9 refused the connection"
        assert wait_run(http, good["id"], ("complete",))["safe"] is True


def test_analysis_runs_hil_analyze_in_a_process_and_reports_its_one_line_error(served):
    with client(served) as http:
        run = http.post("/api/runs", json={"config": "short.toml"}).json()
        sid = wait_run(http, run["id"], ("complete",))["session"]
        assert http.get(f"/api/sessions/{sid}/analysis").json() == {"session": sid, "state": "none"}
        with client(served, None) as anonymous:
            assert anonymous.post(f"/api/sessions/{sid}/analysis").status_code == 401
        assert http.post(f"/api/sessions/{sid[:6]}/analysis").json() == {"session": sid, "state": "running"}
        poll_until(lambda: http.get(f"/api/sessions/{sid}/analysis").json()["state"] != "running", timeout=60,
                   period=0.2)
        # the analysis process is `hil analyze`, which knows the installed rig kinds, not this test's beacon
        assert http.get(f"/api/sessions/{sid}/analysis").json() == {
            "session": sid, "state": "failed", "error": f"Error: session {sid}: no analysis for rig kind "
                                                        "'beacon-serve'"}
        assert http.get(f"/api/sessions/{sid}/analysis/x.png").status_code == 404


def test_delete_removes_a_queued_run_only(served):
    with client(served) as http:
        run = http.post("/api/runs", json={"config": "endless.toml"}).json()
        queued = http.post("/api/runs", json={"config": "short.toml"}).json()
        wait_run(http, run["id"], ("running",))
        assert http.delete(f"/api/runs/{run['id']}").status_code == 409
        assert http.delete(f"/api/runs/{queued['id']}").json() == {"deleted": queued["id"]}
        assert http.delete(f"/api/runs/{queued['id']}").status_code == 404
        assert http.get("/api/runs").json()["queued"] == []
        http.post(f"/api/runs/{run['id']}/abort")
        wait_run(http, run["id"], ("aborted",))


def test_the_queue_survives_a_restart_and_the_running_run_ends_safe(lab):
    configs, store, tokens = lab
    srv = ServerThread(configs, store, tokens).start()
    with client(srv) as http:
        run = http.post("/api/runs", json={"config": "endless.toml"}).json()
        queued = http.post("/api/runs", json={"config": "endless.toml"}).json()
        wait_run(http, run["id"], ("running",))
    srv.stop()  # a shutdown (SIGTERM) aborts the running run through the safe state
    saved = json.loads((store.parent / QUEUE_FILE).read_text())
    assert [e["id"] for e in saved["queued"]] == [queued["id"]]
    assert saved["finished"][0]["id"] == run["id"] and saved["finished"][0]["status"] == "aborted"
    assert saved["finished"][0]["safe"] is True
    again = ServerThread(configs, store, tokens).start()
    try:
        with client(again) as http:
            entry = wait_run(http, queued["id"], ("running",))  # still there, and now it runs
            assert entry["config"] == "endless.toml" and entry["session"] != saved["finished"][0]["session"]
            http.post(f"/api/runs/{queued['id']}/abort")
            wait_run(http, queued["id"], ("aborted",))
    finally:
        again.stop()


def test_export_streams_the_bytes_hil_export_writes(served, tmp_path):
    with client(served) as http:
        run = http.post("/api/runs", json={"config": "short.toml"}).json()
        sid = wait_run(http, run["id"], ("complete",))["session"]
        got = {fmt: http.get(f"/api/sessions/{sid}/export", params={"format": fmt})
               for fmt in ("hdf5", "mat", "csv")}
        assert http.get(f"/api/sessions/{sid}/export", params={"format": "xls"}).status_code == 400
        assert http.get("/api/sessions/nope/export", params={"format": "mat"}).status_code == 404
    for fmt, suffix in (("hdf5", ".h5"), ("mat", ".mat"), ("csv", "")):
        out = tmp_path / f"cli-{fmt}{suffix}"
        res = CliRunner().invoke(main, ["--store", str(served.server.store_path), "export", sid,
                                        "--format", fmt, "-o", str(out)])
        assert res.exit_code == 0, res.output
        assert got[fmt].status_code == 200
        if fmt == "csv":
            with zipfile.ZipFile(io.BytesIO(got[fmt].content)) as z:
                files = {Path(n).name: z.read(n) for n in z.namelist()}
            assert files == {p.name: p.read_bytes() for p in out.iterdir()}
        else:
            assert got[fmt].content == out.read_bytes()


def test_websocket_messages_carry_increasing_sequence_numbers(served):
    with connect(f"ws://127.0.0.1:{served.server.port}/ws/live") as ws, client(served) as http:
        hello = json.loads(ws.recv(timeout=10))
        assert hello["type"] == "hello"
        run = http.post("/api/runs", json={"config": "short.toml"}).json()
        msgs = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            m = json.loads(ws.recv(timeout=10))
            msgs.append(m)
            if m["type"] == "run" and m["state"] == "ended":
                break
    seqs = [hello["seq"]] + [m["seq"] for m in msgs]
    assert all(b > a for a, b in zip(seqs, seqs[1:], strict=False))
    types = {m["type"] for m in msgs}
    assert {"run", "frame", "event"} <= types
    frame = next(m for m in msgs if m["type"] == "frame")
    assert frame["stream"] == "beacon.x" and frame["channels"] == ["x0"] and frame["units"] == ["m"]
    assert len(frame["t"]) == len(frame["data"][0]) > 0
    kinds = {(m["stream"], m["kind"]) for m in msgs if m["type"] == "event"}
    assert ("beacon-serve.run", "started") in kinds and ("beacon-serve.plan", "plan_outcome") in kinds
    assert msgs[-1]["run"]["id"] == run["id"] and msgs[-1]["run"]["status"] == "complete"


def stalled_websocket(port: int) -> socket.socket:
    """A WebSocket client that completes the handshake and then reads nothing (a small receive buffer)."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(f"GET /ws/live HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
                 f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
                 .encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)  # byte by byte: nothing after the handshake is read
    assert head.startswith(b"HTTP/1.1 101"), head
    return sock


def test_a_stalled_browser_loses_messages_counted_and_never_slows_the_run(served):
    url = f"ws://127.0.0.1:{served.server.port}/ws/live"
    with contextlib.closing(stalled_websocket(served.server.port)), \
            connect(url, close_timeout=0.5) as good, client(served) as http:
        run = http.post("/api/runs", json={"config": "heavy.toml"}).json()
        wait_run(http, run["id"], ("running",))

        def dropped() -> int:
            return max((c["dropped"] for c in http.get("/api/live").json()["clients"]), default=0)

        poll_until(lambda: dropped() > 0, timeout=30, period=0.1)
        steps = served.server.runner.ctx.steps_done
        poll_until(lambda: served.server.runner.ctx.steps_done > steps + 50, timeout=20)  # still going
        for _ in range(20):  # the other browser keeps getting messages
            json.loads(good.recv(timeout=10))
        http.post(f"/api/runs/{run['id']}/stop")
        done = wait_run(http, run["id"], ("aborted",))
        assert done["safe"] is True
    store = str(served.server.store_path)
    shown = CliRunner().invoke(main, ["--store", store, "show", done["session"], "--json"])
    recorded = json.loads(shown.output)
    assert recorded["stats"]["gaps"] == {} and recorded["stats"]["malformed"] == {}  # the run lost nothing


@pytest.mark.slow(reason="simulated press runs under a `hil serve` subprocess")
def test_served_press_stop_the_first_the_second_starts_and_sigterm_ends_it_safe(tmp_path):
    """The issue's scenario on the real press simulator, `hil serve` as a process: queue two press runs, stop
    the first, the second starts; SIGTERM to the server aborts the second through the safe state."""
    configs = tmp_path / "configs"
    configs.mkdir()
    for name, n_series in (("press.toml", 3), ("press-long.toml", 30)):
        # the second run must outlast the first one's analysis (a loaded machine slows that down)
        text = Path("configs/press-sim.toml").read_text()
        for key, value in (("n_series", n_series), ("n_steps_up", 4), ("n_samples", 4)):
            text = re.sub(rf"(?m)^{key} = \d+", f"{key} = {value}", text)
        (configs / name).write_text(text)
    store, tokens = tmp_path / "s.sqlite", tmp_path / "tokens"
    proc = subprocess.Popen([str(Path(sys.executable).parent / "hil"), "--store", str(store), "serve",
                             "--configs", str(configs), "--port", "0", "--token-file", str(tokens)],
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        url = None
        while url is None:
            line = proc.stderr.readline()
            assert line, "hil serve ended before it said where it serves"
            m = re.search(r"(http://127\.0\.0\.1:\d+)/\?token=(\S+)", line)
            url, token = (m.group(1), m.group(2)) if m else (None, None)
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
            first = http.post("/api/runs", json={"config": "press.toml"}).json()
            second = http.post("/api/runs", json={"config": "press-long.toml"}).json()
            wait_run(http, first["id"], ("running",), timeout=60)
            poll_until(lambda: ((http.get("/api/runs").json()["current"] or {}).get("live") or {})
                       .get("progress", {}).get("done", 0) >= 2, timeout=60, period=0.2)
            assert http.post(f"/api/runs/{first['id']}/stop").status_code == 200
            a = wait_run(http, first["id"], ("aborted",), timeout=60)
            assert a["safe"] is True and a["kind"] == "press"
            b = wait_run(http, second["id"], ("running",), timeout=60)
            # the first session's analysis (`hil analyze --plots` in a process of its own) beside the run
            where = f"/api/sessions/{a['session']}/analysis"
            assert http.post(where).status_code == 202
            poll_until(lambda: http.get(where).json()["state"] != "running", timeout=120, period=0.5)
            analysis = http.get(where).json()
            if analysis["state"] == "done":  # how much a stopped plan recorded decides which
                assert analysis["report"]["kind"] == "press" and analysis["plots"]
                png = http.get(f"/api/sessions/{a['session']}/analysis/{analysis['plots'][0]}")
                assert png.content.startswith(b"\x89PNG")
            else:
                assert analysis["state"] == "failed" and analysis["error"].startswith("Error: session ")
            assert http.get("/api/runs").json()["current"]["id"] == second["id"]  # still running
        proc.stderr.close()  # whoever read its stderr is gone (a closed terminal, a dead parent): EPIPE
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=90) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
    saved = json.loads((tmp_path / QUEUE_FILE).read_text())
    assert saved["current"] is None and saved["queued"] == []
    ended = saved["finished"][0]
    assert ended["id"] == second["id"] and ended["status"] == "aborted" and ended["safe"] is True
    res = CliRunner().invoke(main, ["--store", str(store), "show", b["session"], "--json"])
    shown = json.loads(res.output)
    assert shown["status"] == "aborted" and shown["config"]["rig"]["kind"] == "press"
    assert {"stream": "press.run", "kind": "started", "n": 1} in shown["event_counts"]


# ----------------------------------------------------------------------------------- replays, tokens, audit


def live_until(ws, done, timeout: float = 30) -> list[dict]:
    """The WebSocket's messages up to and including the first for which ``done(message)`` holds."""
    msgs: list[dict] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msgs.append(json.loads(ws.recv(timeout=max(0.1, deadline - time.monotonic()))))
        if done(msgs[-1]):
            return msgs
    raise AssertionError(f"no final message within {timeout} s; last: {msgs[-3:]}")


def test_a_replayed_session_plays_live_with_its_estimates_numbered_and_with_units(served):
    with client(served) as http:
        run = http.post("/api/runs", json={"config": "estimating.toml"}).json()
        sid = wait_run(http, run["id"], ("complete",))["session"]
        with client(served, None) as anonymous:
            assert anonymous.post("/api/replays", json={"session": sid}).status_code == 401
        assert http.post("/api/replays", json={"session": sid, "speed": 0}).status_code == 400
        assert http.post("/api/replays", json={"session": "nope"}).status_code == 404
        with connect(f"ws://127.0.0.1:{served.server.port}/ws/live") as ws:
            assert json.loads(ws.recv(timeout=10))["replay"] is None  # hello: nothing plays
            r = http.post("/api/replays", json={"session": sid[:6], "speed": 4})
            assert r.status_code == 202, r.text
            replay = r.json()
            assert (replay["session"], replay["kind"]) == (sid, "beacon-est")
            assert replay["by"] == served_name(served)
            assert http.post("/api/replays", json={"session": sid}).status_code == 409  # one at a time
            msgs = live_until(ws, lambda m: m["type"] == "replay" and m["state"] == "ended")
        assert http.get("/api/replays").json()["last"]["status"] == "ended"
    with SessionReader(served.server.store_path) as reader:
        recorded_frames = [m for m in reader.messages(sid) if hasattr(m, "channels")]
        recorded_estimates = [e.body for e in reader.events(sid, kind="estimate")]
    seqs = [m["seq"] for m in msgs]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))  # numbered: one client, nothing missed
    assert (msgs[0]["type"], msgs[0]["state"], msgs[0]["replay"]["id"]) == ("replay", "started", replay["id"])
    frames = [m for m in msgs if m["type"] == "frame"]
    assert [f["bus_seq"] for f in frames] == [f.seq for f in recorded_frames]  # every recorded frame
    assert all(f["replay"] is True and f["session"] == sid and f["units"] == ["m"] for f in frames)
    assert frames[0]["t"][0] == pytest.approx(recorded_frames[0].t0)  # the recorded times
    estimates = [m["body"] for m in msgs if m["type"] == "event" and m["kind"] == "estimate"]
    assert len(estimates) == 4 and estimates == recorded_estimates
    assert estimates[-1]["units"] == ["1", "m"] and estimates[-1]["verdict"]["kept"] == ["beacon"]
    outcome = [m for m in msgs if m["type"] == "event" and m["kind"] == "plan_outcome"]
    assert outcome[0]["body"]["status"] == "complete" and outcome[0]["replay"] is True


def test_a_looping_replay_plays_pass_after_pass_until_stopped_and_a_queued_run_takes_over(served):
    with client(served) as http:
        first = http.post("/api/runs", json={"config": "short.toml"}).json()
        sid = wait_run(http, first["id"], ("complete",))["session"]
        with connect(f"ws://127.0.0.1:{served.server.port}/ws/live") as ws:
            json.loads(ws.recv(timeout=10))
            looping = http.post("/api/replays", json={"session": sid, "speed": 20, "loop": True}).json()
            msgs = live_until(ws, lambda m: m["type"] == "replay" and m["state"] == "pass"
                              and m["replay"]["passes"] == 3)
            frames = [m["bus_seq"] for m in msgs if m["type"] == "frame"]
            assert frames[:20] == list(range(10)) * 2  # the whole session (frames 0 to 9), then again
            stopped = http.post(f"/api/replays/{looping['id']}/stop")
            assert stopped.status_code == 200 and stopped.json()["status"] == "stopped"
            assert http.get("/api/replays").json() == {"current": None, "last": stopped.json()}
            assert http.post(f"/api/replays/{looping['id']}/stop").status_code == 409
            # a run that becomes due ends a playing replay: the live view is the run's
            again = http.post("/api/replays", json={"session": sid, "speed": 20, "loop": True}).json()
            run = http.post("/api/runs", json={"config": "short.toml"}).json()
            msgs = live_until(ws, lambda m: m["type"] == "run" and m["state"] == "ended")
        ended = [m["replay"] for m in msgs if m["type"] == "replay" and m["state"] == "ended"]
        assert [(e["status"], e["reason"]) for e in ended if e["id"] == again["id"]] == [
            ("stopped", "a queued run started")]
        assert wait_run(http, run["id"], ("complete",))["safe"] is True
        assert http.post("/api/replays", json={"session": sid, "loop": "yes"}).status_code == 400


def served_name(srv: ServerThread) -> str:
    lines = srv.server.token_file.read_text().splitlines()
    return [x for x in lines if x and not x.startswith("#")][0].split()[0]


def test_hil_run_records_who_started_it_shown_by_sessions_show_and_the_api(served, monkeypatch):
    store = str(served.server.store_path)
    config = str(served.server.configs.folder / "short.toml")
    monkeypatch.setenv("HIL_USER", "ada")
    res = CliRunner().invoke(main, ["--store", store, "run", config, "--no-progress", "--json"])
    assert res.exit_code == 0, res.output
    sid = json.loads(res.output)["run"]["session_id"]
    monkeypatch.delenv("HIL_USER")
    res = CliRunner().invoke(main, ["--store", store, "run", config, "--no-progress", "--json"])
    other = json.loads(res.output)["run"]["session_id"]
    rows = {r["id"]: r for r in json.loads(CliRunner().invoke(main, ["--store", store, "sessions", "--json"])
                                           .output)}
    assert rows[sid]["started_by"] == "ada" and rows[other]["started_by"] == getpass.getuser()
    assert list(rows[sid]) == ["id", "kind", "status", "reason", "started", "ended", "started_by", "rig",
                               "dry_run", "streams"]
    shown = json.loads(CliRunner().invoke(main, ["--store", store, "show", sid, "--json"]).output)
    assert shown["started_by"] == "ada"
    assert " by ada" in CliRunner().invoke(main, ["--store", store, "show", sid]).output
    with client(served, None) as http:
        # the served row is `hil sessions --json`'s plus the labs holding it (none here: tests/test_lab.py)
        assert {r["id"]: r for r in http.get("/api/sessions").json()}[sid] == {**rows[sid], "lab": []}
        assert http.get(f"/api/sessions/{sid}").json() == shown


def tokens_cli(path: Path, *args: str):
    return CliRunner().invoke(main, ["serve", "token", *args, "--token-file", str(path)])


def test_named_tokens_are_added_listed_and_revoked_and_a_running_server_follows_the_file(served):
    path = served.server.token_file
    owner = served_name(served)
    added = tokens_cli(path, "bob")
    assert added.exit_code == 2  # a subcommand is needed
    added = tokens_cli(path, "add", "bob")
    assert added.exit_code == 0, added.output
    bob = added.stdout.strip()
    assert len(bob) >= 40 and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert tokens_cli(path, "list").stdout.split() == [owner, "bob"]
    assert bob not in tokens_cli(path, "list").output
    assert tokens_cli(path, "add", "bob").output.strip() == (
        f"Error: token file {path} already has a token named 'bob' (hil serve token revoke bob first)")
    with client(served, bob) as http:  # the running server takes bob's token without a restart
        run = http.post("/api/runs", json={"config": "short.toml"})
        assert run.status_code == 202 and run.json()["by"] == "bob"
        assert wait_run(http, run.json()["id"], ("complete",))["by"] == "bob"
    revoked = tokens_cli(path, "revoke", "bob")
    assert revoked.exit_code == 0 and "revoked token 'bob'" in revoked.output
    with client(served, bob) as http:
        assert http.post("/api/runs", json={"config": "short.toml"}).status_code == 401
    with client(served) as http:
        assert http.delete("/api/runs/abc").status_code == 404  # the owner's token still works
    assert tokens_cli(path, "list").stdout.split() == [owner]
    assert tokens_cli(path, "revoke", owner).output.strip() == (
        f"Error: '{owner}' holds the only token of {path}: add another first (hil serve token add NAME), "
        "then revoke this one")
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".part")]  # written whole, renamed
    path.chmod(0o644)  # a file opened to others while serving: nobody gets in (fail closed), said in one line
    with client(served) as http:
        r = http.delete("/api/runs/abc")
        assert r.status_code == 401 and r.json()["error"] == (
            f"token file {path} is open to other users (mode 0644): chmod 600 {path}")
    path.chmod(0o600)
    with client(served) as http:
        assert http.delete("/api/runs/abc").status_code == 404


@pytest.mark.parametrize("content, mode, error", [
    (b"lab short\n", 0o600, "line 1: expected 'NAME TOKEN' or 'NAME TOKEN viewer' with a token of at least "
                            "16 characters (an admin's line ends in 'admin')"),
    (b"lab 0123456789abcdef\nbob 0123456789abcdef\n", 0o600, "line 2: the same token as line 1 (each token "
                                                            "names one person)"),
    (b"# nothing\n", 0o600, "holds no token (hil serve token add NAME)"),
    (b"lab \xff0123456789abcdef\n", 0o600, "is not UTF-8 text"),
    (b"lab 0123456789abcdef\n", 0o640, "is open to other users (mode 0640): chmod 600 {path}"),
])
def test_a_bad_token_file_is_refused_in_one_line(tmp_path, content, mode, error):
    path = tmp_path / "tokens"
    path.write_bytes(content)
    path.chmod(mode)
    res = CliRunner().invoke(main, ["--store", str(tmp_path / "s.sqlite"), "serve", "--port", "0",
                                    "--configs", str(tmp_path), "--token-file", str(path)])
    assert res.exit_code == 1
    said = f"Error: token file {path} " + error.format(path=path)
    assert res.output.strip().splitlines() == [said]
    listed = tokens_cli(path, "list")
    if "no token" in error:  # the file itself is fine: it lists no name
        assert listed.exit_code == 0 and listed.output == ""
    else:
        assert listed.exit_code == 1 and listed.output.strip() == said
    missing = tmp_path / "missing"
    assert tokens_cli(missing, "list").output.startswith(f"Error: token file {missing}: no such file")
