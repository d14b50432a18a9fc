"""The lab at scale: N rig processes pushing generated press and crane sessions at once into one Tiled
server with a PostgreSQL catalogue (`hil lab push`), against N processes of the plain tiled client writing
the same arrays (`write_array` of each stream's time axis and data) into the same server in the same run;
search latency over a catalogue of generated session metadata; the peak memory of pushing one session far
larger than the 300 MB budget.

`hil lab push` does more than the plain client: it checks the local session whole first (decodes every
frame, SHA-256 of t and data), writes the frame and event tables and the time index, has the server
confirm every block by its own hash of what it stored (Tiled's ETag: a 304 with no body), reads the two
tables back, and compares the server's row counts and the stored digests before it marks the session.
MB/s counts the session's sample bytes (t + data) for both.

    .venv/bin/python benchmarks/bench_lab.py [--pushers 4 16] [--sessions 2] [--session-mb 8]
        [--catalogue 10000] [--big-mb 1024 ...] [--repeat 3]

Needs PostgreSQL's server binaries (/usr/lib/postgresql/15/bin; run as root, the cluster runs as the
postgres user). Wall times on a loaded machine are inflated: the CPU time of the child processes is
printed beside them.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from daq.bus.frames import Frame
from daq.lab.reader import LabReader
from daq.lab.search import Filters
from daq.store.read_write import SessionStore

ROOT = Path(__file__).resolve().parents[1]
PG_BIN = Path("/usr/lib/postgresql/15/bin")
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def as_pg(*cmd: str) -> None:
    subprocess.run(["runuser", "-u", "postgres", "--", *cmd], check=True, capture_output=True, timeout=300)


def start_postgres(folder: Path, port: int) -> str:
    shutil.chown(folder, "postgres")
    as_pg(str(PG_BIN / "initdb"), "-D", str(folder / "db"), "-A", "trust", "-U", "postgres")
    as_pg(str(PG_BIN / "pg_ctl"), "-D", str(folder / "db"), "-l", str(folder / "log"), "-w", "-o",
          f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c max_connections=300", "start")
    as_pg(str(PG_BIN / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "lab")
    return f"postgresql://postgres@127.0.0.1:{port}/lab"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_lab(data: Path, catalog: str) -> tuple[subprocess.Popen, str, str]:
    cmd = [sys.executable, "-m", "daq.cli.main", "lab", "serve", "--data", str(data), "--port", "0",
           "--catalog", catalog]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=ENV, cwd=ROOT)
    lines = [proc.stdout.readline().decode().strip() for _ in range(2)]
    return proc, lines[1], (data / "lab.key").read_text().strip()


def make_store(path: Path, n: int, mb: float, seed: int) -> int:
    """``n`` sessions alternating press (3 channels at 10 kHz) and crane (3 channels at 5 kHz); returns the
    sample bytes (t + data) written."""
    rng = np.random.default_rng(seed)
    total = 0
    with SessionStore(path) as store:
        for k in range(n):
            kind, rate = (("press", 1e4), ("crane", 5e3))[k % 2]
            rows = int(mb * 1e6 / 32)
            sid = store.create_session(kind, {"rig": {"kind": kind, "name": f"{kind}-{seed}"}})
            block = 2000
            for j in range(rows // block):
                store.append(sid, Frame(f"{kind}.trace", j, j * block / rate, 1 / rate, ["a", "b", "c"],
                                        ["N", "m", "rad/s"], rng.standard_normal((block, 3))))
            store.finish(sid, "complete")
            total += rows // block * block * 32
    return total


PLAIN = textwrap.dedent("""
    import sys
    from tiled.client import from_uri
    from daq.store.reader import SessionReader
    url, key, store, tag = sys.argv[1:5]
    root = from_uri(url, api_key=key)
    with SessionReader(store) as s:
        for info in s.list_sessions():
            node = root.create_container(f"plain-{tag}-{info.id}")
            for name in info.streams:
                d = s.read_stream(info.id, name)
                sub = node.create_container(name)
                sub.write_array(d.t, key="t")
                sub.write_array(d.data, key="data")
