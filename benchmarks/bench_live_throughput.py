"""Live sessions (issue 40), throughput: N rig processes, each recording a 10 kHz x 3-channel float64
stream into its own SQLite store (the project's SessionStore, 100-sample frames appended in real time and
committed as a run commits them), each with its live forwarder (``python -m daq.lab.live``, the process a
run starts), all streaming into ONE ``hil lab serve`` on this machine (a PostgreSQL catalogue by default).

Per rig, sampled every ``--every`` s while it records: the lag = rows in the rig's store minus rows of the
stream's ``data`` in the lab (its shape in the lab's catalogue, read from the catalogue's database so that
sampling costs the Tiled server nothing), in seconds of data. Reported: its median and max, whether it
stays bounded (the least-squares slope of the lag over the second half of the recording, s of lag per s:
a lab that keeps up holds it near 0; one that does not lets it grow at 1 - intake/rate), the rows every
rig had in the lab when it stopped recording and after the catch-up (equal to the store's), the rig's
frames lost (made minus stored: must be 0) and how late its real-time loop ran, the forwarder's CPU, and
the lab server's CPU. Then every forwarder ends with the verified push of its session (its time is
printed).

    PYTHONPATH=. .venv/bin/python benchmarks/bench_live_throughput.py --rigs 4 16 --seconds 60
    PYTHONPATH=. .venv/bin/python benchmarks/bench_live_throughput.py --rigs 4 --catalog sqlite

PostgreSQL 15's server binaries (/usr/lib/postgresql/15/bin) and ``runuser`` are needed for the
PostgreSQL catalogue (as root: the cluster runs as the ``postgres`` user, on loopback, removed after).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.pg_cluster import PG_BIN, throwaway_postgres  # noqa: E402 - after the path

HZ = os.sysconf("SC_CLK_TCK")
RATE = 10_000.0  # samples/s of every rig's stream
FRAME = 100  # samples a frame
STREAM = "rig.trace"

#: One rig: records RATE x 3 channels in real time (frames due by the wall clock appended at once, so a
#: late loop catches up and loses nothing) for SECONDS, then ends the session complete; prints its id
#: first and at the end {"made": frames made, "late_max": s the loop ran behind the clock at worst}.
RIG = """
import json, sys, time
import numpy as np
from daq.bus.frames import Frame
from daq.store.read_write import SessionStore
store_path, seconds, seed = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
rate, frame = float(sys.argv[4]), int(sys.argv[5])
store = SessionStore(store_path)
sid = store.create_session("rig", {"rig": {"kind": "rig", "name": f"rig-{seed}"}}, {})
print(sid, flush=True)
rng = np.random.default_rng(seed)
per_s = rate / frame
t0 = time.time()
k, late = 0, 0.0
while k < seconds * per_s:
    due = min(int((time.time() - t0) * per_s) + 1, int(seconds * per_s))
    late = max(late, (due - 1 - k) / per_s)
    while k < due:
        store.append(sid, Frame("rig.trace", k, t0 + k / per_s, 1 / rate, ["x", "y", "z"], ["m", "m", "m"],
                                rng.normal(size=(frame, 3))))
        k += 1
    time.sleep(max(0.0, t0 + k / per_s - time.time()))
