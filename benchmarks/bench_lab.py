"""The lab at scale: N rig processes pushing generated press and crane sessions at once into one Tiled
server with a PostgreSQL catalogue (`hil lab push`), against N processes of the plain tiled client writing
the same arrays (`write_array` of each stream's time axis and data) into the same server in the same run;
search latency over a catalogue of generated session metadata (the whole listing, the newest 50 and the
count as `hil sessions` lists by default, the plain tiled client; the plan of the newest-50 query); the peak
memory of pushing one session far
larger than the 300 MB budget.

`hil lab push` does more than the plain client: it checks the local session whole first (decodes every
frame, SHA-256 of t and data), writes the frame and event tables and the time index, has the server
confirm every block by its own hash of what it stored (Tiled's ETag: a 304 with no body), reads the two
tables back, and compares the server's row counts and the stored digests before it marks the session.
MB/s counts the session's sample bytes (t + data) for both.

    .venv/bin/python benchmarks/bench_lab.py [--pushers 4 16] [--sessions 2] [--session-mb 8]
        [--catalogue 10000] [--big-mb 1024 ...] [--repeat 3]
    .venv/bin/python benchmarks/bench_lab.py --pushers --big-mb --catalogue 10000   # only the searches

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


def pg_cpu(pg_dir: Path) -> float:
    """CPU seconds the PostgreSQL cluster's backends have used so far (the children of its postmaster)."""
    postmaster = int((pg_dir / "db" / "postmaster.pid").read_text().split()[0])
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if int(fields[1]) == postmaster:
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


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


def template_metadata() -> dict:
    """A session container's metadata as a push writes it (layout 3: the press-sim config, three streams,
    the replication checks, who pushed it) with the summary of an analysis as `hil analyze` records it (a
    report of three fitted models, whose report goes to the session's `about` child, not searched)."""
    from daq.config.load import read_toml
    from daq.lab.about import split_analysis
    from daq.lab.analysis import analysis_metadata
    from daq.lab.layout import session_fields
    from daq.store.records import SessionInfo, StreamInfo

    rng = np.random.default_rng(5)
    streams = {n: StreamInfo(n, "frame", ["a", "b", "c"], ["N", "m", "Pa"], "float64", 1e-4, 3000, 600000,
                             1.7e9, 1.7e9 + 60, True) for n in ("press.force", "press.sensors", "press.plan")}
    info = SessionInfo("template", "press", "complete", None, 1.7e9, 1.7e9 + 600,
                       read_toml(ROOT / "configs" / "press-sim.toml"), "bench", {"drive": {"model": "sim"}},
                       streams)
    meta = session_fields(info, "ana", {"safe": True, "steps": 120})
    models = {m: {"p": rng.normal(size=2).tolist(), "std_errors": rng.uniform(size=2).tolist(),
                  "covariance": rng.normal(size=(2, 2)).tolist(), "tests": rng.normal(size=(20, 4)).tolist()}
              for m in ("M1", "M2", "M3")}
    report = {"parameters": ["k5", "k7"], "models": models, "verdicts": {"M1": "reject", "M2": "reject",
                                                                        "M3": "keep"}}
    meta["analysis"], _ = split_analysis(analysis_metadata(report, by="ana", where="lab"))
    sha = lambda: rng.bytes(32).hex()  # noqa: E731 - digests as a push records them
    checks = {"streams": {n: {"rows": 600000, "t_sha256": sha(), "data_sha256": sha(), "frames": 3000,
                              "frames_sha256": sha()} for n in streams},
              "events": {"rows": 40, "sha256": sha()}}
    meta["replication"] = {"state": "partial", "checks": checks, "pushed_at": 1.7e9 + 700,  # never found
                           "from_host": "rig-pc"}
    meta["pushed_by"] = {"name": "otto", "role": "operator", "key_id": "abcd1234",
                         "principal": "6f1c2a0e-8d3b-4c55-9a7e-2b1d0c9e8f70"}
    return meta


