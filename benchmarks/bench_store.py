"""Store ingest: 8-channel float64 blocks through SessionStore.append/flush vs plain sqlite3.

"plain-same" is the comparison (issue 44): a plain sqlite3 script that stores the same rows as ours -
the same frames table with the same three indexes (the store's own DDL text), every column filled the
simplest way (ordinal, sample index s0, t_min/t_max), the stream's counters and the session's heartbeat
updated at each commit - with the same page size (daq.store.schema.PAGE_SIZE), WAL, synchronous=NORMAL
and commit policy (every 0.25 s), executemany per commit. "ours" goes through SessionStore.append
(validation, header fields, stream bookkeeping) and flush. Two floors that store less are printed
beside it: "plain-pg" inserts only (seq, t0, payload) into a one-column-index-free table with the same
pages, "plain" the same with SQLite's default 4 KiB pages (the issue-23 baselines; before issue 44 the
ours/plain ratio was against "plain", then "plain-pg" - both do less work than ours: 3 of the 13
columns and none of the indexes that window reads and replay need). A "sample" is one value of one
channel; rows/s (all 8 channels at one instant) are shown too. Runs alternate; the ratio is the median
of the per-run ratios of wall time, and of the process's CPU time (which the load of other jobs on a
shared machine barely moves).

Two sources of blocks: "arrays", one writeable array for every block (the store must copy it at append,
as the caller may reuse it), and "bus", the blocks as the recorder receives them from the bus (each a
read-only view of its own received message below the bus's zero-copy threshold - which the store keeps
until the commit without a copy - and a writable one above it). The plain scripts copy with ``tobytes``
either way; a plain script that bound the received buffers without a copy would skip that too.

    .venv/bin/python benchmarks/bench_store.py [--repeat 5] [--source arrays|bus|both]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import zmq

from daq.bus.frames import Frame, decode, encode
from daq.bus.pubsub import ZERO_COPY_THRESHOLD
from daq.store.read_write import SessionStore
from daq.store.schema import FRAME_COLS, INDEXES, PAGE_SIZE, SCHEMA

N_CH = 8
CASES = [(100, 4000), (1000, 1000), (10000, 200)]  # rows per block, blocks


def blocks(rows: int, n: int) -> list[Frame]:
    rng = np.random.default_rng(1)
    data = rng.standard_normal((rows, N_CH))
    ch = [f"c{i}" for i in range(N_CH)]
    return [Frame("bench.s", i, i * rows * 1e-4, 1e-4, ch, ["m"] * N_CH, data) for i in range(n)]


def received(frame: Frame) -> Frame:
    """``frame`` as the recorder's subscriber hands it on: decoded from a received ZeroMQ message, whose
    buffer is made read-only below the zero-copy threshold (daq.bus.pubsub's _recv_nowait)."""
    topic, header, payload = encode(frame)
    buffer = zmq.Frame(bytes(payload)).buffer
    if len(buffer) < ZERO_COPY_THRESHOLD:
        buffer = buffer.toreadonly()
    return decode([bytes(topic), bytes(header), buffer])


def bench_ours(path: Path, frames: list[Frame]) -> tuple[float, float]:
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


def bench_plain(path: Path, frames: list[Frame], page_size: int | None = None) -> tuple[float, float]:
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


def bench_plain_same(path: Path, frames: list[Frame]) -> tuple[float, float]:
    """Plain sqlite3 storing what ours stores: the same rows, tables, indexes, pages, durability, commits."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute(f"PRAGMA page_size={PAGE_SIZE}")
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.executescript(SCHEMA + INDEXES)
    sid, stream = "0123456789ab", frames[0].stream
    db.execute(
        "INSERT INTO sessions (id, kind, status, started, config, software_version, devices, heartbeat) "
        "VALUES (?, 'bench', 'running', ?, '{}', 'plain', '{}', ?)", (sid, time.time(), time.time()))
    db.execute("INSERT INTO streams (session_id, stream, type, channels, units, dtype, dt) "
               "VALUES (?, ?, 'frame', ?, ?, 'float64', ?)",
               (sid, stream, str(frames[0].channels), str(frames[0].units), frames[0].dt))
    insert = f"INSERT INTO frames ({FRAME_COLS}) VALUES ({', '.join('?' * 13)})"

    def commit(batch: list[tuple]) -> None:
        db.execute("BEGIN IMMEDIATE")
        db.executemany(insert, batch)
        if batch:
            db.execute("UPDATE streams SET n_messages=n_messages+?, n_samples=n_samples+?, "
                       "t_first=MIN(COALESCE(t_first, ?), ?), t_last=MAX(COALESCE(t_last, ?), ?) "
                       "WHERE session_id=? AND stream=?",
                       (len(batch), sum(r[6] for r in batch), batch[0][11], batch[0][11], batch[-1][12],
                        batch[-1][12], sid, stream))
        db.execute("UPDATE sessions SET heartbeat=? WHERE id=?", (time.time(), sid))
        db.execute("COMMIT")

    t0, c0 = time.perf_counter(), time.process_time()
    batch = []
    last = time.monotonic()
    s0 = 0
    for ordinal, f in enumerate(frames):  # same commit policy: every 0.25 s
        n = f.data.shape[0]
        batch.append((sid, ordinal, f.stream, f.seq, f.t0, f.dt, n, 0, 0, f.data.tobytes(), s0, f.t0,
                      f.t0 + (n - 1) * f.dt))
        s0 += n
        if time.monotonic() - last >= 0.25:
            commit(batch)
            batch, last = [], time.monotonic()
    commit(batch)
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    db.close()
    return dt, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5, help="runs per case, alternating (median reported)")
    ap.add_argument("--source", choices=("arrays", "bus", "both"), default="both",
                    help="blocks from one writeable array, as the bus delivers them, or both (default)")
    args = ap.parse_args()
    print("load average", " ".join(f"{x:.2f}" for x in os.getloadavg()))
    kinds = ("plain", "plain-pg", "plain-same", "ours")
    sources = ("arrays", "bus") if args.source == "both" else (args.source,)
    with tempfile.TemporaryDirectory() as tmp:
        for source in sources:
            print(f"blocks: {source}")
            print(f"{'rows/block':>10} {'impl':>10} {'samples/s':>12} {'rows/s':>11} {'MB/s':>8} "
                  f"{'ours/plain-same':>16}")
            run_cases(Path(tmp), kinds, args.repeat, source)
    print("load average", " ".join(f"{x:.2f}" for x in os.getloadavg()))


def run_cases(tmp: Path, kinds: tuple[str, ...], repeat: int, source: str) -> None:
    """Every block size, ``repeat`` alternating runs of each kind; prints rates and ratios."""
    for k, (rows, n) in enumerate(CASES):
        frames = blocks(rows, n)
        if source == "bus":
            frames = [received(f) for f in frames]
        values = rows * N_CH * n
        wall: dict[str, list[float]] = {kind: [] for kind in kinds}
        cpu: dict[str, list[float]] = {kind: [] for kind in kinds}
        for r in range(repeat):  # alternating, so load from other processes hits all alike
            for kind in kinds:
                path = tmp / f"{kind}{k}-{r}.sqlite"
                if kind == "ours":
                    t, c = bench_ours(path, frames)
                elif kind == "plain-same":
                    t, c = bench_plain_same(path, frames)
                else:
                    t, c = bench_plain(path, frames, PAGE_SIZE if kind == "plain-pg" else None)
                wall[kind].append(t)
                cpu[kind].append(c)
            for p in tmp.iterdir():
                p.unlink()

        def ratios(base: str, times: dict[str, list[float]]) -> list[float]:
            return [b / o for b, o in zip(times[base], times["ours"], strict=True)]

        same = ratios("plain-same", wall)
        for name in kinds:
            t = statistics.median(wall[name])
            ratio = f"{statistics.median(same):.2f}" if name == "ours" else ""
            mb_s = values * 8 / t / 1e6
            rate, row_rate = values / t, rows * n / t
            print(f"{rows:>10} {name:>10} {rate:>12.3g} {row_rate:>11.3g} {mb_s:>8.0f} {ratio:>16}")
        for base in ("plain-same", "plain-pg", "plain"):
            for what, times in (("wall", wall), ("CPU", cpu)):
                rs = ratios(base, times)
                print(f"{'':>10} {what:>4}-time ratio {base}/ours (median): {statistics.median(rs):.2f} "
                      f"({' '.join(f'{x:.2f}' for x in rs)})")


if __name__ == "__main__":
    main()
