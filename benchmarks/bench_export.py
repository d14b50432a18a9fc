"""Exports of long sessions: peak memory and time per format, HDF5 against plain h5py, window reads.

A session of the shape "10 kHz x 8 channels float64" (frames of 1000 rows, unix times) is written
once through ``SessionStore.append`` into ``--dir`` (30 min = 144 M samples = 1.15 GB, 2 h = 4.6 GB;
reused by later runs). Each export runs in its own process, which reports its own peak RSS
(``ru_maxrss``) and wall time; the output is deleted afterwards. "h5py direct" writes the same
arrays, already in memory, with the same dataset layout in one call per dataset: the ratio
ours/plain is the cost of reading the store chunk by chunk. HDF5 and MAT exports run alternately with
their plain baseline (``--repeat`` pairs); the ratios are medians of the per-pair ratios of wall time
and of process CPU time (threads included), which the load of other jobs barely moves. The window
read takes 1 s of the session at 20 random places via the frame index, next to a plain SQL query on
the unindexed frame start time (a scan of the frame rows).

    .venv/bin/python benchmarks/bench_export.py --minutes 30            # 30-min session
    .venv/bin/python benchmarks/bench_export.py --minutes 120 --formats hdf5,mat,csv
    .venv/bin/python benchmarks/bench_export.py --minutes 30 --scale 0.1   # when disk is short
    .venv/bin/python benchmarks/bench_export.py --minutes 3 --repeat 3     # median of 3 runs each
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RATE = 10_000.0
N_CH = 8
ROWS = 1000  # rows per frame
POOL = 64  # distinct data blocks cycled through (generating 4.6 GB of normals would dominate)
STREAM = "bench.trace"


def blocks() -> np.ndarray:
    return np.random.default_rng(7).standard_normal((POOL, ROWS, N_CH))


def generate(path: Path, minutes: float) -> str:
    """Write the session once (reused when the store already holds it); returns its id."""
    sys.path.insert(0, str(ROOT))
    from daq.bus.frames import Frame
    from daq.store.read_write import SessionStore

    n_frames = int(round(minutes * 60 * RATE / ROWS))
    sid = f"bench{int(minutes * 100):07d}"
    if path.exists():
        with SessionStore(path) as store:
            try:
                info = store.get_session(sid)
                if info.status == "complete" and info.streams[STREAM].n_messages == n_frames:
                    return sid
            except Exception:  # noqa: BLE001 - regenerate anything unexpected
                pass
        path.unlink()
        for suffix in ("-wal", "-shm"):
            Path(str(path) + suffix).unlink(missing_ok=True)
    pool = blocks()
    ch = [f"c{i}" for i in range(N_CH)]
    began = time.perf_counter()
    with SessionStore(path) as store:
        store.create_session("bench", {"rig": {"kind": "bench"}}, session_id=sid)
        for k in range(n_frames):
            store.append(
                sid, Frame(STREAM, k, 1.7e9 + k * ROWS / RATE, 1 / RATE, ch, ["m"] * N_CH, pool[k % POOL])
            )
        store.finish(sid, "complete")
    took = time.perf_counter() - began
    size = path.stat().st_size / 1e9
    print(f"wrote {n_frames * ROWS * N_CH / 1e6:.0f} M samples in {took:.1f} s ({size:.2f} GB)")
    return sid


CHILD_EXPORT = """
import json, resource, sys, time
import h5py  # imported before the clock starts, as in the h5py run
import numpy as np
sys.path.insert(0, {root!r})
from daq.export.session_export import export
from daq.store.read_write import SessionStore
if {reference!r}:  # the CSV row formatting before issue 23 (repr of lists, split, zip, join), for the ratio
    import daq.export.csv_files as csv_files
    def _csv_lines(t, columns):
        parts = [repr(t.tolist())[1:-1].split(", ")]
        for col in columns:
            block = col.astype(np.int64) if col.dtype == np.bool_ else col
            if block.ndim == 1:
                parts.append(repr(block.tolist())[1:-1].split(", "))
            elif block.shape[1]:
                parts.append(repr(block.tolist())[2:-2].replace(", ", ",").split("],["))
        return "\\n".join(map(",".join, zip(*parts, strict=True))) + "\\n"
    csv_files._csv_lines = _csv_lines