KINDS = ("press", "crane", "oscillator", "pendulum", "crane-adjoint", "machine-tool")
#: Every generated session from the template in one INSERT (Tiled's triggers fill its closure table):
#: kind, rig (20), status (1 in 7 aborted), an hour apart, who (4 people), dead_time in [0, 2 ms), k5 about
#: 2e8, verdict "M2 keep" for 1 in 3.
SEED_SQL = """
SELECT setseed(0.3);
INSERT INTO nodes (parent, key, structure_family, metadata, specs)
SELECT t.parent, 'gen-' || lpad(g::text, 5, '0'), t.structure_family,
       t.metadata || jsonb_build_object(
           'id', 'gen-' || lpad(g::text, 5, '0'),
           'kind', (ARRAY[{kinds}])[g % 6 + 1],
           'rig', jsonb_build_object('kind', (ARRAY[{kinds}])[g % 6 + 1], 'name', 'rig-' || (g % 20)),
           'status', CASE WHEN g % 7 = 0 THEN 'aborted' ELSE 'complete' END,
           'started', 1.7e9 + g * 3600.0, 'ended', 1.7e9 + g * 3600.0 + 600.0,
           'by', (ARRAY['ana', 'ben', 'cleo', 'dev'])[g % 4 + 1],
           'replication', jsonb_set(t.metadata -> 'replication', '{{state}}', '"verified"'),
           'analysis', (t.metadata -> 'analysis') || jsonb_build_object(
               'estimates', jsonb_build_object('dead_time', random() * 2e-3, 'k5', 2e8 + random() * 1e7),
               'verdict', CASE WHEN g % 3 = 0 THEN 'M2 keep' ELSE 'M3 keep' END)),
       t.specs
FROM nodes t, generate_series(0, {n} - 1) g
WHERE t.key = 'bench-template' AND t.parent = (SELECT id FROM nodes WHERE parent IS NULL LIMIT 1);
ANALYZE nodes;
"""


