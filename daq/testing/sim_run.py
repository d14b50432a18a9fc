"""A lab's CI of its own configs and plans: run a config on its simulated rig, at a speed, from a test.

:func:`run_simulated` (and :func:`run_simulated_async` inside an event loop) takes a rig config file that
says ``[rig] simulated = true``, points every simulated device and the bus at loopback port 0 (parallel tests
never collide), records one session into a temporary store, analyses it with the rig's own analysis, copies
out what a test asserts on (:class:`SimRun`) and removes the store. The run itself is the one ``hil run``
makes: :func:`daq.run.lifecycle.run` with the clock at ``speed`` (docs/testing-your-rig.md).
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from daq.config.load import read_toml, refuse_unsupplied, resolve_paths
from daq.rigs import get_rig, rig_of
from daq.rigs.analysis import analyze_session
from daq.rigs.config import refuse_sim_speed
from daq.run.lifecycle import RunResult, run
from daq.store.read_write import SessionStore
from daq.store.records import StreamData

__all__ = ["DEFAULT_SPEED", "SimRun", "SimSession", "StreamSummary", "loopback_config", "run_simulated",
           "run_simulated_async"]

DEFAULT_SPEED = 10.0  # the clock of a test run: ten times faster than real time
STARTED_BY = "hil-testing"  # who the session says started it (its ``started`` event)

_ANY_HOST = "127.0.0.1"  # every simulated device and the bus listen here, on a port the system picks
_PORT_KEYS = ("port", "secure_port")


@dataclass(frozen=True)
class StreamSummary:
    """One recorded stream: its channels with their units (SI) and how much it holds."""

    name: str
    type: str  # "frame" (samples) or "event"
    channels: list[str]
    units: list[str]
    samples: int   # frame streams: samples; event streams: events
    messages: int
    t_first: float | None  # s of the run's clock (simulated seconds)
    t_last: float | None

    def unit(self, channel: str) -> str:
        """The unit of ``channel`` (KeyError naming the channels for one the stream has not)."""
        if channel not in self.channels:
            raise KeyError(f"stream {self.name} has no channel {channel!r} (channels: {self.channels})")
        return self.units[self.channels.index(channel)]


@dataclass(frozen=True)
class SimSession:
    """The recorded session: how it ended, whether the safe state was confirmed, and what it recorded."""

    id: str
    kind: str
    status: str            # "complete" or "aborted"
    reason: str | None     # why it ended early (None after a normal end)
    safe: bool             # every step of every safe-state action succeeded
    safe_errors: list[str]
    sim_speed: float       # the clock's speed the run ran at
    summary: dict          # the plan's counters (setpoints, runs, ...) and ``sim_speed``
    streams: dict[str, StreamSummary]
    plan_outcome: dict | None  # the body of the session's ``plan_outcome`` event (status, reason, safe, ...)
    config: dict           # the config snapshot the session stored (loopback ports, the speed)

    @property
    def complete(self) -> bool:
        return self.status == "complete"

    @property
    def ok(self) -> bool:
        """The plan ran to its end and the rig ended safe."""
        return self.complete and self.safe

    def describe(self) -> str:
        """One line for an assertion message: ``session ab12 aborted (reason); safe state confirmed``."""
        why = f" ({self.reason})" if self.reason else ""
        safe = ("safe state confirmed" if self.safe
                else "SAFE STATE NOT CONFIRMED: " + "; ".join(self.safe_errors))
        return f"{self.kind} session {self.id} {self.status}{why}; {safe}"


@dataclass(frozen=True)
class SimRun:
    """What :func:`run_simulated` hands back once its store is gone."""

    session: SimSession
    analysis: dict | None = None   # the rig's report (``hil analyze --json``): estimates, intervals, verdicts
    report: str | None = None      # the same as text (as ``hil analyze`` prints it)
    data: dict[str, StreamData] = field(default_factory=dict)  # the samples of the streams asked for

    @property
    def ok(self) -> bool:
        return self.session.ok


def run_simulated(config: str | Path, *, speed: float | None = DEFAULT_SPEED,
                  overrides: Mapping[str, Any] | None = None, analyze: bool = True,
                  read: Iterable[str] = ()) -> SimRun:
    """Run ``config`` on its simulated rig at ``speed`` and return the session and its analysis.

    ``speed``: the clock (``hil run --sim-speed``); None: the config's ``[simulator] speed``.
    ``overrides``: TOML data merged into the config's tables before it is checked (a shorter plan for CI, a
    fault to test); relative paths in it are relative to the config file, as in the file.
    ``analyze``: run the rig's analysis after a complete run (an analysis that fails raises).
    ``read``: frame streams whose samples are copied into :attr:`SimRun.data`.
    A config that is not a simulated rig is refused in one line (ConfigError) before anything is opened.
    Inside a running event loop (an async test) await :func:`run_simulated_async` instead."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(run_simulated_async(config, speed=speed, overrides=overrides, analyze=analyze,
                                               read=read))
    raise RuntimeError("run_simulated() was called inside a running event loop: await "
                       "run_simulated_async() there instead")


