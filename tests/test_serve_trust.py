"""`hil serve` against an attacker on the lab PC or network (issue 33 items 2-4, 10, 11): foreign Host and
Origin refused, the token never in a URL (a cookie from the printed link), read-only viewer tokens, bad
bodies answered in one JSON line, exports on a bounded pool that leaves nothing behind. One real server
(uvicorn on 127.0.0.1, port 0) with a recorded session serves the whole module."""

from __future__ import annotations

import asyncio
import concurrent.futures
import io
import json
import os
import signal
import socket
import time
import zipfile

import httpx
import pytest
import websockets

from daq.rigs import register, unregister
from daq.serve.auth import COOKIE, Tokens, add_token
from daq.serve.exports import ClientGone, ExportPool
from daq.serve.problems import Busy
from daq.serve.replies import BODY_LIMIT
from tests.polling import poll_until, wait_until
from tests.serve_fixtures import ServedBeacon, ServerThread, beacon_config, bearer, finish_one_run
from tests.serve_fixtures import ws_connect as connect

RIG = ServedBeacon("beacon-trust", samples=50, channels=2, period=0.005)


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    register(RIG)
    folder = tmp_path_factory.mktemp("trust")
    configs = folder / "configs"
    configs.mkdir()
    beacon_config(configs, "short.toml", RIG.kind, frames=40)
    beacon_config(configs, "endless.toml", RIG.kind)
    served = ServerThread(configs, folder / "store" / "s.sqlite", folder / "tokens",
                          allowed_hosts=("lab-pc.example",)).start()
    try:
        finish_one_run(served)
        yield served
    finally:
        served.stop()
        unregister(RIG.kind)


def http_client(srv, **headers) -> httpx.Client:
    return httpx.Client(base_url=srv.url, headers=headers, timeout=30, follow_redirects=False)


def test_a_foreign_host_is_refused_loopback_and_configured_names_answer(srv):
    port = srv.server.port
    with http_client(srv) as http:
        for path in ("/", "/api/sessions", f"/api/sessions/{srv.session}"):
            r = http.get(path, headers={"Host": f"attacker.example:{port}"})
            assert r.status_code == 403 and "attacker.example" in r.json()["error"], path
        for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"lab-pc.example:{port}",
                     f"LAB-PC.example:{port}"):
            assert http.get("/api/sessions", headers={"Host": host}).status_code == 200, host
    assert handshake(port, "attacker.example").startswith(b"HTTP/1.1 403")
    assert handshake(port, f"localhost:{port}").startswith(b"HTTP/1.1 101")