""")


def cpu_of(pid: int | None) -> float:
    """CPU seconds (user + system) the process ``pid`` has used so far; 0 without one."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


SERVER: dict[str, int | None] = {"pid": None}


def run_all(cmds: list[list[str]]) -> tuple[float, float, int, float]:
    """Run the commands at once; a push that says "retry later" (the lab too busy to answer its probe)
    is started again, as the background push would; (wall s, CPU s of the children, retries, CPU s of
    the lab server meanwhile)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    server_before = cpu_of(SERVER["pid"])
    t0 = time.perf_counter()
    todo, retries = list(cmds), 0
    while todo:
        procs = [(c, subprocess.Popen(c, env=ENV, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
                 for c in todo]
        todo = []
        for c, p in procs:
            out, _ = p.communicate()
            if p.returncode and b"retry later" in out and retries < 3 * len(cmds):
                todo.append(c)
                retries += 1
            elif p.returncode:
                raise SystemExit(f"{' '.join(c[:6])}... failed: {out.decode()[-500:]}")
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), retries,
            cpu_of(SERVER["pid"]) - server_before)


def bench_pushers(work: Path, url: str, key: str, n: int, sessions: int, mb: float, repeat: int) -> None:
    """``repeat`` pairs of (plain, push) with fresh sessions each (a second push of the same ones would add
    nothing); the order alternates pair by pair, so neither side always meets the larger catalogue or the
    warmer server; the ratio is the median of the pairs'."""
    plain_script = work / "plain.py"
    plain_script.write_text(PLAIN)
    ratios = []
    for r in range(repeat):
        stores = [work / f"rig-{n}-{r}-{k}.sqlite" for k in range(n)]
        nbytes = sum(make_store(s, sessions, mb, seed=1000 * r + 100 * n + k) for k, s in enumerate(stores))
        push = [[sys.executable, "-m", "daq.cli.main", "--store", str(s), "lab", "push", "--all", "--to", url,
                 "--key-file", str(work / "key")] for s in stores]
        plain = [[sys.executable, str(plain_script), url, key, str(s), f"{n}-{r}-{k}"]
                 for k, s in enumerate(stores)]
        sides = {"plain tiled client": plain, "hil lab push": push}
        order = list(sides) if r % 2 == 0 else list(sides)[::-1]
        measured = {label: run_all(sides[label]) for label in order}
        total = n * sessions
        for label in order:
            wall, cpu, retries, server_cpu = measured[label]
            print(f"  {n:2d} processes, pair {r + 1}, {label:18s}: {nbytes / 1e6 / wall:6.2f} MB/s, "
                  f"{total / wall * 60:6.2f} sessions/min  (wall {wall:.1f} s, CPU {cpu:.1f} s, "
                  f"server CPU {server_cpu:.1f} s, "
                  f"retries {retries}; load average {os.getloadavg()[0]:.1f})", flush=True)
        ratios.append(measured["plain tiled client"][0] / measured["hil lab push"][0])
        print(f"  {n:2d} processes, pair {r + 1} ({' first, '.join(order)} second): push / plain = "
              f"{ratios[-1]:.2f}x in wall time ({total} sessions of {mb:g} MB)", flush=True)
    print(f"  {n:2d} processes: push / plain = {statistics.median(ratios):.2f}x (median of {repeat} pairs: "
          f"{', '.join(f'{x:.2f}' for x in ratios)})", flush=True)