def seed_catalogue(root, port: int, n: int) -> float:
    """``n`` verified session containers (metadata only) in the catalogue; seconds it took."""
    t0 = time.perf_counter()
    root.create_container("bench-template", metadata=template_metadata(), specs=["hil-session"])
    sql = SEED_SQL.format(n=n, kinds=", ".join(f"'{k}'" for k in KINDS))
    as_pg(str(PG_BIN / "psql"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-d", "lab", "-q",
          "-v", "ON_ERROR_STOP=1", "-c", sql)
    return time.perf_counter() - t0


MONTH = (1.7e9 + 1000 * 3600, 1.7e9 + 1720 * 3600)
SEARCHES = {  # label: (the hil filters, the same query for the plain tiled client as (kind, key, value))
    "--rig rig-3": ({"rig": "rig-3"}, [("eq", "rig.name", "rig-3")]),
    "--kind crane --status aborted": ({"kind": "crane", "status": "aborted"},
                                      [("eq", "kind", "crane"), ("eq", "status", "aborted")]),
    "--since/--until (one month)": ({"since": MONTH[0], "until": MONTH[1]},
                                    [("ge", "started", MONTH[0]), ("lt", "started", MONTH[1])]),
    "--by ana --verdict 'M2 keep'": ({"by": "ana", "verdict": "M2 keep"},
                                     [("eq", "by", "ana"), ("eq", "analysis.verdict", "M2 keep")]),
    "--kind crane --param dead_time=1e-3:2e-3": (
        {"kind": "crane", "params": [("dead_time", 1e-3, 2e-3)]},
        [("eq", "kind", "crane"), ("ge", "analysis.estimates.dead_time", 1e-3),
         ("le", "analysis.estimates.dead_time", 2e-3)]),
    "--param k5=2.0e8:2.001e8": ({"params": [("k5", 2.0e8, 2.001e8)]},
                                 [("ge", "analysis.estimates.k5", 2.0e8),
                                  ("le", "analysis.estimates.k5", 2.001e8)]),
}


def plain_search(root, query: list[tuple[str, str, object]]) -> int:
    """The query with the plain tiled client: its own query types, every hit's metadata fetched."""
    from tiled.queries import Comparison, Eq

    node = root.search(Eq("replication.state", "verified"))
    for op, key, value in query:
        node = node.search(Eq(key, value) if op == "eq" else Comparison(op, key, value))
    return sum(1 for _ in node.items())


#: The SQL of the newest 50 verified sessions as Tiled 0.2.20 sends it (sort by -started, -id; one row more).
EXPLAIN_NEWEST = """
EXPLAIN (ANALYZE, COSTS OFF) SELECT nodes.id, nodes.key, nodes.metadata FROM nodes
WHERE nodes.parent = (SELECT id FROM nodes WHERE parent IS NULL LIMIT 1)
  AND (nodes.metadata #> '{replication,state}') >= '"verified"'::jsonb
  AND (nodes.metadata #> '{replication,state}') <= '"verified"'::jsonb
ORDER BY nodes.metadata -> 'started' DESC, nodes.key DESC, nodes.id LIMIT 51
"""


def as_pg_out(port: int, sql: str) -> str:
    """What psql prints for ``sql`` in the lab's database."""
    return subprocess.run(["runuser", "-u", "postgres", "--", str(PG_BIN / "psql"), "-h", "127.0.0.1", "-p",
                           str(port), "-U", "postgres", "-d", "lab", "-At", "-c", sql], check=True,
                          capture_output=True, text=True, timeout=120).stdout


def timed(run, pg_dir: Path) -> tuple[object, float, tuple[float, float, float]]:
    """``run()``'s result, its wall time and the CPU it cost (server, database, client), in s."""
    before = (cpu_of(SERVER["pid"]), pg_cpu(pg_dir), time.process_time())
    t0 = time.perf_counter()
    result = run()
    wall = time.perf_counter() - t0
    after = (cpu_of(SERVER["pid"]), pg_cpu(pg_dir), time.process_time())
    return result, wall, tuple(b - a for a, b in zip(before, after, strict=True))


def median_text(walls: list[float], cpus: list[tuple]) -> str:
    server, db, client = (statistics.median(c[i] for c in cpus) * 1e3 for i in range(3))
    return f"{statistics.median(walls) * 1e3:6.0f} ms ({server:3.0f} + {db:3.0f} + {client:3.0f})"


def bench_search(url: str, key: str, catalog: str, port: int, n: int, pg_dir: Path, repeat: int = 5) -> None:
    """Each search's wall time (median of ``repeat``) and the CPU it cost: the Tiled server's, the
    database's and the client's (on a loaded machine the wall time grows with the load; the CPU hardly):
    the whole listing (`--limit 0`, as `--json` lists), the default listing (the newest 50 and the count:
    `hil sessions`) and the plain tiled client fetching every hit."""
    from tiled.client import from_uri

    from daq.cli.lab_search import DEFAULT_LIMIT
    from daq.lab.pg_indexes import ensure_search_indexes

    root = from_uri(url, api_key=key)
    seconds = seed_catalogue(root, port, n)
    print(f"  catalogue of {n} generated sessions (metadata only) made in {seconds:.1f} s", flush=True)
    indexed = ensure_search_indexes(catalog)  # what `hil lab serve` does when it starts again
    print(f"  indexed (as at a restart of `hil lab serve`): {', '.join(indexed)}", flush=True)
    plan = as_pg_out(port, EXPLAIN_NEWEST)
    used = "the index hil_sort_started" if "hil_sort_started" in plan else "NO index (a sort of every row)"
    print(f"  the newest 50 of all sessions are read through {used}:", flush=True)
    print(textwrap.indent(plan.strip(), "    "), flush=True)
    lab = LabReader(url, key)
    print(f"  {'search':42s} {'hits':>5s}  {'all (--limit 0): wall (CPU ms)':>30s}  "
          f"{f'newest {DEFAULT_LIMIT} + count':>30s}  {'plain tiled client':>18s}  (median of {repeat}; "
          "CPU: server + db + client)")
    for label, (given, query) in {"(no filter)": ({}, []), **SEARCHES}.items():
        whole = bool(query)  # the whole listing of all sessions (and the plain client's) left out
        walls: dict[str, list[float]] = {"all": [], "newest": [], "plain": []}
        cpus: dict[str, list[tuple]] = {"all": [], "newest": []}
        hits: dict[str, int] = {}
        filters = Filters(**given)
        for _ in range(repeat):
            if whole:
                found, wall, cpu = timed(lambda f=filters: lab.search_metadata(f), pg_dir)
                hits["all"] = len(found)
                walls["all"].append(wall)
                cpus["all"].append(cpu)
            (found, total), wall, cpu = timed(lambda f=filters: lab.newest_metadata(f, DEFAULT_LIMIT), pg_dir)
            hits["newest"] = total
            walls["newest"].append(wall)
            cpus["newest"].append(cpu)
            if whole:
                t0 = time.perf_counter()
                hits["plain"] = plain_search(root, query)
                walls["plain"].append(time.perf_counter() - t0)
        assert len(set(hits.values())) == 1, (label, hits)
        every = median_text(walls["all"], cpus["all"]) if whole else "-"
        plain = f"{statistics.median(walls['plain']) * 1e3:.0f} ms" if whole else "-"
        newest = median_text(walls["newest"], cpus["newest"])
        print(f"  {label:42s} {hits['newest']:5d}  {every:>30s}  {newest:>30s}  {plain:>18s}", flush=True)


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
    ap.add_argument("--pushers", type=int, nargs="*", default=[4, 16])
    ap.add_argument("--sessions", type=int, default=2, help="sessions per pusher")
    ap.add_argument("--session-mb", type=float, default=8.0)
    ap.add_argument("--catalogue", type=int, default=10_000)
    ap.add_argument("--big-mb", type=float, nargs="*", default=[1024.0])
    ap.add_argument("--repeat", type=int, default=1, help="pairs of (plain, push) per process count")
    ap.add_argument("--search-repeat", type=int, default=5, help="runs of each search (median)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-lab-"))
    pg_dir = Path(tempfile.mkdtemp(prefix="bench-lab-pg-"))
    server = None
    try:
        port = free_port()
        catalog = start_postgres(pg_dir, port)
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
            bench_search(url, key, catalog, port, args.catalogue, pg_dir, args.search_repeat)
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
