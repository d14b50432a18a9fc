"""`hil serve` under export load (issue 33 item 3): the latency of `GET /api/sessions` and `POST /api/runs`
while 8 CSV exports of a 10 kHz session run at once, and what the exports answered.

    python benchmarks/bench_serve_exports.py [--seconds 60] [--code DIR]

A store with one session of 4 channels at 10 kHz (`--seconds` long) is written first; `hil serve` runs as a
process of its own (`--code DIR`: the checkout whose code serves, e.g. an older main for comparison). Then
8 clients ask for the CSV export at once, and while they run the script asks for the session list and
queues (then deletes) a run every 0.5 s, timing each answer. Printed: latency min/median/max of each, the
exports' statuses and durations, the server's CPU time, and what is left under serve-exports/. Wall-clock
figures depend on the machine's load (printed beside them)."""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def write_session(store: Path, seconds: float, rate: float = 10_000.0, channels: int = 4) -> str:
    from daq.bus.frames import Frame
    from daq.store.read_write import SessionStore

    with SessionStore(store) as s:
        sid = s.create_session("bench", {"rig": {"kind": "bench"}})
        block, t0 = 1000, time.time() - seconds
        rng = np.random.default_rng(1)
        for k in range(int(seconds * rate / block)):
            data = rng.standard_normal((block, channels))
            s.append(sid, Frame("bench.x", k, t0 + k * block / rate, 1 / rate,
                                [f"x{i}" for i in range(channels)], ["m"] * channels, data))
        s.finish(sid, "complete")
    return sid


def start_server(code: Path, store: Path, configs: Path, tokens: Path) -> tuple[subprocess.Popen, str, str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(code)}
    hil = [sys.executable, "-c", "import sys; from daq.cli.main import main; sys.exit(main())"]
    proc = subprocess.Popen([*hil, "--store", str(store), "serve",
                             "--configs", str(configs), "--port", "0", "--token-file", str(tokens)],
                            stderr=subprocess.PIPE, text=True, env=env, cwd=code)
    while line := proc.stderr.readline():
        print("  hil serve:", line.rstrip())
        m = re.search(r"(http://127\.0\.0\.1:\d+)/\?token=(\S+)", line)
        if m:
            threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep the pipe drained
            return proc, m.group(1), m.group(2)
    raise SystemExit("hil serve did not say where it serves")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--code", type=Path, default=ROOT)
    ap.add_argument("--during-run", action="store_true",
                    help="measure while a simulated press run is in progress (queued runs then wait)")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-serve-exports-"))
    store, configs, tokens = tmp / "s.sqlite", tmp / "configs", tmp / "tokens"
    configs.mkdir()
    (configs / "press.toml").write_text((ROOT / "configs" / "press-sim.toml").read_text())
    sid = write_session(store, a.seconds)
    print(f"session {sid}: 4 channels x 10 kHz x {a.seconds:g} s; load average {os.getloadavg()[0]:.1f}")
    proc, url, token = start_server(a.code, store, configs, tokens)
    auth = {"Authorization": f"Bearer {token}"}
    try:
        if a.during_run:
            with httpx.Client(base_url=url, headers=auth, timeout=60) as http:
                http.post("/api/runs", json={"config": "press.toml"}).raise_for_status()
                while (http.get("/api/runs").json()["current"] or {}).get("session") is None:
                    time.sleep(0.2)
        with httpx.Client(base_url=url, headers=auth, timeout=60) as http:  # as the page does when it opens
            print(f"GET /api/configs once first (the server checks its configs ahead in a thread at start): "
                  f"{timed(lambda: http.get('/api/configs').raise_for_status()) * 1e3:.0f} ms")
        cpu0 = cpu_seconds(proc.pid)

        def export(_):
            t = time.perf_counter()
            with httpx.Client(base_url=url, timeout=900) as c:
                r = c.get(f"/api/sessions/{sid}/export", params={"format": "csv"})
            return r.status_code, time.perf_counter() - t, len(r.content)

        listing, queueing = [], []
        with concurrent.futures.ThreadPoolExecutor(8) as pool, \
                httpx.Client(base_url=url, headers=auth, timeout=900) as http:
            futures = [pool.submit(export, k) for k in range(8)]
            time.sleep(1.0)
            while not all(f.done() for f in futures):
                listing.append(timed(lambda: http.get("/api/sessions").raise_for_status()))
                t = time.perf_counter()
                run = http.post("/api/runs", json={"config": "press.toml"}).json()
                queueing.append(time.perf_counter() - t)
                if "id" in run:  # not to be run: deleted while queued, else aborted
                    http.delete(f"/api/runs/{run['id']}")
                    http.post(f"/api/runs/{run['id']}/abort")
                time.sleep(0.5)
            results = [f.result() for f in futures]
        cpu = cpu_seconds(proc.pid) - cpu0
        for name, xs in (("GET /api/sessions", listing), ("POST /api/runs", queueing)):
            p90 = statistics.quantiles(xs, n=10)[-1]
            print(f"{name}: {len(xs)} requests during the exports, latency min {min(xs) * 1e3:.0f} ms, "
                  f"median {statistics.median(xs) * 1e3:.0f} ms, p90 {p90 * 1e3:.0f} ms, "
                  f"max {max(xs) * 1e3:.0f} ms (the first {xs[0] * 1e3:.0f} ms)")
        for status, seconds, size in sorted(results):
            print(f"export: {status} after {seconds:.1f} s, {size / 1e6:.1f} MB")
        print(f"server CPU time during the exports {cpu:.1f} s (export processes not counted); "
              f"load average {os.getloadavg()[0]:.1f}")
        left = list((tmp / "serve-exports").glob("*")) if (tmp / "serve-exports").exists() else []
        print(f"left in serve-exports/: {len(left)}; hil-serve-export-* in {tempfile.gettempdir()}: "
              f"{len(list(Path(tempfile.gettempdir()).glob('hil-serve-export-*')))}")
    finally:
        proc.terminate()
        proc.wait(60)


if __name__ == "__main__":
    main()