def bench_search(url: str, key: str, n: int) -> None:
    from tiled.client import from_uri

    root = from_uri(url, api_key=key)
    rng = np.random.default_rng(3)
    dead, k5 = rng.uniform(0, 2e-3, n), rng.normal(2e8, 1e7, n)
    rigs, kinds, people = [f"rig-{k}" for k in range(20)], ["press", "crane"], ["ana", "ben", "cleo", "dev"]

    def one(k: int) -> None:
        started = 1.7e9 + k * 3600.0
        root.create_container(f"gen-{k:05d}", metadata={
            "id": f"gen-{k:05d}", "kind": kinds[k % 2], "rig": {"kind": kinds[k % 2], "name": rigs[k % 20]},
            "status": "complete" if k % 7 else "aborted", "started": started, "ended": started + 600,
            "by": people[k % 4], "replication": {"state": "verified"}, "reason": None,
            "config": {}, "devices": {}, "software_version": "bench", "streams": {},
            "analysis": {"estimates": {"dead_time": float(dead[k]), "k5": float(k5[k])},
                         "verdict": "M3 keep" if k % 3 else "M2 keep"}})

    t0 = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(n)))
    print(f"  catalogue of {n} generated sessions made in {time.perf_counter() - t0:.0f} s", flush=True)
    lab = LabReader(url, key)
    queries = {
        "--rig rig-3": Filters(rig="rig-3"),
        "--kind crane --status aborted": Filters(kind="crane", status="aborted"),
        "--since/--until (one month)": Filters(since=1.7e9 + 1000 * 3600, until=1.7e9 + 1720 * 3600),
        "--param dead_time=1e-3:2e-3 --kind crane": Filters(kind="crane", params=[("dead_time", 1e-3, 2e-3)]),
        "--by ana --verdict 'M2 keep'": Filters(by="ana", verdict="M2 keep"),
    }
    for label, f in queries.items():
        times, hits = [], 0
        for _ in range(5):
            t0 = time.perf_counter()
            hits = len(lab.search(f))
            times.append(time.perf_counter() - t0)
        print(f"  search {label:42s}: {hits:5d} hits, median {statistics.median(times) * 1e3:7.0f} ms "
              f"(incl. fetching the hits' metadata)")


def bench_memory(work: Path, url: str, mb: float) -> None:
    store = work / f"big-{mb:g}.sqlite"
    make_store(store, 1, mb, seed=9)
    cmd = [sys.executable, "-m", "daq.cli.main", "--store", str(store), "lab", "push", "--all", "--to", url,
           "--key-file", str(work / "key")]
    proc = subprocess.Popen(cmd, env=ENV, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    peak = 0
    while proc.poll() is None:
        try:
            status = Path(f"/proc/{proc.pid}/status").read_text()
            peak = max(peak, int(next(ln for ln in status.splitlines() if ln.startswith("VmHWM")).split()[1]))
        except (OSError, StopIteration):
            pass
        time.sleep(0.2)
    out = proc.stdout.read().decode().strip()
    print(f"  pushing one {mb:g} MB session: peak RSS {peak / 1024:.0f} MB (budget 300 MB); {out}",
          flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pushers", type=int, nargs="+", default=[4, 16])
    ap.add_argument("--sessions", type=int, default=2, help="sessions per pusher")
    ap.add_argument("--session-mb", type=float, default=8.0)
    ap.add_argument("--catalogue", type=int, default=10_000)
    ap.add_argument("--big-mb", type=float, nargs="*", default=[1024.0])
    ap.add_argument("--repeat", type=int, default=1, help="pairs of (plain, push) per process count")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-lab-"))
    pg_dir = Path(tempfile.mkdtemp(prefix="bench-lab-pg-"))
    server = None
    try:
        catalog = start_postgres(pg_dir, free_port())
        server, url, key = start_lab(work / "lab", catalog)
        SERVER["pid"] = server.pid
        (work / "key").write_text(key + "\n")
        os.chmod(work / "key", 0o600)
        print(f"lab {url}, PostgreSQL catalogue, arrays in {work / 'lab'}")
        for n in args.pushers:
            bench_pushers(work, url, key, n, args.sessions, args.session_mb, args.repeat)
        for mb in args.big_mb:
            bench_memory(work, url, mb)
        if args.catalogue:
            bench_search(url, key, args.catalogue)
    finally:
        if server is not None:
            server.send_signal(signal.SIGINT)
            server.wait(timeout=180)
        if (pg_dir / "db" / "postmaster.pid").exists():
            as_pg(str(PG_BIN / "pg_ctl"), "-D", str(pg_dir / "db"), "-m", "fast", "-w", "stop")
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(pg_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
