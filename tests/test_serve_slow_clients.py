"""`hil serve` against clients that send their headers slowly (issue 39, section 6): under a 200-file limit,
250 connections that trickle a header byte by byte must not make the server stop answering. `hil serve` runs
as a process of its own (its file limit set before it starts); every socket is on loopback."""

from __future__ import annotations

import json
import os
import re
import resource
import selectors
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest

FILE_LIMIT = 200
SLOW_CLIENTS = 250


def _limit_files() -> None:  # runs in the child before `hil serve` starts
    resource.setrlimit(resource.RLIMIT_NOFILE, (FILE_LIMIT, FILE_LIMIT))


def _start_server(tmp_path) -> tuple[subprocess.Popen, str, int, str, list[str], threading.Thread]:
    """`hil serve` on 127.0.0.1 port 0 under the file limit: the process, its URL, port and token, its
    stderr lines and the thread that goes on reading them (so the pipe never fills)."""
    configs = tmp_path / "configs"
    configs.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-c", "from daq.cli.main import main; main()", "--store", str(tmp_path / "s.sqlite"),
         "serve", "--configs", str(configs), "--port", "0", "--token-file", str(tmp_path / "tokens")],
        stderr=subprocess.PIPE, text=True, preexec_fn=_limit_files,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.stderr is not None
    lines: list[str] = []
    found = None
    while found is None:
        line = proc.stderr.readline()
        assert line, "hil serve ended before it said where it serves:\n" + "".join(lines)
        lines.append(line)
        found = re.search(r"(http://127\.0\.0\.1:(\d+))/\?token=(\S+)", line)
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)  # type: ignore[arg-type]
    reader.start()
    return proc, found.group(1), int(found.group(2)), found.group(3), lines, reader


def _status_and_body(answer: bytes) -> tuple[int, dict]:
    head, _, body = answer.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    assert b"content-type: application/json" in head.lower(), head
    return status, json.loads(body)


@pytest.mark.slow(reason="250 clients held for the 10 s header timeout of a `hil serve` process")
def test_slow_header_clients_are_cut_off_and_the_server_keeps_answering_under_a_200_file_limit(tmp_path):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < 2 * SLOW_CLIENTS:  # this process holds every client socket
        room = 4 * SLOW_CLIENTS if hard == resource.RLIM_INFINITY else min(4 * SLOW_CLIENTS, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (room, hard))
    proc, url, port, token, said, reader = _start_server(tmp_path)
    selector = selectors.DefaultSelector()
    answers: dict[socket.socket, bytes] = {}
    try:
        for _ in range(SLOW_CLIENTS):
            s = socket.create_connection(("127.0.0.1", port), timeout=30)
            s.sendall(f"GET /api/me HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Slow: ".encode())
            s.setblocking(False)
            selector.register(s, selectors.EVENT_READ)
            answers[s] = b""
        open_ = set(answers)
        me = None
        deadline = time.monotonic() + 120
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=5) as http:
            while (open_ or me is None) and time.monotonic() < deadline:
                for s in list(open_):  # one more header byte from each client still connected
                    try:
                        s.send(b"a")
                    except OSError:  # the server closed it (reset or broken pipe)
                        open_.discard(s)
                for key, _ in selector.select(timeout=0.2):
                    s = key.fileobj  # type: ignore[assignment]
                    try:
                        chunk = s.recv(4096)
                    except BlockingIOError:
                        continue
                    except OSError:
                        chunk = b""
                    answers[s] += chunk
                    if not chunk:
                        open_.discard(s)
                        selector.unregister(s)
                if me is None:
                    try:
                        r = http.get("/api/me")
                    except httpx.TransportError:
                        continue  # no answer (yet): the server is out of files, or the connection was cut
                    if r.status_code == 200:
                        me = r.json()
                    else:  # while the slow clients hold every connection it may take: refused, in JSON
                        assert r.status_code == 503 and "--max-connections" in r.json()["error"], r.text
            assert me is not None and me["role"] == "operator", "the server stopped answering"
            assert not open_, f"{len(open_)} of {SLOW_CLIENTS} slow clients are still connected"
            assert http.get("/api/me").json()["role"] == "operator"  # and it goes on answering
        statuses = [_status_and_body(a) for a in answers.values() if a]
        cut = [body["error"] for status, body in statuses if status == 408]
        refused = [body["error"] for status, body in statuses if status == 503]
        assert len(cut) + len(refused) == len(statuses), statuses  # every answer is one of the two
        assert cut and all("--header-timeout" in text for text in cut)  # those let in ran out of time
        assert refused and all("--max-connections" in text for text in refused)  # the rest never got in
        assert not any("Too many open files" in line for line in said), "".join(said)[-2000:]
    finally:
        for s in answers:
            s.close()
        selector.close()
        proc.terminate()
        proc.wait(timeout=60)
        reader.join(timeout=10)
        if proc.stderr is not None:
            proc.stderr.close()
