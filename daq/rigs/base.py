"""What a rig kind declares: its typed config, devices, plan, session reader, analysis and report.

A rig kind is one package under ``daq/rigs/`` whose ``rig`` module builds a :class:`Rig`;
:mod:`daq.rigs` maps ``[rig].kind`` to it. The run lifecycle (:mod:`daq.run.lifecycle`) owns everything
around the plan - store, bus, recorder, safe-state guard, two-level Ctrl-C, operator commands, simulator
start/stop, outcome and error mapping - so a rig only says *what* its devices and steps are (the split
of Bluesky's plans and RunEngine).

The contract, in the order the lifecycle and the analysis use it (``C`` the rig's config struct, ``D``
its connected devices, ``A`` what it reads back from a session, ``R`` its analysis result):

=====================  ==================================================================================
``schema``             ``type[C]``: the msgspec struct the whole config is checked against before anything
                       opens (a subclass of :class:`~daq.config.schema.RigConfig`)
``simulator(raw)``     the simulated devices (:class:`SimulatedRig`) for ``[rig].simulated = true``
``simulated_devices``  ``(started simulator, raw config) -> [devices]`` tables pointed at it
``open_devices``       ``(cfg: C, device tables) -> D``: connect; ``D`` is :class:`Devices` (identities,
                       safe-state actions run in order on every exit path, close)
``prepare(ctx)``       optional, before the session exists (designs, checks); leaves its results in
                       ``ctx.prepared``
``progress_total``     ``cfg -> steps`` of the plan for the progress bar (None: unknown)
``plan(ctx)``          the experiment, on a :class:`RunContext` ``[C, D]``
``arrays``             ``(store, session id) -> A``: the session read back for the analysis
``analyze``            ``(A, cfg: C, progress) -> R``
``report``             :class:`Report` ``[R, A]``: text, JSON-ready dict, plot files
``describe_simulator`` the device table `hil sim` prints
``streams``            stream name -> what it carries (documentation)
=====================  ==================================================================================
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from daq.config.schema import RigConfig

if TYPE_CHECKING:  # annotations only: the registry imports this module and stays light (no zmq, sqlite)
    import numpy as np

    from daq.bus.frames import Frame
    from daq.bus.pubsub import BusSubscriber
    from daq.store.reader import SessionReader

RawConfig = dict[str, Any]            #: a config as read from TOML, before the schema check
DeviceTables = dict[str, Any]         #: the ``[devices]`` tables a run connects to
SafeAction = Callable[[], Awaitable[object]]
AnalysisProgress = Callable[[int, int, str], None]   #: (done, total, what) while an analysis runs

C = TypeVar("C", bound=RigConfig)     # the rig's config struct
D = TypeVar("D", bound="Devices")     # its connected devices
A = TypeVar("A")                      # a session read back (arrays)
R = TypeVar("R")                      # an analysis result


class Devices(Protocol):
    """The connected devices of one run, as the lifecycle sees them."""

    safe_actions: list[tuple[str, SafeAction]]  # run in order on every exit path

    async def identities(self) -> dict[str, dict]: ...

    async def close(self) -> None: ...


class SimulatedRig(Protocol):
    """The rig's simulated devices, served on loopback for the duration of a run (or `hil sim`)."""

    async def start(self) -> object: ...

    async def stop(self) -> None: ...


class RunContext(Protocol[C, D]):
    """What a plan sees of its run (implemented by :class:`daq.run.lifecycle.RunContext`)."""

    config: C
    devices: D
    raw: RawConfig
    session_id: str
    summary: dict[str, Any]     # counters the plan reports; stored with the session's outcome
    prepared: dict[str, Any]    # what ``prepare`` made for the plan

    async def event(self, stream: str, kind: str, **body: Any) -> None: ...

    async def publish(self, frame: Frame) -> None: ...

    def next_seq(self, stream: str) -> int: ...

    async def publish_blocks(self, stream: str, data: np.ndarray, t0: float, dt: float, channels: list[str],
                             units: list[str], block: int = 5000) -> None: ...

    async def subscribe(self, *topics: str) -> BusSubscriber: ...

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]: ...

    async def checkpoint(self, where: str = "") -> None: ...

    def advance(self, n: int = 1, description: str | None = None) -> None: ...


@dataclass
class Report(Generic[R, A]):
    """How a result is shown: a text table, a JSON-ready dict, and plots written into a folder."""

    text: Callable[[R], str]
    to_dict: Callable[[R], dict]
    plots: Callable[[R, A, Path], list[Path]] | None = None  # (result, arrays, folder) -> files


def _device_config(sim: Any, raw: RawConfig) -> DeviceTables:
    """Default ``simulated_devices``: the simulator's own ``device_config()``."""
    return sim.device_config()


def _unknown_total(cfg: Any) -> int | None:
    return None


@dataclass
class Rig(Generic[C, D, A, R]):
    """One rig kind. Only ``kind``, ``summary``, ``schema``, ``open_devices`` and ``plan`` are required;
    see the module docstring for the contract of each member."""

    kind: str
    summary: str
    schema: type[C]
    open_devices: Callable[[C, DeviceTables], Awaitable[D]]
    plan: Callable[[RunContext[C, D]], Awaitable[None]]
    simulator: Callable[[RawConfig], SimulatedRig] | None = None
    simulated_devices: Callable[[Any, RawConfig], DeviceTables] = _device_config  # (started simulator, raw)
    prepare: Callable[[RunContext[C, D]], Awaitable[None]] | None = None
    progress_total: Callable[[C], int | None] = _unknown_total
    arrays: Callable[[SessionReader, str], A] | None = None
    analyze: Callable[[A, C, AnalysisProgress | None], R] | None = None
    report: Report[R, A] | None = None
    describe_simulator: Callable[[Any], list[dict]] | None = None  # (its started simulator) -> table
    streams: dict[str, str] = field(default_factory=dict)
