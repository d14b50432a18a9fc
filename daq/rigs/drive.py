"""What every rig behind the OPC UA servo drive shares (crane, oscillator, pendulum, crane-adjoint).

Config: ``[devices.drive]`` (:class:`DriveDevice`). Devices: one :class:`~drivers.servo_drive.ServoDrive`
whose safe state is "stopped and disabled". A run of such a rig is one or more *trajectories*: a sampled
input uploaded to the drive, played from its buffer, and its trace read back (:func:`run_trajectory`),
then published as ``trajectory_start`` - trace frames - ``trajectory_end`` (:func:`record_trajectory`).
The same bracket is read back twice: from the bus by the online identifiers
(:class:`TrajectoryReceiver`) and from the store by the analyses (:func:`read_trajectories`).
Online identifiers start through :func:`daq.online.estimates.start_online`. :class:`DriveRig` is the
base class of these kinds: its devices, simulator and simulated device tables.

This is no rig kind: the rig packages import it, it imports none of them.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import msgspec
import numpy as np
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from daq.bus.frames import Event, Frame
from daq.config.load import Invalid, parse, to_dict
from daq.config.schema import Table
from daq.rigs.base import A, C, R, Rig, RunContext
from drivers.backends import Backends
from drivers.clock import WALL, Clock
from drivers.errors import HilError
from drivers.servo_settings import ServoDriveConfig
from simulators.settings import DriveSettings

if TYPE_CHECKING:  # annotations only
    from daq.store.reads import SessionReads
    from drivers.servo_drive import DriveTrace, ServoDrive

FRAME_SAMPLES = 5000                              #: samples per published trace frame
TRACE_CHANNELS: Final = ("torque_cmd", "torque", "speed")  #: the drive's trace, in the order it is published


# ----------------------------------------------------------------------------------------- config


#: ``[devices.drive]`` and its ``security`` table are the driver's own settings structs (defaults, ranges and
#: the security rules written there once)
DriveDevice = ServoDriveConfig


#: ``[simulator.drive]`` is the simulated drive's own settings struct (simulators/settings.py)
DriveSimTable = DriveSettings


class DriveDevicesTable(Table, kw_only=True):
    """``[devices]`` of a drive rig: the one drive."""

    drive: DriveDevice


def check_drive(drive: DriveDevice, simulator: DriveSimTable | None, inputs: Sequence[tuple[str, float, int]]
                ) -> None:
    """The rules of a drive rig beyond its tables, for `hil check` and `hil run` before anything opens:
    the security files exist and parse, the password's variable is set, and - against the simulated
    drive - every input (``(key, dt, samples)``) has a sample time and a length the drive plays; and the
    driver is built from the table as `hil run` builds it (not connected)."""
    from drivers.servo_drive import ServoDrive  # lazy: asyncua, not needed to read or analyse a session

    try:
        ServoDrive(drive)
    except (TypeError, ValueError, KeyError, HilError) as exc:
        raise Invalid("devices.drive", str(exc), table=True) from None
    sec = drive.security
    if sec.mode != "none":
        for key in ("certificate", "private_key", "server_certificate"):
            path = getattr(sec, key)
            if path:
                why = _pki_problem(path, key)
                if why:
                    raise Invalid(f"devices.drive.security.{key}", why)
        if sec.server_trust_dir and not Path(sec.server_trust_dir).is_dir():
            raise Invalid("devices.drive.security.server_trust_dir",
                          f"{sec.server_trust_dir} is not a folder (the trusted servers' certificates)")
    if sec.user and sec.password is None and sec.password_env and sec.password_env not in os.environ:
        raise Invalid("devices.drive.security.password_env",
                      f"${sec.password_env} is not set: export it (the drive user's password) before the run")
    for key, dt, n in inputs:
        if simulator is not None:
            why = simulator.accepts(dt)
            if why:
                raise Invalid(key, f"input sample time {dt:g} s: {why}")
            if n > simulator.max_samples:
                raise Invalid(key, f"{n} input samples exceed [simulator.drive].max_samples "
                                   f"({simulator.max_samples})")
        if n > drive.max_samples:
            raise Invalid(key, f"{n} input samples exceed [devices.drive].max_samples ({drive.max_samples})")


def _pki_problem(path: str, key: str) -> str | None:
    """Why a certificate or private-key file cannot be used (None: it can)."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        return f"{path}: {exc.strerror or exc} (generate it, e.g. simulators/certs.py, or fix the path)"
    pem = data.lstrip().startswith(b"-----")
    try:
        if key == "private_key":
            (serialization.load_pem_private_key if pem else serialization.load_der_private_key)(data, None)
        else:
            (x509.load_pem_x509_certificate if pem else x509.load_der_x509_certificate)(data)
    except (ValueError, TypeError) as exc:
        what = "private key" if key == "private_key" else "certificate"
        return f"{path} is no readable {what} (PEM or DER): {exc}"
    return None


