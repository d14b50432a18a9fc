"""The press stiffness experiment: force staircase with online setpoint correction, recorded as a session.

Data flow (all on one event loop, every consumer on the bus):

    acquisition (load cell, pressure, command @ rate) --frames press.force--> recorder, setpoint corrector
    plan: step event -> corrector.reach(q_d) -> setpoint event -> sensor block (frames press.sensors)
          -> measurement event (desired force, actual force, mean displacement per sensor)

The plan runs inside :class:`daq.safety.SafeStateGuard`: force to zero and source disabled on every
exit path. A fault of the acquisition (device fault bit, lost connection) cancels the plan.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from daq.bus import BusPublisher, BusSubscriber
from daq.config import get
from daq.frames import Event, Frame
from daq.press_plan import PressPlan
from daq.recorder import Recorder
from daq.safety import OperatorStop, PlanAborted, SafeStateGuard
from daq.setpoint_correction import CorrectionResult, CorrectionSettings, SetpointCorrector
from daq.store import SessionStore

log = logging.getLogger(__name__)

FORCE_STREAM = "press.force"
SENSOR_STREAM = "press.sensors"
PLAN_STREAM = "press.plan"
TASK_STOP_TIMEOUT = 10.0  # s a cancelled plan or acquisition task gets to finish


@dataclass
class PressRunResult:
    """What a press run produced: the session and how it ended."""

    session_id: str
    status: str
    reason: str | None
    setpoints: int = 0
    not_reached: int = 0
    safe: bool = True
    safe_errors: list[str] = field(default_factory=list)


class DeviceFault(Exception):
    """The force source reported a fault or stopped answering during the plan."""


@dataclass
class _Devices:
    source: object
    sensors: dict[str, object]


async def _open_devices(device_cfg: dict) -> _Devices:
    from drivers.displacement import open_sensor
    from drivers.force_source import ForceSource

    source = ForceSource(device_cfg["force_source"], name="force_source")
    sensors = {name: open_sensor(name, cfg) for name, cfg in device_cfg["sensors"].items()}
    await source.connect()
    await asyncio.gather(*(s.connect() for s in sensors.values()))
    return _Devices(source, sensors)


async def _close_devices(devices: _Devices | None) -> None:
    if devices is None:
        return
    for dev in (devices.source, *devices.sensors.values()):
        with contextlib.suppress(Exception):
            await dev.close()


class ForceAcquisition:
    """Polls the force source at ``rate`` Hz and publishes blocks of (command, force, pressure).

    A poll may fail once or twice on a busy line; ``max_failures`` failures in a row end the plan.
    """

    def __init__(self, source, publisher: BusPublisher, session_id: str, rate: float = 200.0,
                 block: int = 10, max_failures: int = 3):
        self.source = source
        self.publisher = publisher
        self.session_id = session_id
        self.period = 1.0 / rate
        self.block = block
        self.command = 0.0
        self.max_failures = max_failures

    async def run(self) -> None:
        rows: list[tuple[float, float, float]] = []
        stamps: list[float] = []
        next_t = time.monotonic()
        failures = 0
        while True:
            try:
                force = await self.source.read_force()
                pressure = await self.source.read_pressure()
                failures = 0
            except Exception as exc:  # noqa: BLE001 - repeated failures of the source end the plan
                failures += 1
                if failures >= self.max_failures:
                    raise DeviceFault(f"force source lost: {exc}") from exc
                log.warning("force source poll failed (%d/%d): %s", failures, self.max_failures, exc)
                next_t = time.monotonic() + self.period
                continue
            stamps.append(time.time())
            rows.append((self.command, force, pressure))
            if len(rows) >= self.block:
                await self._publish(rows, stamps)
                rows, stamps = [], []
                await self._check_status()
            next_t += self.period
            await asyncio.sleep(max(0.0, next_t - time.monotonic()))

    async def _check_status(self) -> None:
        try:
            await self.source.heartbeat()
            status = await self.source.read_status()
        except Exception as exc:  # noqa: BLE001
            raise DeviceFault(f"force source lost: {exc}") from exc
        fault = getattr(status, "fault_code", 0)
        if fault:
            raise DeviceFault(f"force source fault code {fault}: {getattr(status, 'fault_text', '')}".strip())

    async def _publish(self, rows, stamps) -> None:
        await self.publisher.publish(Frame(
            stream=FORCE_STREAM, seq=self.publisher.next_seq(FORCE_STREAM), t0=stamps[0], dt=None,
            channels=["force_cmd", "force", "pressure"], units=["N", "N", "Pa"],
            data=np.asarray(rows, dtype=np.float64), timestamps=np.asarray(stamps),
            session_id=self.session_id))


class PressExperiment:
    """One run of the press plan against connected devices, publishing on ``publisher``."""

    def __init__(self, devices: _Devices, publisher: BusPublisher, corrector: SetpointCorrector,
                 acquisition: ForceAcquisition, plan: PressPlan, session_id: str,
                 on_progress: Callable[[dict], None] | None = None):
        self.devices = devices
        self.publisher = publisher
        self.corrector = corrector
        self.acquisition = acquisition
        self.plan = plan
        self.session_id = session_id
        self.on_progress = on_progress
        self.stop_requested = False
        self.setpoints = 0
        self.not_reached = 0

    def request_stop(self) -> None:
        """Finish the current step, then stop (first Ctrl-C)."""
        self.stop_requested = True

    async def event(self, kind: str, **body) -> None:
        await self.publisher.publish(Event(
            stream=PLAN_STREAM, kind=kind, seq=self.publisher.next_seq(PLAN_STREAM), t=time.time(),
            body=body, session_id=self.session_id))

    async def set_command(self, force: float) -> None:
        await self.devices.source.set_force(force)
        self.acquisition.command = force

    async def run_plan(self) -> None:
        plan = self.plan
        q_d = plan.q_desired
        await self.event("plan_start", n_series=plan.n_series, q_desired=q_d.tolist(),
                         sensors=list(self.devices.sensors))
        await self.devices.source.enable()
        if plan.precondition:
            await self.precondition()
        for i in range(plan.n_series):
            for j, q in enumerate(q_d):
                if self.stop_requested:
                    raise PlanAborted(f"stopped by the operator before series {i} step {j}")
                await self.event("step", series=i, index=j, q_desired=float(q))
                result = await self.corrector.reach(float(q))
                await self._report_setpoint(i, j, result)
                if plan.settle_time > 0:
                    await asyncio.sleep(plan.settle_time)
                await self._measure(i, j, float(q))
                self.setpoints += 1
        await self.set_command(0.0)
        await self.event("plan_end", setpoints=self.setpoints, not_reached=self.not_reached)

    async def precondition(self) -> None:
        """Load to q_max and back to 0 once, unrecorded as a series.

        The guide friction remembers the force history; a full cycle wipes that memory, so the first
        recorded series starts from the same state as every later one (not from the virgin state).
        """
        for q in (self.plan.q_max, 0.0):
            if self.stop_requested:
                raise PlanAborted("stopped by the operator during preconditioning")
            result = await self.corrector.reach(q)
            await self.event("precondition", q_desired=q, q_actual=result.q_actual, reached=result.reached)

    async def _report_setpoint(self, i: int, j: int, r: CorrectionResult) -> None:
        kind = "setpoint_reached" if r.reached else "setpoint_not_reached"
        if not r.reached:
            self.not_reached += 1
        await self.event(kind, series=i, index=j, q_desired=r.q_desired, q_actual=r.q_actual,
                         residual=r.residual, iterations=r.iterations, command=r.command,
                         reversals=r.reversals)
        if self.on_progress:
            self.on_progress({"series": i, "index": j, "q_desired": r.q_desired, "residual": r.residual,
                              "reached": r.reached})

    async def _measure(self, i: int, j: int, q: float) -> None:
        """Read a block from every sensor while the load cell keeps streaming; record both."""
        names = list(self.devices.sensors)
        t_start = time.time()
        blocks = await asyncio.gather(*(
            self.devices.sensors[n].read_many(self.plan.n_samples, self.plan.sample_interval) for n in names))
        t_end = time.time()
        z = np.column_stack([np.asarray(b, dtype=np.float64) for b in blocks])
        stamps = np.linspace(t_start, t_end, z.shape[0])
        await self.publisher.publish(Frame(
            stream=SENSOR_STREAM, seq=self.publisher.next_seq(SENSOR_STREAM), t0=t_start, dt=None,
            channels=names, units=["m"] * len(names), data=z, timestamps=stamps, session_id=self.session_id))
        q_actual = await self.corrector.measure(max(t_end - t_start, 0.02), since=t_start)
        await self.event("measurement", series=i, index=j, q_desired=q, q_actual=q_actual,
                         z=z.mean(axis=0).tolist(), z_std=z.std(axis=0).tolist(), n_samples=int(z.shape[0]),
                         sensors=names, units="m")


def _device_identities(devices: _Devices) -> dict[str, dict]:
    out = {"force_source": devices.source.device_identity()}
    out.update({name: s.device_identity() for name, s in devices.sensors.items()})
    return out


async def run_press(config: dict, store_path: str | None = None, *, show_progress: bool = True,
                    handle_sigint: bool = True, on_session: Callable[[str], None] | None = None,
                    rig=None) -> PressRunResult:
    """Run the press plan once and record one session; returns how it ended.

    With ``[rig] simulated = true`` (and no ``rig`` given) the simulated press is served on loopback
    for the duration of the run. ``rig``: an already started simulated rig (tests use it to kill
    devices mid-plan). Errors before the plan starts (devices unreachable) are raised after the
    session, if one was opened, is marked aborted.
    """
    own_rig = None
    if rig is None and get(config, "rig.simulated", bool, default=False):
        from simulators.press_rig import PressRig

        own_rig = rig = PressRig(config)
        await rig.start()
    device_cfg = rig.device_config() if rig is not None else get(config, "devices", dict)
    plan = PressPlan.from_config(config)
    source_cfg = device_cfg["force_source"]
    settings = CorrectionSettings.from_config(
        get(config, "correction", dict, default={}),
        min_command=float(source_cfg.get("f_min", 0.0)), max_command=float(source_cfg.get("f_max", math.inf)))
    acq_cfg = get(config, "acquisition", dict, default={})

    store = SessionStore(store_path or get(config, "store.path", str))
    publisher = BusPublisher(get(config, "bus.data", str), lossless=True)
    rec_sub = BusSubscriber(publisher.endpoint)
    corr_sub = BusSubscriber(publisher.endpoint, topics=("data/" + FORCE_STREAM,))
    devices: _Devices | None = None
    session_id = ""
    recorder: Recorder | None = None
    experiment: PressExperiment | None = None
    guard: SafeStateGuard | None = None
    status, reason, failure = "aborted", None, None
    progress = _Progress(plan) if show_progress else None
    # Ctrl-C is ours from here to the end of the clean-up: a late second press must not interrupt the
    # safe state or the bookkeeping of the session
    stopper = OperatorStop(on_first=lambda: experiment is not None and experiment.request_stop())
    if handle_sigint:
        stopper.install()
    try:
        await publisher.wait_for_subscribers(2)
        devices = await _open_devices(device_cfg)
        snapshot = dict(config, devices=device_cfg)
        session_id = store.create_session("press", snapshot, devices=_device_identities(devices))
        if on_session:
            on_session(session_id)
        recorder = Recorder(store, session_id, rec_sub).start()
        acquisition = ForceAcquisition(devices.source, publisher, session_id,
                                       rate=float(acq_cfg.get("rate", 200.0)),
                                       block=int(acq_cfg.get("block", 10)))
        corrector = SetpointCorrector(corr_sub, None, settings)
        experiment = PressExperiment(devices, publisher, corrector, acquisition, plan, session_id,
                                     on_progress=progress.update if progress else None)
        corrector.set_command = experiment.set_command
        experiment.stop_requested = stopper.requested  # Ctrl-C during set-up stops before the first step
        guard = SafeStateGuard([("force to zero and disable", devices.source.safe_state)])
        try:
            async with guard:
                await _run_with_acquisition(experiment, acquisition, stopper)
        except BaseException as exc:  # noqa: BLE001 - the guard reached the safe state and kept the reason
            log.warning("press plan aborted: %s", guard.reason or exc)
        await _record_outcome(experiment, guard)
        status, reason = guard.outcome, guard.reason
    except BaseException as exc:  # set-up failed before the plan ran
        failure = exc
        reason = f"{type(exc).__name__}: {exc}"
        if devices is not None:
            await SafeStateGuard([("force to zero", devices.source.safe_state)]).reach_safe_state()
    finally:
        if progress:
            progress.close()
        if recorder is not None:
            await recorder.stop(drain=0.2)
        if session_id:
            store.finish(session_id, status, reason)
        await _close_devices(devices)
        rec_sub.close()
        corr_sub.close()
        publisher.close()
        store.close()
        stopper.uninstall()
        if own_rig is not None:
            await own_rig.stop()
    if failure is not None:
        raise failure
    return PressRunResult(session_id, status, reason, experiment.setpoints, experiment.not_reached,
                          guard.safe, guard.errors)


async def _record_outcome(experiment: PressExperiment, guard: SafeStateGuard) -> None:
    """Put a final event on the bus so the recording says how the plan ended."""
    with contextlib.suppress(Exception):
        await experiment.event("plan_outcome", status=guard.outcome, reason=guard.reason, safe=guard.safe,
                               safe_errors=guard.errors)


async def _run_with_acquisition(experiment: PressExperiment, acquisition: ForceAcquisition,
                                stopper: OperatorStop) -> None:
    """Run the plan and the acquisition side by side; whichever fails first ends both."""
    acq_task = asyncio.ensure_future(acquisition.run())
    plan_task = asyncio.ensure_future(experiment.run_plan())
    stopper.target = plan_task
    try:
        done, _ = await asyncio.wait({acq_task, plan_task}, return_when=asyncio.FIRST_COMPLETED)
        if acq_task in done and not plan_task.done():
            plan_task.cancel()
            await asyncio.wait({plan_task}, timeout=TASK_STOP_TIMEOUT)
            acq_task.result()  # raises the device fault
            raise PlanAborted("acquisition stopped unexpectedly")
        await plan_task  # raises PlanAborted / device errors / CancelledError
    finally:
        stopper.target = None
        await _stop_tasks(plan_task, acq_task)


async def _stop_tasks(*tasks: asyncio.Future) -> None:
    """Cancel and await ``tasks``, but never wait for longer than ``TASK_STOP_TIMEOUT``.

    Stopping must not hang the way to the safe state: a task that ignores its cancellation is
    reported and left behind.
    """
    pending = [t for t in tasks if not t.done()]
    for t in pending:
        t.cancel()
    if pending:
        _, still = await asyncio.wait(pending, timeout=TASK_STOP_TIMEOUT)
        for t in still:
            log.error("task %r did not stop within %.0f s of its cancellation", t, TASK_STOP_TIMEOUT)
    for t in tasks:
        if t.done() and not t.cancelled():
            t.exception()  # retrieved: the caller reports the failure that mattered


class _Progress:
    """A rich progress bar: setpoint, series and the last force error."""

    def __init__(self, plan: PressPlan):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                             TimeElapsedColumn(), transient=False)
        self._task = self._bar.add_task("press plan", total=plan.n_series * len(plan.q_desired))
        self._bar.start()

    def update(self, info: dict) -> None:
        mark = "" if info["reached"] else " NOT REACHED"
        self._bar.update(self._task, advance=1, description=(
            f"series {info['series'] + 1} step {info['index'] + 1:2d} q_d={info['q_desired']:8.0f} N "
            f"error={info['residual']:+7.1f} N{mark}"))

    def close(self) -> None:
        self._bar.stop()
