"""Modbus poll rate: our driver (ModbusTransport / ModbusDisplacementSensor) vs the plain pymodbus client.

A simulated displacement sensor (``simulators.displacement_sim.ModbusSensorSim``, Modbus TCP, one float32
in the input table) runs in a child process, so the server's work does not share the client's core.
Two clients poll it from this process, both connected at once, one request in flight, alternating in
short rounds (load from other jobs hits both alike; the median of the per-round ratios is reported):

* "plain": ``AsyncModbusTcpClient.read_input_registers(0, count=2, device_id=1)`` and
  ``client.convert_from_registers(regs, FLOAT32)`` - what a script written against pymodbus does;
* "ours":  ``ModbusDisplacementSensor.read()`` - the same request through ``ModbusTransport`` with
  its reply check (device id, function code, register count), the request guard (a per-connection
  watchdog), the cancellation check, the register-map decode and the plausibility checks (finite,
  register range, sensor range).

    .venv/bin/python benchmarks/bench_modbus.py [--requests 500] [--repeat 20]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REGISTERS = {"displacement": {"table": "input", "address": 0, "type": "float32", "unit": "m",
                              "range": [-0.01, 0.01]}}


def serve(port_q: mp.Queue, stop_ev) -> None:
    sys.path.insert(0, str(ROOT))
    from simulators.displacement_sim import ModbusSensorSim

    async def go():
        sim = ModbusSensorSim("bench", {"protocol": "modbus_tcp", "host": "127.0.0.1", "port": 0,
                                        "device_id": 1, "registers": REGISTERS}, lambda: 1.25e-3)
        await sim.start()
        port_q.put(sim.port)
        while not stop_ev.is_set():
            await asyncio.sleep(0.1)
        await sim.stop()

    asyncio.run(go())


async def rounds(port: int, n: int, repeat: int) -> tuple[list[float], list[float]]:
    """Both clients connected at once; ``repeat`` short rounds of ``n`` requests each, alternating."""
    from pymodbus.client import AsyncModbusTcpClient

    from drivers.displacement import ModbusDisplacementSensor

    client = AsyncModbusTcpClient("127.0.0.1", port=port, timeout=0.5, retries=1, reconnect_delay=0)
    await client.connect()
    f32 = client.DATATYPE.FLOAT32
    sensor = ModbusDisplacementSensor("bench", {"protocol": "modbus_tcp", "host": "127.0.0.1", "port": port,
                                                "device_id": 1, "timeout": 0.5, "retries": 1,
                                                "range": [-0.005, 0.005], "registers": REGISTERS})
    await sensor.connect()

    cpu: dict[str, list[float]] = {"plain": [], "ours": []}  # client CPU s per request (load-independent)

    async def plain() -> float:
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(n):
            rr = await client.read_input_registers(0, count=2, device_id=1)
            value = client.convert_from_registers(rr.registers, f32)
        assert abs(value - 1.25e-3) < 1e-9, value
        cpu["plain"].append((time.process_time() - c0) / n)
        return n / (time.perf_counter() - t0)

    async def ours() -> float:
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(n):
            value = await sensor.read()
        assert abs(value - 1.25e-3) < 1e-9, value
        cpu["ours"].append((time.process_time() - c0) / n)
        return n / (time.perf_counter() - t0)

    await plain()  # warm up both
    await ours()
    p_rates, o_rates = [], []
    for k in range(repeat):
        if k % 2:
            o_rates.append(await ours())
            p_rates.append(await plain())
        else:
            p_rates.append(await plain())
            o_rates.append(await ours())
    client.close()
    await sensor.close()
    p_cpu, o_cpu = statistics.median(cpu["plain"][1:]), statistics.median(cpu["ours"][1:])
    print(f"client CPU per request (median): plain {p_cpu * 1e6:.1f} us, ours {o_cpu * 1e6:.1f} us "
          f"(ours adds {(o_cpu - p_cpu) * 1e6:.1f} us)")
    return p_rates, o_rates


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=500, help="requests per round")
    ap.add_argument("--repeat", type=int, default=20, help="rounds per client (median reported)")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    ctx = mp.get_context("spawn")
    q, stop = ctx.Queue(), ctx.Event()
    server = ctx.Process(target=serve, args=(q, stop), daemon=True)
    server.start()
    try:
        port = q.get(timeout=60)
        p_rates, o_rates = asyncio.run(rounds(port, args.requests, args.repeat))
    finally:
        stop.set()
        server.join(10)
    ratios = [o / p for p, o in zip(p_rates, o_rates, strict=True)]
    print(f"{'impl':>6} {'req/s (median)':>15}")
    print(f"{'plain':>6} {statistics.median(p_rates):>15.0f}")
    print(f"{'ours':>6} {statistics.median(o_rates):>15.0f}")
    q1, _, q3 = statistics.quantiles(ratios, n=4)
    print(f"ours/plain: median of {len(ratios)} per-round ratios {statistics.median(ratios):.3f} "
          f"(quartiles {q1:.3f}..{q3:.3f})")


if __name__ == "__main__":
    main()
