"""Closing a ``socket://`` serial port never freezes the event loop.

pyserial 3.5's socket port sleeps 0.3 s in ``close()``; our drivers close ports on the event loop, so
every sensor closing froze the loop (and every other device's requests) for 0.3 s. In `hil devices` the
three serial sensors of the simulated press closing one after the other starved the force source's read
past its 0.3 s timeout (found by CI). drivers/serial_urls gives ``socket://`` a port that closes at once.

Here: every ``socket://`` port the drivers open is that port, and the sensors reconnect right after closing.
How long the loop stands still while they close (ours vs pyserial's port) is benchmarks/bench_serial_close.py.
"""

from __future__ import annotations

import socket
from pathlib import Path

import serial

from daq.rigs.config import load
from drivers.displacement import open_sensor
from drivers.serial_urls import protocol_socket

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
        for s in sensors:
            await s.close()
        for s in sensors:  # the sleep was to "give the server time" before a reconnect: not needed
            await s.connect()
            assert abs(await s.read()) < 5e-3
            await s.close()
    finally:
        await sim.stop()


def test_a_socket_url_opens_our_port_whose_close_ends_the_connection():
    """With the drivers imported, ``socket://`` resolves to drivers/serial_urls (pyserial's own port sleeps
    0.3 s in ``close()``); its close shuts the connection down, so the peer sees the end."""
    import drivers.serial_transport  # noqa: F401  (importing a transport installs the handlers)

    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = serial.serial_for_url(f"socket://127.0.0.1:{listener.getsockname()[1]}", timeout=1)
        assert type(port) is protocol_socket.Serial
        peer, _ = listener.accept()
        with peer:
            port.close()
            peer.settimeout(10)
            assert peer.recv(1) == b""  # the connection ended
        assert not port.is_open
