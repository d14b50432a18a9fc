"""Receive side of the bus, step by step: CPU microseconds per message of each step of
``BusSubscriber.recv`` on frames as ``bench_bus.py`` sends them, beside plain pyzmq's decode.

Steps 1-5 run on messages already queued (an inproc socket filled first, so no waiting and no I/O thread):
each row is the cumulative cost up to that step, the difference between rows is the step. Step 6 is a
``recv`` that has to wait for every message (a paced sender in a second process over tcp loopback): the
wait on the event loop. Process CPU time, median of ``--repeat`` runs (a shared machine moves the figures;
``valgrind --tool=callgrind`` on the same script gives instruction counts that it does not move).

    .venv/bin/python benchmarks/profile_bus_receive.py [--repeat 5] [--kb 8 80]

Instruction counts of a receiver that waits for every message (issue 44's table): a paced sender, and the
receiver under callgrind; runs of 20 and 220 messages, (difference) / 200 per message:

    .venv/bin/python benchmarks/profile_bus_receive.py --send EP_FILE --kb 80 --n 220 --gap 0.01 --delay 25 &
    valgrind --tool=callgrind .venv/bin/python benchmarks/profile_bus_receive.py \
        --recv ours --endpoint-file EP_FILE --n 220
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import statistics
import time
import uuid

import numpy as np
import zmq
import zmq.asyncio

from daq.bus import header_json
from daq.bus.frames import Frame, decode, encode
from daq.bus.pubsub import BusSubscriber

N_CH = 8
N_QUEUED = 2000
N_PACED = 1000


def messages(payload_bytes: int, n: int) -> list[list[bytes]]:
    rows = payload_bytes // (8 * N_CH)
    data = np.random.default_rng(0).standard_normal((rows, N_CH))
    frame = Frame("bench.s", 0, 0.0, 1e-4, [f"c{i}" for i in range(N_CH)], ["m"] * N_CH, data)
    out = []
    for seq in range(n):
        frame.seq = seq
        out.append([bytes(p) for p in encode(frame)])
    return out


def cpu_per_message(fn, n: int) -> float:
    c = time.process_time()
    fn()
    return (time.process_time() - c) / n * 1e6


def queued_steps(msgs: list[list[bytes]]) -> dict[str, float]:
    """Cumulative CPU per message of the steps on queued messages."""
    n = len(msgs)
    ctx = zmq.asyncio.Context.instance()  # inproc: the subscriber's context
    endpoint = f"inproc://profile-{uuid.uuid4().hex}"
    owner = ctx.socket(zmq.PUB)
    push = zmq.Socket.shadow(owner.underlying)  # plain sends, no event loop
    push.setsockopt(zmq.SNDHWM, 0)
    push.bind(endpoint)
    sub = BusSubscriber(endpoint, ctx=ctx, hwm=0)
    time.sleep(0.05)  # the subscription reaches the publisher (inproc, same context)

    def fill() -> None:
        for m in msgs:
            push.send_multipart(m)

    sync = sub._sync
    out: dict[str, float] = {}

    def recv_parts() -> None:
        for _ in range(n):
            f = sync.recv(zmq.NOBLOCK, copy=False)
            while f.more:
                f = sync.recv(zmq.NOBLOCK, copy=False)

    fill()
    out["1 ZeroMQ receive of the 3 parts (zmq.Frame, no copy)"] = cpu_per_message(recv_parts, n)
    fill()
    out["2 + parts as bytes, bytes, read-only view (_recv_nowait)"] = cpu_per_message(
        lambda: [sub._recv_nowait() for _ in range(n)], n)
    fill()
    parts = [sub._recv_nowait() for _ in range(n)]
    out["3 + header parsed and type-checked (msgspec FrameHead)"] = out[
        "2 + parts as bytes, bytes, read-only view (_recv_nowait)"] + cpu_per_message(
        lambda: [header_json.frame_head(p[1]) for p in parts], n)
    out["4 + the rest of decode (layout, size, topic, views, Frame)"] = out[
        "2 + parts as bytes, bytes, read-only view (_recv_nowait)"] + cpu_per_message(
        lambda: [decode(p) for p in parts], n)
    out["5 + subscriber bookkeeping (stats, sequence gaps)"] = out[
        "2 + parts as bytes, bytes, read-only view (_recv_nowait)"] + cpu_per_message(
        lambda: [sub._decode(p) for p in parts], n)
    fill()

    async def recv_all() -> None:
        for _ in range(n):
            await sub.recv(timeout=10)

    step6 = "6 await recv() (1-5 and the coroutine), queued"
    out[step6] = cpu_per_message(lambda: asyncio.run(recv_all()), n)

    def plain() -> None:
        loads, frombuffer = json.loads, np.frombuffer
        for p in parts:
            h = loads(p[1])
            frombuffer(p[2], dtype=h["dtype"]).reshape(h["shape"])

    out["plain: json.loads + np.frombuffer.reshape (after step 2)"] = out[
        "2 + parts as bytes, bytes, read-only view (_recv_nowait)"] + cpu_per_message(plain, n)
    sub.close()
    owner.close(linger=0)
    return out


def paced_sender(q: mp.Queue, payload_bytes: int, n: int, gap: float) -> None:
    msgs = messages(payload_bytes, n)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.XPUB)
    sock.setsockopt(zmq.XPUB_NODROP, 1)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    q.put(f"tcp://127.0.0.1:{port}")
    sock.recv()
    time.sleep(0.3)
    nxt = time.perf_counter()
    for m in msgs:
        while time.perf_counter() < nxt:
            pass
        sock.send_multipart(m)
        nxt += gap
    time.sleep(0.5)
    sock.close(linger=-1)
    ctx.term()


def paced(payload_bytes: int, kind: str) -> float:
    """Receiver CPU per message when every message is waited for (one every 0.3 ms)."""
    ctx = mp.get_context("spawn")
    q: mp.Queue = ctx.Queue()
    p = ctx.Process(target=paced_sender, args=(q, payload_bytes, N_PACED, 3e-4))
    p.start()
    endpoint = q.get(timeout=30)
    if kind == "plain":
        sock = zmq.Context.instance().socket(zmq.SUB)
        sock.setsockopt(zmq.SUBSCRIBE, b"")
        sock.connect(endpoint)
        sock.recv_multipart()
        c = time.process_time()
        for _ in range(N_PACED - 1):
            _t, h, pl = sock.recv_multipart(copy=False)
            hh = json.loads(h.bytes)
            np.frombuffer(pl.buffer, dtype=hh["dtype"]).reshape(hh["shape"])
        cpu = time.process_time() - c
        sock.close(linger=0)
    else:

        async def go() -> float:
            sub = BusSubscriber(endpoint)
            await sub.recv(timeout=30)
            c = time.process_time()
            for _ in range(N_PACED - 1):
                await sub.recv(timeout=30)
            spent = time.process_time() - c
            assert sub.stats.missing == 0
            sub.close()
            return spent

        cpu = asyncio.run(go())
    p.join(30)
    return cpu / (N_PACED - 1) * 1e6


def send_to_file(path: str, payload_bytes: int, n: int, gap: float, delay: float) -> None:
    """The paced sender of a callgrind run: writes its endpoint to ``path``, waits for the subscription
    and ``delay`` s more (the receiver under valgrind gets to its first wait), then sends."""
    msgs = messages(payload_bytes, n)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.XPUB)
    sock.setsockopt(zmq.XPUB_NODROP, 1)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    with open(path + ".tmp", "w") as f:
        f.write(f"tcp://127.0.0.1:{port}")
    os.replace(path + ".tmp", path)
    sock.recv()
    time.sleep(delay)
    for m in msgs:
        sock.send_multipart(m)
        time.sleep(gap)
    time.sleep(1.0)
    sock.close(linger=-1)
    ctx.term()


def receive_from_file(kind: str, path: str, n: int) -> None:
    """Receive ``n`` messages from the endpoint in ``path``, as plain pyzmq or with BusSubscriber."""
    while not os.path.exists(path):
        time.sleep(0.05)
    with open(path) as f:
        endpoint = f.read()
    if kind == "plain":
        sock = zmq.Context.instance().socket(zmq.SUB)
        sock.setsockopt(zmq.SUBSCRIBE, b"")
        sock.connect(endpoint)
        for _ in range(n):
            _t, h, pl = sock.recv_multipart(copy=False)
            hh = json.loads(h.bytes)
            np.frombuffer(pl.buffer, dtype=hh["dtype"]).reshape(hh["shape"])
        sock.close(linger=0)
        return

    async def go() -> None:
        sub = BusSubscriber(endpoint)
        for _ in range(n):
            await sub.recv(timeout=120)
        assert sub.stats.missing == 0
        sub.close()

    asyncio.run(go())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--kb", type=int, nargs="+", default=[8, 80])
    ap.add_argument("--send", metavar="EP_FILE", help="only be the paced sender (for a callgrind run)")
    ap.add_argument("--recv", choices=("plain", "ours"), help="only be the receiver (for a callgrind run)")
    ap.add_argument("--endpoint-file", help="with --recv: the file the sender wrote its endpoint to")
    ap.add_argument("--n", type=int, default=220, help="with --send/--recv: messages")
    ap.add_argument("--gap", type=float, default=0.01, help="with --send: seconds between messages")
    ap.add_argument("--delay", type=float, default=25.0, help="with --send: seconds before the first")
    args = ap.parse_args()
    if args.send:
        send_to_file(args.send, args.kb[0] * 1024, args.n, args.gap, args.delay)
        return
    if args.recv:
        receive_from_file(args.recv, args.endpoint_file, args.n)
        return
    print("load average", " ".join(f"{x:.2f}" for x in os.getloadavg()))
    for kb in args.kb:
        msgs = messages(kb * 1024, N_QUEUED)
        runs = [queued_steps(msgs) for _ in range(args.repeat)]
        print(f"\n{kb} kB frames, CPU us per message (median of {args.repeat}; cumulative)")
        for step in runs[0]:
            print(f"  {step:<62} {statistics.median(r[step] for r in runs):7.1f}")
        for kind in ("plain", "ours"):
            v = statistics.median(paced(kb * 1024, kind) for _ in range(args.repeat))
            label = "7 await recv(), waiting for every message (tcp)" if kind == "ours" else \
                "plain: blocking receive + decode, waiting for each (tcp)"
            print(f"  {label:<62} {v:7.1f}")
    print("load average", " ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
