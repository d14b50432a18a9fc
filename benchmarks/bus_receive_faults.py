"""Page faults on the receive side of the bus: minor faults, CPU and rate per message of plain pyzmq's and
our receiver, each in a fresh process, behind the same plain pyzmq sender as ``bench_bus.py``.

At 80 kB libzmq's I/O thread allocates every message's buffer; when glibc has handed the freed buffers back
to the OS (heap trim), the next message faults its pages in again. How often that happens depends on how
short the receiver keeps its queue, so it moves from run to run and decides much of the 80 kB ratio of
``bench_bus.py`` (issue 44, benchmarks/README.md). Run it once as it is and once with
``GLIBC_TUNABLES=glibc.malloc.trim_threshold=67108864:glibc.malloc.mmap_threshold=33554432`` in the
environment (senders and receivers inherit it) to see the churn and its cost.

    .venv/bin/python benchmarks/bus_receive_faults.py [--kb 80] [--n 15000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_bus  # noqa: E402 - the benchmark's own sender and plain receiver


def thread_faults() -> dict[str, int]:
    """Minor faults so far per thread name (Linux /proc)."""
    out: dict[str, int] = {}
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/stat") as f:
            stat = f.read()
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        out[name] = out.get(name, 0) + int(stat[stat.rindex(")") + 2 :].split()[7])
    return out


def ours_receive(endpoint: str, n: int) -> tuple[float, float]:
    """bench_bus.ours_receive without its lossless check: here both receivers sit behind the plain sender,
    whose messages carry no bus sequence to check (that check fails against it)."""
    from daq.bus.pubsub import BusSubscriber

    async def go() -> tuple[float, float]:
        sub = BusSubscriber(endpoint)
        await sub.recv(timeout=30)
        t0, cpu = time.perf_counter(), time.process_time()
        for _ in range(n - 1):
            await sub.recv(timeout=30)
        dt, cpu = time.perf_counter() - t0, time.process_time() - cpu
        sub.close()
        return dt, cpu

    return asyncio.run(go())


def receiver(kind: str, endpoint: str, n: int, out: mp.Queue) -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    dt, cpu = ours_receive(endpoint, n) if kind == "ours" else bench_bus.plain_receive(endpoint, n)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    out.put(((n - 1) / dt, cpu / (n - 1) * 1e6, faults / (n - 1), thread_faults()))


def run_once(kind: str, payload: int, n: int) -> tuple:
    ctx = mp.get_context("spawn")
    q, cpu_q, out = ctx.Queue(), ctx.Queue(), ctx.Queue()
    send = ctx.Process(target=bench_bus.plain_sender, args=(q, payload, n, cpu_q))
    send.start()
    recv = ctx.Process(target=receiver, args=(kind, q.get(timeout=30), n, out))
    recv.start()
    result = out.get(timeout=120)
    cpu_q.get(timeout=30)
    send.join(30)
    recv.join(30)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kb", type=int, default=80, help="payload size, kB")
    ap.add_argument("--n", type=int, default=15000, help="messages per run")
    ap.add_argument("--repeat", type=int, default=3, help="runs per receiver, alternating (median reported)")
    args = ap.parse_args()
    print("load average", " ".join(f"{x:.2f}" for x in os.getloadavg()))
    print("GLIBC_TUNABLES", os.environ.get("GLIBC_TUNABLES", "(not set)"))
    runs: dict[str, list[tuple]] = {"plain": [], "ours": []}
    for _ in range(args.repeat):
        for kind in runs:
            runs[kind].append(run_once(kind, args.kb * 1024, args.n))
    print(f"{args.kb} kB, {args.n} messages; medians of {args.repeat}")
    print(f"{'receiver':>8} {'msg/s':>9} {'recv CPU us/msg':>16} {'faults/msg':>11}  faults/msg of each run; "
          "thread with the most faults (last run)")
    for kind, rs in runs.items():
        rate, cpu, faults = (statistics.median(r[i] for r in rs) for i in range(3))
        worst = max(rs[-1][3].items(), key=lambda kv: kv[1])[0]
        print(f"{kind:>8} {rate:>9.0f} {cpu:>16.1f} {faults:>11.2f}  "
              f"{' '.join(f'{r[2]:.1f}' for r in rs)}; {worst}")
    print("load average", " ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
