"""A driver's settings table: a typed msgspec struct that refuses unknown keys and holds its own rules.

Each driver owns the table of its device (``ForceSourceSettings``, ``SensorSettings``, ``ServoDriveConfig``,
...): field types, defaults and ranges written once, the relations inside the table in ``check()``. The
service's rig schemas compose these tables as they are (``daq.config`` walks them with key paths in its
messages) and hand them back to the drivers parsed, so a setting is checked in one place. A program may
still give a driver a plain mapping: :func:`settings_from` converts and checks it with the same struct.

Drivers import msgspec, never the service: the service's ``Invalid`` is a subclass of
:class:`InvalidSetting`, so the config walk turns either into one line naming the file and the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, TypeVar, cast

import msgspec
from msgspec import Meta

from drivers.errors import HilError

#: a file or folder a table names: non-empty; the service makes a relative one absolute against the config
#: file's folder once, when the config is loaded (the ``path`` marker is what it looks for)
PathStr = Annotated[str, Meta(min_length=1, extra={"path": True})]
NonEmpty = Annotated[str, Meta(min_length=1)]
Port = Annotated[int, Meta(ge=0, le=65535)]
Baud = Annotated[int, Meta(ge=300, le=4_000_000)]
UnitId = Annotated[int, Meta(ge=0, le=247)]
Timeout = Annotated[float, Meta(gt=0, le=600.0)]          # s a device connect may take
Interval = Annotated[float, Meta(gt=0, le=10.0)]          # s between heartbeats, polls


class InvalidSetting(HilError, ValueError):
    """Raised by a table's ``check()``: ``key`` is the field (relative to the table) that is wrong;
    ``table`` says the key names a table rather than a value."""

    def __init__(self, key: str | None, message: str, table: bool = False):
        super().__init__(f"[{key}] {message}" if key else message)
        self.key = key
        self.message = message
        self.table = table


class Settings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """A settings table: unknown keys are refused; defaults are left out when written back."""


S = TypeVar("S", bound=msgspec.Struct)


def settings_from(value: S | Mapping[str, Any], cls: type[S]) -> S:
    """``value`` as a ``cls``: a struct is taken as it is; a mapping is converted strictly (no coercion) and
    every table's ``check()`` run, inner tables first. msgspec.ValidationError or InvalidSetting otherwise."""
    if isinstance(value, cls):
        return value
    obj = msgspec.convert(dict(cast(Mapping[str, Any], value)), cls)  # not a cls: the other half of the union
    check_tree(obj)
    return obj


def check_tree(obj: Any) -> None:
    """Run ``check()`` of ``obj`` and of every table inside it (inner first), as the config walk does."""
    if isinstance(obj, msgspec.Struct):
        for name in obj.__struct_fields__:
            check_tree(getattr(obj, name))
        check = getattr(obj, "check", None)
        if check is not None:
            check()
    elif isinstance(obj, dict):
        for v in obj.values():
            check_tree(v)
