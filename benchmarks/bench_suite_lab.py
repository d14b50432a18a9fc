"""What the suite's lab tests pay for a lab server and for one look at the lab (issue 43).

1. A `hil lab serve` start, until it prints its URL: as a fresh `python -m daq.cli.main lab serve` (what the
   tests did before) against forked from the worker's zygote (tests/zygote.py, what they do now; the
   zygote's own start, once per worker, is printed too). Wall time, and the CPU of the process that
   serves (for the fresh start: its whole CPU until the URL; for the fork: the child's).
2. One probe of the live tests, "how many rows of a stream does the lab hold": as it was (a new Tiled
   client each time, then containment checks down the path) against now (one client per lab, one lookup
   of the whole path). The server's CPU per probe (utime + stime from /proc) and the prober's.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_suite_lab.py [--starts 5] [--probes 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.bench_lab import cpu_of
from daq.lab import layout
from tests.test_lab import ROOT, LabServer
from tests.test_lab_live import forwarded_in_process
from tests.zygote import hil_child


def fresh_start(folder: Path) -> tuple[float, float]:
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "daq.cli.main", "lab", "serve", "--data", str(folder),
                             "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    while not proc.stdout.readline().startswith(b"http"):
        pass
    wall, cpu = time.perf_counter() - t0, cpu_of(proc.pid)
    proc.send_signal(2)
    proc.wait(timeout=60)
    return wall, cpu


def forked_start(folder: Path) -> tuple[float, float]:
    t0 = time.perf_counter()
    child = hil_child(["lab", "serve", "--data", str(folder), "--port", "0"],
                      env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT, stderr=folder.parent / "log")
    while not child.stdout.readline().startswith(b"http"):
        pass
    wall, cpu = time.perf_counter() - t0, cpu_of(child.pid)
    child.send_signal(2)
    child.wait(timeout=60)
    child.stdout.close()
    return wall, cpu


def old_probe(url: str, key: str, sid: str, stream: str) -> int:
    """The live tests' probe before: a new client, then `in` checks down the path."""
    from tiled.client import from_uri

    try:
        node = from_uri(url, api_key=key)[sid]
    except KeyError:
        return 0
    if stream not in node or layout.DATA not in node[stream]:
        return 0
    return node[stream][layout.DATA].shape[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--starts", type=int, default=5, help="server starts of each kind (alternating)")
    ap.add_argument("--probes", type=int, default=20, help="probes of each kind")
    args = ap.parse_args()
    print("load average", " ".join(f"{x:.2f}" for x in os.getloadavg()))
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        forked_start(Path(tmp) / "warm")  # the zygote's own start, once per worker
        print(f"zygote start + first forked server: {time.perf_counter() - t0:.2f} s wall")
        runs: dict[str, list[tuple[float, float]]] = {"fresh": [], "forked": []}
        for k in range(args.starts):
            runs["fresh"].append(fresh_start(Path(tmp) / f"fresh{k}"))
            runs["forked"].append(forked_start(Path(tmp) / f"forked{k}"))
        for kind, got in runs.items():
            print(f"lab serve start, {kind:>6}: wall median {statistics.median(w for w, _ in got):.2f} s "
                  f"(all {' '.join(f'{w:.2f}' for w, _ in got)}), server CPU median "
                  f"{statistics.median(c for _, c in got):.2f} s")
        server = LabServer(Path(tmp) / "lab")
        try:
            rec = forwarded_in_process(Path(tmp) / "s.sqlite", server)
            from tests.test_lab_live import lab_rows

            probes = {"before": lambda: old_probe(server.url, server.key, rec.sid, "press.force"),
                      "now": lambda: lab_rows(server.url, server.key, rec.sid, "press.force")}
            assert len({probe() for probe in probes.values()}) == 1  # the same answer
            for kind, probe in probes.items():
                s0, c0, w0 = cpu_of(server.proc.pid), time.process_time(), time.perf_counter()
                for _ in range(args.probes):
                    probe()
                n = args.probes
                served = (cpu_of(server.proc.pid) - s0) / n * 1e3
                ours, wall = (time.process_time() - c0) / n * 1e3, (time.perf_counter() - w0) / n * 1e3
                print(f"probe {kind:>6}: server CPU {served:.0f} ms, prober CPU {ours:.0f} ms, "
                      f"wall {wall:.0f} ms per probe")
        finally:
            server.stop()
    print("load average", " ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
