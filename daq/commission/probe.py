"""`hil devices`: connect to every device of a config, read its identity and every channel N times, and judge
each reading against the config's ranges and limits - writing nothing, enabling nothing.

The devices are the drivers of the config's typed ``[devices]`` tables, connected as `hil run` connects
them (timeouts, unit ids, serial settings, OPC UA security) but read through read-only paths: raw Modbus
registers decoded with the config's map, the serial sensor's query, the drive's status nodes (its
connection without the heartbeat, so not even the watchdog counter is written). Every device is probed
at once, so an unreachable one costs its own connect timeout, not the sum.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np

from daq.commission.causes import likely_cause, looks_like_http, slow_reads
from daq.commission.loop_lag import LoopLag
from daq.commission.plausible import decode_all, inside, likely_mistake, scatter_note
from drivers.backends import Backends
from drivers.displacement import SensorSettings, open_sensor
from drivers.errors import BadResponse, HilError
from drivers.force_source import ForceSource, ForceSourceSettings
from drivers.modal_frontend import FrontEndSettings, ModalFrontEnd
from drivers.modbus_identity import NO_IDENTITY, identity_mismatch, read_identity
from drivers.servo_drive import ServoDrive, ServoDriveConfig


@dataclass
class Channel:
    """N readings of one value: median, spread, read latency and the verdict."""

    name: str
    unit: str
    values: list[float]
    latencies: list[float]          # s per read
    span: tuple[float, float] | None
    problem: str | None = None      # why it is not plausible (None: plausible)

    def to_dict(self) -> dict:
        finite = [v for v in self.values if math.isfinite(v)]
        return {"channel": self.name, "unit": self.unit, "reads": len(self.values),
                "value": float(np.median(finite)) if finite else None,
                "spread": float(np.std(finite, ddof=1)) if len(finite) > 1 else None,
                "latency_median_s": float(np.median(self.latencies)) if self.latencies else None,
                "latency_max_s": max(self.latencies) if self.latencies else None,
                "range": list(self.span) if self.span else None, "plausible": self.problem is None,
                "problem": self.problem}


@dataclass
class DeviceReport:
    """One device: where it is, what it says it is, its channels, and what is wrong."""

    name: str
    address: str
    identity: dict[str, Any] = field(default_factory=dict)
    channels: list[Channel] = field(default_factory=list)
    error: str | None = None        # not reachable, refused, identity mismatch
    late: int = 0                   # Modbus replies that came after their request had timed out

    @property
    def ok(self) -> bool:
        return self.error is None and all(c.problem is None for c in self.channels)

    def problem(self) -> str | None:
        """What is wrong with the device, in one line without its name and address (None: nothing): its
        error, else its first implausible channel."""
        if self.error:
            return self.error.removeprefix(f"{self.name} ({self.address}): ")
        return next((f"{c.name}: {c.problem}" for c in self.channels if c.problem), None)

    def to_dict(self) -> dict:
        return {"device": self.name, "address": self.address, "ok": self.ok, "error": self.error,
                "identity": self.identity, "late_replies": self.late,
                "channels": [c.to_dict() for c in self.channels]}


async def _timed(n: int, read: Callable[[], Awaitable[Any]]
                 ) -> tuple[list[Any], list[float], list[float]]:
    """``n`` reads: their values, their latencies (s) and the time the event loop was held up during each
    (s; daq/commission/loop_lag.py: what of a latency is the PC's, not the device's)."""
    out, lat, held = [], [], []
    async with LoopLag() as lag:
        for _ in range(n):
            t0, h0 = time.perf_counter(), lag.held()
            out.append(await read())
            lat.append(time.perf_counter() - t0)
            held.append(lag.held() - h0)
    return out, lat, held


async def _force_source(name: str, s: ForceSourceSettings, reads: int, rep: DeviceReport,
                        backends: Backends | None = None) -> None:
    # built for its register map with the driver's default ranges
    dev = ForceSource(s, name=name, backends=backends)
    rep.address = dev.address
    await dev.transport.connect()
    try:
        await _modbus_identity(dev.transport, s.expect, rep)
        spans = {n: spec.range for n, spec in dev.regs.items() if spec.range is not None}
        for reg_name, spec in dev.regs.items():
            read = functools.partial(dev.transport.read_registers, spec.table, spec.address, spec.count)
            raws, lat, held = await _timed(reads, read)
            values = decode_all(spec, raws)
            ch = Channel(reg_name, spec.unit, values, lat, spec.range)
            if not inside(values, spec.range):
                others = {k: v for k, v in spans.items() if k != reg_name}
                ch.problem = likely_mistake(spec, raws, spec.range or (-math.inf, math.inf), others)
            ch.problem = ch.problem or slow_reads(lat, s.timeout, held)
            rep.channels.append(ch)
    finally:
        rep.late = dev.transport.n_late + dev.transport.n_mismatched
        dev.transport.close()


async def _sensor(name: str, s: SensorSettings, reads: int, rep: DeviceReport,
                        backends: Backends | None = None) -> None:
    dev = open_sensor(name, s, backends)
    rep.address = dev.address
    if s.protocol == "serial":
        await dev.connect()
    else:  # the link only: a wrong identity is reported below, not raised
        await dev.transport.connect()  # type: ignore[attr-defined]
    try:
        if s.protocol == "serial":
            rep.identity = {"id": await dev.identify()}  # type: ignore[attr-defined]
            if looks_like_http(rep.identity["id"]):
                raise BadResponse(name, rep.address, f"answers {rep.identity['id']!r} to {s.id_query!r}")
            values, lat, held = await _timed(reads, dev._read_raw)
            ch = Channel("displacement", "m", values, lat, dev.range)
            if not inside(values, dev.range):
                ch.problem = (f"reads {np.median(values):.4g} m, outside the plausible {dev.range[0]:g}.."
                              f"{dev.range[1]:g} m: check the sensor's zero and unit")
        else:
            spec = dev.regs["displacement"]  # type: ignore[attr-defined]
            tr = dev.transport  # type: ignore[attr-defined]
            await _modbus_identity(tr, s.expect, rep)
            raws, lat, held = await _timed(reads, lambda: tr.read_registers(spec.table, spec.address,
                                                                                spec.count))
            values = decode_all(spec, raws)
            ch = Channel("displacement", spec.unit, values, lat, dev.range)
            if not inside(values, dev.range):
                ch.problem = likely_mistake(spec, raws, dev.range, {})
        if ch.problem is None:
            ch.problem = scatter_note(values, s.sigma, "m") or slow_reads(lat, s.timeout, held)
        rep.channels.append(ch)
    finally:
        if s.protocol != "serial":
            tr = dev.transport  # type: ignore[attr-defined]
            rep.late = tr.n_late + tr.n_mismatched
        await dev.close()


async def _modbus_identity(transport: Any, expect: dict[str, str], rep: DeviceReport) -> None:
    """The device's identification (FC43) into the report, and a mismatch with ``expect`` as its error; a
    device that does not offer the function is noted, not failed (unless the config expects an identity)."""
    identity = await read_identity(transport)
    rep.identity = dict(identity) if identity is not None else {"identity": NO_IDENTITY}
    rep.error = identity_mismatch(expect, identity)


async def _drive(name: str, s: ServoDriveConfig, reads: int, rep: DeviceReport,
                        backends: Backends | None = None) -> None:
    drive = ServoDrive(s, backends=backends)
    rep.address = drive.url
    await drive.connect(heartbeat=False)  # a look, not a session: nothing written, not even the heartbeat
    try:
        rep.identity = await drive.device_identity()
        rep.error = drive.identity_mismatch(rep.identity)
        status, lat, _ = await _timed(reads, drive.status)
        for key, unit, limit in (("actual_speed", "rad/s", s.speed_limit), ("actual_torque", "N*m",
                                                                            s.torque_limit)):
            values = [float(st[key]) for st in status]
            ch = Channel(key, unit, values, lat, (-limit, limit))
            if not inside(values, ch.span):
                ch.problem = (f"reads {np.median(values):.4g} {unit} beyond the configured limit {limit:g} "
                              f"{unit}")
            rep.channels.append(ch)
        last = status[-1]
        rep.identity.update(state=str(last["state"]), enabled=bool(last["enabled"]),
                            fault_code=int(last["fault_code"]))
    finally:
        await drive.close()


async def _frontend(name: str, s: FrontEndSettings, reads: int, rep: DeviceReport,
                        backends: Backends | None = None) -> None:
    fe = ModalFrontEnd(s, name=name, backends=backends)
    rep.address = fe.address
    await fe.connect()
    try:
        rep.identity = {"idn": fe.idn}
        if looks_like_http(fe.idn):
            raise BadResponse(name, rep.address, f"answers {fe.idn!r} to '*IDN?'")
    finally:
        await fe.close()


PROBES: dict[type, Callable[[str, Any, int, DeviceReport, Backends | None], Awaitable[None]]] = {
    ForceSourceSettings: _force_source, SensorSettings: _sensor, ServoDriveConfig: _drive,
    FrontEndSettings: _frontend,
}


def device_tables(devices: Any) -> list[tuple[str, Any]]:
    """(name, settings) of every device of a typed ``[devices]`` table (sensor tables flattened); none for
    a table that is not typed (a rig kind without a ``[devices]`` struct: nothing a probe could read)."""
    out: list[tuple[str, Any]] = []
    if not isinstance(devices, msgspec.Struct):
        return out
    for key in devices.__struct_fields__:
        value = getattr(devices, key)
        if isinstance(value, dict):
            out += [(n, v) for n, v in value.items() if isinstance(v, msgspec.Struct)]
        elif isinstance(value, msgspec.Struct):
            out.append((key, value))
    return out


async def _one(name: str, settings: Any, reads: int, backends: Backends | None = None) -> DeviceReport:
    rep = DeviceReport(name, str(getattr(settings, "address", "") or getattr(settings, "url", "") or "?"))
    probe = next((p for t, p in PROBES.items() if isinstance(settings, t)), None)
    if probe is None:
        rep.error = f"no read-only probe for a {type(settings).__name__} table"
        return rep
    try:
        await probe(name, settings, reads, rep, backends)
    except HilError as exc:
        rep.error = str(exc) if str(exc).startswith(name) else f"{name} ({rep.address}): {exc}"
        cause = likely_cause(exc, settings, rep.late)
        if cause:
            rep.error += f" - {cause}"
    except (OSError, TimeoutError) as exc:
        rep.error = f"{name} ({rep.address}): {exc or type(exc).__name__}"
    return rep


async def probe_devices(devices: Any, reads: int = 10,
                        backends: Backends | None = None) -> list[DeviceReport]:
    """Probe every device of a typed ``[devices]`` table at once; one report per device, in config order.
    ``backends``: where the drivers' requests go (:mod:`drivers.backends`; default their protocols)."""
    tables = device_tables(devices)
    return list(await asyncio.gather(*(_one(n, s, reads, backends) for n, s in tables)))


async def probe_config(rig: Any, cfg: Any, reads: int = 10) -> list[DeviceReport]:
    """The devices of a checked config: a simulated config's simulator started first (as `hil run` does)."""
    if not cfg.rig.simulated:
        return await probe_devices(cfg.devices, reads)
    sim = rig.simulator(cfg)
    await sim.start()
    try:
        return await probe_devices(rig.simulated_devices(sim, cfg), reads)
    finally:
        with contextlib.suppress(Exception):
            await sim.stop()
