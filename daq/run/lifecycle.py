"""The one run lifecycle of every rig kind.

``run(config)`` checks the config whole, starts the simulated rig when ``[rig].simulated`` says so,
opens the devices, creates the session, records the bus, serves operator commands, and runs the rig's
plan inside the safe-state guard with two-level Ctrl-C. Whatever ends the plan - its normal end, an
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
import getpass
import logging
import os
import time
from collections.abc import Callable, Coroutine
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from daq import json_codec
from daq.bus.frames import Event, Frame
from daq.bus.keys import load_keys, with_own_client
from daq.bus.pubsub import BusPublisher, BusSubscriber
from daq.config.load import ConfigError, store_path_for, to_dict
from daq.config.schema import RigConfig
from daq.rigs import check_rules, get_rig, parse_config
from daq.rigs.base import Devices, Rig
from daq.run.commands import CommandServer
from daq.run.progress import ProgressBar
from daq.run.recorder import Recorder
from daq.run.safety import OperatorStop, PlanAborted, SafeStateGuard
from daq.store.read_write import SessionStore
from daq.store.reserve import DiskReserve

log = logging.getLogger(__name__)

ENV_USER = "HIL_USER"  # who `hil run` records as having started a run (default: the OS user)


def operator_name() -> str | None:
    """Who is starting a run from this process: ``$HIL_USER`` (a shared lab account names its person), else
    the OS user; None when neither is known. ``hil run`` records it as ``started_by``."""
    name = os.environ.get(ENV_USER, "").strip()
    if name:
        return name
    try:
        return getpass.getuser() or None
    except Exception:  # noqa: BLE001 - no user name in this environment (a container without passwd entry)
        return None


TASK_STOP_TIMEOUT = 10.0  # s a cancelled plan or companion task gets to finish
RECORDER_DRAIN_S = 0.2    # s of quiet bus the recorder waits for before it stops


@dataclass
class RunResult:
    """How a run ended. ``safe`` is True only when every safe-state action was confirmed."""

    session_id: str
    kind: str
    status: str
    reason: str | None
    safe: bool
    safe_errors: list[str] = field(default_factory=list)
    summary: dict = field(default_factory=dict)
    store: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


class RunContext:
    """What a plan may use: devices, config, the bus, companions, checkpoints and progress."""

    def __init__(self, rig: Rig, config: Any, publisher: BusPublisher,
                 progress: Callable[[int, str | None], None] | None = None):
        self.rig = rig
        self.config = config
        self.publisher = publisher
        self.devices: Any = None
        self.recorder: Recorder | None = None  # for status and for tests that break it on purpose
        self.session_id = ""
        self.summary: dict = {}          # counters the plan reports (setpoints, runs, ...)
        self.state = "starting"          # running | paused | stopping
        self.stop_requested = False
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

    # -- bus ------------------------------------------------------------------------------------------
    async def event(self, stream: str, kind: str, **body) -> None:
        await self.publisher.publish(Event(stream=stream, kind=kind, seq=self.publisher.next_seq(stream),
                                           t=time.time(), body=body, session_id=self.session_id))

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

    # -- operator -------------------------------------------------------------------------------------
    async def checkpoint(self, where: str = "") -> None:
        """Where a plan may stop or pause: raises PlanAborted after a stop request, waits while paused."""
        if self.stop_requested:
            raise PlanAborted(f"stopped by the operator{' ' + where if where else ''}")
        if not self._resume.is_set():
            log.warning("paused%s", f" {where}" if where else "")
            await self._resume.wait()
            if self.stop_requested:
                raise PlanAborted(f"stopped by the operator{' ' + where if where else ''}")

    def request_stop(self) -> None:
        self.stop_requested = True
        self.state = "stopping"
        self._resume.set()

    def abort(self) -> None:
        """Stop now: cancel the running plan (it still ends through the safe state)."""
        self.request_stop()
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
              handle_term: bool | None = None, on_session: Callable[[str], None] | None = None,
              on_context: Callable[[RunContext], None] | None = None,
              started_by: str | None = None) -> RunResult:
    """Run the plan of ``config``'s rig once and record one session; see the module docstring.

    ``config``: the rig kind's typed config as the edge parsed it (``daq.rigs.config.load``), or TOML data
    (programs, tests), parsed here once.

    ``file``: the config's file, named in config errors; its folder is the one the rig's ``check`` gets.
    ``simulated_rig``: an already started simulated rig (tests use it to kill devices mid-plan).
    ``handle_sigint``: two-level Ctrl-C; ``handle_term`` (default: as ``handle_sigint``): SIGTERM and
    SIGHUP stop at once through the safe state, the session's reason names the signal. The handlers
    are installed for the run only and the previous ones restored afterwards.
    Problems before the session exists (config, unreachable devices) are raised; once a session
    exists the run always returns a result whose status and reason say how it ended.
    ``started_by``: who asked for the run (`hil run`: :func:`operator_name`; `hil serve`: the token's name);
    recorded as the session's first event, ``started`` on stream ``<kind>.run`` with body ``{"by": ...}``.
    """
    if isinstance(config, dict):
        rig, cfg = parse_config(config, file)  # checked whole: nothing is opened for a broken config
    else:
        rig, cfg = get_rig(config.rig.kind, file), config
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
        handle_term = handle_sigint if handle_term is None else handle_term
        return await _run_session(rig, cfg, device_cfg, store_path, show_progress, handle_sigint,
                                  handle_term, on_session, on_context, started_by)
    finally:
        if own_sim is not None:
            await own_sim.stop()


async def _run_session(rig: Rig, cfg: Any, device_cfg: Any, store_path: Path, show_progress: bool,
                       handle_sigint: bool, handle_term: bool, on_session, on_context,
                       started_by: str | None = None) -> RunResult:
    store = SessionStore(store_path)
    keys = _keys(cfg)
    publisher = BusPublisher(cfg.bus.data, lossless=True, send_timeout=cfg.bus.send_timeout,
                             tap_endpoint=cfg.bus.tap, keys=keys)
    rec_sub = BusSubscriber(publisher.endpoint, keys=keys)
    progress = ProgressBar(rig.kind, rig.progress_total(cfg)) if show_progress else None
    ctx = RunContext(rig, cfg, publisher, progress.advance if progress else None)
    ctx.keys = keys
    ctx.steps_total = rig.progress_total(cfg)
    if on_context is not None:
        on_context(ctx)
    commands = _CommandChannel(ctx, cfg.bus.command, keys)
    devices: Devices | None = None
    recorder: Recorder | None = None
    guard: SafeStateGuard | None = None
    session_id = ""
    status, reason, failure = "aborted", None, None
    outcome: Event | None = None  # a plan_outcome the bus could not carry
    published: Event | None = None  # the plan_outcome handed to the bus (the recorder stores it, if alive)
    stopper = OperatorStop(on_first=ctx.request_stop)
    if handle_sigint or handle_term:
        stopper.install(sigint=handle_sigint, terminate=handle_term)  # ours until the clean-up is done
    reserve = DiskReserve(store_path)
    try:
        reserve.hold()  # room for the outcome and the session's end should the disk fill (daq.store.reserve)
        await publisher.wait_for_subscribers(1)
        devices = await rig.open_devices(cfg, device_cfg)
        ctx.devices = devices
        await rig.prepare(ctx)
        # the parsed config, with the store it went to and the devices as they were reached (simulated ports)
        snapshot = dict(to_dict(cfg), store={"path": str(store_path)})
        if "devices" in rig.schema.__struct_fields__:
            snapshot["devices"] = to_dict(device_cfg)
        session_id = store.create_session(rig.kind, _jsonable(snapshot), devices=await devices.identities())
        ctx.session_id = session_id
        if on_session is not None:
            on_session(session_id)
        recorder = ctx.recorder = Recorder(store, session_id, rec_sub).start()
        commands.start(store_path, session_id, publisher)
        if started_by:  # the audit record: who asked for this run
            await ctx.event(f"{rig.kind}.run", "started", by=started_by)
        if stopper.requested:  # Ctrl-C during set-up stops before the first step
            ctx.request_stop()
        ctx.state = "running"
        guard = SafeStateGuard(list(devices.safe_actions))
        try:
            async with guard:
                await _run_plan(ctx, rig, recorder, stopper)
        except BaseException as exc:  # noqa: BLE001 - the guard reached the safe state and kept the reason
            log.warning("%s plan aborted: %s", rig.kind, guard.reason or exc)
        status, reason = guard.outcome, guard.reason
        if stopper.terminated and status == "aborted":  # SIGTERM/SIGHUP stopped the plan: say which
            reason = stopper.terminated
        if not guard.safe:
            reason = f"{reason + '; ' if reason else ''}SAFE STATE NOT CONFIRMED: {'; '.join(guard.errors)}"
        outcome = Event(f"{rig.kind}.plan", "plan_outcome", publisher.next_seq(f"{rig.kind}.plan"),
                        time.time(), body={"status": status, "reason": reason, "safe": guard.safe,
                                           "safe_errors": guard.errors, "summary": ctx.summary},
                        session_id=session_id)
        try:
            async with asyncio.timeout(2.0):
                await publisher.publish(outcome)
            published, outcome = outcome, None  # on the bus: the recorder stores it
        except Exception as exc:  # noqa: BLE001 - a stalled bus: the store gets it directly below
            log.warning("plan outcome not published (%s); recording it directly", exc or type(exc).__name__)
    except BaseException as exc:  # set-up failed before the plan ran
        failure = exc
        reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if devices is not None:
            guard = SafeStateGuard(list(devices.safe_actions))
            await asyncio.shield(guard.reach_safe_state())
    finally:
        if progress is not None:
            progress.close()
        await commands.stop()
        if recorder is not None:
            await recorder.stop(drain=RECORDER_DRAIN_S)
            rec_error = _recorder_error(recorder)
            if rec_error and status == "complete":
                status, reason = "aborted", _recorder_reason(recorder.error or rec_error)
        reserve.release()  # the recorder has stopped: what is left to write gets the room held back
        if outcome is None and rec_error_of(recorder):  # on the bus, but the recorder had already failed
            outcome = published
        # after a full disk the writer still holds the rows that did not fit: a second commit of them would
        # eat the room just released, so the last writes go through a fresh connection
        full = recorder is not None and getattr(recorder.error, "disk_full", False)
        if outcome is not None and session_id:  # the recorder has stopped: the store is ours alone
            _record_outcome(None if full else store, store_path, session_id, outcome)
        if session_id:
            _finish_session(None if full else store, store_path, session_id, status, reason)
        if devices is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(TASK_STOP_TIMEOUT):
                    await devices.close()
        for sub in (*ctx._subscribers, rec_sub):
            sub.close()
        publisher.close()
        try:
            store.close()
        except Exception as exc:  # noqa: BLE001 - after a failed commit the last flush fails again
            log.warning("session store: %s (what was committed stays readable)", exc)
        stopper.uninstall()
    if failure is not None:
        raise failure
    task = asyncio.current_task()
    if task is not None and task.cancelling():  # we were cancelled from outside: say so after clean-up
        raise asyncio.CancelledError
    return RunResult(session_id, rig.kind, status, reason, guard.safe if guard else False,
                     list(guard.errors) if guard else [], ctx.summary, str(store_path))


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


def rec_error_of(recorder: Recorder | None) -> str | None:
    return _recorder_error(recorder) if recorder is not None else None


def _recorder_reason(error: object) -> str:
    """The reason a failed recorder gives a session: its own words for a full disk, else prefixed."""
    return str(error) if getattr(error, "disk_full", False) else f"recorder failed: {error}"


def _keys(cfg: Any):
    """CURVE keys of [bus].keys (required by the bus and command server beyond loopback), with a client
    pair of the run's own for its recorder and plan subscribers (no client key on disk needed)."""
    if not cfg.bus.keys:
        return None
    return with_own_client(load_keys(cfg.bus.keys))


def _recorder_error(recorder: Recorder) -> str | None:
    if recorder.error is not None:
        return str(recorder.error)
    task = recorder._task
    if task is None or not task.done() or task.cancelled() or task.exception() is None:
        return None
    exc = task.exception()
    return f"{type(exc).__name__}: {exc}"


async def _run_plan(ctx: RunContext, rig: Rig, recorder: Recorder, stopper: OperatorStop) -> None:
    """Run the plan with its companions and the recorder; whichever ends first ends the plan."""
    plan_task = asyncio.ensure_future(rig.plan(ctx))
    stopper.target = plan_task
    ctx._plan_task = plan_task
    rec_task = recorder.failed  # resolves (with the error) only when the recorder stops on a failure
    try:
        while not plan_task.done():
            ctx._wake.clear()
            watch = {plan_task, *ctx._companions}
            if rec_task is not None:
                watch.add(rec_task)
            wake = asyncio.ensure_future(ctx._wake.wait())
            done, _ = await asyncio.wait({*watch, wake}, return_when=asyncio.FIRST_COMPLETED)
            wake.cancel()
            if plan_task in done:
                break
            ended = [t for t in done if t is not wake]
            for t in list(ended):  # a companion that returned normally has finished its job
                if t is not rec_task and not t.cancelled() and t.exception() is None:
                    ctx._companions.remove(t)
                    ended.remove(t)
            if ended:
                reason = _why_ended(ended[0], rec_task)
                plan_task.cancel()
                await asyncio.wait({plan_task}, timeout=TASK_STOP_TIMEOUT)
                raise PlanAborted(reason)
        await plan_task
    finally:
        stopper.target = None
        stopper.plan_over = True
        await stop_tasks(plan_task, *ctx._companions)


def _why_ended(task: asyncio.Future, rec_task: asyncio.Future | None) -> str:
    if task is rec_task:
        return _recorder_reason(task.result() if not task.cancelled() else "cancelled")
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


def _jsonable(obj: Any) -> Any:
    """Config snapshot as JSON-safe data (TOML dates and the like become strings)."""
    return json_codec.loads(json_codec.encode(obj, default=str))


# ----------------------------------------------------------------------------------------- operator


def runs_dir(store_path: Path) -> Path:
    """Where running sessions announce their command endpoint (for `hil ctl`)."""
    return store_path.parent / "runs"


def live_runs(store_path: Path) -> list[dict]:
    """The announcements of the sessions running on this store (oldest file name first).

    An announcement whose process is gone (``pid`` recorded in it, no such process: a run killed by
    SIGKILL or a power cut never removes its own) is stale: it is deleted and not returned. Unreadable
    files and announcements without a pid are returned/kept as they are (nothing proves them stale).
    """
    folder = runs_dir(Path(store_path))
    runs = []
    for f in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            entry = json_codec.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(entry, dict):
            continue
        if not _process_alive(entry.get("pid")):
            log.warning("removing the stale run announcement %s (process %s is gone)", f, entry.get("pid"))
            with contextlib.suppress(OSError):
                f.unlink()
            continue
        runs.append(entry)
    return runs


def _process_alive(pid: Any) -> bool:
    """False only when ``pid`` is a process id and no such process exists."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):  # someone else's process (alive), or we cannot tell
        return True
    return True


class _CommandChannel:
    """Operator commands of a running plan: status, pause, resume, stop (after the step), abort (now)."""

    def __init__(self, ctx: RunContext, endpoint: str, keys=None):
        self.ctx = ctx
        self.endpoint = endpoint
        self.keys = keys
        self.server = None
        self.announce: Path | None = None

    def start(self, store_path: Path, session_id: str, publisher: BusPublisher) -> None:

        ctx = self.ctx
        handlers: dict[str, Callable[..., Any]] = {
            "status": self._status,
            "pause": lambda: (ctx.pause(), self._status())[1],
            "resume": lambda: (ctx.resume(), self._status())[1],
            "stop": lambda: (ctx.request_stop(), self._status())[1],
            "abort": self._abort,
        }
        self.server = CommandServer(self.endpoint, handlers, keys=self.keys).start()
        folder = runs_dir(store_path)
        folder.mkdir(parents=True, exist_ok=True)
        self.announce = folder / f"{session_id}.json"
        self.announce.write_text(json_codec.dumps({"session": session_id, "kind": ctx.rig.kind,
                                             "command": self.server.endpoint, "data": publisher.endpoint,
                                             "tap": publisher.tap_endpoint,
                                             "pid": os.getpid(), "started": time.time()}))

    def _status(self) -> dict:
        ctx = self.ctx
        return {"session": ctx.session_id, "kind": ctx.rig.kind, "state": ctx.state, "summary": ctx.summary,
                "progress": {"done": ctx.steps_done, "total": ctx.steps_total, "label": ctx.step_label}}

    def _abort(self) -> dict:
        self.ctx.abort()
        return self._status()

    async def stop(self) -> None:
        if self.announce is not None:
            with contextlib.suppress(OSError):
                self.announce.unlink()
        if self.server is not None:
            await self.server.stop()
            self.server.close()
