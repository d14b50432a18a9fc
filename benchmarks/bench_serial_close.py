"""How long the event loop stands still while the simulated press's three serial sensors close their
``socket://`` ports: our URL handler (drivers/serial_urls: closes at once) vs pyserial 3.5's own
``socket://`` port (sleeps 0.3 s in ``close()``), same sensors, same run, rounds alternating.

A ticker coroutine asks for a turn every 5 ms (:func:`loop_gaps`); the figure is the longest
time between two of its turns while the three ports close one after the other, the median over rounds.
Was tests/test_serial_close.py's ``max gap < 0.25 s`` (issue 39: no test asserts speed).

    .venv/bin/python benchmarks/bench_serial_close.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from pathlib import Path

import serial

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from daq.rigs.config import load  # noqa: E402
from drivers import serial_urls  # noqa: E402
from drivers.displacement import open_sensor  # noqa: E402


async def loop_gaps(gaps: list[float], period: float = 0.005) -> None:
    """Append the time between this coroutine's turns on the running loop (it asks for one every ``period``
    s) to ``gaps`` until cancelled: how long the loop stood still while something else ran on it."""
    loop = asyncio.get_running_loop()
    last = loop.time()
    while True:
        await asyncio.sleep(period)
        now = loop.time()
        gaps.append(now - last)
        last = now


async def longest_stall(devices, ours: bool) -> float:
    """Open, read and close the sensors once with our handler or pyserial's; the longest loop gap (s)."""
    handlers = serial.protocol_handler_packages
    if not ours:
        handlers.remove(serial_urls.PACKAGE)
    try:
        sensors = [open_sensor(n, s) for n, s in devices.sensors.items()]
        for s in sensors:
            await s.connect()
            await s.read()
    finally:
        serial_urls.install()
    gaps: list[float] = []
    ticker = asyncio.create_task(loop_gaps(gaps))
    await asyncio.sleep(0.05)
    for s in sensors:
        await s.close()
    await asyncio.sleep(0.05)
    ticker.cancel()
    return max(gaps)


async def bench(repeat: int) -> tuple[list[float], list[float]]:
    rig, cfg = load(ROOT / "configs" / "press-sim.toml")
    sim = rig.simulator(cfg)
    await sim.start()
    ours, plain = [], []
    try:
        devices = rig.simulated_devices(sim, cfg)
        for k in range(repeat):
            for which in ((True, False) if k % 2 == 0 else (False, True)):
                (ours if which else plain).append(await longest_stall(devices, which))
    finally:
        await sim.stop()
    return ours, plain


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5, help="rounds per handler (median reported)")
    args = ap.parse_args()
    ours, plain = asyncio.run(bench(args.repeat))
    print(f"{'handler':>22} {'longest loop stall, median (max) of ' + str(args.repeat):>40}")
    print(f"{'ours (serial_urls)':>22} {statistics.median(ours) * 1e3:>31.1f} ms ({max(ours) * 1e3:.1f})")
    print(f"{'pyserial socket://':>22} {statistics.median(plain) * 1e3:>31.1f} ms ({max(plain) * 1e3:.1f})")
    ratio = statistics.median(ours) / statistics.median(plain)
    print(f"ours/plain: {ratio:.3f} (3 ports; pyserial sleeps 0.3 s in each close)")


if __name__ == "__main__":
    main()
