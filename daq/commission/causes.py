"""Why a device failed its look, in words: the likely cause of a driver error or of reads slower than the
device's timeout. Plain functions, no I/O (the probes in :mod:`daq.commission.probe` call them).

A probe sees a few typical mistakes in how a config reaches a device, each with its fingerprint:

- a Modbus exception 10/11 from a gateway (or a TCP device that checks the unit id): no device answers that
  unit id behind the address;
- silence on a line that connected, not even a late reply: the unit id, the url/port (something that does
  not speak the protocol answers nothing), the baud rate;
- replies that come after their request timed out (or answer an earlier request), or reads slower than the
  timeout: the device is slower than its timeout, and every request is stretched by a retry;
- an answer like ``HTTP/1.0 400`` or ``<!DOCTYPE HTML>``: a web server listens where the device should be.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from drivers.errors import (
    BadResponse,
    DeviceConnectionError,
    DeviceRefused,
    DeviceTimeout,
    HilError,
)

GATEWAY_CODES = (10, 11)  # gateway path unavailable, gateway target did not respond


_WEB = ("http/1.", "http/2", "<!doctype html", "<html")  # a status line, or an error page's first line


def looks_like_http(text: str) -> bool:
    """An answer a web server gives (``HTTP/1.0 400 Bad request``, or an HTML error page to a line it takes
    for an HTTP/0.9 request), not a measuring device's."""
    low = text.lower()
    return any(mark in low for mark in _WEB)


def _unit_id(settings: Any) -> str:
    return f"unit id (device_id = {settings.device_id})" if hasattr(settings, "device_id") else "address"


def _where(settings: Any) -> str:
    """The config keys that say where the device is."""
    if getattr(settings, "protocol", None) == "modbus_tcp" or (hasattr(settings, "host")
                                                              and not hasattr(settings, "url")):
        return "host/port"
    return "url" if hasattr(settings, "url") else "address"


def _timeout(settings: Any) -> str:
    timeout = getattr(settings, "timeout", None)
    return f"its timeout ({timeout:g} s)" if isinstance(timeout, int | float) else "its timeout"


_CLOSED = ("lost", "closed", "disconnected")  # words of a connection the other end ended


def likely_cause(exc: HilError, settings: Any, late: int = 0) -> str | None:
    """The likely cause of a driver error ``exc`` met while probing the device of ``settings`` (its typed
    ``[devices.*]`` table; ``late``: Modbus replies that came after their request had timed out); None when
    the error says it already (a refused identity, a cannot-connect)."""
    text = str(exc)
    protocol = getattr(settings, "protocol", None)
    where, unit, timeout = _where(settings), _unit_id(settings), _timeout(settings)
    if looks_like_http(text):
        return f"a web server answers at this {where}, not the configured device: check {where}"
    if isinstance(exc, DeviceRefused) and exc.code in GATEWAY_CODES:
        return f"no device answers {unit} at this address: check device_id"
    if late or (isinstance(exc, BadResponse) and "does not match the request" in text):
        return (f"its replies come late: the device answers slower than {timeout} (raise timeout), or "
                "another device answers at this address too")
    if isinstance(exc, DeviceTimeout) and protocol == "modbus_rtu":  # a slow slave's replies would be late
        return (f"no reply at all (not even a late one): likely not this device at this {where}, {unit} or "
                "baud rate; check them")
    if isinstance(exc, DeviceTimeout):
        line = f"{where} or {unit}" if protocol == "modbus_tcp" else where
        return f"no answer in time: likely not this device at this {line}, or one slower than {timeout}"
    if isinstance(exc, DeviceConnectionError) and any(word in text for word in _CLOSED):
        return f"the other end closed the connection: is something else listening at this {where}?"
    return None


def slow_reads(latencies: Sequence[float], timeout: float | None,
               held: Sequence[float] | None = None) -> str | None:
    """A problem when the reads are slower than the device's ``timeout`` (s): the median read took longer,
    so each needed a retry (or took a late reply to an earlier attempt) and the driver's time budgets do
    not hold. None when the reads fit. The median: one read held up by a busy PC is no fingerprint, a
    device that is always slow is. ``held``: s the event loop was held up during each read (the PC's
    share of its latency, daq/commission/loop_lag.py), taken off before the comparison."""
    if timeout is None or not latencies:
        return None
    own = latencies if held is None else [max(0.0, t - h) for t, h in zip(latencies, held, strict=True)]
    median = statistics.median(own)
    if median <= timeout:
        return None
    return (f"answers in {median:.3g} s (median of {len(latencies)} reads), slower than its timeout "
            f"({timeout:g} s): every read needs a retry; raise timeout, or check the line")