# ----------------------------------------------------------------------------------------- devices


@dataclass
class DriveRigDevices:
    """The connected drive; its safe state (stop, disable, ``enabled`` read back) runs on every exit."""

    drive: ServoDrive
    safe_actions: list = field(default_factory=list)

    async def identities(self) -> dict[str, dict]:
        return {"drive": await self.drive.device_identity()}

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.drive.close()


async def open_devices(cfg: object, devices: DriveDevicesTable,
                       backends: Backends | None = None) -> DriveRigDevices:
    """Connect the drive of ``[devices.drive]``; closed again when the connection fails."""
    from drivers.servo_drive import ServoDrive  # lazy: asyncua, not needed to read or analyse a session

    drive = ServoDrive(devices.drive, backends=backends)
    # stop, disable and read `enabled` back, each step within its own budget (drivers/safe_state.py)
    rig_devices = DriveRigDevices(drive, [("stop and disable drive", drive.safe_action())])
    try:
        await drive.connect()
        await drive.check_identity()  # the configured drive, or nothing moves
    except BaseException:
        await rig_devices.close()
        raise
    return rig_devices


def simulator(cfg: Any):
    """The simulated drive (with the plant of ``[simulator]``) for ``[rig].simulated = true``."""
    from simulators.crane_rig import CraneRig  # lazy: scipy and the simulator, only a simulated run starts it

    return CraneRig(to_dict(cfg))


def simulated_devices(sim, cfg: Any) -> DriveDevicesTable:
    """The ``[devices]`` with the drive's url pointed at the started simulator (its secure endpoint when
    the drive's security is on)."""
    devices = cfg.devices if cfg.devices is not None else parse({"drive": {"url": "opc.tcp://sim"}},
                                                                   DriveDevicesTable, None, ["devices"])
    url = sim.endpoints["secure" if devices.drive.security.mode != "none" else "plain"]
    return msgspec.structs.replace(devices, drive=msgspec.structs.replace(devices.drive, url=url))


class DriveRig(Rig[C, DriveRigDevices, A, R]):
    """A rig kind behind the one servo drive: devices, simulator and simulated tables as above; a kind
    adds its plan, analysis and report (and its ``describe_simulator`` note)."""

    async def open_devices(self, cfg: C, tables: DriveDevicesTable,
                           backends: Backends | None = None) -> DriveRigDevices:
        return await open_devices(cfg, tables, backends)

    def simulator(self, cfg: C):
        return simulator(cfg)

    def simulated_devices(self, sim, cfg: C) -> DriveDevicesTable:
        return simulated_devices(sim, cfg)


def describe_simulator(sim, note: str = "") -> list[dict]:
    """The `hil sim` table of a simulated drive: one row per endpoint; ``note`` ends the nodes column."""
    s = sim.settings
    return [{"device": "drive", "protocol": "opc.tcp", "address": url, "security": kind,
             "nodes": f"namespace {s.namespace}, object {s.axis}{note}"}
            for kind, url in sim.endpoints.items()]


