"""The dashboard's memory over a long run: `hil serve` with a simulated press, the page open in headless
Chromium, its JS heap and DOM node count sampled every ``--every`` s for ``--minutes`` minutes.

The issue asks for ">= 10 updates/s while a stream runs, with the page's memory flat over a one-hour run".
This script serves what a lab engineer would watch and measures the page itself:

* ``--source live`` (default): ``hil serve`` (a subprocess, as in the lab) runs the simulated press of
  ``configs/press-sim.toml`` (``[acquisition].rate`` = ``--rate`` Hz on ``press.force``) with a plan sized to
  outlast ``--minutes`` (and queues another run should one end early), so the stream never stops;
* ``--source replay``: records one short press session first (3 series, about 2 minutes), then plays it in
  a loop (``POST /api/replays {"loop": true}``) - the recorded data again and again, with the plots
  starting over at every pass.

Every sample forces a garbage collection in the page first (CDP ``HeapProfiler.collectGarbage``), so the heap
figure is what the page keeps, not what it has not yet freed; then CDP ``Performance.getMetrics``
(``JSHeapUsedSize``, ``Nodes``, ``JSEventListeners``) and the page's own counters (``window.hilStats``:
redraws, points, messages, missed, dropped). It prints one line per sample as it goes, then the slopes
(least squares, per minute, over the samples after the first minute: the page fills its fixed buffers in
that minute) and the update rate (plot redraws per second, the page's 20/s cap included).

    .venv/bin/python benchmarks/bench_dashboard_memory.py --minutes 3
    .venv/bin/python benchmarks/bench_dashboard_memory.py --minutes 60 --every 30      # the hour, unattended
    .venv/bin/python benchmarks/bench_dashboard_memory.py --minutes 10 --source replay

Needs Debian's ``chromium`` and ``chromium-driver`` and selenium (the test extra).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
HIL = str(Path(sys.executable).parent / "hil")
SERIES_S = 20.0  # s per press series, at least (about 40 s measured): sizes the plan to outlast --minutes


def press_config(folder: Path, n_series: int, rate: float) -> Path:
    text = (ROOT / "configs" / "press-sim.toml").read_text()
    text = re.sub(r"(?m)^n_series = \d+", f"n_series = {n_series}", text)
    text = re.sub(r"(?m)^rate = [\d.]+", f"rate = {rate}", text)
    path = folder / "press.toml"
    path.write_text(text)
    return path


def start_server(configs: Path, store: Path, tokens: Path) -> tuple[subprocess.Popen, str, str]:
    proc = subprocess.Popen([HIL, "--store", str(store), "serve", "--configs", str(configs), "--port", "0",
                             "--token-file", str(tokens)], stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        m = re.search(r"(http://127\.0\.0\.1:\d+)/\?token=(\S+)", line)
        if m:
            return proc, m.group(1), m.group(2)
    proc.kill()
    raise SystemExit("hil serve did not say where it serves")


def browser(tmp: Path):
    """Headless Chromium with its temporary files under ``tmp`` (it leaves its singleton folder behind)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver):
        raise SystemExit("needs Debian's chromium and chromium-driver (apt-get install chromium "
                         "chromium-driver)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,1000", "--enable-precise-memory-info"):
        opts.add_argument(arg)
    return webdriver.Chrome(service=Service(driver, env={**os.environ, "TMPDIR": str(tmp)}), options=opts)


def sample(page) -> dict:
    page.execute_cdp_cmd("HeapProfiler.collectGarbage", {})
    metrics = {m["name"]: m["value"] for m in page.execute_cdp_cmd("Performance.getMetrics", {})["metrics"]}
    stats = page.execute_script("return window.hilStats")
    return {"t": time.monotonic(), "heap_mb": metrics["JSHeapUsedSize"] / 1e6, "nodes": int(metrics["Nodes"]),
            "listeners": int(metrics.get("JSEventListeners", 0)), "redraws": stats["redraws"],
            "points": stats["points"], "messages": stats["messages"], "missed": stats["missed"],
            "dropped": stats["dropped"]}


