"""Every error `hil serve` gives is the documented JSON `{"error": "one line"}` (docs/api.md, "Errors and
limits"; issue 39, section 6): the protocol-level ones that uvicorn answers before the application (raw
sockets on loopback) and the application's own (httpx). One real server (uvicorn on 127.0.0.1, port 0) with
a finished run serves the tables; the connection limits get servers of their own."""

from __future__ import annotations

import json
import select
import socket
import time

import httpx
import pytest

from daq.rigs import register, unregister
from daq.serve.auth import add_token
from tests.polling import poll_until
from tests.serve_fixtures import ServedBeacon, ServerThread, beacon_config, bearer, finish_one_run

RIG = ServedBeacon("beacon-errors", samples=10, channels=1, period=0.005)
WS_KEY = "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
UPGRADE = "Upgrade: websocket\r\nConnection: Upgrade\r\n"


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    register(RIG)
    folder = tmp_path_factory.mktemp("errors")
    configs = folder / "configs"
    configs.mkdir()
    beacon_config(configs, "short.toml", RIG.kind, frames=3)
    (configs / "refused.toml").write_text('[rig]\nkind = "no-such-kind"\nname = "x"\n')
    served = ServerThread(configs, folder / "store" / "s.sqlite", folder / "tokens").start()
    try:
        served.viewer = add_token(served.server.token_file, "wall", viewer=True)
        served.run_id = finish_one_run(served)
        yield served
    finally:
        served.stop()
        unregister(RIG.kind)


def assert_json_error(status: int, content_type: str, body: bytes, expected: int, words: str) -> str:
    """The documented shape: the status, `application/json`, an object with one key `error`, one line."""
    assert status == expected, (status, body[:300])
    assert content_type.split(";")[0].strip().lower() == "application/json", (content_type, body[:300])
    reply = json.loads(body)
    assert list(reply) == ["error"] and isinstance(reply["error"], str), reply
    assert reply["error"] and "\n" not in reply["error"] and words in reply["error"], reply
    return reply["error"]


def raw_exchange(port: int, *pieces: bytes) -> tuple[int, str, bytes]:
    """Send ``pieces`` on one connection and read the answer until the server closes the connection:
    (status, content type, body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        for piece in pieces:
            s.sendall(piece)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(":", 1) for line in lines[1:])
    content_type = {k.lower(): v for k, v in headers.items()}.get("content-type", "")
    return int(lines[0].split(" ", 2)[1]), content_type, body


# name, the request (``{host}``: this server's), the status, words of the error
PROTOCOL_ERRORS = [
    ("negative Content-Length", "POST /api/runs HTTP/1.1\r\nHost: {host}\r\nContent-Length: -1\r\n\r\n",
     400, "bad Content-Length"),
    ("Content-Length not a number", "POST /api/runs HTTP/1.1\r\nHost: {host}\r\nContent-Length: ten\r\n\r\n",
     400, "bad Content-Length"),
    ("two Content-Lengths", "POST /api/runs HTTP/1.1\r\nHost: {host}\r\nContent-Length: 1\r\n"
     "Content-Length: 2\r\n\r\nx", 400, "Content-Length"),
    ("a Transfer-Encoding other than chunked", "POST /api/runs HTTP/1.1\r\nHost: {host}\r\n"
     "Transfer-Encoding: gzip\r\n\r\n", 501, "Transfer-Encoding"),
    ("no request line", "GARBAGE\r\n\r\n", 400, "illegal request line"),
    ("a request target that is not ASCII", "GET /caf\xe9 HTTP/1.1\r\nHost: {host}\r\n\r\n", 400,
     "illegal request line"),
    ("a header line without a colon", "GET /api/me HTTP/1.1\r\nHost: {host}\r\nBad Header\r\n\r\n", 400,
     "illegal header line"),
    ("no Host in HTTP/1.1", "GET /api/me HTTP/1.1\r\n\r\n", 400, "Host"),
    ("two Host headers", "GET /api/me HTTP/1.1\r\nHost: {host}\r\nHost: {host}\r\n\r\n", 400, "Host"),
    ("headers over 16 KiB", "GET /api/me HTTP/1.1\r\nHost: {host}\r\nX-Big: " + "a" * 17_000 + "\r\n\r\n",
     431, "16384 bytes"),
    ("a WebSocket handshake without its key", "GET /ws/live HTTP/1.1\r\nHost: {host}\r\n" + UPGRADE + "\r\n",
     400, "Sec-WebSocket-Key"),
    ("a WebSocket of an unknown version", "GET /ws/live HTTP/1.1\r\nHost: {host}\r\n" + UPGRADE +
     WS_KEY.replace("Version: 13", "Version: 8") + "\r\n", 400, "Sec-WebSocket-Version"),
    ("a WebSocket at no such path", "GET /ws/nothing HTTP/1.1\r\nHost: {host}\r\n" + UPGRADE + WS_KEY
     + "\r\n", 403, "WebSocket handshake refused"),
    ("a WebSocket to a foreign Host", "GET /ws/live HTTP/1.1\r\nHost: evil.example\r\n" + UPGRADE + WS_KEY
     + "\r\n", 403, "evil.example"),
    ("a WebSocket from a foreign Origin", "GET /ws/live HTTP/1.1\r\nHost: {host}\r\nOrigin: http://evil.example"
     "\r\n" + UPGRADE + WS_KEY + "\r\n", 403, "origin"),
    ("an HTTP/1.0 request without Host", "GET /api/me HTTP/1.0\r\n\r\n", 403, "host ''"),
]


@pytest.mark.parametrize("name, request_text, status, words", PROTOCOL_ERRORS,
                         ids=[case[0] for case in PROTOCOL_ERRORS])
def test_a_request_refused_before_or_at_the_application_gets_the_json_error(srv, name, request_text, status,
                                                                          words):
    port = srv.server.port
    got = raw_exchange(port, request_text.replace("{host}", f"127.0.0.1:{port}").encode("latin-1"))
    assert_json_error(*got, status, words)


def test_headers_over_16_kib_sent_in_pieces_are_refused_before_they_end(srv):
    port = srv.server.port
    pieces = [f"GET /api/me HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Big: ".encode()] + [b"a" * 4096] * 5
    assert_json_error(*raw_exchange(port, *pieces), 431, "16384 bytes")


def _answered(sock: socket.socket, timeout: float = 30.0) -> bool:
    """Whether the server's answer (or its end) has arrived on ``sock`` within ``timeout`` s."""
    readable, _, _ = select.select([sock], [], [], timeout)
    return bool(readable)


