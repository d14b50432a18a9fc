"""What a rig kind declares: its typed config, devices, plan, session reader, analysis and report.

A rig kind is one module that builds a :class:`Rig`; :mod:`daq.rigs` maps ``[rig].kind`` to it. The run
lifecycle (:mod:`daq.run.lifecycle`) owns everything around the plan - store, bus, recorder, safe-state
guard, two-level Ctrl-C, operator commands, simulator start/stop, outcome and error mapping - so a rig
only says *what* its devices and steps are (the split of Bluesky's plans and RunEngine).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from daq.config.schema import RigConfig

SafeAction = Callable[[], Awaitable[object]]


class Devices(Protocol):
    """The connected devices of one run, as the lifecycle sees them."""

    safe_actions: list[tuple[str, SafeAction]]  # run in order on every exit path

    async def identities(self) -> dict[str, dict]: ...

    async def close(self) -> None: ...


class SimulatedRig(Protocol):
    """The rig's simulated devices, served on loopback for the duration of a run (or `hil sim`)."""

    async def start(self) -> Any: ...

    async def stop(self) -> None: ...


@dataclass
class Report:
    """How a result is shown: a text table, a JSON-ready dict, and plots written into a folder."""

    text: Callable[[Any], str]
    to_dict: Callable[[Any], dict]
    plots: Callable[[Any, Any, Path], list[Path]] | None = None  # (result, arrays, folder) -> files


@dataclass
class Rig:
    """One rig kind. Only ``kind``, ``schema``, ``open_devices`` and ``plan`` are required."""

    kind: str
    summary: str
    schema: type[RigConfig]
    open_devices: Callable[[Any, dict], Awaitable[Devices]]          # (typed config, device tables)
    plan: Callable[[Any], Awaitable[None]]                           # (RunContext) -> None
    simulator: Callable[[dict], SimulatedRig] | None = None          # raw config -> simulated rig
    simulated_devices: Callable[[Any, dict], dict] = lambda sim, raw: sim.device_config()  # its [devices]
    prepare: Callable[[Any], Awaitable[None]] | None = None          # before the session exists
    progress_total: Callable[[Any], int | None] = lambda cfg: None   # steps of the plan, for the bar
    arrays: Callable[[Any, str], Any] | None = None                  # (store, session id) -> arrays
    analyze: Callable[..., Any] | None = None                        # (arrays, typed cfg, progress) -> result
    report: Report | None = None
    describe_simulator: Callable[[SimulatedRig], list[dict]] | None = None  # `hil sim` device table
    streams: dict[str, str] = field(default_factory=dict)            # stream name -> what it carries