def handshake(port: int, host: str) -> bytes:
    """The first line of the answer to a WebSocket handshake with exactly this Host header."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(f"GET /ws/live HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
        return s.recv(4096)


def test_a_websocket_or_a_change_from_a_foreign_origin_is_refused_even_with_the_token(srv):
    port = srv.server.port
    with pytest.raises(websockets.exceptions.InvalidStatus) as refused:
        with connect(f"ws://127.0.0.1:{port}/ws/live", origin="http://evil.example"):
            pass
    assert refused.value.response.status_code == 403
    with connect(f"ws://127.0.0.1:{port}/ws/live", origin=f"http://127.0.0.1:{port}") as ws:
        assert json.loads(ws.recv(timeout=10))["type"] == "hello"  # its own origin: accepted
    with http_client(srv, **bearer(srv.token)) as http:
        for origin in ("http://evil.example", "null", f"http://127.0.0.1:{port + 1}", f"https://127.0.0.1:{port}"):
            r = http.post("/api/runs", json={"config": "short.toml"}, headers={"Origin": origin})
            assert r.status_code == 403 and "origin" in r.json()["error"], origin
            assert http.post(f"/api/runs/{srv.session}/abort", headers={"Origin": origin}).status_code == 403
        assert http.get("/api/runs").json()["queued"] == []  # nothing got queued
        read = http.get("/api/sessions", headers={"Origin": "http://evil.example"})
        assert read.status_code == 200  # a read changes nothing


def test_the_printed_link_becomes_an_httponly_strict_cookie_and_a_clean_url(srv):
    port = srv.server.port
    with http_client(srv) as http:
        r = http.get(f"/?token={srv.token}")
        assert r.status_code == 303 and r.headers["location"] == "/"
        cookie = r.headers["set-cookie"]
        assert cookie.startswith(f"{COOKIE}=") and "HttpOnly" in cookie and "SameSite=strict" in cookie
        assert r.headers["referrer-policy"] == "no-referrer"
        bad = http.get("/?token=not-a-token-of-this-server")
        assert bad.status_code == 303 and bad.headers["location"] == "/?login=failed"
        assert "set-cookie" not in bad.headers
    own = {"Origin": f"http://127.0.0.1:{port}"}
    with http_client(srv) as http:
        http.cookies.set(COOKIE, srv.token)
        assert http.get("/api/me").json()["role"] == "operator"
        assert http.delete("/api/runs/nosuchrun", headers=own).status_code == 404  # authorised: a change
        # the cookie alone, without the Origin a browser sends, changes nothing (and never with another one)
        assert http.delete("/api/runs/nosuchrun").status_code == 401
    # a token in a URL authorises nothing but that first exchange
    with http_client(srv) as http:
        assert http.delete(f"/api/runs/nosuchrun?token={srv.token}", headers=own).status_code == 401


def test_a_viewers_token_reads_but_changes_nothing(srv):
    viewer = add_token(srv.server.token_file, "visitor", viewer=True)
    with http_client(srv, **bearer(viewer)) as http:
        assert http.get("/api/me").json() == {"name": "visitor", "role": "viewer"}
        assert http.get(f"/api/sessions/{srv.session}").status_code == 200
        r = http.post("/api/runs", json={"config": "short.toml"})
        assert r.status_code == 403 and "viewer" in r.json()["error"]
        assert http.post(f"/api/runs/{srv.session}/abort").status_code == 403
        r = http.get(f"/?token={viewer}")  # the viewer's link: a cookie that can only look
        assert r.status_code == 303 and COOKIE in r.headers["set-cookie"]


@pytest.mark.parametrize("body, status, words", [
    (b"[" * 1000 + b"]" * 1000, 400, "nested too deeply"),
    (b'{"config": ' + b"[" * 100 + b"]" * 100 + b"}", 400, "nested too deeply"),
    (b"[" * 60_000, 400, "nested too deeply"),
    (b"not json", 400, "must be JSON"),
    (b'{"config": "' + b"x" * (BODY_LIMIT + 10) + b'"}', 413, f"at most {BODY_LIMIT} bytes"),
])
def test_a_bad_body_gets_one_json_line(srv, body, status, words):
    with http_client(srv, **bearer(srv.token)) as http:
        for path in ("/api/runs", "/api/replays"):
            r = http.post(path, content=body, headers={"Content-Type": "application/json"})
            assert r.status_code == status and words in r.json()["error"], (path, r.text[:200])
            assert "\n" not in r.json()["error"]


def test_a_body_over_the_limit_is_refused_while_reading_without_a_declared_length(srv):
    def chunks():  # chunked transfer: no Content-Length to refuse in advance
        for _ in range(64):
            yield b" " * 4096
    with http_client(srv, **bearer(srv.token)) as http:
        r = http.post("/api/runs", content=chunks(), headers={"Content-Type": "application/json"})
        assert r.status_code == 413 and "bytes" in r.json()["error"]


def test_a_token_file_saved_with_a_byte_order_mark_names_its_token_without_it(tmp_path):
    path = tmp_path / "tokens"
    path.write_bytes("\ufeffroot abcdefghijklmnopqrstuvwxyz012345\n".encode())
    path.chmod(0o600)
    assert list(Tokens.load(path).names.values()) == ["root"]


def test_hil_serve_token_add_viewer_writes_a_read_only_token(tmp_path):
    from click.testing import CliRunner

    from daq.cli.main import main

    path = tmp_path / "tokens"
    res = CliRunner().invoke(main, ["serve", "token", "add", "wall", "--viewer", "--token-file", str(path)])
    assert res.exit_code == 0, res.output
    tokens = Tokens.load(path)
    (token,) = tokens.names
    assert tokens.names[token] == "wall" and not tokens.may_change(token)
    assert path.read_text().splitlines()[-1] == f"wall {token} viewer"


def test_runs_answer_one_by_one_queued_ones_with_their_kind_and_replays_404_in_words(srv):
    with http_client(srv, **bearer(srv.token)) as http:
        done = http.get(f"/api/runs/{srv.session}").json()
        assert done["status"] == "complete" and done["kind"] == RIG.kind and done["session"] == srv.session
        r = http.get("/api/runs/nosuchrun")
        assert r.status_code == 404 and "no run nosuchrun" in r.json()["error"]
        r = http.post("/api/replays/0123456789ab/stop")
        assert r.status_code == 404 and "restart" in r.json()["error"]
        r = http.post("/api/runs/nosuchrun/pause")
        assert r.status_code == 404 and r.json()["error"] == "no run nosuchrun"
        r = http.get("/api/nothing/here")  # the server's own answers are JSON lines too
        assert r.status_code == 404 and r.json()["error"] == "no such path /api/nothing/here"
        r = http.put("/api/runs")
        assert r.status_code == 405 and "does not take PUT" in r.json()["error"]


def test_the_export_pool_refuses_when_full_and_cleans_up_after_a_client_that_left(srv, tmp_path):
    async def scenario():
        pool = ExportPool(srv.server.store_path, workers=1, waiting=0)
        pool.root = tmp_path / "exports"

        async def never() -> bool:
            return False

        first = asyncio.ensure_future(pool.make(srv.session, "csv", never))
        await wait_until(lambda: pool.admitted > 0, timeout=30.0)
        with pytest.raises(Busy) as busy:
            await pool.make(srv.session, "csv", never)
        assert busy.value.status == 503 and busy.value.headers == {"Retry-After": "10"}
        path, name = await first
        assert path.is_file() and name == f"session-{srv.session}.zip"
        calls = []

        async def gone() -> bool:  # the client leaves while its export is in the making
            calls.append(1)
            return True

        async def hold_the_export():  # stopped as soon as it runs, so it cannot end before the first poll
            await wait_until(lambda: pool.running, timeout=30.0, period=0.001)
            proc = next(iter(pool.running))
            os.kill(proc.pid, signal.SIGSTOP)
            return proc

        held = asyncio.ensure_future(hold_the_export())
        with pytest.raises(ClientGone):
            await pool.make(srv.session, "csv", gone)
        proc = await held
        assert calls and proc.returncode is not None  # asked, then the stopped export was ended
        return path

    path = asyncio.run(scenario())
    leftovers = [p for p in (tmp_path / "exports").iterdir() if p != path.parent]
    assert leftovers == []  # the abandoned export's folder went with it


def test_listing_and_queueing_answer_while_eight_exports_run_and_nothing_stays_on_disk(srv):
    root = srv.server.store_path.parent / "serve-exports"
    url = f"/api/sessions/{srv.session}/export?format=csv"

    def export() -> tuple[int, float, httpx.Response]:
        with http_client(srv) as http:
            r = http.get(url)
            return r.status_code, time.monotonic(), r

    with concurrent.futures.ThreadPoolExecutor(8) as pool, http_client(srv, **bearer(srv.token)) as http:
        futures = [pool.submit(export) for _ in range(8)]
        poll_until(lambda: root.exists() and any(root.iterdir()), timeout=30, period=0.02)  # exports run
        assert http.get("/api/sessions").status_code == 200
        queued = http.post("/api/runs", json={"config": "endless.toml"})
        assert queued.status_code == 202 and queued.json()["kind"] == RIG.kind
        assert http.get(f"/api/runs/{queued.json()['id']}").json()["kind"] == RIG.kind
        answered = time.monotonic()
        results = [f.result() for f in futures]
        http.post(f"/api/runs/{queued.json()['id']}/abort")
        assert http.delete(f"/api/runs/{queued.json()['id']}").status_code in (200, 409)
    assert answered < max(t for _, t, _ in results)  # listing and queueing did not wait for the exports
    statuses = sorted(s for s, _, _ in results)
    assert set(statuses) <= {200, 503} and statuses.count(200) >= 2
    for status, _, r in results:
        if status == 200:
            assert zipfile.ZipFile(io.BytesIO(r.content)).namelist()
        else:
            assert r.headers["retry-after"] == "10" and "try again" in r.json()["error"]
    poll_until(lambda: not any(root.iterdir()), timeout=10)  # no temporary file outlives its request


def test_the_configs_are_checked_ahead_at_start_not_by_the_first_queued_run(tmp_path):
    """The first check of a config imports its rig kind's code (1-2 s for the press): done in a thread right
    after the start, so the first `POST /api/runs` (before: 2.5 s while exports ran) finds it checked."""
    rig = ServedBeacon("beacon-ahead", samples=10, channels=1, period=0.01)
    register(rig)
    configs = tmp_path / "configs"
    configs.mkdir()
    beacon_config(configs, "a.toml", rig.kind)
    (configs / "broken.toml").write_text("[rig]\nkind = 'no-such-kind'\n")
    served = ServerThread(configs, tmp_path / "s.sqlite", tmp_path / "tokens").start()
    try:  # no request is made: the server checks them on its own
        poll_until(lambda: served.server.configs.checked() == ["a.toml", "broken.toml"], timeout=30)
        with httpx.Client(base_url=served.url, timeout=30) as http:
            listed = {c["name"]: c["ok"] for c in http.get("/api/configs").json()}
        assert listed == {"a.toml": True, "broken.toml": False}
    finally:
        served.stop()
        unregister(rig.kind)
