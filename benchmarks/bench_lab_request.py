"""Cost of one authenticated request to the lab server: `hil lab serve` (per-person keys, the people's
authentication database) against plain `tiled serve catalog --api-key` (one key, no authentication
database) answering the same GETs in the same run, on kept-alive connections as every Tiled client uses.

For each server and path: the server process's CPU per request (utime + stime from /proc) and the wall
time per request seen by an httpx client. The paths: the root's listing and a search, and in a session made
by Tiled's client on each server the session, a stream's array three levels down, and a block of that array
(what a lab's readers, the live forwarder and the push mostly ask for). ``--trees`` runs `hil lab serve`
from other checkouts too (``PYTHONPATH=<tree>``), e.g. a commit before a change:

    .venv/bin/python benchmarks/bench_lab_request.py [--requests 200] [--trees . /tmp/old]
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

PATHS = ("/api/v1/metadata/", "/api/v1/search/", "/api/v1/metadata/s1",
         "/api/v1/metadata/s1/press.force/data", "/api/v1/array/block/s1/press.force/data?block=0,0")


def _session(url: str, key: str) -> None:
    """s1/press.force/data: a session, a stream and its 2000 x 3 float64 array, by Tiled's own client."""
    import numpy as np
    from tiled.client import from_uri

    root = from_uri(url, api_key=key)
    stream = root.create_container("s1", metadata={"status": "complete"}).create_container("press.force")
    stream.write_array(np.arange(6000.0).reshape(2000, 3), key="data", metadata={"units": ["N", "N", "Pa"]})


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def hil_lab_serve(tree: str, folder: Path) -> tuple[subprocess.Popen, str, str]:
    command = [sys.executable, "-m", "daq.cli.main", "lab", "serve", "--data", str(folder / "lab"),
               "--port", "0"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=tree,
                            env={**os.environ, "PYTHONPATH": str(Path(tree).resolve())})
    assert proc.stdout is not None
    url = [proc.stdout.readline().decode().strip() for _ in range(2)][1]
    return proc, url, (folder / "lab" / "lab.key").read_text().strip()


def plain_tiled_serve(folder: Path) -> tuple[subprocess.Popen, str, str]:
    key, port = secrets.token_hex(16), _free_port()
    tiled = Path(sys.executable).with_name("tiled")
    command = [str(tiled), "serve", "catalog", "--temp", "--api-key", key, "--port", str(port),
               "-w", str(folder / "data")]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=folder)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/api/v1/", timeout=2).status_code == 200:
                return proc, url, key
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("plain tiled serve did not start")


def measure(name: str, started: tuple[subprocess.Popen, str, str], n: int) -> None:
    proc, url, key = started
    try:
        _session(url, key)
        with httpx.Client(headers={"Authorization": f"Apikey {key}"}, timeout=30) as client:
            for path in PATHS:  # warm: imports, caches, the connection
                for _ in range(10):
                    client.get(url + path).raise_for_status()
            for path in PATHS:
                cpu0, t0 = _cpu(proc.pid), time.perf_counter()
                for _ in range(n):
                    client.get(url + path).raise_for_status()
                wall, cpu = time.perf_counter() - t0, _cpu(proc.pid) - cpu0
                print(f"{name:>32} {path:<52} server CPU {cpu / n * 1e3:6.1f} ms   "
                      f"wall {wall / n * 1e3:6.1f} ms")
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(60)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=200, help="requests per path")
    ap.add_argument("--trees", nargs="+", default=["."], help="checkouts whose `hil lab serve` is measured")
    args = ap.parse_args()
    print("load average", " ".join(f"{x:.2f}" for x in os.getloadavg()))
    with tempfile.TemporaryDirectory() as tmp:
        for i, tree in enumerate(args.trees):
            folder = Path(tmp) / f"hil{i}"
            folder.mkdir()
            measure(f"hil lab serve ({tree})", hil_lab_serve(tree, folder), args.requests)
        folder = Path(tmp) / "plain"
        folder.mkdir()
        measure("plain tiled serve --api-key", plain_tiled_serve(folder), args.requests)
    print("load average", " ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
