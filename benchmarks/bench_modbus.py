"""Modbus poll rate: our driver (ModbusTransport / ModbusDisplacementSensor) vs the plain pymodbus client.

A simulated displacement sensor (``simulators.displacement_sim.ModbusSensorSim``, Modbus TCP, one float32
in the input table) runs in a child process, so the server's work does not share the client's core.
Two clients poll it in this process, one request in flight each, alternating in rounds:

* "plain": ``AsyncModbusTcpClient.read_input_registers(0, count=2, device_id=1)`` and
  ``client.convert_from_registers(regs, FLOAT32)`` - what a script written against pymodbus does;
* "ours":  ``ModbusDisplacementSensor.read()`` - the same request through ``ModbusTransport`` with
  its reply check (device id, function code, register count), the timeout guard, the cancellation
  check, the register-map decode and the plausibility checks (finite, register range, sensor range).

    .venv/bin/python benchmarks/bench_modbus.py [--requests 4000] [--repeat 5]
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


async def plain_round(port: int, n: int) -> float:
    from pymodbus.client import AsyncModbusTcpClient

    client = AsyncModbusTcpClient("127.0.0.1", port=port, timeout=0.5, retries=1, reconnect_delay=0)
    await client.connect()
    f32 = client.DATATYPE.FLOAT32
    rr = await client.read_input_registers(0, count=2, device_id=1)  # warm up
    t0 = time.perf_counter()
    for _ in range(n):
        rr = await client.read_input_registers(0, count=2, device_id=1)
        value = client.convert_from_registers(rr.registers, f32)
    dt = time.perf_counter() - t0
    assert abs(value - 1.25e-3) < 1e-9, value
    client.close()
    return n / dt


async def ours_round(port: int, n: int) -> float:
    from drivers.displacement import ModbusDisplacementSensor

    sensor = ModbusDisplacementSensor("bench", {"protocol": "modbus_tcp", "host": "127.0.0.1", "port": port,
                                                "device_id": 1, "timeout": 0.5, "retries": 1,
                                                "range": [-0.005, 0.005], "registers": REGISTERS})
    await sensor.connect()
    await sensor.read()  # warm up
    t0 = time.perf_counter()
    for _ in range(n):
        value = await sensor.read()
    dt = time.perf_counter() - t0
    assert abs(value - 1.25e-3) < 1e-9, value
    await sensor.close()
    return n / dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=4000, help="requests per round")
    ap.add_argument("--repeat", type=int, default=5, help="rounds per client (median reported)")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    ctx = mp.get_context("spawn")
    q, stop = ctx.Queue(), ctx.Event()
    server = ctx.Process(target=serve, args=(q, stop), daemon=True)
    server.start()
    try:
        port = q.get(timeout=60)
        rates: dict[str, list[float]] = {"plain": [], "ours": []}
        ratios = []
        for _ in range(args.repeat):  # alternating, so load from other processes hits both alike
            p = asyncio.run(plain_round(port, args.requests))
            o = asyncio.run(ours_round(port, args.requests))
            rates["plain"].append(p)
            rates["ours"].append(o)
            ratios.append(o / p)
    finally:
        stop.set()
        server.join(10)
    print(f"{'impl':>6} {'req/s (median)':>15} {'runs':>40}")
    for kind, r in rates.items():
        print(f"{kind:>6} {statistics.median(r):>15.0f}   {' '.join(f'{x:.0f}' for x in r)}")
    print(f"ours/plain: median of per-round ratios {statistics.median(ratios):.3f} "
          f"({' '.join(f'{x:.3f}' for x in ratios)})")


if __name__ == "__main__":
    main()
