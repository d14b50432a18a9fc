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

Positive = Annotated[float, Meta(gt=0)]
NonNegative = Annotated[float, Meta(ge=0)]
Fraction = Annotated[float, Meta(gt=0, le=1)]
Count = Annotated[int, Meta(ge=1)]
Port = Annotated[int, Meta(ge=0, le=65535)]
Endpoint = str  # checked by BusTable.check: tcp://, ipc:// or inproc://
Range = Annotated[list[float], Meta(min_length=2, max_length=2)]


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
    keys: str | None = None                   # CURVE key folder (`hil keys`); required beyond loopback
    send_timeout: Positive = 5.0              # s a lossless send may wait for the run's own consumers

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
    path: str | None = None  # relative to the config file's folder; default: the user data directory


class RigConfig(Table, kw_only=True):
    """The tables every rig config has; each rig kind subclasses it with its own tables."""

    rig: RigTable
    bus: BusTable = field(default_factory=BusTable)
    store: StoreTable = field(default_factory=StoreTable)


# ----------------------------------------------------------------------------------------- devices


class Register(Table, kw_only=True):
    """One value in a Modbus register map (drivers/registers.py parses the same keys)."""

    table: Literal["holding", "input"] = "holding"
    address: Annotated[int, Meta(ge=0, le=65535)]
    type: Literal["uint16", "int16", "uint32", "int32", "float32"] = "float32"
    word_order: Literal["big", "little"] = "big"
    scale: float = 1.0
    offset: float = 0.0
    unit: str = "1"
    description: str = ""
    range: Range | None = None  # plausible values (SI, after scaling); outside is a bad reading

    def check(self) -> None:
        if self.scale == 0:
            raise Invalid("scale", "must not be 0")
        if self.range is not None and not self.range[0] < self.range[1]:
            raise Invalid("range", f"needs lo < hi, got {self.range}")


class ModbusLink(Table, kw_only=True):
    """Connection settings shared by Modbus and serial devices."""

    timeout: Positive = 1.0            # s per request attempt
    retries: Annotated[int, Meta(ge=0, le=10)] = 1
    connect_timeout: Positive = 3.0    # s spent reconnecting before giving up
    backoff_initial: Positive = 0.05
    backoff_max: Positive = 0.5
    drain_time: Positive | None = None  # RTU: s a late reply is awaited after a timeout (2 x timeout)
    model: str = ""