def test_a_client_still_sending_after_the_refusal_reads_it(srv):
    """The server answers 431 while the client is still sending its head: the socket must not be closed
    with unread input (the kernel would reset it and the client lose the answer). It closes its write side
    and drops what comes after, and the client reads the whole refusal and the end of the connection."""
    port = srv.server.port
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(f"GET /api/me HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Big: ".encode() + b"a" * 17_000)
        assert _answered(s)  # refused: the answer is there
        s.sendall(b"a" * 4096)  # the rest of the head, after the answer
        s.sendall(b"a" * 4096)
        answer = b""
        while chunk := s.recv(65536):  # ConnectionResetError here when the server closed with unread input
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431 "), answer[:200]
    assert_json_error(431, "application/json", body, 431, "16384 bytes")


def test_a_refused_client_that_keeps_sending_is_cut_off(srv):
    """The drop after a refusal is bounded (LINGER_BYTES, LINGER_S): a client that goes on sending is
    disconnected, it cannot keep a connection by streaming into a refusal."""
    port = srv.server.port
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(f"GET /api/me HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Big: ".encode() + b"a" * 17_000)
        assert _answered(s)
        deadline = time.monotonic() + 30
        with pytest.raises(OSError):  # reset (or a broken pipe) once the server has had enough
            while time.monotonic() < deadline:
                s.sendall(b"a" * 65536)
                time.sleep(0.01)


def test_only_the_head_counts_towards_16_kib_a_body_in_the_same_read_and_a_split_end_do_not(srv):
    port = srv.server.port
    host = f"Host: 127.0.0.1:{port}\r\n"
    body = json.dumps({"token": "w" * 32, "pad": "x" * 30_000}).encode()
    head = f"POST /api/login HTTP/1.1\r\n{host}Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    assert_json_error(*raw_exchange(port, head.encode() + body), 401, "wrong token")  # one write: a body
    big = f"GET /api/me HTTP/1.1\r\n{host}Connection: close\r\nX-Pad: {'a' * 15_000}\r\n".encode()
    status, _, answer = raw_exchange(port, big + b"\r", b"\n")  # 15 KiB, its end split between two writes
    assert status == 200 and json.loads(answer) == {"name": None, "role": None}


