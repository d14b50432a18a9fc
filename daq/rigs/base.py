"""What a rig kind is: a subclass of :class:`Rig` with its typed config, devices, plan, session reader,
analysis and report.

A rig kind is one package under ``daq/rigs/`` whose ``rig`` module defines a subclass of :class:`Rig` and
``RIG``, its one instance; :mod:`daq.rigs` maps ``[rig].kind`` to it. The run lifecycle
(:mod:`daq.run.lifecycle`) owns everything around the plan - store, bus, recorder, safe-state guard,
two-level Ctrl-C, operator commands, simulator start/stop, outcome and error mapping - so a rig only says
*what* its devices and steps are (the split of Bluesky's plans and RunEngine)::

    class CraneRig(DriveRig[CraneConfig, CraneRuns, SelectionResult]):
        kind = "crane"
        summary = "stacker-crane x-axis: ..."
        schema = CraneConfig

        async def plan(self, ctx: RunContext[CraneConfig, DriveRigDevices]) -> None: ...

    RIG = CraneRig()

The contract, in the order the lifecycle and the analysis use it (``C`` the rig's config struct, ``D``
its connected devices, ``A`` what it reads back from a session, ``R`` its analysis result):

==================================  ===================================================================
``kind``, ``summary``               class attributes: the ``[rig].kind`` it runs; one line for `hil rigs`
``schema``                          ``type[C]``: the msgspec struct the whole config is checked against
                                    before anything opens (a :class:`~daq.config.schema.RigConfig`)
``streams``                         stream name -> what it carries (documentation)
``check(cfg, config_dir)``          rules beyond the schema (files next to the config, ...), run by
                                    `hil check` and by `hil run` before anything opens; raises
                                    ``Invalid(key, why)`` (made a ConfigError naming file and key) or
                                    ConfigError. Default: none
``simulator(cfg)``                  the simulated devices (:class:`SimulatedRig`) for ``[rig].simulated =
                                    true``. Default: none (``has_simulator`` is False; it raises)
``simulated_devices(sim, cfg)``     the ``[devices]`` table (typed) pointed at the started simulator.
                                    Default: ``sim.device_config()`` parsed by the schema's ``devices``
``describe_simulator(sim)``         the device table `hil sim` prints. Default None: the CLI lists the
                                    tables of ``simulated_devices``
``open_devices(cfg, tables,         abstract, async -> ``D``: connect the typed ``[devices]`` table (the
backends)``                         drivers' own settings structs, handed over as they are) through
                                    ``backends`` (given to every driver); ``D`` is
                                    :class:`Devices`
                                    (identities, safe-state actions - ``(label, SafeAction)``, see
                                    :mod:`drivers.safe_state` - run in order on every exit, close)
``prepare(ctx)``                    async, before the session exists (designs, checks); leaves its
                                    results in ``ctx.prepared``. Default: nothing
``progress_total(cfg)``             steps of the plan for the progress bar. Default None (unknown)
``plan(ctx)``                       abstract, async: the experiment, on a :class:`RunContext` ``[C, D]``
``arrays(reader, session_id)``      ``-> A``: the session read back for the analysis
``analyze(arrays, cfg, progress)``  ``-> R``. Without both (the default) ``has_analysis`` is False and
                                    they raise :class:`AnalysisError`
``report_text(result)``             the text `hil analyze` prints. Default ``str(result)``
``report_dict(result)``             the JSON-ready dict of ``--json``. Default ``result.to_dict()``
``plots(result, arrays, folder)``   PNG files written into ``folder``. Default none (``has_plots`` False)
``analysis_summary(report)``        the searchable summary of ``report_dict``'s dict, one shape for every
                                    kind (:mod:`daq.rigs.summary`). Default None (the lab looks for one)
==================================  ===================================================================
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import msgspec

from daq.config.load import ConfigError, parse
from daq.config.schema import RigConfig
from daq.store.errors import StoreError
from drivers.safe_state import SafeAction  # the typed contract of a safe action (steps with budgets)

if TYPE_CHECKING:  # annotations only: the registry imports this module and stays light (no zmq, sqlite)
    import numpy as np

    from daq.bus.frames import Frame
    from daq.bus.pubsub import BusPublisher, BusSubscriber
    from daq.store.reads import SessionReads
    from drivers.backends import Backends  # the device backend seam: where a driver's requests go
    from drivers.clock import Clock

RawConfig = dict[str, Any]            #: a config as read from TOML, before the schema check
DeviceTables = Any                    #: the typed ``[devices]`` table a run connects to
AnalysisProgress = Callable[[int, int, object], None]  #: (done, total, what: shown as its str())

C = TypeVar("C", bound=RigConfig)     # the rig's config struct
D = TypeVar("D", bound="Devices")     # its connected devices
A = TypeVar("A")                      # a session read back (arrays)
R = TypeVar("R")                      # an analysis result


class Devices(Protocol):
    """The connected devices of one run, as the lifecycle sees them."""

    safe_actions: list[tuple[str, SafeAction]]  # (label, action), run in order on every exit path

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
    session_id: str
    summary: dict[str, Any]     # counters the plan reports; stored with the session's outcome
    prepared: dict[str, Any]    # what ``prepare`` made for the plan
    publisher: BusPublisher     # the run's bus (for acquisition loops that publish on their own)
    dry_run: bool               # outputs held (docs/dry-run.md): waits for the plant must not wait for it
    clock: Clock                # the run's one clock: the plan's waits and recorded times (drivers/clock.py)

    async def event(self, stream: str, kind: str, **body: Any) -> None: ...

    async def publish(self, frame: Frame) -> None: ...

    def next_seq(self, stream: str) -> int: ...

    async def publish_blocks(self, stream: str, data: np.ndarray, t0: float, dt: float, channels: list[str],
                             units: list[str], block: int = 5000) -> None: ...

    async def subscribe(self, *topics: str) -> BusSubscriber: ...

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]: ...

    async def checkpoint(self, where: str = "") -> None: ...

    def advance(self, n: int = 1, description: str | None = None) -> None: ...


class AnalysisError(StoreError):
    """A session that cannot be analysed (wrong kind, too little data); one clear message."""


class Rig(ABC, Generic[C, D, A, R]):
    """One rig kind; see the module docstring for the contract of each member. A subclass sets ``kind``,
    ``summary`` and ``schema`` and defines ``open_devices`` and ``plan``; the rest have defaults."""

    kind: str
    summary: str
    schema: type[C]
    streams: dict[str, str] = {}  # documentation: never mutated

    # -- config, simulator, devices -------------------------------------------------------------------
    def check(self, cfg: C, config_dir: Path) -> None:
        """Rules beyond the schema (``config_dir``: the config file's folder), run by `hil check` and by
        `hil run` before anything opens; raise ``daq.config.load.Invalid(key, why)`` or ConfigError."""

    def simulator(self, cfg: C) -> SimulatedRig:
        """The simulated devices for ``[rig].simulated = true`` (not started yet)."""
        raise ConfigError(f"rig kind {self.kind!r} has no simulator", None, "[rig].simulated")

    def simulated_devices(self, sim: Any, cfg: C) -> DeviceTables:
        """The ``[devices]`` pointed at the started simulator ``sim``: its own ``device_config()``, parsed
        by the schema's ``devices`` table (as it is when the schema has none)."""
        tables = sim.device_config()
        for f in msgspec.structs.fields(self.schema):
            if f.name == "devices":
                return parse(tables, f.type, None, ["devices"])
        return tables

    def describe_simulator(self, sim: Any) -> list[dict] | None:
        """The device table `hil sim` prints for the started simulator; None: the ``simulated_devices``."""
        return None

    @abstractmethod
    async def open_devices(self, cfg: C, tables: DeviceTables, backends: Backends | None = None) -> D:
        """Connect the devices of ``tables`` (the ``[devices]`` a run reaches); closed again on failure.
        ``backends``: where the drivers' requests go (:mod:`drivers.backends`: the protocols when None, the
        recording backend in a dry run, the simulator in-process in tests); hand it to every driver."""

    # -- the run --------------------------------------------------------------------------------------
    async def prepare(self, ctx: RunContext[C, D]) -> None:
        """Before the session exists, with the devices open (designs, checks); results in ``ctx.prepared``."""

    def progress_total(self, cfg: C) -> int | None:
        """How many ``ctx.advance`` steps the plan makes (None: unknown)."""
        return None

    @abstractmethod
    async def plan(self, ctx: RunContext[C, D]) -> None:
        """The experiment, top to bottom."""

    # -- analysis and report --------------------------------------------------------------------------
    def arrays(self, reader: SessionReads, session_id: str) -> A:
        """What the analysis needs of a stored session."""
        raise AnalysisError(f"rig kind {self.kind!r} has no analysis")

    def analyze(self, arrays: A, cfg: C, progress: AnalysisProgress | None = None) -> R:
        """The analysis of a session's ``arrays`` with the settings it was recorded with."""
        raise AnalysisError(f"rig kind {self.kind!r} has no analysis")

    def report_text(self, result: R) -> str:
        """The text `hil analyze` prints."""
        return str(result)

    def report_dict(self, result: R) -> dict:
        """The JSON-ready dict of `hil analyze --json`."""
        return result.to_dict()  # type: ignore[attr-defined]

    def plots(self, result: R, arrays: A, folder: Path) -> list[Path]:
        """Plot files of a result, written into ``folder`` (which exists)."""
        return []

    def analysis_summary(self, report: dict) -> dict | None:
        """Estimates, intervals, verdict and structure of a ``report_dict`` (:mod:`daq.rigs.summary`)."""
        return None

    def parameter_units(self) -> dict[str, str]:
        """The SI unit of each parameter the analysis estimates (the pages show estimates with them)."""
        return {}

    # -- what a kind offers ---------------------------------------------------------------------------
    @property
    def has_simulator(self) -> bool:
        return self._defines("simulator")

    @property
    def has_analysis(self) -> bool:
        return self._defines("arrays") and self._defines("analyze")

    @property
    def has_plots(self) -> bool:
        return self._defines("plots")

    def _defines(self, method: str) -> bool:
        """Whether the kind defines ``method`` itself rather than inheriting the default."""
        return getattr(type(self), method) is not getattr(Rig, method)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {getattr(self, 'kind', '?')!r}>"
