"""Closing a ``socket://`` serial port never freezes the event loop.

pyserial 3.5's socket port sleeps 0.3 s in ``close()``; our drivers close ports on the event loop, so
every sensor closing froze the loop (and every other device's requests) for 0.3 s. In `hil devices` the
three serial sensors of the simulated press closing one after the other starved the force source's read
past its 0.3 s timeout (found by CI). drivers/serial_urls gives ``socket://`` a port that closes at once.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from daq.rigs.config import load
from drivers.displacement import open_sensor
from tests.polling import loop_gaps

CONFIGS = Path("configs").resolve()


async def test_the_press_sensors_close_without_freezing_the_loop_and_reconnect_at_once():
    rig, cfg = load(CONFIGS / "press-sim.toml")
    sim = rig.simulator(cfg)
    await sim.start()
    try:
        devices = rig.simulated_devices(sim, cfg)
        sensors = [open_sensor(n, s) for n, s in devices.sensors.items()]
        kinds = sorted(s.protocol for s in devices.sensors.values())
        assert kinds == ["modbus_rtu", "modbus_rtu", "serial"]  # all three behind socket:// URLs
        for s in sensors:
            await s.connect()
            await s.read()
        gaps: list[float] = []
        ticker = asyncio.create_task(loop_gaps(gaps))
        await asyncio.sleep(0.05)
        for s in sensors:
            await s.close()
        await asyncio.sleep(0.05)
        ticker.cancel()
        # pyserial's own close sleeps 0.3 s per port on the loop: 0.9 s without a turn for three ports
        assert max(gaps) < 0.25, f"the loop stood still for {max(gaps):.3f} s while ports closed"
        for s in sensors:  # the sleep was to "give the server time" before a reconnect: not needed
            await s.connect()
            assert abs(await s.read()) < 5e-3
            await s.close()
    finally:
        await sim.stop()
