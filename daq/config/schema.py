"""Typed config tables shared by every rig kind: [rig], [bus], [store], and building blocks for devices.

Each table is a ``msgspec.Struct`` that refuses unknown keys; ranges are ``Meta`` constraints, relations
inside a table are the table's ``check()``, relations across tables the rig config's ``check()``. See
:mod:`daq.config.load` for how a TOML dict is walked into these types with key-path errors.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

import msgspec
from msgspec import Meta, field

from daq.bus.keys import is_local
from daq.config.load import Invalid
from daq.lab.settings import LabTable

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
#: a file or folder named by a config: non-empty; a relative one is made absolute against the config
#: file's folder once, when the config is loaded (daq.config.load.resolve_paths)
PathStr = Annotated[str, Meta(min_length=1, extra={"path": True})]


class Table(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """A config table: unknown keys are refused."""


class RigTable(Table, kw_only=True):
    kind: str
    name: str = ""
    simulated: bool = False  # true: `hil run` serves the rig's simulated devices on loopback first
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


class Register(Table, kw_only=True):
    """One value in a Modbus register map (drivers/registers.py parses the same keys)."""

    table: Literal["holding", "input"] = "holding"
    address: Annotated[int, Meta(ge=0, le=65535)]
    type: Literal["uint16", "int16", "uint32", "int32", "float32"] = "float32"
    word_order: Literal["big", "little"] = "big"
    scale: Annotated[float, Meta(ge=-1e9, le=1e9)] = 1.0   # SI value = raw * scale + offset
    offset: Finite = 0.0
    unit: str = "1"
    description: str = ""
    range: Range | None = None  # plausible values (SI, after scaling); outside is a bad reading

    def check(self) -> None:
        if abs(self.scale) < 1e-12:
            raise Invalid("scale", f"{self.scale!r} is (almost) 0: readings would all be the offset; "
                                   "give the register's SI units per count")
        words = 2 if self.type in ("uint32", "int32", "float32") else 1
        if self.address + words - 1 > 65535:
            raise Invalid("address", f"{self.address} + {words} words runs past register 65535")
        if self.range is not None and not self.range[0] < self.range[1]:
            raise Invalid("range", f"needs lo < hi, got {self.range}")
        if self.range is not None:
            for v in self.range:
                if not self.encodable(v):
                    raise Invalid("scale", f"{self.scale!r} maps the plausible value {v:g} {self.unit} "
                                           f"outside the {self.type} register ({self.raw_limits()}); "
                                           "choose scale/offset so [range] fits the register")

    def raw_limits(self) -> tuple[float, float]:
        return INT_LIMITS.get(self.type, (-3.4e38, 3.4e38))

    def encodable(self, value: float) -> bool:
        """True when ``value`` (SI) maps into the register's raw range."""
        lo, hi = self.raw_limits()
        return lo <= round((value - self.offset) / self.scale) <= hi


INT_LIMITS = {"uint16": (0, 65535), "int16": (-32768, 32767), "uint32": (0, 2**32 - 1),
              "int32": (-2**31, 2**31 - 1)}


class ModbusLink(Table, kw_only=True):
    """Connection settings shared by Modbus and serial devices."""

    timeout: Annotated[float, Meta(gt=0, le=60.0)] = 1.0          # s per request attempt
    retries: Annotated[int, Meta(ge=0, le=10)] = 1
    connect_timeout: Timeout = 3.0                                # s spent reconnecting before giving up
    backoff_initial: Annotated[float, Meta(gt=0, le=10.0)] = 0.05
    backoff_max: Annotated[float, Meta(gt=0, le=60.0)] = 0.5
    drain_time: Annotated[float, Meta(gt=0, le=60.0)] | None = None  # RTU: s a late reply is awaited
                                                                     # after a timeout (2 x timeout)
    model: str = ""
