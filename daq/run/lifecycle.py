"""The one run lifecycle of every rig kind.

``run(config)`` checks the config whole, starts the simulated rig when ``[rig].simulated`` says so,
checks that every device answers plausibly (:mod:`daq.run.preflight`; else it refuses before its first
write), opens the devices, creates the session, records the bus, serves operator commands, and runs the
rig's plan inside the safe-state guard with two-level Ctrl-C. Whatever ends the plan - its normal end, an
exception, Ctrl-C, SIGTERM or SIGHUP (both stop at once, like a second Ctrl-C), an operator stop, a
device fault, a failed recorder, a stalled bus - the devices get their safe-state actions, the session
gets its status and reason and a ``plan_outcome`` event (recorded straight into the store when the bus
cannot carry it), and the result says whether the safe state was *confirmed*.

The rig's plan sees only a :class:`RunContext`: its devices, its typed config, ``event``/``publish``,
``subscribe``, ``spawn`` (a companion task whose failure ends the plan, e.g. acquisition) and
``checkpoint`` (where an operator stop or pause takes effect).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from daq import json_codec
from daq.bus.frames import Event, Frame
from daq.bus.keys import load_keys, with_own_client
from daq.bus.pubsub import BusPublisher, BusSubscriber
from daq.config.load import ConfigError, store_path_for
from daq.config.load import snapshot as config_snapshot
from daq.config.schema import RigConfig
from daq.rigs import check_rules, get_rig, parse_config
from daq.rigs.base import Devices, Rig
from daq.rigs.config import sim_speed_of, with_sim_speed
from daq.run.collector import frozen_for_the_plan
from daq.run.control import ACTIONS, CommandChannel, channel_keys
from daq.run.dry_run import DryRun, as_dry_run
from daq.run.preflight import check_devices
from daq.run.progress import ProgressBar
from daq.run.recorder import Recorder
from daq.run.safety import OperatorStop, PlanAborted, SafeStateGuard
from daq.store.read_write import SessionStore
from daq.store.reserve import DiskReserve
from drivers.backends import Backends
from drivers.clock import WALL, Clock
from drivers.recording import RecordingBackends

log = logging.getLogger(__name__)

TASK_STOP_TIMEOUT = 10.0  # s a cancelled plan or companion task gets to finish
RECORDER_DRAIN_S = 0.2    # s of quiet bus the recorder waits for before it stops


@dataclass
class RunResult:
    """How a run ended. ``safe`` is True only when every step of every safe-state action succeeded;
    ``safe_failed_steps`` names each one that did not (action, device, step, cause)."""

    session_id: str
    kind: str
    status: str
    reason: str | None
    safe: bool
    safe_errors: list[str] = field(default_factory=list)
    summary: dict = field(default_factory=dict)
    store: str = ""
    safe_failed_steps: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


class RunContext:
    """What a plan may use: devices, config, the bus, companions, checkpoints and progress."""

    def __init__(self, rig: Rig, config: Any, publisher: BusPublisher,
                 progress: Callable[[int, str | None], None] | None = None, clock: Clock = WALL):
        self.rig = rig
        self.config = config
        self.publisher = publisher
        self.clock = clock  # the run's one clock: the plan's waits and recorded times (drivers/clock.py)
        self.devices: Any = None
        self.recorder: Recorder | None = None  # for status and for tests that break it on purpose
        self.session_id = ""
        self.summary: dict = {}          # counters the plan reports (setpoints, runs, ...)
        self.state = "starting"          # running | paused | stopping
        self.stop_requested = False
        self.stop_reason = "stopped by the operator"  # the session's reason after a stop
        self.abort_reason: str | None = None          # the session's reason after an abort (a cancelled plan)
        self._resume = asyncio.Event()
        self._resume.set()
        self._progress = progress
        self._companions: list[asyncio.Task] = []
        self._subscribers: list[BusSubscriber] = []
        self._wake = asyncio.Event()
        self._plan_task: asyncio.Future | None = None
        self.prepared: dict = {}         # what the rig's prepare() made for its plan (designs, ...)
        self.keys = None                 # the bus's CURVE keys with the run's own client pair (or None)
        self.steps_done = 0              # plan steps finished (the progress bar's count), for `hil ctl`
        self.steps_total: int | None = None
        self.step_label: str | None = None  # the description of the last finished step
        # outputs held (docs/dry-run.md): a plan's waits for the plant do not wait for what cannot come
        self.dry_run = bool(getattr(getattr(config, "rig", None), "dry_run", False))
        # s the safe state may take once the devices are open (every attempt of every action): whoever waits
        # for this run to end after an abort waits at least this long, never a constant a driver can exceed
        self.safe_state_budget: float = 0.0

    # -- bus ------------------------------------------------------------------------------------------
    async def event(self, stream: str, kind: str, **body) -> None:
        await self.publisher.publish(Event(stream=stream, kind=kind, seq=self.publisher.next_seq(stream),
                                           t=self.clock.time(), body=body, session_id=self.session_id))

    async def publish(self, frame: Frame) -> None:
        frame.session_id = self.session_id
        await self.publisher.publish(frame)

    def next_seq(self, stream: str) -> int:
        return self.publisher.next_seq(stream)

    async def publish_blocks(self, stream: str, data: np.ndarray, t0: float, dt: float, channels: list[str],
                             units: list[str], block: int = 5000) -> None:
        """A recorded trace (n, channels) sampled at ``dt`` from ``t0``, as frames of ``block`` samples."""
        for k in range(0, data.shape[0], block):
            chunk = np.ascontiguousarray(data[k:k + block])
            seq = self.next_seq(stream)
            await self.publish(Frame(stream, seq, t0 + k * dt, dt, list(channels), list(units), chunk))

    async def subscribe(self, *topics: str) -> BusSubscriber:
        """A subscriber of the run's bus (closed by the lifecycle), connected before this returns."""
        sub = BusSubscriber(self.publisher.endpoint, topics=topics or ("",), keys=self.keys)
        self._subscribers.append(sub)
        await self.publisher.wait_for_subscribers(1 + len(self._subscribers))
        return sub

    # -- tasks ----------------------------------------------------------------------------------------
    def spawn(self, coro: Coroutine, name: str) -> asyncio.Task:
        """Run ``coro`` beside the plan; if it fails (or is cancelled) before the plan ends, the plan is
        aborted with its error as the reason. Returning normally means its job is done."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._companions.append(task)
        self._wake.set()
        return task

    def close_subscribers(self) -> None:
        """Close the subscribers :meth:`subscribe` made (the lifecycle's clean-up)."""
        for sub in self._subscribers:
            sub.close()
        self._subscribers.clear()

    # -- operator -------------------------------------------------------------------------------------
    async def command(self, action: str, by: str | None = None) -> dict:
        """An operator command (``status``, ``pause``, ``resume``, ``stop``, ``abort``) from ``by``; every
        one but ``status`` is applied at once and recorded as a ``command`` event on ``<kind>.run`` with
        who gave it. The one entry of both control paths: the command channel of other processes
        (:mod:`daq.run.control`) and whoever holds this context in-process (``hil serve``)."""
        if action not in ACTIONS:
            raise ValueError(f"unknown command {action!r} (known: {', '.join(ACTIONS)})")
        if action != "status":
            who = by or "unnamed"
            apply = {"pause": self.pause, "resume": self.resume,
                     "stop": lambda: self.request_stop(f"stopped by the operator ({who})"),
                     "abort": lambda: self.abort(f"aborted by the operator ({who})")}
            apply[action]()
            if self.session_id:  # a stalled bus must not hold up the command: the record waits at most 1 s
                try:
                    async with asyncio.timeout(1.0):
                        await self.event(f"{self.rig.kind}.run", "command", command=action, by=who)
                except Exception as exc:  # noqa: BLE001 - the command took effect; only its record is lost
                    log.warning("command %s by %s not recorded: %s", action, who, exc or type(exc).__name__)
        return self.status()

    def status(self) -> dict:
        """What ``hil ctl status`` shows: session, state, the plan's summary and progress."""
        return {"session": self.session_id, "kind": self.rig.kind, "state": self.state,
                "summary": self.summary,
                "progress": {"done": self.steps_done, "total": self.steps_total, "label": self.step_label}}

    async def checkpoint(self, where: str = "") -> None:
        """Where a plan may stop or pause: raises PlanAborted after a stop request, waits while paused."""
        if not self.stop_requested and not self._resume.is_set():
            log.warning("paused%s", f" {where}" if where else "")
            await self._resume.wait()
        if self.stop_requested:
            raise PlanAborted(f"{self.stop_reason}{' ' + where if where else ''}")

    def request_stop(self, reason: str = "stopped by the operator") -> None:
        """Stop after the current step (at the next :meth:`checkpoint`); the first reason given stays."""
        if not self.stop_requested:
            self.stop_reason = reason
        self.stop_requested = True
        self.state = "stopping"
        self._resume.set()

    def abort(self, reason: str = "aborted by the operator") -> None:
        """Stop now: cancel the running plan (it still ends through the safe state, with ``reason``)."""
        self.abort_reason = self.abort_reason or reason
        self.request_stop(reason)
        if self._plan_task is not None and not self._plan_task.done():
            self._plan_task.cancel()

    def pause(self) -> None:
        if self.state == "running":
            self.state = "paused"
            self._resume.clear()

    def resume(self) -> None:
        if self.state == "paused":
            self.state = "running"
            self._resume.set()

    def advance(self, n: int = 1, description: str | None = None) -> None:
        """Move the progress bar by ``n`` plan steps (``description``: the step just finished)."""
        self.steps_done += n
        if description:
            self.step_label = description
        if self._progress is not None:
            self._progress(n, description)


async def run(config: RigConfig | dict, store_path: str | Path | None = None, *,
              file: str | Path | None = None, simulated_rig: Any = None, show_progress: bool = True,
              handle_sigint: bool = True,
              handle_term: bool | None = None, on_session: Callable[[str], object] | None = None,
              on_context: Callable[[RunContext], None] | None = None,
              started_by: str | None = None, dry_run: bool = False,
              backends: Backends | None = None, sim_speed: float | None = None) -> RunResult:
    """Run the plan of ``config``'s rig once and record one session; see the module docstring.

    ``config``: the rig kind's typed config as the edge parsed it (``daq.rigs.config.load``), or TOML data
    (programs, tests), parsed here once.

    ``file``: the config's file, named in config errors; its folder is the one the rig's ``check`` gets.
    ``simulated_rig``: an already started simulated rig (tests use it to kill devices mid-plan).
    ``handle_sigint``: two-level Ctrl-C; ``handle_term`` (default: as ``handle_sigint``): SIGTERM and
    SIGHUP stop at once through the safe state, the session's reason names the signal. The handlers
    are installed for the run only and the previous ones restored afterwards.
    Before its first write every device is connected, identified and read through the commissioning probes
    (:mod:`daq.run.preflight`, `hil devices`); a device that does not answer plausibly refuses the run.
    Problems before the session exists (config, unreachable or implausible devices) are raised; once a
    session exists the run always returns a result whose status and reason say how it ended.
    ``started_by``: who asked for the run (`hil run`: :func:`operator_name`; `hil serve`: the token's name);
    recorded as the session's first event, ``started`` on stream ``<kind>.run`` with body ``{"by": ...}``.
    ``dry_run`` (or ``[rig].dry_run`` in the config): the devices are connected and read, every command is
    held and recorded instead of sent (:mod:`daq.run.dry_run`, docs/dry-run.md): the drivers get recording
    backends (:mod:`drivers.recording`) over ``backends``.
    ``backends``: where the drivers' requests go (:mod:`drivers.backends`); None: their real protocols.
    Tests of plans and of the lifecycle give a simulator's in-process backends
    (``simulators.in_process.InProcessBackends``) with ``simulated_rig``.
    ``sim_speed`` (or ``[simulator].speed``): the simulated rig and the plan run on one clock that many times
    faster than real time (recorded times are its seconds; refused for a rig that is not simulated).
    """
    if isinstance(config, dict):
        rig, cfg = parse_config(config, file)  # checked whole: nothing is opened for a broken config
    else:
        rig, cfg = get_rig(config.rig.kind, file), config
    cfg = with_sim_speed(as_dry_run(cfg, dry_run), sim_speed, file)
    check_rules(rig, cfg, file)            # and the rig's rules beyond the schema (files next to it, ...)
    if cfg.rig.simulated and not rig.has_simulator and simulated_rig is None:
        raise ConfigError(f"rig kind {rig.kind!r} has no simulator", file, "[rig].simulated")
    if not cfg.rig.simulated and simulated_rig is None and getattr(cfg, "devices", None) is None:
        raise ConfigError("missing required table (a real rig needs its devices)", file, "[devices]")
    store_path = Path(store_path) if store_path else store_path_for(None, cfg)
    store_path.parent.mkdir(parents=True, exist_ok=True)

    own_sim = None
    if simulated_rig is None and cfg.rig.simulated:
        own_sim = simulated_rig = rig.simulator(cfg)
        await own_sim.start()
    try:
        device_cfg = (rig.simulated_devices(simulated_rig, cfg) if simulated_rig is not None
                      else cfg.devices)
        # nothing written yet: refused here, there is nothing to make safe
        await check_devices(device_cfg, backends=backends)
        handle_term = handle_sigint if handle_term is None else handle_term
        dry = DryRun(rig.kind) if cfg.rig.dry_run else None
        if dry is not None:  # every driver of the run writes into the hold (drivers/recording.py)
            backends = RecordingBackends(dry.hold, backends) if backends else RecordingBackends(dry.hold)
        clock = getattr(simulated_rig, "clock", None) or WALL  # a simulated rig's physics runs on its clock
        return await _run_session(rig, cfg, device_cfg, store_path, show_progress, handle_sigint,
                                  handle_term, on_session, on_context, started_by, dry, backends, clock)
    finally:
        if own_sim is not None:
            await own_sim.stop()


async def _run_session(rig: Rig, cfg: Any, device_cfg: Any, store_path: Path, show_progress: bool,
                       handle_sigint: bool, handle_term: bool, on_session, on_context,
                       started_by: str | None = None, dry: DryRun | None = None,
                       backends: Backends | None = None, clock: Clock = WALL) -> RunResult:
    session = _Session(rig, cfg, store_path, show_progress, on_context, clock)
    session.dry, session.backends = dry, backends
    if handle_sigint or handle_term:
        session.stopper.install(sigint=handle_sigint, terminate=handle_term)  # ours until clean-up is done
    try:
        await session.set_up(device_cfg, on_session, started_by)
        await session.execute()
    except BaseException as exc:  # noqa: BLE001 - set-up failed: safe state, then re-raised
        await session.set_up_failed(exc)
    finally:
        await session.clean_up()
    if session.failure is not None:
        raise session.failure
    task = asyncio.current_task()
    if task is not None and task.cancelling():  # we were cancelled from outside: say so after clean-up
        raise asyncio.CancelledError
    return session.result()


class _Session:
    """One recorded run from set-up to clean-up: what it opened (closed again by :meth:`clean_up` on every
    path) and how it ended (``status``, ``reason``, the ``plan_outcome`` event)."""

    reason: str | None  # why it ended (None: nothing to say)

    def __init__(self, rig: Rig, cfg: Any, store_path: Path, show_progress: bool,
                 on_context: Callable[[RunContext], None] | None, clock: Clock = WALL):
        self.rig, self.cfg, self.store_path = rig, cfg, store_path
        self.store = SessionStore(store_path)
        keys = _keys(cfg)
        self.publisher = BusPublisher(cfg.bus.data, lossless=True, send_timeout=cfg.bus.send_timeout,
                                      tap_endpoint=cfg.bus.tap, keys=keys)
        self.rec_sub = BusSubscriber(self.publisher.endpoint, keys=keys)
        total = rig.progress_total(cfg)
        self.progress = ProgressBar(rig.kind, total) if show_progress else None
        self.ctx = RunContext(rig, cfg, self.publisher, self.progress.advance if self.progress else None,
                              clock)
        if clock.simulated or sim_speed_of(cfg) != 1.0:  # the session says the speed it ran at
            self.ctx.summary["sim_speed"] = clock.speed
        self.ctx.keys = keys
        self.ctx.steps_total = total
        if on_context is not None:
            on_context(self.ctx)
        self.commands = CommandChannel(self.ctx, cfg.bus.command, channel_keys(keys, store_path))
        self.stopper = OperatorStop(on_first=self.ctx.request_stop)
        self.reserve = DiskReserve(store_path)
        self.devices: Devices | None = None
        self.recorder: Recorder | None = None
        self.guard: SafeStateGuard | None = None
        self.session_id = ""
        self.status, self.reason = "aborted", None
        self.failure: BaseException | None = None
        self.dry: DryRun | None = None       # a dry run's hold and record (daq/run/dry_run.py)
        self.backends: Backends | None = None  # where the drivers' requests go (None: their protocols)
        self.outcome: Event | None = None    # a plan_outcome the bus could not carry
        self.published: Event | None = None  # the plan_outcome handed to the bus (the recorder stores it)

    async def set_up(self, device_cfg: Any, on_session, started_by: str | None) -> None:
        """Open the devices, create the session, start the recorder and the command channel."""
        rig, ctx = self.rig, self.ctx
        self.reserve.hold()  # room for the outcome and the session's end should the disk fill
        await self.publisher.wait_for_subscribers(1)
        self.devices = ctx.devices = await rig.open_devices(self.cfg, device_cfg, self.backends)
        await rig.prepare(ctx)
        # the parsed config, with the store it went to and the devices as they were reached (simulated ports)
        snapshot = dict(config_snapshot(self.cfg), store={"path": str(self.store_path)})
        if "devices" in rig.schema.__struct_fields__:
            snapshot["devices"] = config_snapshot(device_cfg)
        self.session_id = ctx.session_id = self.store.create_session(
            rig.kind, json_codec.jsonable(snapshot), devices=await self.devices.identities())
        if on_session is not None:
            on_session(self.session_id)
        self.recorder = ctx.recorder = Recorder(self.store, self.session_id, self.rec_sub).start()
        self.commands.start(self.store_path, self.session_id)
        if started_by:  # the audit record: who asked for this run
            await ctx.event(f"{rig.kind}.run", "started", by=started_by)
        if self.dry is not None:  # the commands held while the devices opened, then every later one
            await self.dry.record_on(ctx)
            self.dry.phase = "plan"
        if self.stopper.requested:  # Ctrl-C during set-up stops before the first step
            ctx.request_stop()
        ctx.state = "running"

    async def execute(self) -> None:
        """The plan inside the safe-state guard; then its outcome, on the bus if the bus still carries."""
        assert self.devices is not None and self.recorder is not None
        rig, ctx = self.rig, self.ctx
        actions = list(self.devices.safe_actions)
        guard = self.guard = SafeStateGuard(self.dry.safe_actions(actions) if self.dry else actions)
        ctx.safe_state_budget = guard.budget
        try:
            async with guard:
                with frozen_for_the_plan():  # daq/run/collector.py
                    await _run_plan(ctx, rig, self.recorder, self.stopper)
        except BaseException as exc:  # noqa: BLE001 - the guard reached the safe state and kept the reason
            log.warning("%s plan aborted: %s", rig.kind, guard.reason or exc)
        if self.dry is not None:
            ctx.summary["dry_run"] = self.dry.summary()
            with contextlib.suppress(Exception):  # a stalled bus: the outcome below still carries the counts
                async with asyncio.timeout(2.0):
                    await self.dry.record_safe_state(ctx, guard.safe, guard.errors)
        self.status, self.reason = guard.outcome, guard.reason
        if self.stopper.terminated and self.status == "aborted":  # SIGTERM/SIGHUP stopped the plan
            self.reason = self.stopper.terminated
        if not guard.safe:
            self.reason = (f"{self.reason + '; ' if self.reason else ''}SAFE STATE NOT CONFIRMED: "
                           f"{'; '.join(guard.errors)}")
        stream = f"{rig.kind}.plan"
        outcome = Event(stream, "plan_outcome", self.publisher.next_seq(stream), ctx.clock.time(),
                        body={"status": self.status, "reason": self.reason, "safe": guard.safe,
                              "safe_errors": guard.errors, "safe_failed_steps": guard.failed_steps,
                              "summary": ctx.summary},
                        session_id=self.session_id)
        self.outcome = outcome
        try:
            async with asyncio.timeout(2.0):
                await self.publisher.publish(outcome)
            self.published, self.outcome = outcome, None  # on the bus: the recorder stores it
        except Exception as exc:  # noqa: BLE001 - a stalled bus: the store gets it directly
            log.warning("plan outcome not published (%s); recording it directly", exc or type(exc).__name__)

    async def set_up_failed(self, exc: BaseException) -> None:
        self.failure = exc
        self.reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if self.devices is not None:
            self.guard = SafeStateGuard(list(self.devices.safe_actions))
            await asyncio.shield(self.guard.reach_safe_state())

    async def clean_up(self) -> None:
        """Stop the recorder, record the outcome and the session's end, close everything."""
        if self.progress is not None:
            self.progress.close()
        await self.commands.stop()
        recorder, session_id = self.recorder, self.session_id
        rec_error = None
        if recorder is not None:
            await recorder.stop(drain=RECORDER_DRAIN_S)
            rec_error = recorder.failure()
            if rec_error and self.status == "complete":
                self.status, self.reason = "aborted", _recorder_reason(recorder.error or rec_error)
        self.reserve.release()  # the recorder has stopped: what is left to write gets the room held back
        if self.outcome is None and rec_error:  # on the bus, but the recorder had already failed
            self.outcome = self.published
        # after a full disk the writer still holds the rows that did not fit: a second commit of them would
        # eat the room just released, so the last writes go through a fresh connection
        full = recorder is not None and getattr(recorder.error, "disk_full", False)
        if self.outcome is not None and session_id:  # the recorder has stopped: the store is ours alone
            _record_outcome(None if full else self.store, self.store_path, session_id, self.outcome)
        if session_id:
            _finish_session(None if full else self.store, self.store_path, session_id, self.status,
                            self.reason)
        if self.devices is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(TASK_STOP_TIMEOUT):
                    await self.devices.close()
        self.ctx.close_subscribers()
        self.rec_sub.close()
        self.publisher.close()
        try:
            self.store.close()
        except Exception as exc:  # noqa: BLE001 - after a failed commit the last flush fails again
            log.warning("session store: %s (what was committed stays readable)", exc)
        self.stopper.uninstall()

    def result(self) -> RunResult:
        guard = self.guard
        return RunResult(self.session_id, self.rig.kind, self.status, self.reason,
                         guard.safe if guard else False, list(guard.errors) if guard else [],
                         self.ctx.summary, str(self.store_path),
                         list(guard.failed_steps) if guard else [])


def _finish_session(store: SessionStore | None, store_path: Path, session_id: str, status: str,
                    reason: str | None) -> None:
    """Mark the session; after a failed commit (disk full; ``store`` None) the writer still holds the rows
    that did not fit, so a fresh connection marks it instead (an UPDATE of one row)."""
    try:
        if store is not None:
            store.finish(session_id, status, reason)
            return
    except Exception as exc:  # noqa: BLE001 - try the second way before giving up
        log.warning("could not finish session %s on the writer: %s", session_id, exc)
    try:
        with SessionStore(store_path, recover=False) as fresh:
            fresh.finish(session_id, status, reason)
    except Exception as exc:  # noqa: BLE001
        log.error("session %s could not be marked %s (%s); it shows as incomplete", session_id, status, exc)


def _record_outcome(store: SessionStore | None, store_path: Path, session_id: str, outcome: Event) -> None:
    """Store the plan_outcome directly; after a failed commit (disk full; ``store`` None) the writer still
    holds the rows that did not fit, so a fresh connection writes the one small event alone (in the room the
    run held back: :mod:`daq.store.reserve`)."""
    if store is not None:
        with contextlib.suppress(Exception):  # the recorder may have committed it before it failed
            if any(e.seq == outcome.seq for e in store.events(session_id, kind="plan_outcome")):
                return
        try:
            store.append(session_id, outcome)
            store.flush()
            return
        except Exception as exc:  # noqa: BLE001 - e.g. the disk that failed the recorder: the second way
            log.warning("plan outcome of session %s not recorded on the writer: %s", session_id, exc)
    try:
        with SessionStore(store_path, recover=False) as fresh:
            if not any(e.seq == outcome.seq for e in fresh.events(session_id, kind="plan_outcome")):
                fresh.append(session_id, outcome)
                fresh.flush()
    except Exception as exc:  # noqa: BLE001
        log.error("plan outcome of session %s not recorded: %s", session_id, exc)


def _recorder_reason(error: object) -> str:
    """The reason a failed recorder gives a session: its own words for a full disk, else prefixed."""
    return str(error) if getattr(error, "disk_full", False) else f"recorder failed: {error}"


def _keys(cfg: Any):
    """CURVE keys of [bus].keys (required by the bus beyond loopback), with a client pair of the run's own
    for its recorder and plan subscribers (no client key on disk needed)."""
    if not cfg.bus.keys:
        return None
    return with_own_client(load_keys(cfg.bus.keys))


async def _run_plan(ctx: RunContext, rig: Rig, recorder: Recorder, stopper: OperatorStop) -> None:
    """Run the plan with its companions and the recorder; whichever ends first ends the plan."""
    plan_task = asyncio.ensure_future(rig.plan(ctx))
    stopper.target = plan_task
    ctx._plan_task = plan_task
    rec_task = recorder.failed  # resolves (with the error) only when the recorder stops on a failure
    # resolves with its one line when the simulation falls behind a faster-than-real-time clock
    overrun = asyncio.ensure_future(ctx.clock.overrun()) if ctx.clock.simulated else None
    ctx.clock.armed = overrun is not None  # data are recorded from here: falling behind stops the plan
    try:
        while not plan_task.done():
            ctx._wake.clear()
            watch: set[asyncio.Future] = {plan_task, *ctx._companions}
            if rec_task is not None:
                watch.add(rec_task)
            if overrun is not None:
                watch.add(overrun)
            wake = asyncio.ensure_future(ctx._wake.wait())
            done, _ = await asyncio.wait({*watch, wake}, return_when=asyncio.FIRST_COMPLETED)
            wake.cancel()
            if plan_task in done:
                break
            ended = [t for t in done if t is not wake]
            if overrun is not None and overrun in ended:  # too fast: stop safe rather than record wrong data
                plan_task.cancel()
                await asyncio.wait({plan_task}, timeout=TASK_STOP_TIMEOUT)
                raise PlanAborted(overrun.result())
            for t in list(ended):  # a companion that returned normally has finished its job
                if t is not rec_task and not t.cancelled() and t.exception() is None:
                    assert isinstance(t, asyncio.Task)  # a companion
                    ctx._companions.remove(t)
                    ended.remove(t)
            if ended:
                reason = _why_ended(ended[0], rec_task)
                plan_task.cancel()
                await asyncio.wait({plan_task}, timeout=TASK_STOP_TIMEOUT)
                raise PlanAborted(reason)
        try:
            await plan_task
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if ctx.abort_reason and not (task is not None and task.cancelling()):
                raise PlanAborted(ctx.abort_reason) from None  # aborted through a command: say by whom
            raise
    finally:
        stopper.target = None
        stopper.plan_over = True
        ctx.clock.armed = False
        if overrun is not None:
            overrun.cancel()
        await stop_tasks(plan_task, *ctx._companions)


def _why_ended(task: asyncio.Future, rec_task: asyncio.Future | None) -> str:
    if task is rec_task:
        return _recorder_reason(task.result() if not task.cancelled() else "cancelled")
    assert isinstance(task, asyncio.Task)  # the plan or a companion
    who = task.get_name()
    if task.cancelled():
        return f"{who} was cancelled"
    exc = task.exception()
    if exc is None:
        return f"{who} stopped unexpectedly"
    text = str(exc) or type(exc).__name__
    return f"{who} failed: {text}" if who == "recorder" else text


async def stop_tasks(*tasks: asyncio.Future) -> None:
    """Cancel and await ``tasks``, never longer than ``TASK_STOP_TIMEOUT`` (a stop must not hang)."""
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
