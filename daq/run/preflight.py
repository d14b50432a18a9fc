"""Before a run writes anything: every device connected, identified and read, or the run is refused.

The check is `hil devices` in small (the commissioning probes of :mod:`daq.commission.probe`, read-only:
raw registers, the serial sensor's query, the drive's status nodes without the heartbeat, the front end's
identification): every device of the run's ``[devices]`` at once, every channel read :data:`READS` times
within its timeout, the identity compared with ``expect`` where the config has one, each value judged
against its range (with the likely mistake: word order, scale, register address) and its scatter against
the sensor's sigma. One device that fails refuses the whole run with one line naming it and the likely
cause, before the devices are opened for the run and before a session exists: nothing was written, not even
a heartbeat, so there is nothing to make safe and no session to record.
"""

from __future__ import annotations

from typing import Any

from daq.commission.probe import DeviceReport, probe_devices
from drivers.backends import Backends
from drivers.errors import DeviceError

READS = 5  # reads of every channel: enough for a median latency and a scatter (scale) check, and quick


class DevicesNotReady(DeviceError):
    """A device did not answer plausibly before the run: the run is refused, nothing was written."""


def refusal(reports: list[DeviceReport]) -> DevicesNotReady | None:
    """The error refusing a run for ``reports`` (None: every device answered plausibly): the first device
    that failed (config order) with its problem, the others that failed named after it."""
    bad = [r for r in reports if not r.ok]
    if not bad:
        return None
    first, rest = bad[0], bad[1:]
    also = f"; also not ready: {', '.join(r.name for r in rest)} (`hil devices` shows each)" if rest else ""
    return DevicesNotReady(first.name, first.address,
                           f"{first.problem()} - run refused before anything was written{also}")


async def check_devices(devices: Any, reads: int = READS, backends: Backends | None = None
                        ) -> list[DeviceReport]:
    """Probe every device of the typed ``[devices]`` table ``devices`` (through ``backends``, the run's);
    raise :class:`DevicesNotReady` unless each answered plausibly. Returns the reports (the devices'
    identities and readings)."""
    reports = await probe_devices(devices, reads, backends)
    refused = refusal(reports)
    if refused is not None:
        raise refused
    return reports
