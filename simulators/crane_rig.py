"""Simulated crane rig: the crane axis physics behind an OPC UA servo drive on loopback.

``CraneRig(config)`` takes the whole rig config (``[simulator.truth]``, ``[simulator.drive]``)
or just the ``[simulator]`` table; ``[simulator] plant`` chooses what the drive moves (``"crane"`` by default,
``"oscillator"`` or ``"pendulum"``, see :data:`simulators.crane_drive.PLANTS`), and ``[simulator.truth]``
holds that plant's physical values. Security ``"none"`` serves a plain endpoint, ``"secure"`` a
Basic256Sha256 SignAndEncrypt endpoint (trusted client certificates + user/password),
``"both"`` serves both on two ports, sharing one drive; then only the secure one may move the axis
(the plain one reads, stops and disables).
"""

from __future__ import annotations

import asyncio
import copy
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from asyncua import Server

from drivers.clock import Clock
from simulators.certs import Pki, ensure_pki
from simulators.crane_drive import CraneDrive, build_server, get_plant, server_url
from simulators.settings import DriveSimulator, simulator_table


class CraneRig:
    """The simulated drive(s) of a crane config; ``await start()`` / ``await stop()``."""

    def __init__(self, config: Mapping[str, Any] | DriveSimulator, pki_dir: str | Path | None = None,
                 clock: Clock | None = None):
        table = simulator_table(config, DriveSimulator)
        self.plant = table.plant or "crane"
        self.truth = get_plant(self.plant).truth.from_config(dict(table.truth))
        self.settings = table.drive
        self.clock = clock if clock is not None else table.clock()  # the run's one clock
        self.pki_dir = Path(pki_dir if pki_dir is not None else self.settings.pki_dir)
        self.drive = CraneDrive(self.truth, self.settings, self.plant, self.clock)
        self.pki: Pki | None = None
        self._servers: list[Server] = []
        self.endpoints: dict[str, str] = {}

    @property
    def url(self) -> str:
        """The plain endpoint if served, else the secure one."""
        return self.endpoints.get("plain") or self.endpoints["secure"]

    @property
    def n_writes(self) -> int:
        """What clients wrote to the drive (the dry-run tests): its acting method calls, plus one per
        endpoint whose heartbeat was ever written (read before ``stop``)."""
        drive = self.drive
        beats = 0
        for server, idx in drive._faces:
            beat = server.read_attribute_value(drive.nodeid(idx, "Heartbeat")).Value
            assert beat is not None  # the variable is created with a value and only ever written one
            beats += beat.Value != 0
        return drive.n_calls + beats

    async def start(self) -> dict[str, str]:
        """Serve; returns ``{"plain": url, "secure": url}`` (only the served ones)."""
        s = self.settings
        try:
            if s.security in ("none", "both"):  # with security on, the plain face is read-only
                server = await build_server(self.drive, s.host, s.port, control=s.security == "none")
                self._servers.append(server)
                self.endpoints["plain"] = server_url(server, s.host)
            if s.security in ("secure", "both"):
                self.pki = await ensure_pki(self.pki_dir)
                server = await build_server(self.drive, s.host, s.secure_port, pki=self.pki, users=s.users)
                self._servers.append(server)
                self.endpoints["secure"] = server_url(server, s.host)
            self.drive.start()
        except BaseException:
            await self.stop()
            raise
        return dict(self.endpoints)

    async def stop(self) -> None:
        """Disable the drive and close every endpoint."""
        await self.drive.close()
        for server in self._servers:
            await server.stop()
        self._servers.clear()
        self.endpoints.clear()

    async def __aenter__(self) -> CraneRig:
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.stop()


async def serve_crane(config: str | Path | Mapping[str, Any], port: int | None = None) -> None:
    """Serve the simulated crane rig of ``config`` until cancelled; prints the endpoints.

    ``config``: the rig config as data, or a TOML file read as it is (``hil sim crane`` checks a config
    against the rig's schema before it starts the simulator; the simulator itself only reads its tables).
    """
    if isinstance(config, Mapping):
        config = copy.deepcopy(dict(config))
    else:
        with open(config, "rb") as fh:
            config = tomllib.load(fh)
    if port is not None:
        config.setdefault("simulator", {}).setdefault("drive", {})["port"] = port
    rig = CraneRig(config)
    endpoints = await rig.start()
    try:
        for kind, url in endpoints.items():
            print(f"{rig.plant} drive {kind} endpoint: {url}", flush=True)
        if rig.pki is not None:
            print(f"certificates: {rig.pki_dir.resolve()}", flush=True)
        await asyncio.Event().wait()
    finally:
        await rig.stop()
