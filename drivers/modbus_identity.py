"""Modbus device identification (function 43, MEI type 14): what a device says it is, and whether that is
what the config's ``expect`` table says it must be.

A device that does not offer the function (a Modbus exception, or no answer) has no identity; that is no
error by itself - only a config that expects an identity from it refuses the device.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from drivers.errors import DeviceRefused, DeviceTimeout
from drivers.modbus_transport import IDENTITY_OBJECTS

if TYPE_CHECKING:  # annotations only
    from drivers.backends import ModbusLink

EXTENDED = 0x03  # stream access to every object from the one asked for (basic, regular and private)
NO_IDENTITY = "no identity (device does not answer FC43)"


def _name(object_id: int) -> str:
    return IDENTITY_OBJECTS.get(object_id, f"object_{object_id:#04x}")


def _text(value: object) -> str:
    if isinstance(value, list):  # an object sent more than once
        return ", ".join(_text(v) for v in value)
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


async def read_identity(transport: ModbusLink) -> dict[str, str] | None:
    """Every identification object the device gives, by name (``vendor_name``, ``product_code``,
    ``revision``, ..., ``serial_number``); None when the device does not offer the function."""
    out: dict[str, str] = {}
    object_id = 0
    for _ in range(8):  # a long identity comes in parts ("more follows"); a device that loops is cut off
        try:
            rr = await transport.read_device_information(EXTENDED, object_id)
        except (DeviceRefused, DeviceTimeout):
            return out or None
        out.update({_name(k): _text(v) for k, v in dict(rr.information).items()})
        if not rr.more_follows or rr.next_object_id <= object_id:
            break
        object_id = rr.next_object_id
    return out


def identity_mismatch(expect: Mapping[str, str], identity: Mapping[str, str] | None) -> str | None:
    """What of ``identity`` differs from ``expect``, in words (None: it matches, or nothing is expected)."""
    if not expect:
        return None
    if identity is None:
        return (f"the config expects {', '.join(f'{k} {v!r}' for k, v in expect.items())}, but the device "
                "does not answer device identification (FC43): wrong address, or remove [expect]")
    wrong = [f"{key} {identity.get(key)!r} where {want!r} is expected" for key, want in expect.items()
             if identity.get(key) != want]
    if not wrong:
        return None
    return ("the device at this address is not the configured one: " + "; ".join(wrong)
            + " (wrong address or unit id, or [expect] not updated after a device swap)")


async def check_identity(transport: ModbusLink, expect: Mapping[str, str]) -> None:
    """Refuse (DeviceRefused) a device whose identification is not the expected one; nothing if no
    ``expect``."""
    if not expect:
        return
    why = identity_mismatch(expect, await read_identity(transport))
    if why:
        raise DeviceRefused(transport.name, transport.address, why)