# method, path, how (headers / JSON body / raw body), status, words
def app_errors(srv) -> list[tuple]:
    port, op, viewer = srv.server.port, bearer(srv.token), bearer(srv.viewer)
    return [
        ("GET", "/nothing", {}, 404, "no such path /nothing"),
        ("GET", "/static/nothing.js", {}, 404, "no such path"),
        ("PUT", "/api/runs", {"headers": op}, 405, "does not take PUT"),
        ("GET", "/api/sessions/000000000000", {}, 404, "000000000000"),
        ("GET", f"/api/sessions/{srv.session}/series?points=x", {}, 400, "points"),
        ("GET", "/api/runs/nothing", {}, 404, "nothing"),
        ("POST", "/api/runs", {"json": {"config": "short.toml"}}, 401, "token"),
        ("POST", "/api/runs", {"json": {"config": "short.toml"}, "headers": bearer("w" * 32)}, 401, "token"),
        ("POST", "/api/runs", {"json": {"config": "short.toml"}, "headers": viewer}, 403, "viewer"),
        ("GET", "/api/runs", {"headers": {"Host": f"evil.example:{port}"}}, 403, "evil.example"),
        ("POST", "/api/runs", {"json": {"config": "short.toml"}, "headers": {**op, "Origin": "http://evil.example"}},
         403, "origin"),
        ("POST", "/api/runs", {"content": b"not json", "headers": op}, 400, "JSON"),
        ("POST", "/api/runs", {"content": b"[" * 100 + b"]" * 100, "headers": op}, 400, "nested too deeply"),
        ("POST", "/api/runs", {"content": b" " * 70_000, "headers": op}, 413, "bytes"),
        ("POST", "/api/runs", {"json": {"config": "nothing.toml"}, "headers": op}, 404, "nothing.toml"),
        ("POST", "/api/runs", {"json": {"config": "refused.toml"}, "headers": op}, 422, "no-such-kind"),
        ("POST", f"/api/runs/{srv.run_id}/stop", {"headers": op}, 409, ""),
        ("DELETE", f"/api/runs/{srv.run_id}", {"headers": op}, 409, ""),
        ("POST", "/api/login", {"json": {"token": "w" * 32}}, 401, "wrong token"),
        ("POST", "/api/replays", {"json": {"session": srv.session, "speed": -1}, "headers": op}, 400,
         "speed"),
        ("GET", f"/api/sessions/{srv.session}/export?format=doc", {}, 400, "hdf5, mat or csv"),
    ]


def test_every_error_of_the_application_is_the_json_error(srv):
    failures = []
    with httpx.Client(base_url=srv.url, timeout=30, follow_redirects=False) as http:
        for method, path, how, status, words in app_errors(srv):
            r = http.request(method, path, **how)
            try:
                assert_json_error(r.status_code, r.headers.get("content-type", ""), r.content, status, words)
            except AssertionError as exc:
                failures.append(f"{method} {path}: {exc}")
    assert not failures, "\n".join(failures)


def answers(port: int, *pieces: bytes, keep_reading: bool = True, reset_ends: bool = False
            ) -> list[tuple[int, str, bytes]]:
    """Every answer the server gives on one connection that sends ``pieces`` one after the other (each
    after the answer to the one before, when there was one), until it closes the connection. ``reset_ends``:
    a reset after a whole answer ends the connection too (a refusal for the cap is closed at once, and what
    the client sent after it is reset: see the tests of the cap below)."""
    got: list[tuple[bytes, bytes]] = []
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        buffer = b""
        for piece in pieces:
            s.sendall(piece)
            if b"\r\n\r\n" in piece:  # a whole request: read its answer, by its Content-Length
                while b"\r\n\r\n" not in buffer:
                    buffer += s.recv(65536)
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                                  if line.lower().startswith(b"content-length")))
                while len(buffer) < length:
                    buffer += s.recv(65536)
                got.append((head, buffer[:length]))
                buffer = buffer[length:]
        try:
            while chunk := s.recv(65536):
                buffer += chunk
        except ConnectionResetError:
            if not (reset_ends and got and not buffer):
                raise
        if buffer:
            head, _, body = buffer.partition(b"\r\n\r\n")
            got.append((head, body))
    result = []
    for head, body in got:
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
        result.append((int(lines[0].split(" ", 2)[1]), headers.get("content-type", ""), body))
    return result


