"""Simulated displacement sensor served over Modbus (RTU through a ``socket://`` gateway, or TCP).

Every read samples the plant through a callable (metres), adds Gaussian noise and quantises to the
resolution, then encodes the value with the configured register map. ``inject`` makes the device answer
NaN, to test how drivers treat bad register values.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from simulators.press_devices import ModbusSimServer, parse_map, put


def noisy(value: float, sigma: float, resolution: float, rng: np.random.Generator) -> float:
    """Plant value + N(0, sigma), rounded to the resolution (0: no rounding)."""
    v = value + sigma * float(rng.standard_normal())
    if resolution > 0:
        v = round(v / resolution) * resolution
    return v


class ModbusSensorSim:
    """A displacement sensor device with one mapped value ``displacement`` (input or holding table)."""

    def __init__(self, name: str, device_cfg: Mapping[str, Any], source: Callable[[], float],
                 sigma: float = 0.0, resolution: float = 0.0, rng: np.random.Generator | None = None,
                 registers: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self.name = name
        self.source = source
        self.sigma = float(sigma)
        self.resolution = float(resolution)
        self.rng = rng if rng is not None else np.random.default_rng(0)
        self.rmap = parse_map(registers if registers is not None else device_cfg["registers"])
        if "displacement" not in self.rmap:
            raise ValueError(f"{name}: register map lacks 'displacement'")
        protocol = str(device_cfg.get("protocol", "modbus_rtu"))
        host, port = _host_port(device_cfg, protocol)
        self.server = ModbusSimServer(name, protocol, host, port, int(device_cfg.get("device_id", 1)),
                                      self.rmap, self._on_access)
        self.inject: str | None = None  # None or "nan"
        self.n_reads = 0

    def measure(self) -> float:
        """One noisy, quantised reading (m)."""
        return noisy(float(self.source()), self.sigma, self.resolution, self.rng)

    async def _on_access(self, fc, start, address, count, regs, values):
        if values is not None:
            return None  # plain configuration registers, if the map has any
        reg = self.rmap["displacement"]
        if (fc == 4) == (reg.table == "input"):
            self.n_reads += 1
            put(regs, start, reg, float("nan") if self.inject == "nan" else self.measure())
        return None

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def running(self) -> bool:
        return self.server.running

    async def start(self) -> None:
        await self.server.start()

    async def stop(self) -> None:
        await self.server.stop()


def _host_port(cfg: Mapping[str, Any], protocol: str) -> tuple[str, int]:
    """Listen address from ``host``/``port`` (TCP) or ``url = "socket://host:port"`` (RTU gateway)."""
    if protocol == "modbus_tcp" or "url" not in cfg:
        return str(cfg.get("host", "127.0.0.1")), int(cfg.get("port", 0))
    return parse_socket_url(str(cfg["url"]))


def parse_socket_url(url: str) -> tuple[str, int]:
    """"socket://127.0.0.1:0" -> ("127.0.0.1", 0); simulated serial devices only listen on sockets."""
    if not url.startswith("socket://"):
        raise ValueError(f"a simulated serial device needs a socket:// url, got {url!r}")
    host, _, port = url[len("socket://"):].rpartition(":")
    return host or "127.0.0.1", int(port or 0)