# ----------------------------------------------------------------------------------------- plan


@dataclass(frozen=True)
class TraceStreams:
    """Where a drive rig publishes its trajectories: the plan stream with the bracketing events, the
    trace stream with the frames, and the names and units the trace's columns carry there."""

    plan: str
    trace: str
    channels: Sequence[str]
    units: Sequence[str]


async def run_trajectory(drive: ServoDrive, dt: float, samples: np.ndarray, *, not_before: float = 0.0,
                         label: str = "", clock: Clock = WALL) -> tuple[float, DriveTrace]:
    """Upload ``samples`` (held for ``dt`` s each), enable, start, wait, read the trace back, disable.

    Returns (t0, trace): ``t0`` the start's time on the run's ``clock``, never before ``not_before``; the
    trace has ``dt`` and one array per :data:`TRACE_CHANNELS`. RuntimeError (``label`` first) when the
    trace does not hold the trajectory's length at its own cycle."""
    await drive.load_trajectory(dt, samples)
    await drive.enable()
    t0 = max(clock.time(), not_before)
    await drive.start()
    await drive.wait_done()
    trace = await drive.read_trace()
    await drive.disable()
    n = int(trace["speed"].size)
    expected = int(round(samples.size * dt / trace["dt"]))
    if n != expected:
        raise RuntimeError(f"{label}trace has {n} samples, expected {expected}")
    return t0, trace


async def hold_trajectory(drive: ServoDrive, dt: float, samples: np.ndarray, *,
                          not_before: float = 0.0, clock: Clock = WALL) -> tuple[float, dict[str, Any]]:
    """:func:`run_trajectory` in a dry run: the same commands (checked against the limits, then held by the
    driver), but the drive never starts, so there is nothing to wait for and no trace; the drive's status
    is read once instead. Returns (t0, status)."""
    if not drive.calls.holds_writes:  # never move the drive from here
        raise RuntimeError("hold_trajectory outside a dry run: the drive's commands are not held")
    await drive.load_trajectory(dt, samples)
    await drive.enable()
    t0 = max(clock.time(), not_before)
    await drive.start()
    status = await drive.status()
    await drive.disable()
    return t0, {k: v if isinstance(v, bool | int | float) else str(v) for k, v in status.items()}


async def record_trajectory(ctx: RunContext[Any, DriveRigDevices], streams: TraceStreams, dt: float,
                            samples: np.ndarray, info: Mapping[str, Any], *, role: str, before: str,
                            recorded: str, not_before: float = 0.0, label: str = "") -> float:
    """One trajectory of a plan: checkpoint ``before``, :func:`run_trajectory`, then publish the trace
    between ``trajectory_start`` (with ``role`` and ``info``) and ``trajectory_end``; counts it in
    ``ctx.summary["runs"]`` and moves the progress bar (``recorded`` + the sample count).

    Returns the end of the published trace's time base (a next trajectory starts no earlier if asked)."""
    await ctx.checkpoint(before)
    if ctx.dry_run:  # the commands are held, the drive only read (docs/dry-run.md)
        t0, status = await hold_trajectory(ctx.devices.drive, dt, samples, not_before=not_before,
                                           clock=ctx.clock)
        await ctx.event(streams.plan, "trajectory_held", role=role, dt=dt, n=int(samples.size), t0=t0,
                        status=status, **info)
        ctx.summary["runs"] += 1
        ctx.advance(1, f"{recorded} (dry run: held, {samples.size} samples not sent)")
        return t0
    t0, trace = await run_trajectory(ctx.devices.drive, dt, samples, not_before=not_before, label=label,
                                     clock=ctx.clock)
    tdt = trace["dt"]
    n = int(trace["speed"].size)
    await ctx.event(streams.plan, "trajectory_start", role=role, dt=tdt, n=n, t0=t0, **info)
    data = np.column_stack([trace[c] for c in TRACE_CHANNELS])
    await ctx.publish_blocks(streams.trace, data, t0, tdt, list(streams.channels), list(streams.units),
                             FRAME_SAMPLES)
    await ctx.event(streams.plan, "trajectory_end", role=role, dt=tdt, n=n, t0=t0)
    ctx.summary["runs"] += 1
    ctx.advance(1, f"{recorded} ({n} samples)")
    return t0 + n * tdt


