"""Live sessions (issue 40): how long a sample takes from its recording on the rig to a reader subscribed
to the lab with Tiled's own ``subscribe()``, and what forwarding costs the recording.

For each run kind (a crane run, its trace at 10 kHz; a press run) it runs the shipped simulated config
twice with ``hil run``, side by side in time order: without ``[lab]`` and with it (the forwarder streams
to a ``hil lab serve`` on this machine). Latency per sample = the time a subscriber's callback holds it
minus the sample's own time stamp (unix time, taken when the rig acquired it: so it also counts the bus,
the recorder's 0.25 s commits and the forwarder's 0.1 s polls). The recording's figures: samples and frames
recorded, gaps and rejected messages (frames lost), run wall time, and the forwarder process's CPU.

    .venv/bin/python benchmarks/bench_live.py                 # crane and press
    .venv/bin/python benchmarks/bench_live.py --kinds press   # one kind
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
STREAMS = {"crane": "crane.trace", "press": "press.force"}
HZ = os.sysconf("SC_CLK_TCK")


def config(kind: str, folder: Path, lab: tuple[str, Path] | None) -> Path:
    """The shipped simulated config (the press one shortened as the tests do), with [lab] or without."""
    text = (ROOT / "configs" / f"{kind}-sim.toml").read_text()
    text = re.sub(r'(?m)^(\w+_dir|pki_dir) = "\.\./', rf'\1 = "{ROOT}/', text)  # paths made absolute
    if kind == "press":
        text = re.sub(r"(?m)^n_series = \d+", "n_series = 3", text)
        text = re.sub(r"(?m)^n_steps_up = \d+", "n_steps_up = 3", text)
    if lab is not None:
        text += f'\n[lab]\nurl = "{lab[0]}"\nkey_file = "{lab[1]}"\n'
    path = folder / f"{kind}{'-lab' if lab else ''}.toml"
    path.write_text(text)
    return path


def start_lab(folder: Path) -> tuple[subprocess.Popen, str, str]:
    cmd = [sys.executable, "-m", "daq.cli.main", "lab", "serve", "--data", str(folder / "lab"), "--port", "0"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    lines = [proc.stdout.readline().decode().strip() for _ in range(2)]
    return proc, lines[1], (folder / "lab" / "lab.key").read_text().strip()


def forwarder_cpu(store: Path, seen: dict) -> None:
    """CPU seconds of the forwarder process of ``store`` (sampled until it exits)."""
    while not seen.get("done"):
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                if b"daq.lab.live" in cmd and str(store).encode() in cmd:
                    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                    seen[pid] = (int(fields[11]) + int(fields[12])) / HZ
            except OSError:
                continue
        time.sleep(0.5)


def watch_store(store: Path, stream: str, seen: dict, stop: threading.Event) -> None:
    """When each frame of ``stream`` was recorded: the wall time it first appears committed in the rig's
    store (polled every 10 ms, read-only): {s0: (n, time)}."""
    import sqlite3

    while not store.exists() and not stop.is_set():
        time.sleep(0.01)
    db = sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=30)
    last = -1
    while not stop.is_set():
        try:
            rows = db.execute("SELECT s0, n FROM frames WHERE stream=? AND s0>? ORDER BY s0", (stream, last))
            now = time.time()
            for s0, n in rows.fetchall():
                seen[s0] = (n, now)
                last = max(last, s0)
        except sqlite3.OperationalError:
            pass  # the tables are not made yet
        time.sleep(0.01)
    db.close()


def recorded_at(seen: dict, first: int, n: int) -> np.ndarray:
    """The recording time of samples first .. first+n-1 (from :func:`watch_store`; NaN when unseen)."""
    out = np.full(n, np.nan)
    for s0, (m, at) in seen.items():
        lo, hi = max(s0, first), min(s0 + m, first + n)
        if lo < hi:
            out[lo - first:hi - first] = at
    return out


def run_once(kind: str, folder: Path, lab: tuple[str, str, Path] | None) -> dict:
    from tiled.client import from_uri

    from daq.store.reader import SessionReader

    store = folder / f"{kind}{'-lab' if lab else ''}" / "hil.sqlite"
    store.parent.mkdir()
    cfg = config(kind, folder, (lab[0], lab[2]) if lab else None)
    latencies: list[np.ndarray] = []  # from the sample's recording (its commit to the store)
    from_stamp: list[np.ndarray] = []  # from the sample's own time stamp (its acquisition)
    arrivals: list[tuple[int, int, float]] = []
    cpu: dict = {}
    frames: dict = {}
    stop = threading.Event()
    threading.Thread(target=watch_store, args=(store, STREAMS[kind], frames, stop), daemon=True).start()
    t0 = time.monotonic()
    run = subprocess.Popen([sys.executable, "-m", "daq.cli.main", "--store", str(store), "run", str(cfg),
                            "--no-progress"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    sub = None
    if lab is not None:
        threading.Thread(target=forwarder_cpu, args=(store, cpu), daemon=True).start()
        root = from_uri(lab[0], api_key=lab[1])
        stream = STREAMS[kind]

        def on_data(update) -> None:
            now = time.time()
            t = np.asarray(update.data(), dtype=np.float64)
            from_stamp.append(now - t)
            arrivals.append((int(update.offset[0]), len(t), now))

        while run.poll() is None and sub is None:  # subscribe as soon as the stream's time axis exists
            try:
                sids = [k for k in root if root[k].metadata.get("status") == "running"]
                if sids and stream in root[sids[-1]] and "t" in root[sids[-1]][stream]:
                    sub = root[sids[-1]][stream]["t"].subscribe()
                    sub.new_data.add_callback(on_data)
                    sub.start_in_thread()
                    break
            except Exception:  # noqa: BLE001 - not there yet
                pass
            time.sleep(0.1)
    out, _ = run.communicate()
    wall = time.monotonic() - t0
    stop.set()
    wall0 = time.time() - (time.monotonic() - t0)  # the run's start, unix s
    late_at: list[np.ndarray] = []  # when (s into the run) the samples that took over 1 s were recorded
    for first, n, now in arrivals:
        at = recorded_at(frames, first, n)
        latencies.append(now - at)
        late_at.append(at[now - at > 1.0] - wall0)
    if sub is not None:
        time.sleep(2)
        sub.disconnect()
    if lab is not None:
        log = store.parent / "lab-live.log"
        end = time.monotonic() + 600
        while time.monotonic() < end and not (log.exists() and "pushed and verified" in log.read_text()):
            time.sleep(0.5)
        cpu["done"] = True
    with SessionReader(store, recover=False) as r:
        info = r.list_sessions()[-1]
        stats = info.stats or {}
        si = info.streams.get(STREAMS[kind])
    if si is None:
        raise SystemExit(f"{kind} run{' with [lab]' if lab else ''}: {info.status}; {out.strip()[-600:]}")
    lat = np.concatenate(latencies) if latencies else np.empty(0)
    lat = lat[np.isfinite(lat)]
    stamp = np.concatenate(from_stamp) if from_stamp else np.empty(0)
    return {"status": info.status, "wall_s": wall, "samples": si.n_samples, "frames": si.n_messages,
            "received": stats.get("received"), "recorded": stats.get("recorded"),
            "gaps": stats.get("gap_count"),
            "rejected": stats.get("rejected"), "lat_n": len(lat),
            "lat_median": float(np.median(lat)) if len(lat) else None,
            "lat_p90": float(np.percentile(lat, 90)) if len(lat) else None,
            "stamp_median": float(np.median(stamp)) if len(stamp) else None,
            "stamp_p90": float(np.percentile(stamp, 90)) if len(stamp) else None,
            "fwd_cpu_s": max([v for k, v in cpu.items() if k != "done"], default=None),
            "late_over_1s_at": late_seconds(np.concatenate(late_at) if late_at else np.empty(0)),
            "fwd_behind_lines": log_text(store.parent / "lab-live.log").count("behind"),
            "verified": lab is not None and "pushed and verified" in log_text(store.parent / "lab-live.log")}


def late_seconds(at: np.ndarray) -> dict[int, int]:
    """{whole s into the run: samples recorded then that took over 1 s to reach the reader}."""
    at = at[np.isfinite(at)]
    secs, counts = np.unique(np.floor(at).astype(int), return_counts=True)
    return {int(s): int(c) for s, c in zip(secs, counts, strict=True)}


def log_text(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kinds", nargs="+", default=["crane", "press"], choices=sorted(STREAMS))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        proc, url, key = start_lab(folder)
        key_file = folder / "lab.key"
        key_file.write_text(key + "\n")
        key_file.chmod(0o600)
        try:
            for kind in args.kinds:
                off = run_once(kind, folder, None)
                on = run_once(kind, folder, (url, key, key_file))
                for name, r in (("off", off), ("on", on)):
                    print(f"{kind} forwarding {name}: {r}", flush=True)
                lost_off = (off["received"] or 0) - (off["recorded"] or 0) + (off["gaps"] or 0)
                lost_on = (on["received"] or 0) - (on["recorded"] or 0) + (on["gaps"] or 0)
                print(f"{kind}: latency from recording median {on['lat_median']:.3f} s, p90 "
                      f"{on['lat_p90']:.3f} s over {on['lat_n']} samples (from acquisition: median "
                      f"{on['stamp_median']:.3f} s, p90 {on['stamp_p90']:.3f} s); "
                      f"frames lost off/on {lost_off}/{lost_on}; "
                      f"wall {off['wall_s']:.1f}/{on['wall_s']:.1f} s; "
                      f"{STREAMS[kind]} samples {off['samples']}/{on['samples']}; "
                      f"forwarder CPU {on['fwd_cpu_s']} s; verified in the lab: {on['verified']}", flush=True)
        finally:
            proc.terminate()
            proc.wait(timeout=60)


if __name__ == "__main__":
    main()