t, c = time.perf_counter(), time.process_time()
with SessionStore({store!r}, create=False) as store:
    r = export(store, {sid!r}, {fmt!r}, {out!r}, mat_version={mat!r}, force=True)
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
took, cpu = time.perf_counter() - t, time.process_time() - c
print(json.dumps({{"s": took, "cpu": cpu, "rss_mb": rss, "bytes": r.bytes, "mat_version": r.mat_version}}))
"""

CHILD_READ = """
import json, resource, sys, time
sys.path.insert(0, {root!r})
from daq.store.read_write import SessionStore
t, c = time.perf_counter(), time.process_time()
with SessionStore({store!r}, create=False) as store:
    n = sum(len(c) for c in store.iter_stream({sid!r}, {stream!r}, 1 << 16))
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({{"s": time.perf_counter() - t, "cpu": time.process_time() - c, "rss_mb": rss}}))
"""

CHILD_H5PY = """
import json, resource, sys, time
import h5py, numpy as np
ROWS, RATE, N_CH, POOL = {rows}, {rate}, {n_ch}, {pool}
n_frames = {n_frames}
pool = np.random.default_rng(7).standard_normal((POOL, ROWS, N_CH))  # the blocks of the session
data = np.empty((n_frames * ROWS, N_CH))
for k in range(n_frames):
    data[k * ROWS:(k + 1) * ROWS] = pool[k % len(pool)]
t_axis = np.concatenate([1.7e9 + k * ROWS / RATE + np.arange(ROWS) * (1 / RATE) for k in range(n_frames)])
rows = (1 << 20) // (8 * N_CH)
t, c = time.perf_counter(), time.process_time()
with h5py.File({out!r}, "w") as f:
    f.create_dataset("t", data=t_axis, chunks=(rows,), maxshape=(None,))
    f.create_dataset("data", data=data, chunks=(rows, N_CH), maxshape=(None, N_CH))
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({{"s": time.perf_counter() - t, "cpu": time.process_time() - c, "rss_mb": rss}}))
"""

CHILD_SCIPY = """
import json, resource, sys, time
import numpy as np, scipy.io
ROWS, RATE, N_CH, POOL = {rows}, {rate}, {n_ch}, {pool}
n_frames = {n_frames}
pool = np.random.default_rng(7).standard_normal((POOL, ROWS, N_CH))
data = np.empty((n_frames * ROWS, N_CH))
for k in range(n_frames):
    data[k * ROWS:(k + 1) * ROWS] = pool[k % len(pool)]
t_axis = np.concatenate([1.7e9 + k * ROWS / RATE + np.arange(ROWS) * (1 / RATE) for k in range(n_frames)])
t, c = time.perf_counter(), time.process_time()
scipy.io.savemat({out!r}, {{"streams": {{"bench_trace": {{"t": t_axis.reshape(-1, 1), "data": data,
                  "channels": np.array([f"c{{i}}" for i in range(N_CH)], dtype=object)}}}}}})
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({{"s": time.perf_counter() - t, "cpu": time.process_time() - c, "rss_mb": rss}}))
"""

CHILD_HAND = """
import json, resource, sqlite3, sys, time
import h5py, numpy as np
N_CH = {n_ch}
t, c = time.perf_counter(), time.process_time()
db = sqlite3.connect({store!r})
sql = "SELECT n_samples FROM streams WHERE session_id=? AND stream=?"
(n,) = db.execute(sql, ({sid!r}, {stream!r})).fetchone()
rows = (1 << 20) // (8 * N_CH)
with h5py.File({out!r}, "w") as f:
    ts = f.create_dataset("t", (n,), dtype="f8", chunks=(rows,), maxshape=(None,))
    d = f.create_dataset("data", (n, N_CH), dtype="f8", chunks=(rows, N_CH), maxshape=(None, N_CH))
    k = 0
    cur = db.execute("SELECT t0, dt, n, payload FROM frames WHERE session_id=? AND stream=? ORDER BY ord",
                     ({sid!r}, {stream!r}))
    while batch := cur.fetchmany(64):
        data = np.concatenate([np.frombuffer(p, "<f8").reshape(-1, N_CH) for _, _, _, p in batch])
        tt = np.concatenate([t0 + np.arange(m) * dt for t0, dt, m, _ in batch])
        ts[k:k + len(tt)] = tt
        d[k:k + len(tt)] = data
        k += len(tt)
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({{"s": time.perf_counter() - t, "cpu": time.process_time() - c, "rss_mb": rss}}))
"""

CHILD_REPLAY = """
import asyncio, json, resource, sys, time
sys.path.insert(0, {root!r})
from daq.bus.pubsub import BusPublisher
from daq.run.replay import replay_session
from daq.store.read_write import SessionStore
async def main():
    pub = BusPublisher()
    try:
        with SessionStore({store!r}, create=False) as store:
            return await replay_session(store, {sid!r}, pub, burst=True)
    finally:
        pub.close()