# ----------------------------------------------------------------------------------------- read-back


@dataclass
class ReceivedTrajectory:
    """A trajectory as it came over the bus: its start event's body, the columns of its frames, the
    frames' rows one after the other (``data`` may hold fewer or more rows than ``n``) and its end event."""

    start: dict
    channels: list[str]
    data: np.ndarray
    end: Event

    @property
    def n(self) -> int:
        return int(self.start["n"])

    @property
    def dt(self) -> float:
        return float(self.start["dt"])


class TrajectoryReceiver:
    """Collects the trace frames between ``trajectory_start`` and ``trajectory_end`` from a bus (live or
    a replay); :meth:`take` returns each trajectory when its end event arrives."""

    def __init__(self, plan_stream: str, trace_stream: str):
        self.plan_stream, self.trace_stream = plan_stream, trace_stream
        self._open: tuple[dict, list[tuple[list[str], np.ndarray]]] | None = None

    def take(self, msg: Frame | Event) -> ReceivedTrajectory | None:
        if isinstance(msg, Frame):
            if msg.stream == self.trace_stream and self._open is not None:
                self._open[1].append((list(msg.channels), np.asarray(msg.data, float)))
            return None
        if msg.stream != self.plan_stream:
            return None
        if msg.kind == "trajectory_start":
            self._open = (dict(msg.body), [])
        elif msg.kind == "trajectory_end" and self._open is not None:
            (start, blocks), self._open = self._open, None
            if not blocks:
                return ReceivedTrajectory(start, [], np.zeros((0, 0)), msg)
            return ReceivedTrajectory(start, blocks[0][0], np.concatenate([d for _, d in blocks]), msg)
        return None


@dataclass
class StoredTrajectory:
    """A completed trajectory of a session: its place among the trajectories started (``index``), its
    start event's body and its rows of the trace stream (as float)."""

    index: int
    start: dict
    rows: np.ndarray

    @property
    def dt(self) -> float:
        return float(self.start["dt"])


def read_trajectories(store: SessionReads, session_id: str, plan_stream: str, trace_stream: str,
                      name: Callable[[int, dict], str]) -> tuple[list[StoredTrajectory], int]:
    """The completed trajectories of a session, in order, and how many were started.

    Each ``trajectory_start`` .. ``trajectory_end`` pair on ``plan_stream`` owns the next ``n`` samples
    of ``trace_stream`` (one started but cut off before its end event still takes its ``n``, and is
    left out); only those ranges are read. ValueError (naming the trajectory by ``name(index, start
    body)``) when the store holds fewer samples than a completed trajectory claims."""
    marks = [e for e in store.events(session_id, stream=plan_stream)
             if e.kind in ("trajectory_start", "trajectory_end")]
    out: list[StoredTrajectory] = []
    offset, started = 0, 0
    for i, ev in enumerate(marks):
        if ev.kind != "trajectory_start":
            continue
        index, started = started, started + 1
        n = int(ev.body["n"])
        start, offset = offset, offset + n
        if not (i + 1 < len(marks) and marks[i + 1].kind == "trajectory_end"):
            continue
        rows = store.read_range(session_id, trace_stream, start, start + n).data
        if rows.shape[0] != n:
            raise ValueError(f"session {session_id}: {name(index, ev.body)} has {rows.shape[0]} stored "
                             f"samples, expected {n}")
        out.append(StoredTrajectory(index, dict(ev.body), rows.astype(float)))
    return out, started
