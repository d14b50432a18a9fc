"""Where the test suite's CPU goes, by kind of process (issue 43).

pytest's ``--durations`` gives each test's wall time. On a 2-core machine the suite is bound by CPU, and much
of that CPU is spent outside the pytest workers: in the lab servers the tests start, in `hil` processes, in
process pools, in Chromium and PostgreSQL. This script runs a command (by default the README's `pytest -n 4`)
and reads ``/proc`` once a second while it runs: every process seen, its CPU time (utime + stime) at the
first and at the last look, and a kind made from its command line. It prints the machine's CPU over the run
(``/proc/stat``: every process, ours or not), the wall time, and the CPU each kind used while it was seen.

A process that starts and ends between two looks is missed (a short `python -c`); a process that was
running before the command started is counted from the first look only. So the kinds' sum falls a little
short of the machine's figure; the difference is what the table does not explain.

    .venv/bin/python benchmarks/suite_cpu.py [--period 1.0] [--json out.json] [--per-test [--top N]]
        [-- COMMAND ...]

``--per-test`` adds each test's CPU and its lab servers' (benchmarks/per_test_cpu.py); with ``--json`` every
test's and every server's record goes into the file too (``tests``, ``servers``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.per_test_cpu import ENV, read_records, report  # noqa: E402 - after the project's root is on the path

ROOT = Path(__file__).resolve().parents[1]
TICK = os.sysconf("SC_CLK_TCK")

#: (kind, a piece of the command line that marks it), first match wins
KINDS = (
    ("lab servers (tests/zygote.py and its forks)", "tests.zygote"),
    ("pytest-xdist worker", "-u -c import sys;exec(eval(sys.stdin.readline()))"),
    ("lab forwarder (daq.lab.live)", "daq.lab.live"),
    ("process-pool worker (spawn)", "multiprocessing.spawn"),
    ("process-pool fork server and its workers", "multiprocessing.forkserver"),
    ("hil command (python -m daq.cli.main)", "daq.cli.main"),
    ("hil command (.venv/bin/hil)", "bin/hil"),
    ("Chromium and chromedriver", "chrom"),
    ("PostgreSQL", "postgres"),
    ("pytest (controller)", "-m pytest"),
    ("scripts the tests write (under pytest's temporary folders)", "pytest-of-"),
)


def kind_of(cmdline: list[str]) -> str:
    text = " ".join(cmdline)
    for kind, mark in KINDS:
        if mark in text:
            return kind
    if not cmdline:
        return "kernel threads and unnamed"
    return "other: " + Path(cmdline[0]).name


def machine_cpu() -> float:
    """CPU seconds the whole machine has spent in user, nice and system time since boot."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    return sum(int(x) for x in fields[1:4]) / TICK


def look(seen: dict[tuple[int, str], list]) -> None:
    """One pass over /proc: note each process's CPU time now (and its kind the first time it is seen)."""
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
            fields = stat.rsplit(")", 1)[1].split()
            cpu = (int(fields[11]) + int(fields[12])) / TICK
            key = (int(name), fields[19])  # pid and start time: a reused pid is another process
            if key in seen:
                seen[key][2] = cpu
                continue
            raw = Path(f"/proc/{name}/cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue  # it ended while we looked
        cmdline = [part.decode(errors="replace") for part in raw.split(b"\0") if part]
        seen[key] = [kind_of(cmdline), cpu, cpu]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--period", type=float, default=1.0, help="seconds between two looks at /proc")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--top", type=int, default=25, help="tests and modules listed with --per-test")
    ap.add_argument("--per-test", action="store_true",
                    help="each test's CPU and its lab servers' too (benchmarks/per_test_cpu.py)")
    ap.add_argument("command", nargs="*", help="the command to run (after --); default: pytest -n 4")
    args = ap.parse_args()
    command = args.command or [sys.executable, "-m", "pytest", "-n", "4", "-q", "-p", "no:cacheprovider"]
    per_test = Path(tempfile.mkdtemp(prefix="hil-per-test-")) if args.per_test else None
    if per_test is not None:
        os.environ[ENV] = str(per_test)
        command = [*command, "-p", "benchmarks.per_test_cpu"]
    seen: dict[tuple[int, str], list] = {}
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            look(seen)
            done.wait(args.period)

    print("load average", " ".join(f"{x:.2f}" for x in os.getloadavg()), flush=True)
    look(seen)  # what ran before the command: counted from here on
    cpu0, t0 = machine_cpu(), time.perf_counter()
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    rc = subprocess.call(command, cwd=ROOT)
    done.set()
    watcher.join()
    look(seen)
    wall, cpu = time.perf_counter() - t0, machine_cpu() - cpu0
    by_kind: dict[str, list[float]] = {}
    for kind, first, last in seen.values():
        row = by_kind.setdefault(kind, [0.0, 0])
        row[0] += last - first
        row[1] += 1
    rows = sorted(by_kind.items(), key=lambda kv: -kv[1][0])
    print(f"\ncommand exit code {rc}; wall {wall:.1f} s; the machine's CPU {cpu:.1f} s "
          f"({cpu / wall:.2f} of {os.cpu_count()} cores)")
    print(f"{'CPU s':>8} {'share':>6} {'processes':>9}  kind")
    for kind, (seconds, count) in rows:
        if seconds >= 0.5:
            print(f"{seconds:8.1f} {seconds / cpu:6.1%} {count:9d}  {kind}")
    explained = sum(seconds for seconds, _ in by_kind.values())
    print(f"{explained:8.1f} {explained / cpu:6.1%} {'':>9}  all processes seen")
    records: dict[str, list[dict]] = {}
    if per_test is not None:
        records = read_records(per_test)
        print("\n" + report(records, args.top))
        shutil.rmtree(per_test, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps({"command": command, "exit_code": rc, "wall_s": wall, "cpu_s": cpu,
                                         "by_kind": {k: {"cpu_s": s, "processes": n} for k, (s, n) in rows},
                                         **records}, indent=1))
    sys.exit(rc)


if __name__ == "__main__":
    main()