def slope_per_min(rows: list[dict], key: str, t0: float) -> float:
    pts = [(r["t"] - t0, r[key]) for r in rows]
    if len(pts) < 3:
        return math.nan
    x, y = np.array(pts).T
    return float(np.polyfit(x / 60.0, y, 1)[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=3.0)
    ap.add_argument("--every", type=float, default=10.0, help="seconds between samples")
    ap.add_argument("--source", choices=("live", "replay"), default="live")
    ap.add_argument("--rate", type=float, default=200.0, help="Hz of press.force ([acquisition].rate)")
    args = ap.parse_args()
    # a SIGTERM (kill, a CI timeout) unwinds through the finally blocks: the server and the browser end too
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    tmp = Path(tempfile.mkdtemp(prefix="bench-dashboard-"))
    configs, store, tokens = tmp / "configs", tmp / "s.sqlite", tmp / "tokens"
    configs.mkdir()
    n_series = 3 if args.source == "replay" else min(1000, math.ceil(args.minutes * 60 / SERIES_S) + 3)
    config = press_config(configs, n_series, args.rate)
    session = None
    if args.source == "replay":
        print(f"recording a press session to replay ({n_series} series, about 2 minutes) ...", flush=True)
        out = subprocess.run([HIL, "--store", str(store), "run", str(config), "--no-progress", "--json"],
                             capture_output=True, text=True, check=True)
        session = re.search(r'"session_id": "(\w+)"', out.stdout).group(1)
    proc, url, token = start_server(configs, store, tokens)
    page = None
    http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
    try:
        if args.source == "replay":
            body = {"session": session, "speed": 1.0, "loop": True}
            http.post("/api/replays", json=body).raise_for_status()
        else:
            http.post("/api/runs", json={"config": config.name}).raise_for_status()
        page = browser(tmp)
        page.get(f"{url}/?token={token}")
        page.execute_cdp_cmd("Performance.enable", {})
        deadline = time.monotonic() + 60
        while page.execute_script("return window.hilStats.points") == 0:
            if time.monotonic() > deadline:
                raise SystemExit("the page got no points within 60 s")
            time.sleep(0.5)
        print(f"{args.source} press, press.force at {args.rate:g} Hz, {args.minutes:g} min, a sample every "
              f"{args.every:g} s (heap after a forced GC)", flush=True)
        head = f"{'min':>6} {'heap MB':>8} {'nodes':>6} {'listen':>6} {'redraw/s':>8} {'points/s':>8} " \
               f"{'msgs/s':>7} {'missed':>6} {'dropped':>7}"
        print(head, flush=True)
        rows = [sample(page)]
        t0 = rows[0]["t"]
        end = t0 + args.minutes * 60
        while time.monotonic() < end:
            time.sleep(max(0.0, min(args.every, end - time.monotonic())))
            rows.append(sample(page))
            a, b = rows[-2], rows[-1]
            dt = b["t"] - a["t"]
            print(f"{(b['t'] - t0) / 60:6.2f} {b['heap_mb']:8.2f} {b['nodes']:6d} {b['listeners']:6d} "
                  f"{(b['redraws'] - a['redraws']) / dt:8.1f} {(b['points'] - a['points']) / dt:8.0f} "
                  f"{(b['messages'] - a['messages']) / dt:7.1f} {b['missed']:6d} {b['dropped']:7d}",
                  flush=True)
            snap = http.get("/api/runs").json() if args.source == "live" else None
            if snap is not None and not (snap["current"] or snap["queued"]):
                http.post("/api/runs", json={"config": config.name})  # the plan ended early: keep streaming
        steady = [r for r in rows if r["t"] - t0 >= 60] or rows
        span = (rows[-1]["t"] - t0) or 1.0
        print(f"\nheap: {rows[0]['heap_mb']:.2f} MB at the start, {rows[-1]['heap_mb']:.2f} MB at the end, "
              f"min {min(r['heap_mb'] for r in rows):.2f}, max {max(r['heap_mb'] for r in rows):.2f}; slope "
              f"{slope_per_min(steady, 'heap_mb', t0):+.4f} MB/min after the first minute "
              f"({slope_per_min(rows, 'heap_mb', t0):+.4f} MB/min over all)")
        print(f"DOM nodes: {rows[0]['nodes']} -> {rows[-1]['nodes']}, slope "
              f"{slope_per_min(steady, 'nodes', t0):+.2f} nodes/min after the first minute; event listeners "
              f"{rows[0]['listeners']} -> {rows[-1]['listeners']}")
        print(f"updates: {(rows[-1]['redraws'] - rows[0]['redraws']) / span:.1f} plot redraws/s, "
              f"{(rows[-1]['points'] - rows[0]['points']) / span:.0f} points/s, "
              f"{(rows[-1]['messages'] - rows[0]['messages']) / span:.1f} messages/s; missed "
              f"{rows[-1]['missed']}, dropped by the server {rows[-1]['dropped']}")
    finally:
        if page is not None:
            page.quit()
        with contextlib.suppress(Exception):  # the server may be gone already
            cur = http.get("/api/runs").json()["current"]
            if cur:
                http.post(f"/api/runs/{cur['id']}/abort")
        http.close()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