async def run_simulated_async(config: str | Path, *, speed: float | None = DEFAULT_SPEED,
                              overrides: Mapping[str, Any] | None = None, analyze: bool = True,
                              read: Iterable[str] = ()) -> SimRun:
    """:func:`run_simulated` for a caller already in an event loop (the run shares it)."""
    path = Path(config)
    raw = read_toml(path)
    _refuse_real(raw, speed, path)  # one line, before the config is checked or anything is built
    merge(raw, overrides or {})
    with tempfile.TemporaryDirectory(prefix="hil-testing-") as tmp:
        folder = Path(tmp)
        raw = loopback_config(raw, folder)
        refuse_unsupplied(raw, path)
        resolve_paths(raw, rig_of(raw, path).schema, path.parent)
        store_path = folder / "sessions.sqlite"
        result = await run(raw, store_path, file=path, show_progress=False, handle_sigint=False,
                           handle_term=False, started_by=STARTED_BY, sim_speed=speed)
        return await asyncio.to_thread(_read_back, store_path, result, analyze, tuple(read))


def _refuse_real(raw: dict, speed: float | None, path: Path) -> None:
    """The clock's refusal (``hil run --sim-speed`` on a real rig): a real rig runs on the wall clock only."""
    rig = raw.get("rig")
    simulated = isinstance(rig, dict) and rig.get("simulated") is True and "simulator" in raw
    refuse_sim_speed(simulated, DEFAULT_SPEED if speed is None else speed, path)


def merge(base: dict, overrides: Mapping[str, Any]) -> dict:
    """``overrides`` merged into ``base`` in place, table by table (a value that is not a table replaces)."""
    for key, value in overrides.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            merge(base[key], value)
        else:
            base[key] = _copy(value)
    return base


def _copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def loopback_config(raw: dict, folder: Path) -> dict:
    """TOML data of a simulated rig made safe to run beside other tests: the bus and every simulated device
    on 127.0.0.1 with a port the system picks, no dashboard tap, the store, the simulator's certificates
    (``pki_dir``) and the lab replication out of the way (the store is in ``folder``)."""
    raw = _copy(raw)
    raw["bus"] = dict(raw.get("bus") or {}, data=f"tcp://{_ANY_HOST}:0", command=f"tcp://{_ANY_HOST}:0")
    raw["bus"].pop("tap", None)
    raw["store"] = {"path": str(folder / "sessions.sqlite")}
    raw.pop("lab", None)
    for table in ("devices", "simulator"):
        if isinstance(raw.get(table), dict):
            _to_loopback(raw[table], folder)
    return raw


def _to_loopback(table: dict, folder: Path) -> None:
    for key, value in table.items():
        if isinstance(value, dict):
            _to_loopback(value, folder)
        elif key in _PORT_KEYS and isinstance(value, int):
            table[key] = 0
        elif key == "host" and isinstance(value, str):
            table[key] = _ANY_HOST
        elif key == "url" and isinstance(value, str) and value.startswith("socket://"):
            table[key] = f"socket://{_ANY_HOST}:0"
        elif key == "pki_dir":
            table[key] = str(folder / "pki")


def _read_back(store_path: Path, result: RunResult, analyze: bool, read: tuple[str, ...]) -> SimRun:
    """Everything a test asserts on, out of the store before it is removed; the analysis of a complete run."""
    with SessionStore(store_path, recover=False) as store:
        info = store.get_session(result.session_id)
        outcomes = store.events(info.id, kind="plan_outcome")
        session = SimSession(
            id=info.id, kind=info.kind, status=result.status, reason=result.reason, safe=result.safe,
            safe_errors=list(result.safe_errors), sim_speed=float(result.summary.get("sim_speed", 1.0)),
            summary=dict(result.summary),
            streams={name: StreamSummary(name, s.type, list(s.channels), list(s.units),
                                         s.n_samples if s.type == "frame" else s.n_messages, s.n_messages,
                                         s.t_first, s.t_last)
                     for name, s in info.streams.items()},
            plan_outcome=dict(outcomes[-1].body) if outcomes else None, config=info.config)
        data = {name: store.read_stream(info.id, name) for name in read}
        dry = bool((info.config.get("rig") or {}).get("dry_run"))  # held commands: nothing moved to analyse
        if not (analyze and session.complete and not dry and get_rig(info.kind).has_analysis):
            return SimRun(session, data=data)
        _, analysis, rig, _ = analyze_session(store, info.id)
        return SimRun(session, rig.report_dict(analysis), rig.report_text(analysis), data)