store.flush()
store.finish(sid, "complete")
store.close()
print(json.dumps({"made": k, "late_max": late}), flush=True)
"""



@contextmanager
def postgres():
    """A throwaway PostgreSQL 15 cluster on loopback (tests/pg_cluster.py's, run as the postgres user)."""
    if not (PG_BIN / "initdb").exists() or shutil.which("runuser") is None:
        raise SystemExit(f"no PostgreSQL server in {PG_BIN} (apt-get install postgresql) or no runuser")
    with throwaway_postgres() as uri:
        yield uri


def start_lab(folder: Path, catalog: str | None) -> tuple[subprocess.Popen, str, str]:
    cmd = [sys.executable, "-m", "daq.cli.main", "lab", "serve", "--data", str(folder / "lab"), "--port", "0"]
    if catalog:
        cmd += ["--catalog", catalog]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=open(folder / "lab.log", "wb"),  # noqa: SIM115
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout is not None  # a pipe
    lines = [proc.stdout.readline().decode().strip() for _ in range(2)]
    if not lines[1].startswith("http"):
        raise SystemExit(f"lab serve printed {lines}; see {folder / 'lab.log'}")
    return proc, lines[1], (folder / "lab" / "lab.key").read_text().strip()


def cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a live process (None once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / HZ


def store_rows(db: sqlite3.Connection, sid: str) -> int:
    row = db.execute("SELECT n_samples FROM streams WHERE session_id=? AND stream=?",
                     (sid, STREAM)).fetchone()
    return int(row[0]) if row else 0


CATALOG_ROWS = """SELECT sess.key, {shape} FROM nodes sess
JOIN nodes st ON st.parent = sess.id AND st.key = 'rig.trace'
JOIN nodes d ON d.parent = st.id AND d.key = 'data'
JOIN data_sources ds ON ds.node_id = d.id JOIN structures s ON s.id = ds.structure_id"""


class CatalogRows:
    """Rows of every session's ``data`` as the lab's catalogue holds them now (the shape readers are told),
    in one query of its database: sampling the lag costs the Tiled server nothing."""

    def __init__(self, catalog: str | None, data: Path):
        self.catalog, self.data = catalog, data

    def __call__(self) -> dict[str, int]:
        if self.catalog is None:
            with sqlite3.connect(f"file:{self.data / 'catalog.db'}?mode=ro", uri=True, timeout=30) as db:
                rows = db.execute(CATALOG_ROWS.format(shape="json_extract(s.structure, '$.shape[0]')"))
                return {sid: int(n) for sid, n in rows.fetchall()}
        import asyncio

        import asyncpg  # type: ignore[import-untyped]  # Tiled's own PostgreSQL driver

        async def fetch():
            conn = await asyncpg.connect(self.catalog)
            try:
                return await conn.fetch(CATALOG_ROWS.format(shape="(s.structure->'shape'->>0)::bigint"))
            finally:
                await conn.close()

        return {r[0]: int(r[1]) for r in asyncio.run(fetch())}


def lab_rows(http, sid: str) -> int:
    """Rows of the stream's data array in the lab (0 while it has none); one request."""
    resp = http.get(f"/api/v1/metadata/{sid}/{STREAM}/data")
    if resp.status_code == 404:
        return 0
    resp.raise_for_status()
    return int(resp.json()["data"]["attributes"]["structure"]["shape"][0])


class Rig:
    """One rig process and its forwarder."""

    def __init__(self, i: int, folder: Path, seconds: float, url: str, key: str):
        self.store = folder / f"rig{i}" / "hil.sqlite"
        self.store.parent.mkdir()
        self.proc = subprocess.Popen([sys.executable, "-c", RIG, str(self.store), str(seconds), str(i),
                                      str(RATE), str(FRAME)], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                                     env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert self.proc.stdout is not None  # a pipe
        self.sid = self.proc.stdout.readline().strip()
        self.log = open(self.store.parent / "lab-live.log", "w")  # noqa: SIM115 - closed at its push
        self.fwd = subprocess.Popen([sys.executable, "-m", "daq.lab.live", str(self.store), self.sid, url],
                                    cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT,
                                    env={**os.environ, "PYTHONPATH": str(ROOT), "HIL_LAB_KEY": key})
        self.db = sqlite3.connect(f"file:{self.store}?mode=ro", uri=True, timeout=30)
        self.lags: list[tuple[float, float]] = []  # (s since start, lag s)
        self.fwd_cpu = 0.0
        self.result: dict = {}
        self.rows_at_stop: tuple[int, int] | None = None  # (store, lab) when the recording ended
        self.ended_at: float | None = None
        self.pushed_after: float | None = None


def pctl(values, q) -> float:
    return float(np.percentile(values, q)) if len(values) else float("nan")


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of lag over time, s/s (NaN with fewer than 3 points)."""
    if len(points) < 3:
        return float("nan")
    x, y = np.array(points).T
    return float(np.polyfit(x, y, 1)[0])


def bench(n: int, seconds: float, url: str, key: str, lab_pid: int, folder: Path, every: float,
          catalog: str | None) -> dict:
    import httpx

    http = httpx.Client(base_url=url, headers={"Authorization": f"Apikey {key}"}, timeout=60)
    in_lab = CatalogRows(catalog, folder / "lab")
    lab_cpu0 = cpu_s(lab_pid) or 0.0
    t0 = time.monotonic()
    rigs = [Rig(i, folder, seconds, url, key) for i in range(n)]
    start = time.monotonic()
    while any(r.proc.poll() is None for r in rigs):
        now = time.monotonic() - start
        held = in_lab()
        for r in rigs:
            if r.proc.poll() is None:
                r.lags.append((now, (store_rows(r.db, r.sid) - held.get(r.sid, 0)) / RATE))
            elif r.rows_at_stop is None:
                r.rows_at_stop = (store_rows(r.db, r.sid), held.get(r.sid, 0))
                r.ended_at = time.monotonic()
            r.fwd_cpu = cpu_s(r.fwd.pid) or r.fwd_cpu
        time.sleep(max(0.0, every - (time.monotonic() - start - now)))
    record_s = time.monotonic() - start
    held = in_lab()
    for r in rigs:
        if r.rows_at_stop is None:
            r.rows_at_stop, r.ended_at = (store_rows(r.db, r.sid), held.get(r.sid, 0)), time.monotonic()
        r.result = json.loads(r.proc.stdout.readline())  # type: ignore[union-attr]  # a pipe
    lab_cpu_recording = (cpu_s(lab_pid) or 0.0) - lab_cpu0
    caught: dict[int, float] = {}  # rig -> s from its end until the lab held every row (before its push)
    deadline = time.monotonic() + 1800
    while len(caught) < n and time.monotonic() < deadline:
        held = in_lab()
        for i, r in enumerate(rigs):
            if i not in caught and held.get(r.sid, 0) >= store_rows(r.db, r.sid):
                caught[i] = time.monotonic() - (r.ended_at or time.monotonic())
            r.fwd_cpu = cpu_s(r.fwd.pid) or r.fwd_cpu
        time.sleep(0.2)
    for r in rigs:
        while r.fwd.poll() is None and time.monotonic() < deadline:
            r.fwd_cpu = cpu_s(r.fwd.pid) or r.fwd_cpu
            time.sleep(0.2)
        r.pushed_after = time.monotonic() - (r.ended_at or t0)
        r.log.close()
    rows = []
    for i, r in enumerate(rigs):
        lags = [lag for _, lag in r.lags]
        half = [(t, lag) for t, lag in r.lags if t >= record_s / 2]
        stored, lab_end = store_rows(r.db, r.sid), lab_rows(http, r.sid)
        with sqlite3.connect(f"file:{r.store}?mode=ro", uri=True) as db:
            frames = db.execute("SELECT n_messages FROM streams WHERE session_id=? AND stream=?",
                                (r.sid, STREAM)).fetchone()[0]
        log = (r.store.parent / "lab-live.log").read_text()
        rows.append({"rig": i, "lag_median_s": pctl(lags, 50), "lag_max_s": max(lags, default=float("nan")),
                     "lag_max_2nd_half_s": max((lag for _, lag in half), default=float("nan")),
                     "lag_slope": slope(half), "rows_at_stop": r.rows_at_stop,
                     "caught_up_after_s": caught.get(i),
                     "rows_store": stored, "rows_lab": lab_end, "frames_lost": r.result["made"] - frames,
                     "late_max_s": r.result["late_max"], "fwd_cpu_s": r.fwd_cpu,
                     "verified": "pushed and verified" in log, "push_done_after_s": r.pushed_after,
                     "push_line": log.strip().splitlines()[-1][-160:] if log.strip() else ""})
    http.close()
    return {"rigs": n, "record_s": record_s, "lab_cpu_recording_s": lab_cpu_recording, "per_rig": rows}


def report(res: dict, seconds: float) -> None:
    n, rows = res["rigs"], res["per_rig"]
    for row in rows:
        print(json.dumps(row), flush=True)
    lag_med = np.median([r["lag_median_s"] for r in rows])
    lag_max = max(r["lag_max_s"] for r in rows)
    lag_max_late = max(r["lag_max_2nd_half_s"] for r in rows)
    slopes = [r["lag_slope"] for r in rows]
    at_stop = sum(lab for _, lab in (r["rows_at_stop"] for r in rows))
    intake = at_stop / res["record_s"]
    intake_late = sum(RATE * (1 - sl) for sl in slopes)  # rows/s the lab took in the second half
    bounded = float(np.mean(slopes)) < 0.02  # the lab as a whole: the rigs' mean lag does not grow
    late = max(r["late_max_s"] for r in rows)
    caught = max((r["caught_up_after_s"] or float("nan")) for r in rows)
    same = all(r["rows_store"] == r["rows_lab"] for r in rows)
    print(f"{n} rigs x {RATE / 1e3:.0f} kHz x 3 ch for {seconds:.0f} s ({n * RATE / 1e3:.0f} k rows/s "
          f"offered): lag median {lag_med:.2f} s (median over rigs), max {lag_max:.2f} s (second half: "
          f"{lag_max_late:.2f} s); lag slope over the second half mean "
          f"{np.mean(slopes):+.3f} s/s (rigs {min(slopes):+.3f} to {max(slopes):+.3f}) -> "
          f"{'bounded' if bounded else 'GROWING'}; lab intake "
          f"~{intake / 1e3:.1f} k rows/s over the recording, ~{intake_late / 1e3:.1f} k rows/s in its "
          f"second half; "
          f"rows equal store/lab at the end: {same} "
          f"({sum(r['rows_lab'] for r in rows)} rows); caught up after the end: max {caught:.1f} s; "
          f"frames lost {sum(r['frames_lost'] for r in rows)}; rig loop late at most {late:.2f} s; "
          f"forwarder CPU median {np.median([r['fwd_cpu_s'] for r in rows]):.1f} s each; lab server CPU "
          f"while recording {res['lab_cpu_recording_s']:.1f} s; verified {sum(r['verified'] for r in rows)}"
          f"/{n}, last push done {max(r['push_done_after_s'] for r in rows):.0f} s after its rig ended",
          flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rigs", nargs="+", type=int, default=[4, 16], help="rig processes (one run each)")
    ap.add_argument("--seconds", type=float, default=60.0, help="s each rig records")
    ap.add_argument("--catalog", choices=("postgres", "sqlite"), default="postgres")
    ap.add_argument("--every", type=float, default=1.0, help="s between lag samples")
    args = ap.parse_args()
    if any(n < 1 for n in args.rigs) or args.seconds <= 0 or args.every <= 0:
        ap.error("--rigs, --seconds and --every must be positive")
    for n in args.rigs:  # a lab of its own per run: no run inherits another's catalogue
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            os.chmod(folder, 0o755)  # the postgres user reaches its folder in it
            with postgres() if args.catalog == "postgres" else _none() as catalog:
                proc, url, key = start_lab(folder, catalog)
                try:
                    print(f"load before {n} rigs: {os.getloadavg()}", flush=True)
                    res = bench(n, args.seconds, url, key, proc.pid, folder, args.every, catalog)
                    print(f"load after: {os.getloadavg()}", flush=True)
                    report(res, args.seconds)
                finally:
                    proc.terminate()
                    proc.wait(timeout=120)


@contextmanager
def _none():
    yield None


if __name__ == "__main__":
    main()
