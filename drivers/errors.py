"""The root of the project's errors and the device branch: every failure names the device and its address,
so a log line is actionable.

:class:`HilError` is the one base of every error this project raises on purpose (the CLI maps the tree to
exit codes and one-line messages); it lives here, in the lowest layer, because drivers import nothing of
the service. The service's branches (config, protocol, store, plan) are in :mod:`daq.errors`.

Every driver (Modbus, serial, OPC UA) raises only subclasses of :class:`DeviceError`; the text is never
empty (a timeout says how long it waited).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


class HilError(Exception):
    """Base class of every error the project raises on purpose (one clear message, no traceback)."""


class DeviceError(HilError):
    """Base class of all driver errors (carries the device name and address)."""

    def __init__(self, device: str, address: str, message: str) -> None:
        self.device = str(device)
        self.address = str(address)
        self.message = str(message).strip() or f"{type(self).__name__} (no details)"
        super().__init__(f"{self.device} ({self.address}): {self.message}")


class DeviceConnectionError(DeviceError):
    """The device cannot be reached, or the connection was lost."""


class DeviceUnreachable(DeviceConnectionError):
    """No connection could be made (every try within the connect timeout failed)."""


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


class DeviceFault(DeviceError):
    """The device reports a fault (status fault bit or a fault code); also raised by the service when a
    device's stream reports one (``daq.rigs.press.acquisition``)."""

    def __init__(self, device: str, address: str, message: str, fault_code: int = 0) -> None:
        self.fault_code = fault_code
        super().__init__(device, address, message)


@dataclass(frozen=True)
class StepFailure:
    """One failed step of a safe action (:mod:`drivers.safe_state`): the step's name and why it failed."""

    step: str
    cause: str


class SafeStateError(DeviceError):
    """The safe state (force zero and output off, drive stopped and disabled) could not be reached or
    confirmed; the message says which step failed and why, ``failures`` lists them one by one."""

    def __init__(self, device: str, address: str, message: str,
                 failures: Sequence[StepFailure] = ()) -> None:
        self.failures = tuple(failures)
        super().__init__(device, address, message)


class RegisterMapError(HilError, ValueError):
    """A register map in a config is invalid (unknown type, bad word order, missing key)."""
