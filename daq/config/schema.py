"""Typed config tables shared by every rig kind: [rig], [bus], [store], and building blocks for devices.

Each table is a ``msgspec.Struct`` that refuses unknown keys; ranges are ``Meta`` constraints, relations
inside a table are the table's ``check()``, relations across tables the rig config's ``check()``. See
:mod:`daq.config.load` for how a TOML dict is walked into these types with key-path errors.
"""

from __future__ import annotations

import re
from typing import Annotated

from msgspec import Meta, field

from daq.bus.keys import is_local
from daq.config.load import Invalid
from daq.lab.settings import LabTable
from drivers.settings import PathStr, Settings

# Every number of a config is finite and bounded: the generic aliases carry a backstop bound (no inf, no
# 1e300), fields with a physical meaning use the tighter aliases below or their own Meta.
BIG = 1e12
Positive = Annotated[float, Meta(gt=0, le=BIG)]
NonNegative = Annotated[float, Meta(ge=0, le=BIG)]
Finite = Annotated[float, Meta(ge=-BIG, le=BIG)]
Fraction = Annotated[float, Meta(gt=0, le=1)]
Count = Annotated[int, Meta(ge=1, le=10**9)]
Port = Annotated[int, Meta(ge=0, le=65535)]
Seed = Annotated[int, Meta(ge=0, le=2**32 - 1)]           # numpy SeedSequence entropy: >= 0
Timeout = Annotated[float, Meta(gt=0, le=600.0)]          # s a device request / connect may take
Wait = Annotated[float, Meta(gt=0, le=3600.0)]            # s a plan waits for something (an estimate)
Settle = Annotated[float, Meta(ge=0, le=60.0)]            # s a plan sleeps between steps
Interval = Annotated[float, Meta(gt=0, le=10.0)]          # s between heartbeats, polls
Budget = Annotated[float, Meta(gt=0, le=7 * 86400.0)]     # s, wall-clock budget of a plan
Hz = Annotated[float, Meta(gt=0, le=1e6)]                 # a frequency
Endpoint = str  # checked by BusTable.check: tcp://, ipc:// or inproc://
Range = Annotated[list[Finite], Meta(min_length=2, max_length=2)]
#: a file or folder named by a config (drivers.settings.PathStr): non-empty; a relative one is made absolute
#: against the config file's folder once, when the config is loaded (daq.config.load.resolve_paths)
__all__ = ["PathStr", "Table"]


class Table(Settings, kw_only=True):
    """A config table: unknown keys are refused (the same base as the drivers' settings tables)."""


class RigTable(Table, kw_only=True):
    kind: str
    name: str = ""
    simulated: bool = False  # true: `hil run` serves the rig's simulated devices on loopback first
    dry_run: bool = False    # true: every run holds its outputs (`hil run --dry-run`; docs/dry-run.md)
    description: str = ""


class BusTable(Table, kw_only=True):
    data: Endpoint = "tcp://127.0.0.1:0"      # the run's lossless bus (recorder, correction, identifier)
    command: Endpoint = "tcp://127.0.0.1:0"   # operator commands (status, pause, resume, stop, abort)
    tap: Endpoint | None = None               # lossy copy of the bus for dashboards (`hil tap`)
    keys: PathStr | None = None               # CURVE key folder (`hil keys`); required beyond loopback
    send_timeout: Annotated[float, Meta(gt=0, le=60.0)] = 5.0  # s a lossless send may wait for consumers

    def check(self) -> None:
        for name in ("data", "command", "tap"):
            ep = getattr(self, name)
            if ep is not None and not re.match(r"^(tcp|ipc|inproc)://.+", ep):
                raise Invalid(name, f"endpoint {ep!r} must start with tcp://, ipc:// or inproc://")
            if ep is not None and not is_local(ep) and not self.keys:
                raise Invalid(name, f"{ep} is reachable from other machines: set [bus].keys (a folder made "
                                    "by `hil keys`) so the endpoint is authenticated with CURVE, or bind "
                                    "127.0.0.1")


class StoreTable(Table, kw_only=True):
    path: PathStr | None = None  # relative to the config file's folder; default: the user data directory


class RigConfig(Table, kw_only=True):
    """The tables every rig config has; each rig kind subclasses it with its own tables."""

    rig: RigTable
    bus: BusTable = field(default_factory=BusTable)
    store: StoreTable = field(default_factory=StoreTable)
    lab: LabTable | None = None  # where sessions are replicated (daq/lab/settings.py, docs/lab.md)


# ----------------------------------------------------------------------------------------- devices
# A device's table is its driver's own settings struct (drivers/*: ForceSourceSettings, SensorSettings,
# ServoDriveConfig, FrontEndSettings, and the register map's Register), composed by the rig schemas as it is.
