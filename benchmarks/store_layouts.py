"""Would another row layout let the store pass plain sqlite3 at 100-row blocks? (issue 44; SQLite only)

bench_store.py's 100-row case stays near 0.9 of plain-same and 0.6 of plain-pg. One idea was to store fewer,
larger rows: the payloads of a commit in one blob, and per block only its small header row pointing into it.
This script writes the same 4000 blocks of 100 x 8 float64 (6.4 kB each), with the same pages, WAL,
synchronous=NORMAL and commit rule (every 0.25 s), four ways, and prints the process CPU per block:

* ``plain-pg``: (seq, t0, payload) per block, no index (bench_store.py's plain-pg);
* ``plain-same``: our frames table, its three indexes, every column, the payload inline (a plain script);
* ``commit-blob``: the same header rows with an empty payload, plus one blob per commit in a table of its own,
  built by appending to a bytearray;
* ``commit-blob-prealloc``: the same, copied into one buffer allocated beforehand;
* ``commit-row``: one frames row per commit holding the commit's payloads (copied into one buffer allocated
  beforehand) and a small index of its blocks (ord, seq, t0, n: what replay and the lab's frames table need).

No layout code of the store is used beyond its DDL: this measures SQLite and the Python around it.

    .venv/bin/python benchmarks/store_layouts.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from daq.store.schema import FRAME_COLS, INDEXES, PAGE_SIZE, SCHEMA  # noqa: E402 - after the root is on the path

ROWS, CHANNELS, BLOCKS = 100, 8, 4000
SID = "0123456789ab"
HEADER = f"INSERT INTO frames ({FRAME_COLS}, pord, poff) VALUES ({', '.join('?' * 15)})"


def connect(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute(f"PRAGMA page_size={PAGE_SIZE}")
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    return db


def plain_pg(path: Path, blocks: list[np.ndarray]) -> float:
    db = connect(path)
    db.execute("CREATE TABLE f (seq INTEGER, t0 REAL, payload BLOB)")
    c0, batch, last = time.process_time(), [], time.monotonic()
    for i, b in enumerate(blocks):
        batch.append((i, i * 0.01, b.tobytes()))
        if time.monotonic() - last >= 0.25 or i == len(blocks) - 1:
            db.execute("BEGIN")
            db.executemany("INSERT INTO f VALUES (?, ?, ?)", batch)
            db.execute("COMMIT")
            batch, last = [], time.monotonic()
    return time.process_time() - c0


def plain_same(path: Path, blocks: list[np.ndarray]) -> float:
    db = connect(path)
    db.executescript(SCHEMA + INDEXES)
    insert = f"INSERT INTO frames ({FRAME_COLS}) VALUES ({', '.join('?' * 13)})"
    c0, batch, last = time.process_time(), [], time.monotonic()
    for i, b in enumerate(blocks):
        t0 = i * 0.01
        batch.append((SID, i, "s", i, t0, 1e-4, ROWS, 0, 0, b.tobytes(), i * ROWS, t0, t0 + 0.0099))
        if time.monotonic() - last >= 0.25 or i == len(blocks) - 1:
            db.execute("BEGIN IMMEDIATE")
            db.executemany(insert, batch)
            db.execute("COMMIT")
            batch, last = [], time.monotonic()
    return time.process_time() - c0


def commit_blob(path: Path, blocks: list[np.ndarray], prealloc: bool) -> float:
    db = connect(path)
    db.executescript(SCHEMA + INDEXES)
    db.execute("ALTER TABLE frames ADD COLUMN pord INTEGER")
    db.execute("ALTER TABLE frames ADD COLUMN poff INTEGER")
    db.execute("CREATE TABLE payloads (session_id TEXT NOT NULL, ord INTEGER NOT NULL, data BLOB NOT NULL, "
               "PRIMARY KEY (session_id, ord))")
    big = memoryview(bytearray(sum(b.nbytes for b in blocks))) if prealloc else None
    c0, batch, last = time.process_time(), [], time.monotonic()
    grown, start, end, first = bytearray(), 0, 0, 0
    for i, b in enumerate(blocks):
        raw = memoryview(b).cast("B")
        if big is not None:
            big[end:end + len(raw)] = raw
            offset = end - start
        else:
            offset = len(grown)
            grown += raw
        end += len(raw)
        t0 = i * 0.01
        batch.append((SID, i, "s", i, t0, 1e-4, ROWS, 0, 0, b"", i * ROWS, t0, t0 + 0.0099, first, offset))
        if time.monotonic() - last >= 0.25 or i == len(blocks) - 1:
            blob = big[start:end] if big is not None else grown
            db.execute("BEGIN IMMEDIATE")
            db.execute("INSERT INTO payloads VALUES (?, ?, ?)", (SID, first, blob))
            db.executemany(HEADER, batch)
            db.execute("COMMIT")
            batch, last, grown, start, first = [], time.monotonic(), bytearray(), end, i + 1
    return time.process_time() - c0


def commit_row(path: Path, blocks: list[np.ndarray]) -> float:
    db = connect(path)
    db.executescript(SCHEMA + INDEXES)
    db.execute("ALTER TABLE frames ADD COLUMN blocks BLOB")
    insert = f"INSERT INTO frames ({FRAME_COLS}, blocks) VALUES ({', '.join('?' * 14)})"
    big = memoryview(bytearray(sum(b.nbytes for b in blocks)))
    c0, index, last = time.process_time(), [], time.monotonic()
    start = end = first = 0
    for i, b in enumerate(blocks):
        raw = memoryview(b).cast("B")
        big[end:end + len(raw)] = raw
        end += len(raw)
        index.append((i, i, i * 0.01, ROWS))
        if time.monotonic() - last >= 0.25 or i == len(blocks) - 1:
            table = np.array(index, dtype=[("ord", "<i8"), ("seq", "<i8"), ("t0", "<f8"), ("n", "<i8")])
            n = int(table["n"].sum())
            t0 = float(table["t0"][0])
            db.execute("BEGIN IMMEDIATE")
            db.execute(insert, (SID, first, "s", first, t0, 1e-4, n, 0, 0, big[start:end], first * ROWS, t0,
                                float(table["t0"][-1]) + 0.0099, table.tobytes()))
            db.execute("COMMIT")
            index, last, start, first = [], time.monotonic(), end, i + 1
    return time.process_time() - c0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5, help="runs of each layout, alternating")
    args = ap.parse_args()
    rng = np.random.default_rng(1)
    blocks = [rng.standard_normal((ROWS, CHANNELS)) for _ in range(BLOCKS)]
    layouts = {"plain-pg": lambda p: plain_pg(p, blocks), "plain-same": lambda p: plain_same(p, blocks),
               "commit-blob": lambda p: commit_blob(p, blocks, False),
               "commit-blob-prealloc": lambda p: commit_blob(p, blocks, True),
               "commit-row": lambda p: commit_row(p, blocks)}
    cpu: dict[str, list[float]] = {name: [] for name in layouts}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeat):
            for name, run in layouts.items():
                cpu[name].append(run(Path(tmp) / f"{name}-{r}.sqlite"))
                for p in Path(tmp).iterdir():
                    p.unlink()
    for name, runs in cpu.items():
        per_block = [c / BLOCKS * 1e6 for c in runs]
        print(f"{name:>22}: {statistics.median(per_block):6.2f} us CPU per block "
              f"({' '.join(f'{x:.2f}' for x in per_block)})")


if __name__ == "__main__":
    main()