t, c = time.perf_counter(), time.process_time()
st = asyncio.run(main())
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({{"s": time.perf_counter() - t, "cpu": time.process_time() - c, "rss_mb": rss}}))
"""


#: Runs of every child (``--repeat``): the median time and the largest peak RSS are reported.
REPEAT = [1]


def child(code: str) -> dict:
    runs = []
    for _ in range(REPEAT[0]):
        cmd = [sys.executable, "-c", code]
        r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=False)
        if r.returncode != 0:
            raise RuntimeError(r.stderr[-2000:])
        runs.append(json.loads(r.stdout.strip().splitlines()[-1]))
    out = dict(runs[0])
    out["s"] = statistics.median(run["s"] for run in runs)
    out["rss_mb"] = max(run["rss_mb"] for run in runs)
    return out


def paired(code_ours: str, code_plain: str, out_ours: Path, out_plain: Path) -> tuple[dict, dict, list, list]:
    """Ours and the plain library alternately (``--repeat`` pairs), so load from other jobs hits both
    alike: (ours, plain) with median times, and the per-pair ratios ours/plain of wall and CPU time."""
    runs: dict[str, list[dict]] = {"ours": [], "plain": []}
    for k in range(REPEAT[0]):
        order = (("ours", code_ours, out_ours), ("plain", code_plain, out_plain))
        for name, code, out in order if k % 2 == 0 else order[::-1]:
            cmd = [sys.executable, "-c", code]
            r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=False)
            remove(out)
            if r.returncode != 0:
                raise RuntimeError(r.stderr[-2000:])
            runs[name].append(json.loads(r.stdout.strip().splitlines()[-1]))
    med = {}
    for name, rs in runs.items():
        med[name] = dict(rs[0])
        med[name]["s"] = statistics.median(x["s"] for x in rs)
        med[name]["cpu"] = statistics.median(x["cpu"] for x in rs)
        med[name]["rss_mb"] = max(x["rss_mb"] for x in rs)
    walls = [o["s"] / p["s"] for o, p in zip(runs["ours"], runs["plain"], strict=True)]
    cpus = [o["cpu"] / p["cpu"] for o, p in zip(runs["ours"], runs["plain"], strict=True)]
    return med["ours"], med["plain"], walls, cpus


def ratio_line(what: str, walls: list[float], cpus: list[float]) -> str:
    return (f"{what}: {statistics.median(walls):.2f}x wall (per pair {' '.join(f'{x:.2f}' for x in walls)}), "
            f"{statistics.median(cpus):.2f}x CPU (target <= 1.5x)")


def remove(path: Path) -> None:
    if not path.exists():
        return
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def window_reads(store_path: Path, sid: str, minutes: float) -> tuple[float, float]:
    """Median ms to read 1 s via the index, and via a plain SQL scan of the frame start times."""
    sys.path.insert(0, str(ROOT))
    from daq.store.read_write import SessionStore

    rng = np.random.default_rng(3)
    starts = 1.7e9 + rng.uniform(0, minutes * 60 - 1, 20)
    ours, plain = [], []
    with SessionStore(store_path, create=False) as store:
        store.read_window(sid, STREAM, starts[0], starts[0] + 1)  # warm the schema cache
        for t0 in starts:
            t = time.perf_counter()
            w = store.read_window(sid, STREAM, t0, t0 + 1.0)
            ours.append(time.perf_counter() - t)
            assert abs(len(w) - RATE) <= 1
    db = sqlite3.connect(store_path)
    for t0 in starts:
        t = time.perf_counter()
        rows = db.execute(
            "SELECT payload FROM frames NOT INDEXED "
            "WHERE session_id=? AND stream=? AND t0 + 0.1 > ? AND t0 < ?",
            (sid, STREAM, t0, t0 + 1.0),
        ).fetchall()
        plain.append(time.perf_counter() - t)
        assert len(rows) in (10, 11)
    db.close()
    return 1e3 * float(np.median(ours)), 1e3 * float(np.median(plain))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--scale", type=float, default=1.0, help="Shorten the session by this factor (disk).")
    ap.add_argument("--formats", default="hdf5,mat,csv")
    ap.add_argument("--dir", default="/tmp/hil-bench")
    ap.add_argument("--replay", action="store_true", help="Also replay the session (burst, no subscriber).")
    ap.add_argument("--repeat", type=int, default=1, help="runs of every export and baseline (median time)")
    ap.add_argument("--no-csv-reference", action="store_true",
                    help="Skip the CSV export with the row formatting of before issue 23.")
    args = ap.parse_args()
    REPEAT[0] = max(1, args.repeat)
    minutes = args.minutes * args.scale
    work = Path(args.dir)
    work.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(work).free
    need = minutes * 60 * RATE * N_CH * 8 * 3.2  # store + the largest export (csv ~2.2x)
    if need > free:
        sys.exit(f"needs ~{need / 1e9:.0f} GB in {work}, {free / 1e9:.0f} GB free: use --scale")
    store_path = work / f"session-{int(minutes)}min.sqlite"
    sid = generate(store_path, minutes)
    n_frames = int(round(minutes * 60 * RATE / ROWS))
    n_samples = n_frames * ROWS * N_CH
    size = store_path.stat().st_size / 1e9
    print(f"session {sid}: {minutes:g} min, {n_samples / 1e6:.0f} M samples, {size:.2f} GB")
    print("load average (1, 5, 15 min): " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    print(f"{'what':<24}{'time s':>9}{'peak RSS MB':>13}{'output GB':>11}{'CPU s':>9}")
    results = {}
    runs = [(fmt, False) for fmt in args.formats.split(",")]
    if "csv" in args.formats.split(",") and not args.no_csv_reference:
        runs.append(("csv", True))
    baselines = {
        "hdf5": (CHILD_H5PY, work / "plain.h5", "h5py direct (in memory)", "HDF5 export / h5py direct"),
        "mat": (CHILD_SCIPY, work / "plain.mat", "scipy savemat (memory)",
                "MAT export / scipy.io.savemat direct"),
    }
    for fmt, reference in runs:
        out = work / {"hdf5": "x.h5", "mat": "x.mat", "csv": "x_csv"}[fmt]
        code = CHILD_EXPORT.format(
            root=str(ROOT), store=str(store_path), sid=sid, fmt=fmt, out=str(out), mat="auto",
            reference=reference,
        )
        base = baselines.get(fmt) if not reference else None
        if base is None:
            r = child(code)
            remove(out)
        else:
            plain_code = base[0].format(
                rows=ROWS, rate=RATE, n_ch=N_CH, pool=POOL, n_frames=n_frames, out=str(base[1])
            )
            r, p, walls, cpus = paired(code, plain_code, out, base[1])
        label = f"export {fmt}" + (f" (v{r['mat_version']})" if r["mat_version"] else "")
        label += " (before #23)" if reference else ""
        results[fmt + ("-before" if reference else "")] = r
        print(f"{label:<24}{r['s']:>9.2f}{r['rss_mb']:>13.0f}{r['bytes'] / 1e9:>11.2f}{r['cpu']:>9.2f}")
        if base is not None:
            print(f"{base[2]:<24}{p['s']:>9.2f}{p['rss_mb']:>13.0f}{'':>11}{p['cpu']:>9.2f}")
            print(ratio_line(base[3], walls, cpus))
    if "csv" in results:
        rate = n_samples / results["csv"]["s"]
        print(f"CSV: {rate / 1e6:.2f} M values/s", end="")
        if "csv-before" in results:
            print(f"; before #23 {n_samples / results['csv-before']['s'] / 1e6:.2f} M values/s: "
                  f"{results['csv-before']['s'] / results['csv']['s']:.2f}x (target >= 3x)")
        else:
            print()
    r = child(CHILD_READ.format(root=str(ROOT), store=str(store_path), sid=sid, stream=STREAM))
    print(f"{'store read only':<24}{r['s']:>9.2f}{r['rss_mb']:>13.0f}{'':>11}{r['cpu']:>9.2f}")
    if "hdf5" in results:
        out = work / "hand.h5"
        r = child(CHILD_HAND.format(n_ch=N_CH, store=str(store_path), sid=sid, stream=STREAM, out=str(out)))
        remove(out)
        print(f"{'sqlite3+h5py by hand':<24}{r['s']:>9.2f}{r['rss_mb']:>13.0f}{'':>11}{r['cpu']:>9.2f}")
        print(f"HDF5 export / sqlite3+h5py by hand: {results['hdf5']['s'] / r['s']:.2f}x")
    if args.replay:
        r = child(CHILD_REPLAY.format(root=str(ROOT), store=str(store_path), sid=sid))
        print(f"{'replay --burst':<24}{r['s']:>9.2f}{r['rss_mb']:>13.0f}")
    print("load average (1, 5, 15 min) at the end: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    ours, plain = window_reads(store_path, sid, minutes)
    print(
        f"read 1 s window: {ours:.2f} ms via the index, {plain:.1f} ms scanning the frame rows (median of 20)"
    )


if __name__ == "__main__":
    main()
