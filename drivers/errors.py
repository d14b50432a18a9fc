"""Typed device errors: every failure names the device and its address, so a log line is actionable."""

from __future__ import annotations


class DeviceError(Exception):
    """Base class of all driver errors (carries the device name and address)."""

    def __init__(self, device: str, address: str, message: str) -> None:
        self.device = device
        self.address = address
        self.message = message
        super().__init__(f"{device} ({address}): {message}")


class DeviceConnectionError(DeviceError):
    """The device cannot be reached, or the connection was lost."""


class DeviceTimeout(DeviceError):
    """The device did not answer in time."""


class DeviceRefused(DeviceError):
    """The device answered with a refusal (Modbus exception response, ``ERR`` line)."""

    def __init__(self, device: str, address: str, message: str, code: int | None = None) -> None:
        self.code = code
        super().__init__(device, address, message)


class BadResponse(DeviceError):
    """The device answered, but the answer is malformed or the value is implausible (NaN, out of range)."""


class LimitError(DeviceError):
    """A command was outside the configured limits; raised before anything is sent."""


class RegisterMapError(ValueError):
    """A register map in a config is invalid (unknown type, bad word order, missing key)."""