@pytest.fixture
def limited(tmp_path, request):
    """A server with the connection limits ``request.param`` gives: (header timeout s, max connections)."""
    from daq.serve.connections import ConnectionLimits

    header_timeout, most = request.param
    configs = tmp_path / "configs"
    configs.mkdir()
    limits = ConnectionLimits(header_timeout=header_timeout, max_connections=most)
    served = ServerThread(configs, tmp_path / "s.sqlite", tmp_path / "tokens", limits=limits).start()
    try:
        yield served
    finally:
        served.stop()


@pytest.mark.parametrize("limited", [(1.0, 10)], indirect=True)
def test_headers_that_do_not_arrive_in_time_get_408_json_and_the_connection_is_closed(limited):
    port = limited.server.port
    host = f"Host: 127.0.0.1:{port}\r\n".encode()
    silent = answers(port)  # connects, sends nothing
    assert len(silent) == 1 and assert_json_error(*silent[0], 408, "--header-timeout")
    partial = answers(port, b"GET /api/me HTTP/1.1\r\n" + host)  # never ends its headers
    assert len(partial) == 1 and assert_json_error(*partial[0], 408, "--header-timeout")
    # a kept-alive connection: the first request is answered, the next one's headers are on the clock again
    kept = answers(port, b"GET /api/me HTTP/1.1\r\n" + host + b"\r\n", b"GET /api/me HTTP/1.1\r\n" + host)
    assert [status for status, _, _ in kept] == [200, 408]
    assert json.loads(kept[0][2]) == {"name": None, "role": None}
    assert_json_error(*kept[1], 408, "1 s (--header-timeout)")


def near_the_cap(port: int, request: bytes) -> list[tuple[int, str, bytes]]:
    """The answers to ``request`` on one connection to a server at or near its cap; [] when the connection was
    reset before its answer was read whole (the server closes a connection over the cap at once, and a
    request that reaches the closed socket is reset; the 503 may go with it)."""
    try:
        return answers(port, request, reset_ends=True)
    except ConnectionResetError:
        return []


def status_near_the_cap(port: int, request: bytes, seen: list) -> int | None:
    """The status of the first answer :func:`near_the_cap` got (None: reset before it), kept in ``seen``."""
    seen.append(near_the_cap(port, request))
    return seen[-1][0][0] if seen[-1] else None


@pytest.mark.parametrize("limited", [(600.0, 2)], indirect=True)
def test_a_connection_over_the_limit_is_refused_with_503_json_and_one_freed_lets_the_next_in(limited):
    port = limited.server.port
    request = f"GET /api/me HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode()
    held = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(2)]
    try:
        refused: list = []
        poll_until(lambda: status_near_the_cap(port, request, refused) == 503, timeout=30, period=0.05)
        assert_json_error(*refused[-1][0], 503, "2 connections open, its limit (--max-connections)")
        held.pop().close()
        poll_until(lambda: status_near_the_cap(port, request, []) == 200, timeout=30, period=0.05)
    finally:
        for s in held:
            s.close()


@pytest.mark.parametrize("limited", [(600.0, 1)], indirect=True)
def test_a_connection_over_the_limit_is_closed_at_once_not_kept_for_a_linger(limited):
    """The cap keeps files free for the run: a refusal for the cap does not linger like the other refusals
    (a flood of them would hold a file each for LINGER_S). What the client sends after the 503 is reset,
    while a lingering refusal would take up to LINGER_BYTES for LINGER_S (2 s) without a reset."""
    port = limited.server.port
    request = f"GET /api/me HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode()
    held = socket.create_connection(("127.0.0.1", port), timeout=30)
    try:
        refused: list = []
        poll_until(lambda: status_near_the_cap(port, request, refused) == 503, timeout=30, period=0.05)
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            assert _answered(s)
            assert s.recv(65536).startswith(b"HTTP/1.1 503 ")
            with pytest.raises(OSError):  # reset: the server has closed the socket
                for _ in range(100):  # 100 KiB in about 1 s: a linger would drop it all without a reset
                    s.sendall(b"x" * 1024)
                    time.sleep(0.01)
    finally:
        held.close()

