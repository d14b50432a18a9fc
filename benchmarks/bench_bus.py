"""Bus throughput: daq.bus.pubsub (encode + XPUB NODROP + decode) vs plain pyzmq sending the same bytes.

Both sides run in two processes over tcp loopback and are lossless (XPUB_NODROP, back-pressure).
"plain" sends pre-encoded [topic, header, payload] with the sync API and receives them as a script
written against plain pyzmq would to get the same result: ``recv_multipart(copy=False)``, the JSON
header parsed with the standard library, the payload viewed as a numpy array of the header's dtype and
shape (the same work as ours, without its checks); "raw" sends the same way and only counts the parts
(the floor: no decode at all). "ours" builds a Frame per message, publishes it with BusPublisher
(asyncio) and decodes every message with BusSubscriber into numpy arrays, with every check of a
recording. Timing is taken at the receiver, first to last message. ours/plain is the issue-23 ratio;
ours/raw is printed beside it.

Besides the rate, each side's CPU time per message is reported (process CPU, ZeroMQ's I/O thread
included): on a machine shared with other jobs the rates move with the load, the CPU per message much
less, and it shows which side costs what. The load average is printed before and after.

At 80 kB the receive side of both was dominated by page faults in ZeroMQ's I/O thread (glibc hands the
freed message buffers back to the OS and the next message faults fresh pages in; benchmarks/README.md,
issue 44). The ``hil`` command keeps freed heap for reuse (:mod:`daq.bus.allocator`); this benchmark applies
the same setting to every process of both sides alike (receivers here, senders spawned), or none of them
with ``--glibc-defaults``.

    .venv/bin/python benchmarks/bench_bus.py [--repeat 3] [--glibc-defaults]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import statistics
import time

import numpy as np
import zmq

N_CH = 8
CASES = [(8 * 1024, 40000), (80 * 1024, 15000)]  # payload bytes, messages


def make_frame(payload_bytes: int, seq: int = 0):
    from daq.bus.frames import Frame

    rows = payload_bytes // (8 * N_CH)
    data = np.random.default_rng(seq).standard_normal((rows, N_CH))
    return Frame("bench.s", seq, 0.0, 1e-4, [f"c{i}" for i in range(N_CH)], ["m"] * N_CH, data)


# ----------------------------------------------------------------------------- senders (child process)


def _allocator(keep: bool) -> None:
    """The allocator setting of a ``hil`` process (both sides alike), unless --glibc-defaults."""
    if keep:
        from daq.bus.allocator import keep_freed_heap

        keep_freed_heap()


def plain_sender(endpoint_q: mp.Queue, payload_bytes: int, n: int, cpu_q: mp.Queue, keep: bool) -> None:
    from daq.bus.frames import encode

    _allocator(keep)
    parts = [bytes(p) for p in encode(make_frame(payload_bytes))]
    ctx = zmq.Context()
    sock = ctx.socket(zmq.XPUB)
    sock.setsockopt(zmq.XPUB_NODROP, 1)
    sock.setsockopt(zmq.LINGER, -1)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    endpoint_q.put(f"tcp://127.0.0.1:{port}")
    sock.recv()  # wait for the subscription
    copy = payload_bytes < 64 * 1024
    cpu = time.process_time()
    for _ in range(n):
        while True:
            try:
                sock.send_multipart(parts, copy=copy)
                break
            except zmq.Again:
                time.sleep(0.0002)
    cpu_q.put(time.process_time() - cpu)
    sock.close()
    ctx.term()


def ours_sender(endpoint_q: mp.Queue, payload_bytes: int, n: int, cpu_q: mp.Queue, keep: bool) -> None:
    from daq.bus.pubsub import BusPublisher

    _allocator(keep)
    frame = make_frame(payload_bytes)

    async def go():
        pub = BusPublisher()
        endpoint_q.put(pub.endpoint)
        await pub.wait_for_subscribers(1, timeout=30)
        cpu = time.process_time()
        for _ in range(n):
            frame.seq = pub.next_seq("bench.s")
            await pub.publish(frame)
        cpu_q.put(time.process_time() - cpu)
        await asyncio.sleep(0.5)  # let the queue drain before closing (linger=0)
        pub.close()

    asyncio.run(go())


# ----------------------------------------------------------------------------- receivers (this process)


def plain_receive(endpoint: str, n: int, decode: bool = True) -> tuple[float, float]:
    """Plain pyzmq: receive, and (``decode``) parse the header and view the payload as an array."""
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.SUB)
    sock.setsockopt(zmq.SUBSCRIBE, b"")
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    sock.recv_multipart()
    loads, frombuffer = json.loads, np.frombuffer
    t0, cpu = time.perf_counter(), time.process_time()
    if decode:
        for _ in range(n - 1):
            _topic, header, payload = sock.recv_multipart(copy=False)
            h = loads(header.bytes)
            data = frombuffer(payload.buffer, dtype=h["dtype"]).reshape(h["shape"])
        assert data.shape == (h["shape"][0], N_CH)
    else:
        for _ in range(n - 1):
            sock.recv_multipart(copy=False)
    dt, cpu = time.perf_counter() - t0, time.process_time() - cpu
    sock.close()
    return dt, cpu


def ours_receive(endpoint: str, n: int) -> tuple[float, float]:
    from daq.bus.pubsub import BusSubscriber

    async def go() -> tuple[float, float]:
        sub = BusSubscriber(endpoint)
        await sub.recv(timeout=30)
        t0, cpu = time.perf_counter(), time.process_time()
        for _ in range(n - 1):
            msg = await sub.recv(timeout=30)
        dt, cpu = time.perf_counter() - t0, time.process_time() - cpu
        assert msg.seq == n - 1 and sub.stats.missing == 0, "lossless run lost messages"
        sub.close()
        return dt, cpu

    return asyncio.run(go())


def run_once(kind: str, payload_bytes: int, n: int, keep: bool) -> tuple[float, float, float]:
    """Messages per second, and the sender's and receiver's CPU microseconds per message."""
    ctx = mp.get_context("spawn")
    q, cpu_q = ctx.Queue(), ctx.Queue()
    sender = ours_sender if kind == "ours" else plain_sender
    p = ctx.Process(target=sender, args=(q, payload_bytes, n, cpu_q, keep))
    p.start()
    endpoint = q.get(timeout=30)
    if kind == "ours":
        dt, recv_cpu = ours_receive(endpoint, n)
    else:
        dt, recv_cpu = plain_receive(endpoint, n, decode=kind == "plain")
    send_cpu = cpu_q.get(timeout=30)
    p.join(30)
    return (n - 1) / dt, send_cpu / n * 1e6, recv_cpu / (n - 1) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs per case (median reported)")
    ap.add_argument("--glibc-defaults", action="store_true",
                    help="leave glibc's allocator as it is on both sides (default: hil's setting on both)")
    args = ap.parse_args()
    keep = not args.glibc_defaults
    _allocator(keep)  # the receivers run in this process
    print("load average", " ".join(f"{x:.2f}" for x in os.getloadavg()))
    print("allocator:", "hil's (daq/bus/allocator.py), both sides" if keep else "glibc defaults, both sides")
    if os.environ.get("GLIBC_TUNABLES"):  # both sides: the senders are spawned with this environment too
        print("GLIBC_TUNABLES", os.environ["GLIBC_TUNABLES"])
    print(f"{'payload':>8} {'impl':>6} {'msg/s':>10} {'MB/s':>9} {'ours/plain':>11} {'ours/raw':>9} "
          f"{'send us/msg':>12} {'recv us/msg':>12}  (CPU)")
    for payload, n in CASES:
        runs: dict[str, list[tuple[float, float, float]]] = {"raw": [], "plain": [], "ours": []}
        for _ in range(args.repeat):  # interleaved, so that load from other processes hits both alike
            for kind in runs:
                runs[kind].append(run_once(kind, payload, n, keep))
        med = {kind: [statistics.median(col) for col in zip(*r, strict=True)] for kind, r in runs.items()}
        for kind in ("raw", "plain", "ours"):
            rate, send_cpu, recv_cpu = med[kind]
            ratio = f"{rate / med['plain'][0]:.2f}" if kind == "ours" else ""
            ratio_raw = f"{rate / med['raw'][0]:.2f}" if kind == "ours" else ""
            print(
                f"{payload // 1024:>6}kB {kind:>6} {rate:>10.0f} {rate * payload / 1e6:>9.1f} {ratio:>11} "
                f"{ratio_raw:>9} {send_cpu:>12.1f} {recv_cpu:>12.1f}"
            )
    print("load average", " ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
