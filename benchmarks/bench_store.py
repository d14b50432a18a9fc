"""Store ingest: 8-channel float64 blocks through SessionStore.append/flush vs plain sqlite3.

"plain" inserts the same payload bytes with executemany into a one-table WAL database with SQLite's
default page size; "plain-pg" does the same with the store's page size (daq.store.schema.PAGE_SIZE),
to show what the page size buys and what our own work costs on top of it; "ours" goes through
SessionStore.append (validation, header fields, stream bookkeeping, four indexes) and flush. A
"sample" is one value of one channel; rows/s (all 8 channels at one instant) are shown too.
Runs alternate; the ratio is the median of the per-run ratios of wall time, and of the process's CPU
time (which the load of other jobs on a shared machine barely moves), against both plain variants.

    .venv/bin/python benchmarks/bench_store.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from daq.bus.frames import Frame
from daq.store.read_write import SessionStore
from daq.store.schema import PAGE_SIZE

N_CH = 8
CASES = [(100, 4000), (1000, 1000), (10000, 200)]  # rows per block, blocks


def blocks(rows: int, n: int) -> list[Frame]:
    rng = np.random.default_rng(1)
    data = rng.standard_normal((rows, N_CH))
    ch = [f"c{i}" for i in range(N_CH)]
    return [Frame("bench.s", i, i * rows * 1e-4, 1e-4, ch, ["m"] * N_CH, data) for i in range(n)]


def bench_ours(path: Path, frames: list[Frame]) -> float:
    store = SessionStore(path)
    sid = store.create_session("bench", {})
    t0, c0 = time.perf_counter(), time.process_time()
    for f in frames:
        store.append(sid, f)
    store.flush()
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    store.finish(sid, "complete")
    store.close()
    return dt, cpu


def bench_plain(path: Path, frames: list[Frame], page_size: int | None = None) -> float:
    db = sqlite3.connect(path, isolation_level=None)
    if page_size:
        db.execute(f"PRAGMA page_size={page_size}")
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("CREATE TABLE f (seq INTEGER, t0 REAL, payload BLOB)")
    t0, c0 = time.perf_counter(), time.process_time()
    batch = []
    last = time.monotonic()
    for f in frames:  # same commit policy: every 0.25 s
        batch.append((f.seq, f.t0, f.data.tobytes()))
        if time.monotonic() - last >= 0.25:
            db.execute("BEGIN")
            db.executemany("INSERT INTO f VALUES (?, ?, ?)", batch)
            db.execute("COMMIT")
            batch, last = [], time.monotonic()
    db.execute("BEGIN")
    db.executemany("INSERT INTO f VALUES (?, ?, ?)", batch)
    db.execute("COMMIT")
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    db.close()
    return dt, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5, help="runs per case, alternating (median reported)")
    args = ap.parse_args()
    print(f"{'rows/block':>10} {'impl':>8} {'samples/s':>12} {'rows/s':>11} {'MB/s':>8} {'ours/plain':>11}")
    with tempfile.TemporaryDirectory() as tmp:
        for k, (rows, n) in enumerate(CASES):
            frames = blocks(rows, n)
            values = rows * N_CH * n
            times: dict[str, list[float]] = {"plain": [], "plain-pg": [], "ours": []}
            ratios, cpu_ratios, pg_ratios, pg_cpu_ratios = [], [], [], []
            for r in range(args.repeat):  # alternating, so load from other processes hits both alike
                t_plain, c_plain = bench_plain(Path(tmp) / f"plain{k}-{r}.sqlite", frames)
                t_ours, c_ours = bench_ours(Path(tmp) / f"ours{k}-{r}.sqlite", frames)
                t_pg, c_pg = bench_plain(Path(tmp) / f"plainpg{k}-{r}.sqlite", frames, PAGE_SIZE)
                times["plain"].append(t_plain)
                times["plain-pg"].append(t_pg)
                times["ours"].append(t_ours)
                ratios.append(t_plain / t_ours)
                pg_ratios.append(t_pg / t_ours)
                cpu_ratios.append(c_plain / c_ours)
                pg_cpu_ratios.append(c_pg / c_ours)
                for p in Path(tmp).iterdir():
                    p.unlink()
            for name in ("plain", "plain-pg", "ours"):
                t = statistics.median(times[name])
                ratio = f"{statistics.median(ratios):.2f}" if name == "ours" else ""
                mb_s = values * 8 / t / 1e6
                rate, row_rate = values / t, rows * n / t
                print(f"{rows:>10} {name:>8} {rate:>12.3g} {row_rate:>11.3g} {mb_s:>8.0f} {ratio:>11}")
            print(f"{'':>10} wall-time ratios per run: {' '.join(f'{x:.2f}' for x in ratios)}")
            print(f"{'':>10} CPU-time ratio plain/ours (median; load-independent): "
                  f"{statistics.median(cpu_ratios):.2f} ({' '.join(f'{x:.2f}' for x in cpu_ratios)})")
            print(f"{'':>10} wall-time ratio plain-pg/ours ({PAGE_SIZE}-byte pages both; median): "
                  f"{statistics.median(pg_ratios):.2f} ({' '.join(f'{x:.2f}' for x in pg_ratios)})")
            print(f"{'':>10} CPU-time ratio plain-pg/ours ({PAGE_SIZE}-byte pages both; median): "
                  f"{statistics.median(pg_cpu_ratios):.2f} ({' '.join(f'{x:.2f}' for x in pg_cpu_ratios)})")

if __name__ == "__main__":
    main()
