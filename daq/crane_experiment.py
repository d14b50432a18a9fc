"""Crane identification experiment: training and validation multisines through the servo drive.

For each role (training, validation): design the excitation, upload it, enable, start, wait
until done, read the 10 kHz trace back, disable, and publish the trace as ``crane.trace`` frames
(channels torque_cmd, torque, speed; N*m, N*m, rad/s) between ``trajectory_start`` and
``trajectory_end`` events on ``crane.plan``. A Recorder writes the bus into the session store.
The plan runs in :class:`daq.safety.SafeStateGuard`: the drive is stopped and disabled on every
exit (normal end, exception, Ctrl-C/cancel, drive fault, lost connection) and the session is
marked ``aborted`` with the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from pathlib import Path

import numpy as np

from daq.bus import BusPublisher, BusSubscriber
from daq.config import get
from daq.frames import Event, Frame
from daq.recorder import Recorder
from daq.safety import SafeStateGuard
from daq.store import SessionStore
from drivers.servo_drive import ServoDrive

log = logging.getLogger(__name__)

TRACE_STREAM = "crane.trace"
PLAN_STREAM = "crane.plan"
CHANNELS = ["torque_cmd", "torque", "speed"]
UNITS = ["N*m", "N*m", "rad/s"]
ROLES = ("training", "validation")
FRAME_SAMPLES = 5000


def design_excitation(config: dict, role: str, torque_limit: float) -> tuple[float, np.ndarray, dict]:
    """Torque trajectory for ``role`` from ``[excitation]`` (+ ``[excitation.<role>]`` overrides).

    With ``[excitation] export_dir`` set, the trajectory is also written there as
    ``<role>.csv`` (``t [s],torque [N*m]``) and ``<role>.png`` (one period and the amplitude
    spectrum); ``info["files"]`` lists them.
    """
    from identification.multisine import design_multisine, export_trajectory, plot_multisine

    exc = dict(get(config, "excitation", dict))
    exc.update(exc.pop(role, {}) or {})
    for other in ROLES:
        exc.pop(other, None)
    export_dir = exc.pop("export_dir", None)
    dt = float(exc.get("dt", 1e-4))
    duration = float(exc.get("duration", 2.0))
    n_periods = int(exc.get("n_periods", 1))
    ms = design_multisine(float(exc["f_min"]), float(exc["f_max"]), int(exc["n_lines"]), dt,
                          n_periods=n_periods, grid=str(exc.get("grid", "lin")),
                          odd_only=bool(exc.get("odd_only", False)), seed=int(exc.get("seed", 0)),
                          max_iter=int(exc.get("max_iter", 50)), period=duration / n_periods)
    amplitude = float(exc.get("amplitude", 0.5))
    if not 0 < amplitude <= 1:
        raise ValueError("[excitation] amplitude must be a fraction of the torque limit in (0, 1]")
    signal = np.asarray(ms.signal, dtype=float)
    torque = signal / np.abs(signal).max() * amplitude * torque_limit
    info = {"f_min": float(exc["f_min"]), "f_max": float(exc["f_max"]), "n_lines": int(exc["n_lines"]),
            "grid": str(exc.get("grid", "lin")), "seed": int(exc.get("seed", 0)),
            "crest_factor": float(ms.crest_factor), "peak_torque": float(np.abs(torque).max())}
    if export_dir:
        out = Path(str(export_dir))
        out.mkdir(parents=True, exist_ok=True)
        peak = amplitude * torque_limit  # the unit-peak signal scaled like `torque`
        info["files"] = [str(export_trajectory(ms, out / f"{role}.csv", peak=peak)),
                         str(plot_multisine(ms, out / f"{role}.png", peak=peak))]
    return dt, torque, info


class _Plan:
    """Runs the trajectories and publishes what the drive recorded."""

    def __init__(self, drive: ServoDrive, publisher: BusPublisher, session_id: str):
        self.drive = drive
        self.pub = publisher
        self.sid = session_id
        self.done: list[str] = []
        self._t_end = 0.0  # end of the last published trace: time bases never overlap

    async def event(self, kind: str, **body) -> None:
        await self.pub.publish(Event(PLAN_STREAM, kind, self.pub.next_seq(PLAN_STREAM), time.time(), body,
                                     session_id=self.sid))

    async def run_one(self, role: str, dt: float, torque: np.ndarray, info: dict) -> None:
        d = self.drive
        await d.load_trajectory(dt, torque)
        await d.enable()
        t0 = max(time.time(), self._t_end)
        await d.start()
        await d.wait_done()
        trace = await d.read_trace()
        await d.disable()
        n = int(trace["speed"].size)
        if n != int(round(torque.size * dt / trace["dt"])):
            expected = torque.size * dt / trace["dt"]
            raise RuntimeError(f"{role}: trace has {n} samples, expected {expected:.0f}")
        await self.event("trajectory_start", role=role, dt=trace["dt"], n=n, t0=t0, **info)
        data = np.column_stack([trace[c] for c in CHANNELS])
        for k in range(0, n, FRAME_SAMPLES):
            block = np.ascontiguousarray(data[k:k + FRAME_SAMPLES])
            await self.pub.publish(Frame(TRACE_STREAM, self.pub.next_seq(TRACE_STREAM), t0 + k * trace["dt"],
                                         trace["dt"], CHANNELS, UNITS, block, session_id=self.sid))
        self._t_end = t0 + n * trace["dt"]
        await self.event("trajectory_end", role=role, dt=trace["dt"], n=n, t0=t0)
        self.done.append(role)

    async def run(self, excitations: dict[str, tuple[float, np.ndarray, dict]]) -> None:
        for role in ROLES:
            dt, torque, info = excitations[role]
            await self.run_one(role, dt, torque, info)


async def run_crane(config: dict, store_path: str | None = None, *, rig=None,
                    on_session=None) -> str:
    """Run training + validation once and record one ``crane`` session; returns its id.

    With ``[rig] simulated = true`` (and no started ``rig`` given) the simulated crane drive is
    served on loopback for the duration of the run and ``[devices.drive] url`` points at it.
    An aborted plan still returns the session id (status ``aborted``, reason stored); set-up
    errors before a session exists are raised.
    """
    own_rig = None
    if rig is None and get(config, "rig.simulated", bool, default=False):
        from simulators.crane_rig import CraneRig

        own_rig = rig = CraneRig(config)
        await rig.start()
    dev_cfg = dict(get(config, "devices.drive", dict))
    if rig is not None:
        mode = dict(dev_cfg.get("security", {})).get("mode", "none")
        dev_cfg["url"] = rig.endpoints["secure" if mode != "none" else "plain"]
    store = SessionStore(store_path or get(config, "store.path", str))
    publisher = BusPublisher(get(config, "bus.data", str), lossless=True)
    subscriber = BusSubscriber(publisher.endpoint)
    drive = ServoDrive(dev_cfg)
    recorder: Recorder | None = None
    session_id = ""
    status, reason = "aborted", None
    try:
        await publisher.wait_for_subscribers(1)
        await drive.connect()
        limit = min(drive.cfg.torque_limit, drive.drive_limits.get("torque_limit", np.inf))
        loop = asyncio.get_running_loop()
        excitations = {role: await loop.run_in_executor(None, design_excitation, config, role, limit)
                       for role in ROLES}
        snapshot = dict(config, devices=dict(config.get("devices", {}), drive=dev_cfg))
        session_id = store.create_session("crane", snapshot, devices={"drive": await drive.device_identity()})
        if on_session:
            on_session(session_id)
        recorder = Recorder(store, session_id, subscriber).start()
        plan = _Plan(drive, publisher, session_id)
        guard = SafeStateGuard([("stop and disable drive", _safe(drive))])
        try:
            async with guard:
                await plan.run(excitations)
        except BaseException as exc:  # noqa: BLE001 - the guard reached the safe state and kept the reason
            if isinstance(exc, asyncio.CancelledError):  # also subclasses raised inside asyncua
                guard.reason = "cancelled (operator stop or shutdown)"
            log.warning("crane plan aborted: %s", guard.reason or exc)
            with contextlib.suppress(Exception):
                await plan.event("plan_outcome", status="aborted", reason=guard.reason, safe=guard.safe)
            status, reason = "aborted", guard.reason
            if isinstance(exc, asyncio.CancelledError | KeyboardInterrupt):
                raise
        else:
            await plan.event("plan_outcome", status="complete", reason=None, safe=guard.safe)
            status, reason = guard.outcome, guard.reason
    except BaseException as exc:
        if reason is None:
            reason = f"{type(exc).__name__}: {exc}"
        await drive.safe_state()
        if not session_id or isinstance(exc, asyncio.CancelledError | KeyboardInterrupt):
            raise
    finally:
        if recorder is not None:
            await recorder.stop(drain=0.2)
        if session_id:
            store.finish(session_id, status, reason)
        await drive.close()
        subscriber.close()
        publisher.close()
        store.close()
        if own_rig is not None:
            await own_rig.stop()
    return session_id


def _safe(drive: ServoDrive):
    async def action() -> None:
        # stop + disable, raising if the drive could not be reached so the guard retries
        await drive.stop()
        await drive.disable()
    return action


def crane_arrays(store: SessionStore, session_id: str) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray,
                                                                         float]]:
    """``role -> (t, torque_cmd, speed, dt)`` for every completed trajectory of a crane session.

    ``t`` starts at 0; ``torque_cmd`` is the commanded torque (N*m, the input whose effect is
    delayed by the plant's dead time), ``speed`` the measured motor speed (rad/s).
    """
    ends = {e.body["role"] for e in store.events(session_id, kind="trajectory_end")}
    if not ends:
        return {}
    stream = store.read_stream(session_id, TRACE_STREAM)
    out: dict = {}
    offset = 0  # each trajectory's frames follow its start event, in order
    for ev in store.events(session_id, kind="trajectory_start"):
        role, dt, n = ev.body["role"], float(ev.body["dt"]), int(ev.body["n"])
        rows = stream.data[offset:offset + n]
        offset += n
        if role not in ends:
            continue
        if rows.shape[0] != n:
            raise ValueError(f"session {session_id}: {role} has {rows.shape[0]} stored samples, expected {n}")
        out[role] = (np.arange(n) * dt, rows[:, CHANNELS.index("torque_cmd")].astype(float),
                     rows[:, CHANNELS.index("speed")].astype(float), dt)
    return out
